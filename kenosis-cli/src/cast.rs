//! `kenosis cast MODEL --precision fp16|bf16 -o OUT`: the model's FP32 weights stored in 16
//! bits, each behind a `Cast` to FP32 (see `kenosis_quantize::cast`): about half the file,
//! computed in FP32 as before.

use std::path::PathBuf;

use kenosis_quantize::cast::{CastSummary, Precision};

use serde::Serialize;

use crate::error::Result;
use crate::format::Format;
use crate::inspect::megabytes;

/// The 16-bit storage formats, as written on the command line.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PrecisionArg {
    /// IEEE half precision: 11 bits of mantissa, largest finite value 65504
    Fp16,
    /// bfloat16: FP32's range, 8 bits of mantissa (needs opset 13)
    Bf16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Fp16 => Precision::Float16,
            PrecisionArg::Bf16 => Precision::Bfloat16,
        }
    }
}

/// The arguments of `kenosis cast`.
#[derive(clap::Args)]
pub struct Args {
    /// The FP32 ONNX model (external data is read from its folder)
    model: PathBuf,
    /// The storage format of the weights
    #[arg(long, value_enum, value_name = "PRECISION")]
    precision: PrecisionArg,
    /// Where to write the cast model (one self-contained file)
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
    /// Print lines for people (text) or one JSON document for scripts (see
    /// docs/cli-json.md)
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// What `kenosis cast --format json` prints (see `docs/cli-json.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Casting {
    /// The FP32 model as given.
    pub source: String,
    /// The cast model written.
    pub output: String,
    /// `fp16` or `bf16`.
    pub precision: &'static str,
    /// The FP32 file's size in bytes.
    pub size_fp32: usize,
    /// The cast file's size in bytes.
    pub size_cast: usize,
    /// What was cast and what was kept, as the library counts it.
    #[serde(flatten)]
    pub summary: CastSummary,
}

/// Casts `args.model` and writes it.
///
/// # Errors
/// [`crate::error::Error::Cast`] when the model cannot be read or cast (a weight out of
/// FP16's range, an opset without the Cast; the message names the file and the tensor);
/// [`crate::error::Error::Write`].
pub fn run(args: &Args) -> Result<()> {
    let bytes = std::fs::read(&args.model).map_err(|source| kenosis_quantize::Error::Io {
        path: args.model.clone(),
        source,
    })?;
    let precision = Precision::from(args.precision);
    let cast = kenosis_quantize::cast::cast(&args.model, &bytes, precision)?;
    crate::model::write_atomic(&args.output, &cast.bytes)?;
    if args.format == Format::Json {
        return crate::format::print_json(&Casting {
            source: args.model.display().to_string(),
            output: args.output.display().to_string(),
            precision: match args.precision {
                PrecisionArg::Fp16 => "fp16",
                PrecisionArg::Bf16 => "bf16",
            },
            size_fp32: bytes.len(),
            size_cast: cast.bytes.len(),
            summary: cast.summary.clone(),
        });
    }
    println!(
        "{}",
        summary_line(&cast.summary, precision, bytes.len(), cast.bytes.len())
    );
    println!("wrote {}", args.output.display());
    Ok(())
}

/// One line: what was cast and kept, and the file sizes.
fn summary_line(s: &CastSummary, precision: Precision, before: usize, after: usize) -> String {
    let mut line = format!(
        "kenosis: cast {} weight tensor(s) to {precision} ({} kept FP32: {} small, {} \
         quantization parameters); {} -> {} ({:.0}%)",
        s.cast,
        s.kept_small + s.kept_quantization,
        s.kept_small,
        s.kept_quantization,
        megabytes(before),
        megabytes(after),
        100.0 * after as f64 / before.max(1) as f64,
    );
    if s.flushed_to_zero > 0 {
        line.push_str(&format!(
            "; {} tiny nonzero weight(s) became 0",
            s.flushed_to_zero
        ));
    }
    line
}
