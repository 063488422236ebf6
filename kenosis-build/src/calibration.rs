//! The calibration data a model's build names, and its place in the cache key: a folder of
//! `.npy` samples (`calibration = "dir"`, [`Config::calibration_npy_dir`]), a folder of
//! images read by a preprocessing spec (`calibration_images = "dir", preprocess = "spec"`)
//! or text read by the model's tokenizer (`calibration_text = "path", tokenizer =
//! "tokenizer.json"`, optionally `max_len = n`). The front end never decodes an image or a
//! token: it hashes the files the quantizer will read, and the quantizer turns them into
//! samples (`kenosis_quantize::calibrate::images`, `kenosis_quantize::calibrate::text`).
//!
//! [`Config::calibration_npy_dir`]: crate::Config::calibration_npy_dir

use std::path::{Path, PathBuf};

use kenosis_options::Options;

use crate::cache::KeyHasher;
use crate::error::{Error, Result};
use crate::onnx::outline::Outline;
use crate::request::CalibrationSource;
use crate::{cargo, model_files};

/// The calibration source a call site's options name, its paths relative to the crate root
/// (a leading `$OUT_DIR` expanded to `out_dir`); `None` when they name none.
///
/// # Errors
/// [`Error::Config`] when more than one source is named, or an option is missing its
/// partner: `calibration_images` without `preprocess` (or the reverse), `calibration_text`
/// without `tokenizer` (or `tokenizer` or `max_len` without `calibration_text`).
pub(crate) fn from_call(options: &Options, out_dir: &Path) -> Result<Option<CalibrationSource>> {
    let named = [
        options.calibration.is_some(),
        options.calibration_images.is_some(),
        options.calibration_text.is_some(),
    ];
    if named.iter().filter(|&&n| n).count() > 1 {
        return Err(Error::Config(
            "give one of `calibration`, `calibration_images` and `calibration_text`".into(),
        ));
    }
    let path = |p: &str| expand_out_dir(p, out_dir);
    let missing = |needs: &str, given: &str| {
        Err(Error::Config(format!(
            "option `{given}` needs `{needs}` beside it"
        )))
    };
    match (&options.calibration_images, &options.preprocess) {
        (Some(_), None) => return missing("preprocess", "calibration_images"),
        (None, Some(_)) => return missing("calibration_images", "preprocess"),
        (Some(dir), Some(spec)) => {
            return Ok(Some(CalibrationSource::Images {
                dir: path(dir),
                preprocess: spec.to_string(),
            }))
        }
        (None, None) => {}
    }
    match (&options.calibration_text, &options.tokenizer) {
        (Some(_), None) => return missing("tokenizer", "calibration_text"),
        (None, Some(_)) => return missing("calibration_text", "tokenizer"),
        (None, None) if options.max_len.is_some() => return missing("calibration_text", "max_len"),
        (Some(text), Some(tokenizer)) => {
            return Ok(Some(CalibrationSource::Text {
                path: path(text),
                tokenizer: path(tokenizer),
                max_len: options.max_len,
            }))
        }
        (None, None) => {}
    }
    Ok(options
        .calibration
        .as_deref()
        .map(|dir| CalibrationSource::Npy { dir: path(dir) }))
}

/// A call-site path: a leading `$OUT_DIR` is the build script's `OUT_DIR`; other paths stay
/// relative to the crate root.
pub(crate) fn expand_out_dir(dir: &str, out_dir: &Path) -> PathBuf {
    match dir.strip_prefix(kenosis_options::OUT_DIR_PREFIX) {
        Some(rest) => out_dir.join(rest.trim_start_matches('/')),
        None => PathBuf::from(dir),
    }
}

/// Adds the files `source` names to the cache `key` (each file's name within its folder and
/// its bytes; the spec, tokenizer and window length for images and text), prints
/// `cargo:rerun-if-changed` for them, and returns `source` with its paths made absolute
/// against `manifest_dir`, as the quantizer reads them. A `.npy` folder keys exactly as it
/// did before images and text were sources, so its artifacts keep their cache entries.
///
/// # Errors
/// [`Error::Calibration`] or [`Error::Io`] from the listing of the files (see
/// [`model_files`]); [`Error::UnsafePath`] for a path a `cargo:` line cannot carry.
pub(crate) fn hash_into(
    key: &mut KeyHasher,
    source: &CalibrationSource,
    manifest_dir: &Path,
    outline: &Outline,
) -> Result<CalibrationSource> {
    let absolute = |p: &Path| -> Result<PathBuf> {
        let p = manifest_dir.join(p);
        let p = p.canonicalize().unwrap_or(p);
        cargo::rerun_if_changed(&p)?;
        Ok(p)
    };
    let named_files = |key: &mut KeyHasher, dir: &Path, files: &[PathBuf]| -> Result<()> {
        for file in files {
            let rel = file.strip_prefix(dir).unwrap_or(file);
            key.add(rel.to_string_lossy().as_bytes());
            key.add_file(file)?;
        }
        Ok(())
    };
    Ok(match source {
        CalibrationSource::Npy { dir } => {
            let dir = absolute(dir)?;
            // Exactly the files calibration will read (see `npy_files`), with their names:
            // pairing across inputs goes by name.
            let files = model_files::npy_files(&dir, &outline.input_names())?;
            named_files(key, &dir, &files.concat())?;
            CalibrationSource::Npy { dir }
        }
        CalibrationSource::Images { dir, preprocess } => {
            let dir = absolute(dir)?;
            key.add(b"calibration images").add(preprocess.as_bytes());
            named_files(key, &dir, &model_files::image_files(&dir)?)?;
            CalibrationSource::Images {
                dir,
                preprocess: preprocess.clone(),
            }
        }
        CalibrationSource::Text {
            path,
            tokenizer,
            max_len,
        } => {
            let (path, tokenizer) = (absolute(path)?, absolute(tokenizer)?);
            key.add(b"calibration text").add(
                max_len
                    .map_or_else(String::new, |n| n.to_string())
                    .as_bytes(),
            );
            key.add_file(&tokenizer)?;
            let files = model_files::text_files(&path)?;
            let dir = if files == [path.clone()] {
                model_files::model_dir(&path)
            } else {
                &path
            };
            named_files(key, dir, &files)?;
            CalibrationSource::Text {
                path,
                tokenizer,
                max_len: *max_len,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Options {
        Options::parse_str(text).expect("options parse")
    }

    #[test]
    fn a_call_site_names_one_source_with_its_partners() {
        let out = Path::new("/out");
        let images =
            parse(r#"calibration_images = "$OUT_DIR/img", preprocess = "rgb,mean=127,std=128""#);
        assert_eq!(
            from_call(&images, out).unwrap(),
            Some(CalibrationSource::Images {
                dir: PathBuf::from("/out/img"),
                preprocess: "rgb,nchw,stretch,scale=1,mean=127,std=128".into(),
            })
        );
        let text = parse(r#"calibration_text = "prose", tokenizer = "tok.json", max_len = 64"#);
        assert_eq!(
            from_call(&text, out).unwrap(),
            Some(CalibrationSource::Text {
                path: PathBuf::from("prose"),
                tokenizer: PathBuf::from("tok.json"),
                max_len: Some(64),
            })
        );
        assert_eq!(
            from_call(&parse(r#"calibration = "c""#), out).unwrap(),
            Some(CalibrationSource::Npy { dir: "c".into() })
        );
        assert_eq!(from_call(&parse(""), out).unwrap(), None);
        for bad in [
            r#"calibration = "c", calibration_images = "i", preprocess = "rgb""#,
            r#"calibration_images = "i""#,
            r#"preprocess = "rgb""#,
            r#"calibration_text = "t""#,
            r#"tokenizer = "t.json""#,
            "max_len = 64",
        ] {
            let e = from_call(&parse(bad), out).expect_err(bad);
            assert!(matches!(e, Error::Config(_)), "{bad}: {e}");
        }
    }
}
