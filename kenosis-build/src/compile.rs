//! [`Config::compile`]: each registered or discovered model quantized (or taken from the
//! cache), its artifact written into `OUT_DIR`, and the manifest `include_quantized!` reads.

use std::path::{Path, PathBuf};

use kenosis_manifest::{Manifest, ModelEntry};

use crate::artifact::{write_entry, ArtifactFiles};
use crate::config::{CacheSecret, Config, ModelConfig};
use crate::error::{Error, Result};
use crate::options::QuantizeOptions;
use crate::request::{self, CalibrationSource, ReportHead, Request};
use crate::{cache, calibration, cargo, device, discover, model_files, onnx, quantizer};

impl Config {
    /// Quantizes every registered model (or takes it from the cache), copies the artifacts
    /// into `OUT_DIR`, writes the manifest `include_quantized!` reads, and prints the
    /// `cargo:rerun-if-*` lines and one `cargo:warning` per (re)quantized model. A model is
    /// quantized by the `kenosis` quantizer (see `quantizer`), or in this process with the
    /// `quantizer` feature.
    ///
    /// # Errors
    /// [`Error::Config`] for an option out of bounds (see `QuantizeOptions::check`) or an
    /// empty cache key (see [`Config::cache_key`]), before any model is read;
    /// [`Error::QuantizerUnavailable`] when a model must be quantized and no quantizer of
    /// this version can be found or built; [`Error::Quantizer`] with the quantizer's message
    /// when it fails on a model; otherwise the first [`Error`] met. Nothing is written into
    /// `OUT_DIR` for the failing model and no manifest is written.
    pub fn compile(self) -> Result<()> {
        let target = match &self.target {
            Some(t) => t.clone(),
            None => std::env::var("TARGET").unwrap_or_default(),
        };
        // Target features are cargo's for its own `TARGET`; an overridden triple has none known.
        let target_features = match &self.target {
            Some(_) => String::new(),
            None => std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default(),
        };
        let resolve = |layers: &kenosis_options::Options| {
            QuantizeOptions::for_target(layers, &target, &target_features)
        };
        let options = resolve(&self.options);
        options.check()?;
        let manifest_dir = match &self.manifest_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(cargo::cargo_env("CARGO_MANIFEST_DIR")?),
        };
        let out_dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(cargo::cargo_env("OUT_DIR")?),
        };
        let secret = match &self.cache_key {
            Some(CacheSecret(k)) => Some(k.clone()),
            None => cargo::env(cache::CACHE_KEY_ENV),
        };
        if secret.as_deref() == Some("") {
            return Err(Error::Config(format!(
                "the cache key is empty (`{}` set to \"\" or `cache_key(\"\")`): an unavailable \
                 secret must not turn cache authentication off; unset it, or set a secret",
                cache::CACHE_KEY_ENV
            )));
        }
        let cache_dir = match (&self.cache_dir, cargo::env(CACHE_DIR_ENV)) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => {
                if secret.is_none() {
                    cargo::warning(&format!(
                        "kenosis: {CACHE_DIR_ENV} is set but no cache key: entries of the shared cache folder are checked for integrity, not authenticity; set {} to a secret (see docs/cache-trust.md)",
                        cache::CACHE_KEY_ENV
                    ));
                }
                PathBuf::from(d)
            }
            (None, None) => cargo::target_dir_of(&out_dir).join("kenosis-cache"),
        };
        let mut models = self.models.clone();
        if self.discover {
            let toml = manifest_dir.join("Cargo.toml");
            cargo::rerun_if_changed(&toml)?;
            let found = discover::discover_calls(
                &manifest_dir,
                Some(&out_dir.join("kenosis-discovery.json")),
            )?;
            for path in found.dirs.iter().chain(&found.files) {
                cargo::rerun_if_changed(path)?;
            }
            let mut known: Vec<(PathBuf, String)> = models
                .iter()
                .map(|m| (manifest_dir.join(&m.path), String::new()))
                .collect();
            for call in found.calls {
                let key = (manifest_dir.join(&call.model), call.options.canonical());
                let same = |k: &(PathBuf, String)| {
                    k.1 == key.1
                        && (k.0 == key.0
                            || k.0
                                .canonicalize()
                                .ok()
                                .is_some_and(|a| key.0.canonicalize().ok() == Some(a)))
                };
                if known.iter().any(same) {
                    continue;
                }
                known.push(key);
                models.push(ModelConfig {
                    path: PathBuf::from(&call.model),
                    calibration_npy_dir: None,
                    call: Some(call),
                });
            }
        } else if models.is_empty() {
            return Err(Error::Config(
                "no model registered; call .model(\"path/to/model.onnx\") or .discover() before .compile()".into(),
            ));
        }
        let mut cache = cache::Cache::open(cache_dir)?;
        if let Some(secret) = secret {
            cache = cache.authenticated(secret.as_bytes());
        }
        let artifacts_dir = out_dir.join("kenosis");
        std::fs::create_dir_all(&artifacts_dir).map_err(|e| Error::io(&artifacts_dir, e))?;

        let config_keep_float = self.options.keep_float.as_deref().unwrap_or_default();
        let mut manifest = Manifest::new();
        let mut unmatched_per_model: Vec<Vec<String>> = Vec::new();
        // A cross build: `KENOSIS_DEVICE_PROFILE` applies (see `device::profile_path`).
        let cross = std::env::var("HOST").is_ok_and(|host| host != target);
        for model in &models {
            let mut calib = (model.calibration_npy_dir.clone())
                .or(self.default_calibration.clone())
                .map(|dir| CalibrationSource::Npy { dir });
            let at_call = |e: Error| match &model.call {
                Some(call) => Error::CallSite {
                    file: call.file.clone(),
                    line: call.line,
                    model: call.model.clone(),
                    source: Box::new(e),
                },
                None => e,
            };
            let mut layers = self.options.clone();
            if let Some(call) = &model.call {
                layers.merge(&call.options);
                let named = calibration::from_call(&call.options, &out_dir).map_err(at_call)?;
                if named.is_some() {
                    calib = named;
                }
            }
            let mut model_options = resolve(&layers);
            let profile = device::profile_path(&layers, cross, &manifest_dir, &out_dir)?;
            if let Some(path) = &profile {
                model_options = device::apply(model_options, path).map_err(at_call)?;
            }
            let build = Build {
                manifest_dir: &manifest_dir,
                artifacts_dir: &artifacts_dir,
                cache: &cache,
                target: &target,
                target_features: &target_features,
            };
            let entry = compile_one(
                &build,
                model,
                (calib.as_ref(), profile.as_deref()),
                &model_options,
            );
            manifest.models.push(match (entry, &model.call) {
                (Ok((entry, unmatched)), call) => {
                    if let Some(call) = call {
                        warn_unmatched_at_call(call, &unmatched, config_keep_float);
                    }
                    unmatched_per_model.push(unmatched);
                    entry
                }
                (Err(e), None) => return Err(e),
                (Err(e), Some(call)) => {
                    return Err(Error::CallSite {
                        file: call.file.clone(),
                        line: call.line,
                        model: call.model.clone(),
                        source: Box::new(e),
                    })
                }
            });
        }
        for name in unmatched_everywhere(config_keep_float, &unmatched_per_model) {
            cargo::warning(&format!(
                "kenosis: keep_float(\"{name}\") names no node of any model; it is a node name of the model file, and nodes normalization folds or fuses away (BatchNormalization, Dropout, a Pad, a Split, the parts of a SiLU, GELU, HardSwish or layer normalization) cannot be kept"
            ));
        }
        manifest
            .write(&Manifest::path_in(&out_dir))
            .map_err(|e| Error::Config(e.to_string()))
    }
}

/// What every model of one build shares: the crate's folder, where artifacts go, the cache,
/// and the build target (cargo's `TARGET` or [`Config::target`], and its
/// `CARGO_CFG_TARGET_FEATURE`).
struct Build<'a> {
    manifest_dir: &'a Path,
    artifacts_dir: &'a Path,
    cache: &'a cache::Cache,
    target: &'a str,
    target_features: &'a str,
}

/// The manifest entry of `model`: its artifact from the cache, or quantized (by the
/// quantizer, see `quantizer::quantize`) and put into the cache, written into `OUT_DIR`; with
/// the `keep_float` names that matched no node.
fn compile_one(
    build: &Build<'_>,
    model: &ModelConfig,
    (calib, device_profile): (Option<&CalibrationSource>, Option<&Path>),
    options: &QuantizeOptions,
) -> Result<(ModelEntry, Vec<String>)> {
    let Build {
        manifest_dir,
        artifacts_dir,
        cache,
        ..
    } = *build;
    let path = manifest_dir.join(&model.path);
    // The manifest records these paths for `include_bytes!`: JSON and Rust string
    // literals carry UTF-8 only.
    if let Some(bad) = [&path, artifacts_dir]
        .into_iter()
        .find(|p| p.to_str().is_none())
    {
        return Err(Error::Unsupported {
            path: path.clone(),
            reason: format!(
                "the path {} is not valid UTF-8, so include_quantized! could not embed it; \
                 move the model (or the target directory) to a UTF-8 path",
                bad.display()
            ),
        });
    }
    cargo::rerun_if_changed(&path)?;
    let bytes = read_regular_file(&path)?;
    let source_path = path.canonicalize().map_err(|e| Error::io(&path, e))?;

    let outline = onnx::outline::read(&path, &bytes)?;
    let mut key = cache::KeyHasher::new();
    key.add(&bytes).add(options.canonical().as_bytes());
    drop(bytes);
    // `external_files` has checked that each is a regular file inside the model's folder.
    for file in model_files::external_files(&path, &outline)? {
        cargo::rerun_if_changed(&file)?;
        key.add_file(&file)?;
    }
    let calibration = calib
        .map(|source| calibration::hash_into(&mut key, source, manifest_dir, &outline))
        .transpose()?;
    let key = key.finish();
    if cargo::env(DOCS_RS_ENV).is_some() {
        let threads = options.intra_threads;
        return docs_only_entry(
            model,
            &path,
            source_path,
            artifacts_dir,
            &outline,
            key,
            threads,
        );
    }
    drop(outline);

    // Concurrent builds of one key quantize once: the others wait here, then find the
    // entry. Held until this model's artifact is in the cache.
    let (hit, lock) = match cache.get(&key) {
        Some(hit) => (Some(hit), None),
        None => {
            let lock = cache.lock(&key)?;
            (cache.get(&key), Some(lock))
        }
    };
    let (artifact, report_json) = match hit {
        // Byte-identical models share cache entries; the report names this one.
        Some((bytes, report)) => {
            let named = request::with_source(&report, &model.path.display().to_string())?;
            (bytes, named)
        }
        None => {
            let request = Request {
                model: source_path.clone(),
                source: model.path.display().to_string(),
                calibration,
                options: options.to_options().canonical(),
                device_profile: device_profile.map(Path::to_owned),
                target: build.target.to_owned(),
                target_features: build.target_features.to_owned(),
                cache_dir: cache.dir().to_owned(),
                key: key.clone(),
                artifact: cache.scratch_path(&key, "onnx"),
                report: cache.scratch_path(&key, "json"),
            };
            let answer = quantizer::quantize(&request);
            let read = |p: &Path| std::fs::read(p).map_err(|e| Error::io(p, e));
            let files = answer.and_then(|summary| {
                Ok((summary, read(&request.artifact)?, read(&request.report)?))
            });
            let _ = std::fs::remove_file(&request.artifact);
            let _ = std::fs::remove_file(&request.report);
            let (summary, bytes, report) = files?;
            cache.put(&key, &bytes, &report)?;
            cargo::warning(&summary);
            (bytes, report)
        }
    };
    drop(lock);
    let head = ReportHead::parse(&report_json)
        .ok_or_else(|| Error::Config(format!("the report of {} does not parse", path.display())))?;
    let files = ArtifactFiles {
        artifact: &artifact,
        report_json: &report_json,
        inputs: head.inputs,
        outputs: head.outputs,
        intra_threads: options.intra_threads,
    };
    let entry = write_entry(model, &path, source_path, artifacts_dir, key, files)?;
    Ok((entry, head.keep_float_unmatched))
}

/// The cache folder to use instead of `<target dir>/kenosis-cache`, e.g. one shared by CI
/// jobs (see `docs/cache-trust.md`).
const CACHE_DIR_ENV: &str = "KENOSIS_CACHE_DIR";

/// Set by docs.rs, whose builds have neither ONNX Runtime nor network (`ort-sys` skips linking
/// under it too).
const DOCS_RS_ENV: &str = "DOCS_RS";

/// The manifest entry of `model` for a documentation-only build (see [`DOCS_RS_ENV`]): an
/// empty artifact file, enough for `include_quantized!`'s `include_bytes!` and the typed
/// wrapper it documents, whose inputs and outputs are the FP32 model's as declared. The
/// report file says the model was not quantized. Nothing enters the cache.
///
/// # Errors
/// [`Error::Io`] when the artifact or report cannot be written.
fn docs_only_entry(
    model: &ModelConfig,
    path: &Path,
    source_path: PathBuf,
    artifacts_dir: &Path,
    outline: &onnx::outline::Outline,
    key: String,
    intra_threads: Option<usize>,
) -> Result<(ModelEntry, Vec<String>)> {
    let note = serde_json::json!({
        "source": model.path.display().to_string(),
        "quantized": false,
        "reason": "built with DOCS_RS set (docs.rs): the artifact is empty, documentation only",
    })
    .to_string();
    let (inputs, outputs) = outline.declared_io();
    let files = ArtifactFiles {
        artifact: &[],
        report_json: note.as_bytes(),
        inputs,
        outputs,
        intra_threads,
    };
    let entry = write_entry(model, path, source_path, artifacts_dir, key, files)?;
    Ok((entry, Vec::new()))
}

/// Warns about each `keep_float` name written at `call` (not also given to
/// [`Config::keep_float`], which [`unmatched_everywhere`] covers) that names no node of its
/// model (`unmatched`).
fn warn_unmatched_at_call(call: &discover::Call, unmatched: &[String], config: &[String]) {
    let written = call.options.keep_float.as_deref().unwrap_or_default();
    for name in written
        .iter()
        .filter(|n| unmatched.contains(n) && !config.contains(n))
    {
        cargo::warning(&format!(
            "kenosis: keep_float name \"{name}\" at {}:{} names no node of {}; it is a node name of the model file, and nodes normalization folds or fuses away cannot be kept",
            call.file.display(),
            call.line,
            call.model
        ));
    }
}

/// The `keep_float` names that match a node in none of the models, given each model's
/// unmatched names (a name may rightly be absent from some models: it applies to all).
fn unmatched_everywhere<'a>(names: &'a [String], per_model: &[Vec<String>]) -> Vec<&'a str> {
    names
        .iter()
        .filter(|n| !per_model.is_empty() && per_model.iter().all(|u| u.contains(n)))
        .map(String::as_str)
        .collect()
}

/// The bytes of the model file at `path`, which must be a regular file (symlinks followed):
/// a FIFO would block the build and a device would never end.
fn read_regular_file(path: &Path) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidModel {
            path: path.to_owned(),
            reason: "not a regular file (a FIFO, device, socket or folder)".into(),
        });
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::unmatched_everywhere;

    #[test]
    fn a_keep_float_name_is_unmatched_only_when_no_model_has_it() {
        let names = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let per_model = [vec!["a".to_owned(), "b".to_owned()], vec!["b".to_owned()]];
        assert_eq!(unmatched_everywhere(&names, &per_model), ["b"]);
        assert!(unmatched_everywhere(&names, &[]).is_empty());
    }
}
