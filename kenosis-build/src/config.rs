//! The build script's configuration: [`Config`], the builder `build.rs` fills, and the
//! models it names. [`Config::compile`] (in `compile`) turns it into artifacts.

use std::path::{Path, PathBuf};

use crate::error::Result;

/// One model registered with [`Config::model`] or found by discovery.
#[derive(Debug, Clone)]
pub(crate) struct ModelConfig {
    pub(crate) path: PathBuf,
    pub(crate) calibration_npy_dir: Option<PathBuf>,
    /// The `include_quantized!` call it was found at (with its options), if discovered.
    pub(crate) call: Option<crate::discover::Call>,
}

/// The whole `build.rs` body: `Config::new().discover().compile()`. Finds every
/// `include_quantized!` call of the package, quantizes each model with the options written at
/// its call site, and writes the manifest the macro reads.
///
/// # Errors
/// As [`Config::compile`]; a call that does not parse or a model that fails to quantize is
/// reported with the file and line of its call.
pub fn discover() -> Result<()> {
    Config::new().discover().compile()
}

/// Build-script configuration: which models to quantize and how. Ends in [`Config::compile`].
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub(crate) models: Vec<ModelConfig>,
    pub(crate) discover: bool,
    pub(crate) default_calibration: Option<PathBuf>,
    /// The options set with the setters `options` generates from the declaration table
    /// (`calibration` stays unset: [`Config::calibration_npy_dir`] attaches to a model).
    pub(crate) options: kenosis_options::Options,
    pub(crate) manifest_dir: Option<PathBuf>,
    pub(crate) out_dir: Option<PathBuf>,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) cache_key: Option<CacheSecret>,
    pub(crate) target: Option<String>,
}

/// The secret of [`Config::cache_key`], kept out of `Debug` output (build logs).
#[derive(Clone, Default)]
pub(crate) struct CacheSecret(pub(crate) String);

impl std::fmt::Debug for CacheSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheSecret(<redacted>)")
    }
}

/// Generates the [`Config`] setters from the table's `artifact` entries.
macro_rules! config_setters {
    (
        inputs { $($inputs:tt)* }
        artifact { $(
            $(#[doc = $doc:literal])+
            $name:ident: $ty:ty {
                check: $check:path,
                merge: $merge:ident,
                resolved: $resolved:ty = $default:expr,
                setter: {
                    $(#[$setter_attr:meta])*
                    fn $setter:ident($($arg:ident: $arg_ty:ty),* $(,)?) = $value:expr;
                },
            }
        )* }
    ) => {
        impl Config {
            $(
                $(#[$setter_attr])*
                pub fn $setter(mut self, $($arg: $arg_ty),*) -> Self {
                    kenosis_options::merge::$merge(&mut self.options.$name, $value);
                    self
                }
            )*
        }
    };
}

kenosis_options::options!(config_setters);

impl Config {
    /// An empty configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an FP32 ONNX model; a relative path is resolved against `CARGO_MANIFEST_DIR`.
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn model(mut self, path: impl AsRef<Path>) -> Self {
        self.models.push(ModelConfig {
            path: path.as_ref().to_owned(),
            calibration_npy_dir: None,
            call: None,
        });
        self
    }

    /// Also quantizes the model of every `include_quantized!` call in the package's lib,
    /// bins, examples, tests and benches (see `discover`), each with the options written at
    /// its call site on top of this configuration's. Prints `cargo:rerun-if-changed` for every
    /// scanned file and target folder, so adding a call needs no `build.rs` edit. A call for a
    /// model also registered with [`Config::model`] and without options uses that
    /// registration.
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .discover()
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn discover(mut self) -> Self {
        self.discover = true;
        self
    }

    /// Calibration samples as `.npy` files, one sample per file, whose dtype is the input's
    /// element type: float32, int64, int32, int16, int8, uint8 or bool (an input of another
    /// type, such as float16 or float64, cannot be calibrated from files). Either byte order,
    /// C or Fortran order; the leading batch dimension may be left out. A multi-input model
    /// uses one subfolder per input name, paired by sorted file name. Only the `.npy` files
    /// directly in those folders are read, and nothing outside the folder (see
    /// `docs/cache-trust.md`). Applies to the model registered just before, or, called before
    /// any [`Config::model`], to every model without its own folder. Relative paths are resolved
    /// against `CARGO_MANIFEST_DIR`. Without it, deterministic synthetic inputs are used.
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .calibration_npy_dir("calib/net")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn calibration_npy_dir(mut self, dir: impl AsRef<Path>) -> Self {
        match self.models.last_mut() {
            Some(m) => m.calibration_npy_dir = Some(dir.as_ref().to_owned()),
            None => self.default_calibration = Some(dir.as_ref().to_owned()),
        }
        self
    }

    /// Prices which regions stay FP32 with the kernel costs `kenosis probe` measured on the
    /// device (a JSON file, relative to the crate root), for every model of this build; a
    /// call site's `device_profile` overrides it. Without it, a cross build reads
    /// `$KENOSIS_DEVICE_PROFILE`. The profile's bytes are part of the cache key; a profile
    /// measured on another CPU class than the target's fails the build
    /// ([`Error::DeviceProfile`](crate::Error::DeviceProfile)). See
    /// docs/cross-compiling.md.
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .device_profile("profiles/board.json")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn device_profile(mut self, path: impl AsRef<Path>) -> Self {
        self.options.device_profile = Some(path.as_ref().to_string_lossy().into_owned());
        self
    }

    // The option setters (`per_channel`, `calibration_method`, ...) are generated below,
    // from `kenosis_options::table`, where each is declared with its docs.

    /// Overrides `OUT_DIR` (artifacts and manifest go there).
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .out_dir("target/kenosis-out")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.out_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Overrides the cache folder (default: `$KENOSIS_CACHE_DIR`, else
    /// `<target dir>/kenosis-cache`, shared by debug and release builds).
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .cache_dir("/var/cache/kenosis")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cache_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Authenticates cache entries with `secret` (default: `$KENOSIS_CACHE_KEY`): entries
    /// carry a keyed BLAKE3 hash over the cache key, the artifact and its report, and an
    /// entry whose hash does not verify is rebuilt, never embedded (see
    /// `cache::Cache::authenticated` and `docs/cache-trust.md`). Set it when the cache
    /// folder is shared with jobs that may write it but must not choose what is embedded.
    ///
    /// An empty secret (here or in `KENOSIS_CACHE_KEY`) makes [`Config::compile`] fail: a CI
    /// secret that is unavailable to a job expands to an empty string, and that must not turn
    /// authentication off silently. The secret never appears in `Debug` output.
    ///
    /// ```no_run
    /// let secret = std::env::var("CI_CACHE_SECRET").expect("CI_CACHE_SECRET is set");
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .cache_key(secret)
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn cache_key(mut self, secret: impl Into<String>) -> Self {
        self.cache_key = Some(CacheSecret(secret.into()));
        self
    }

    /// Overrides `CARGO_MANIFEST_DIR` (base of relative paths).
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .manifest_dir("/path/to/crate")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn manifest_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.manifest_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Overrides the build target triple (default: cargo's `TARGET`), which picks the
    /// reduce-range default.
    ///
    /// ```no_run
    /// kenosis_build::Config::new()
    ///     .model("models/net.onnx")
    ///     .target("aarch64-unknown-linux-gnu")
    ///     .compile()
    ///     .expect("kenosis: quantization failed");
    /// ```
    pub fn target(mut self, triple: impl Into<String>) -> Self {
        self.target = Some(triple.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use kenosis_options::{BuildTarget, Options};

    use super::*;
    use crate::options::{FidelityTarget, QuantizeOptions};
    use kenosis_request::kernels::Evaluation;

    const SATURATING: BuildTarget = BuildTarget {
        saturating_kernels: true,
    };

    #[test]
    fn setters_and_a_call_site_layer_resolve_to_the_same_options() {
        let config = Config::new()
            .per_channel(false)
            .calibration_method(kenosis_options::Method::Percentile(99.9))
            .synthetic_image_range(0.0, 255.0)
            .min_top1_agreement(0.9)
            .keep_float("a")
            .keep_float("b");
        let from_config =
            QuantizeOptions::resolve(&config.options, SATURATING, Evaluation::HostKernels);
        let call = Options::parse_str(
            r#"per_channel = false, method = "percentile(99.9)",
               synthetic_image_range = "[0, 255]", min_top1_agreement = 0.9,
               keep_float = ["a", "b"]"#,
        )
        .expect("valid options");
        let from_call = QuantizeOptions::resolve(&call, SATURATING, Evaluation::HostKernels);
        assert_eq!(from_config, from_call);
        assert_eq!(from_config.canonical(), from_call.canonical());
        assert_eq!(from_config.keep_float, ["a", "b"]);
        assert_eq!(
            from_config.fidelity_target(),
            Some(FidelityTarget {
                min_cosine: None,
                min_top1_agreement: Some(0.9),
            })
        );

        // A call site over the build script: its values win, its names add to the build's.
        let mut layers = config.options.clone();
        layers
            .merge(&Options::parse_str(r#"per_channel = true, keep_float = "c""#).expect("valid"));
        let merged = QuantizeOptions::resolve(&layers, SATURATING, Evaluation::HostKernels);
        assert!(merged.per_channel);
        assert_eq!(merged.keep_float, ["a", "b", "c"]);
        assert_eq!(merged.method, kenosis_options::Method::Percentile(99.9));
    }
}
