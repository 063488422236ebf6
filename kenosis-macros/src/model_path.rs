//! Where the model an `include_quantized!` call names is: its path resolved against the crate
//! root (or the test-harness override).

use std::env;
use std::path::PathBuf;

/// Environment variable that, when set at compile time, replaces `CARGO_MANIFEST_DIR` as the
/// directory relative model paths are resolved against (for test harnesses like `trybuild`).
pub(crate) const BASE_DIR_OVERRIDE: &str = "KENOSIS_MANIFEST_DIR";

/// The model file `written` (as the call site wrote it), resolved and canonicalized.
///
/// # Errors
/// A message for the call site when the file does not exist, is not a file or cannot be read,
/// or when neither `CARGO_MANIFEST_DIR` nor the override is set.
pub(crate) fn resolve(written: &str) -> Result<PathBuf, String> {
    let (base, base_var) = base_dir()?;
    let resolved = base.join(written);
    let source_path = match resolved.canonicalize() {
        Ok(path) if path.is_file() => path,
        Ok(path) => {
            return Err(format!(
                "kenosis: model path `{written}` resolves to {}, which is not a file",
                path.display()
            ))
        }
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist".to_owned()
            } else {
                format!("cannot be read: {e}")
            };
            let against = if base_var == BASE_DIR_OVERRIDE {
                format!("{BASE_DIR_OVERRIDE}, which is set in the environment")
            } else {
                "the crate root, CARGO_MANIFEST_DIR".to_owned()
            };
            return Err(format!(
                "kenosis: model file `{written}` not found: {} {why}\n\
                 (relative paths are resolved against {against})",
                resolved.display()
            ));
        }
    };
    Ok(source_path)
}

/// The directory relative model paths are resolved against, and the variable it came from.
fn base_dir() -> Result<(PathBuf, &'static str), String> {
    [BASE_DIR_OVERRIDE, "CARGO_MANIFEST_DIR"]
        .into_iter()
        .find_map(|var| env::var_os(var).map(|dir| (PathBuf::from(dir), var)))
        .ok_or_else(|| {
            "kenosis: CARGO_MANIFEST_DIR is not set; include_quantized! must be compiled by Cargo"
                .to_owned()
        })
}
