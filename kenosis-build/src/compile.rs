//! [`Config::compile`]: each registered or discovered model quantized (or taken from the
//! cache), its artifact written into `OUT_DIR`, and the manifest `include_quantized!` reads.

use std::path::{Path, PathBuf};

use kenosis_manifest::{Manifest, ModelEntry};

use crate::artifact::{write_entry, ArtifactFiles};
use crate::config::{CacheSecret, Config, ModelConfig};
use crate::error::{self, Error, Result};
use crate::pipeline::{self, Calibration, QuantizeOptions};
use crate::report::{self, Report};
use crate::{
    cache, calibrate, cargo, discover, kernel_bench, kernel_costs, kernels, onnx, options,
};

impl Config {
    /// Quantizes every registered model (or takes it from the cache), copies the artifacts
    /// into `OUT_DIR`, writes the manifest `include_quantized!` reads, and prints the
    /// `cargo:rerun-if-*` lines and one `cargo:warning` per (re)quantized model.
    ///
    /// # Errors
    /// [`Error::Config`] for an option out of bounds (see `QuantizeOptions::check`) or an
    /// empty cache key (see [`Config::cache_key`]), before any model is read; otherwise the
    /// first [`Error`] met. Nothing is written into
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
        let target_cpu = kernels::TargetCpu::of_target(&target, &target_features);
        let target_kernels = target_cpu.integer_kernels();
        let build_target = options::build_target(target_kernels);
        let evaluation =
            kernels::Evaluation::for_kernels(target_kernels, kernels::IntegerKernels::of_host());
        let host_runs_target = target_kernels.timed_here(&target);
        // The build machine's kernel costs price the placement of a target of its own class.
        let costs_here = target_kernels.run_here(&target);
        let resolve = |layers: &kenosis_options::Options| QuantizeOptions {
            host_runs_target,
            target_cpu,
            ..QuantizeOptions::resolve(layers, build_target, evaluation)
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
        let measured = std::cell::OnceCell::new();
        for model in &models {
            let mut calib = model
                .calibration_npy_dir
                .clone()
                .or(self.default_calibration.clone());
            let mut model_options = options.clone();
            if let Some(call) = &model.call {
                let mut layers = self.options.clone();
                layers.merge(&call.options);
                model_options = resolve(&layers);
                if let Some(dir) = &call.options.calibration {
                    calib = Some(expand_out_dir(dir, &out_dir));
                }
            }
            let path = manifest_dir.join(&model.path);
            let entry = measured_costs(&model_options, costs_here, &cache, &path, &measured)
                .and_then(|costs| {
                    model_options.measured_costs = costs;
                    self.compile_one(
                        &manifest_dir,
                        &artifacts_dir,
                        &cache,
                        model,
                        calib.as_ref(),
                        &model_options,
                    )
                });
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

    fn compile_one(
        &self,
        manifest_dir: &Path,
        artifacts_dir: &Path,
        cache: &cache::Cache,
        model: &ModelConfig,
        calib: Option<&PathBuf>,
        options: &QuantizeOptions,
    ) -> Result<(ModelEntry, Vec<String>)> {
        let path = manifest_dir.join(&model.path);
        // The manifest records these paths for `include_bytes!`: JSON and Rust string
        // literals carry UTF-8 only.
        if let Some(bad) = [&path, artifacts_dir]
            .into_iter()
            .find(|p| p.to_str().is_none())
        {
            return Err(Error::unsupported(
                &path,
                error::Unsupported::NonUtf8Path {
                    path: bad.to_owned(),
                },
            ));
        }
        cargo::rerun_if_changed(&path)?;
        let bytes = read_regular_file(&path)?;
        let source_path = path.canonicalize().map_err(|e| Error::io(&path, e))?;

        let decoded = onnx::decode(&path, &bytes)?;
        let mut key = cache::KeyHasher::new();
        key.add(&bytes).add(options.canonical().as_bytes());
        let size_fp32 = bytes.len();
        drop(bytes);
        // `external_files` has checked that each is a regular file inside the model's folder.
        for file in pipeline::external_files(&path, &decoded)? {
            cargo::rerun_if_changed(&file)?;
            key.add_file(&file)?;
        }
        let calibration = match calib {
            Some(dir) => {
                let dir = manifest_dir.join(dir);
                cargo::rerun_if_changed(&dir)?;
                // Exactly the files calibration will read (see `npy_files`), with their
                // names: pairing across inputs goes by name.
                let graph = decoded.graph.as_ref().map(calibrate::data::input_names);
                let files = calibrate::data::npy_files(&dir, &graph.unwrap_or_default())?;
                for file in files.iter().flatten() {
                    let rel = file.strip_prefix(&dir).unwrap_or(file);
                    key.add(rel.to_string_lossy().as_bytes());
                    key.add_file(file)?;
                }
                Calibration::NpyDir(dir)
            }
            None => Calibration::Synthetic,
        };
        let key = key.finish();
        // Built for docs.rs (see `build.rs`), the quantizing code below is left out, so that
        // nothing reachable calls ONNX Runtime.
        #[cfg(kenosis_docs_rs)]
        {
            let _ = (cache, calibration, size_fp32, options);
            docs_only_entry(model, &path, source_path, artifacts_dir, &decoded, key)
        }
        #[cfg(not(kenosis_docs_rs))]
        {
            if cargo::env(DOCS_RS_ENV).is_some() {
                return docs_only_entry(model, &path, source_path, artifacts_dir, &decoded, key);
            }

            // Concurrent builds of one key quantize once: the others wait here, then find the
            // entry. Held until this model's artifact is in the cache.
            let (hit, lock) = match cache.get(&key) {
                Some(hit) => (Some(hit), None),
                None => {
                    let lock = cache.lock(&key)?;
                    (cache.get(&key), Some(lock))
                }
            };
            let (artifact, report) = match hit {
                // Byte-identical models share cache entries; the report names this one.
                Some((bytes, report)) => (
                    bytes,
                    Report {
                        source: model.path.display().to_string(),
                        ..report
                    },
                ),
                None => {
                    warn_if_unoptimized();
                    let mut q = pipeline::quantize_decoded(
                        &path,
                        decoded,
                        size_fp32,
                        &calibration,
                        options,
                    )?;
                    q.report.source = model.path.display().to_string();
                    q.report.key = key.clone();
                    cache.put(&key, &q.bytes, &q.report)?;
                    cargo::warning(&q.report.summary_line());
                    (q.bytes, q.report)
                }
            };
            drop(lock);
            #[allow(
                clippy::expect_used,
                reason = "a Report (strings, numbers, string-keyed maps) always serializes to JSON"
            )]
            let report_json = serde_json::to_vec_pretty(&report).expect("report serializes");
            let files = ArtifactFiles {
                artifact: &artifact,
                report_json: &report_json,
                inputs: report.inputs,
                outputs: report.outputs,
            };
            let entry = write_entry(model, &path, source_path, artifacts_dir, key, files)?;
            Ok((entry, report.keep_float_unmatched))
        }
    }
}

/// The cache folder to use instead of `<target dir>/kenosis-cache`, e.g. one shared by CI
/// jobs (see `docs/cache-trust.md`).
const CACHE_DIR_ENV: &str = "KENOSIS_CACHE_DIR";

/// Set by docs.rs, whose builds have neither ONNX Runtime nor network (`ort-sys` skips linking
/// under it too).
const DOCS_RS_ENV: &str = "DOCS_RS";

/// The kernel costs measured on this machine (see `kernel_bench`; measured once per machine
/// and kept in the cache folder, then remembered in `memo` for the build) for a model whose
/// `options` return slower regions to FP32, when `costs_here` (the target is of this
/// machine's own CPU class); `None` otherwise, and in documentation-only builds, which run
/// no ONNX Runtime. `path` names the model in errors.
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime fails on the micro-benchmarks, [`Error::Io`] when
/// their results cannot be kept.
fn measured_costs(
    options: &QuantizeOptions,
    costs_here: bool,
    cache: &cache::Cache,
    path: &Path,
    memo: &std::cell::OnceCell<kernel_costs::KernelCosts>,
) -> Result<Option<kernel_costs::KernelCosts>> {
    if !options.fp32_where_faster || !costs_here || cfg!(kenosis_docs_rs) {
        return Ok(None);
    }
    if cargo::env(DOCS_RS_ENV).is_some() {
        return Ok(None);
    }
    if let Some(costs) = memo.get() {
        return Ok(Some(*costs));
    }
    #[cfg(not(kenosis_docs_rs))]
    {
        let table = kernel_costs::KernelCosts::of(options.target_cpu);
        let measured = kernel_bench::cached(cache.dir(), &table, path)?;
        Ok(Some(*memo.get_or_init(|| measured.costs)))
    }
    #[cfg(kenosis_docs_rs)]
    {
        let _ = (cache, path);
        Ok(None)
    }
}

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
    decoded: &onnx::ModelProto,
    key: String,
) -> Result<(ModelEntry, Vec<String>)> {
    let note = serde_json::json!({
        "source": model.path.display().to_string(),
        "quantized": false,
        "reason": "built with DOCS_RS set (docs.rs): the artifact is empty, documentation only",
    })
    .to_string();
    let (inputs, outputs) = report::declared_io(decoded);
    let files = ArtifactFiles {
        artifact: &[],
        report_json: note.as_bytes(),
        inputs,
        outputs,
    };
    let entry = write_entry(model, path, source_path, artifacts_dir, key, files)?;
    Ok((entry, Vec::new()))
}

/// Says once per build script run, before quantizing, that kenosis-build was compiled without
/// optimization (cargo builds build-dependencies at `opt-level = 0` unless told otherwise),
/// which makes its statistics loops several times slower, and what to add.
fn warn_if_unoptimized() {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Some(message) = unoptimized_warning(env!("KENOSIS_BUILD_OPT_LEVEL")) {
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            cargo::warning(&message);
        }
    }
}

/// The warning for kenosis-build compiled at cargo's `opt_level` (`OPT_LEVEL`), if any.
fn unoptimized_warning(opt_level: &str) -> Option<String> {
    (opt_level == "0").then(|| {
        "kenosis: kenosis-build is compiled without optimization, so quantizing is slow; add \
         to the workspace's Cargo.toml: [profile.dev.package.kenosis-build] opt-level = 3 and \
         [profile.release.package.kenosis-build] opt-level = 3"
            .to_owned()
    })
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

/// A call-site calibration folder: a leading `$OUT_DIR` is the build script's `OUT_DIR`;
/// other paths stay relative to the crate root.
fn expand_out_dir(dir: &str, out_dir: &Path) -> PathBuf {
    match dir.strip_prefix(kenosis_options::OUT_DIR_PREFIX) {
        Some(rest) => out_dir.join(rest.trim_start_matches('/')),
        None => PathBuf::from(dir),
    }
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
    use super::{unmatched_everywhere, unoptimized_warning};

    #[test]
    fn an_unoptimized_kenosis_build_says_what_to_add() {
        let message = unoptimized_warning("0").expect("a warning at opt-level 0");
        assert!(message.contains("[profile.dev.package.kenosis-build] opt-level = 3"));
        assert!(message.contains("[profile.release.package.kenosis-build] opt-level = 3"));
        for level in ["1", "2", "3", "s", "z"] {
            assert_eq!(unoptimized_warning(level), None, "opt-level {level}");
        }
    }

    #[test]
    fn a_keep_float_name_is_unmatched_only_when_no_model_has_it() {
        let names = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let per_model = [vec!["a".to_owned(), "b".to_owned()], vec!["b".to_owned()]];
        assert_eq!(unmatched_everywhere(&names, &per_model), ["b"]);
        assert!(unmatched_everywhere(&names, &[]).is_empty());
    }
}
