//! `kenosis build-request` (hidden): what a build script's front end (kenosis-build without
//! its `quantizer` feature) runs on a cache miss. Reads one request (JSON) on standard input,
//! quantizes its model as the build resolved it, writes the artifact and report to the
//! request's paths, and prints the summary line on standard output.

use std::io::Read;

use kenosis_request::request::Request;

use crate::error::{Error, Result};

/// Answers the request on standard input.
///
/// # Errors
/// [`Error::Mismatch`] when the request does not parse (a front end of another version);
/// [`Error::Kenosis`] when the model cannot be quantized (the message names the file).
pub fn run() -> Result<()> {
    let mut json = Vec::new();
    std::io::stdin()
        .read_to_end(&mut json)
        .map_err(|e| Error::Mismatch(format!("the build's request cannot be read: {e}")))?;
    let request: Request = serde_json::from_slice(&json)
        .map_err(|e| Error::Mismatch(format!("the build's request does not parse: {e}")))?;
    println!("{}", kenosis_quantize::serve(&request)?);
    Ok(())
}
