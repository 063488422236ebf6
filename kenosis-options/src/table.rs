//! The declaration of every option: the one place an option is added, moved or changed.
//!
//! [`options!`](crate::options) hands the table below to a generator macro, in the way
//! bindgen's `options!` declares each option once. Two generators read it:
//!
//! - this crate's (in `lib.rs`): the call-site [`Options`](crate::Options) struct (one
//!   `Option` field per key, documented with the declaration's doc line), [`KEYS`](crate::KEYS),
//!   the `key = value` grammar, the value check, the merge of one layer over another and the
//!   canonical text [`Options::canonical`](crate::Options::canonical);
//! - `kenosis-build`'s (in its `options` module): the `Config` setter, with the setter docs
//!   written here, and the resolved `QuantizeOptions` field, its default, its check and its
//!   line in the cache key.
//!
//! Each entry reads:
//!
//! ```text
//! /// Doc line: the call-site syntax, what it means, the default.
//! name: ValueType {
//!     check: path::to::fn,           // fn(&ValueType) -> Result<(), String>
//!     merge: replace | extend,       // what a later layer (call site over Config) does
//!     resolved: Type = |t| default,  // the build's value (`t`: the build target)
//!     setter: { /// docs
//!               fn config_setter(args) = value_expression; },
//! }
//! ```
//!
//! Setter docs are expanded in `kenosis-build`, so their intra-doc links are written as
//! `crate::` paths of that crate.
//!
//! `ValueType` implements [`Value`](crate::value::Value): its call-site syntax and canonical
//! text. `resolved` converts from it with `Into` (`T` for an option with a default,
//! `Option<T>` for one that is unset by default). Entries under `inputs` name files the build
//! reads (calibration data, a device profile), not how the model is quantized: they have no
//! resolved value (the files' own bytes enter the cache key) and their `Config` setter, where
//! there is one, is written by hand.

/// Invokes `$callback! { inputs { ... } artifact { ... } }` with every option's declaration
/// (see the [module docs](crate::table) for the entry syntax). Not a stable API: the table's
/// shape changes with the generators that read it.
#[doc(hidden)]
#[macro_export]
macro_rules! options {
    ($callback:path) => {
        $callback! {
            inputs {
                /// `calibration = "dir"`: folder of `.npy` calibration samples, relative to the
                /// crate root; a leading `$OUT_DIR` is the build script's `OUT_DIR` (default:
                /// synthetic inputs).
                calibration: String {
                    check: $crate::check::calibration_dir,
                    merge: replace,
                }
                /// `calibration_images = "dir"`: folder of images (JPEG or PNG), relative to the crate
                /// root or under `$OUT_DIR`, each one calibration sample of a model with one
                /// image input, preprocessed as `preprocess` says (which it requires).
                calibration_images: String {
                    check: $crate::check::calibration_dir,
                    merge: replace,
                }
                /// `preprocess = "spec"`: how `calibration_images` become the model's input,
                /// written as the model card states it, e.g.
                /// `"rgb,nchw,224x224,crop,mean=0.485:0.456:0.406,std=0.229:0.224:0.225"`
                /// (grammar: `kenosis_options::preprocess`, docs/preprocess.md).
                preprocess: $crate::preprocess::ImagePreprocess {
                    check: $crate::check::any,
                    merge: replace,
                }
                /// `calibration_text = "file" | "dir"`: UTF-8 text (a file, or the files
                /// directly in a folder), relative to the crate root or under `$OUT_DIR`,
                /// tokenized with `tokenizer` into windows of `max_len` tokens, one calibration
                /// sample each, for a model whose inputs are token ids (and an attention mask,
                /// type ids or positions, by name).
                calibration_text: String {
                    check: $crate::check::calibration_dir,
                    merge: replace,
                }
                /// `tokenizer = "tokenizer.json"`: the model's Hugging Face tokenizer, relative
                /// to the crate root or under `$OUT_DIR`, for `calibration_text` (which requires
                /// it).
                tokenizer: String {
                    check: $crate::check::calibration_dir,
                    merge: replace,
                }
                /// `max_len = n`, `n` in `[2, 65536]`: tokens per `calibration_text` window,
                /// special tokens included (default: the model's fixed sequence length, else
                /// the tokenizer's truncation length, else 128).
                max_len: usize {
                    check: $crate::check::max_len,
                    merge: replace,
                }
                /// `device_profile = "profile.json"`: kernel costs measured on the device by
                /// `kenosis probe`, relative to the crate root or under `$OUT_DIR`, pricing
                /// which regions stay FP32 instead of the target class's table (default:
                /// `$KENOSIS_DEVICE_PROFILE` in a cross build, else costs measured on the
                /// build machine or the table).
                device_profile: String {
                    check: $crate::check::calibration_dir,
                    merge: replace,
                }
            }
            artifact {
                /// `method = "minmax" | "percentile" | "percentile(P)" | "entropy" | "mse"`:
                /// how activation ranges are chosen from calibration statistics;
                /// `"percentile"` is `"percentile(99.99)"` (default `"mse"`).
                method: $crate::Method {
                    check: $crate::check::method,
                    merge: replace,
                    resolved: $crate::Method = |_| $crate::Method::Mse,
                    setter: {
                        /// How activation ranges are chosen from calibration statistics
                        /// (default [`Method::Mse`](crate::Method::Mse); `docs/design.md`
                        /// describes the methods).
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .calibration_method(kenosis_build::Method::Percentile(99.99))
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn calibration_method(method: $crate::Method) = method;
                    },
                }
                /// `per_channel = bool`: per-channel weight scales on the output-channel axis, or
                /// one scale per weight tensor (default `true`).
                per_channel: bool {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: bool = |_| true,
                    setter: {
                        /// Per-channel weight scales on the output-channel axis (default `true`) or
                        /// per tensor.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .per_channel(false)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn per_channel(enable: bool) = enable;
                    },
                }
                /// `reduce_range = bool`: 7-bit weights where the integer kernel would saturate;
                /// depthwise Convs, and Convs whose simulated saturation costs less than the
                /// extra bit saves, keep 8 bits (default: on for x86 targets without VNNI).
                reduce_range: bool {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: bool = |target| target.saturating_kernels,
                    setter: {
                        /// 7-bit ("reduce-range") weights. Default: on for x86/x86-64 build
                        /// targets, whose u8·s8 kernels without VNNI saturate on full-range
                        /// weights, unless the target enables VNNI (`avxvnni` or `avx512vnni` in
                        /// cargo's `CARGO_CFG_TARGET_FEATURE`, e.g. with `-C target-cpu=native`
                        /// on such a CPU); off elsewhere. Depthwise Convs keep 8-bit weights either
                        /// way (see `quantize::rewrite::runs_on_widening_kernel`), and so does
                        /// each Conv
                        /// whose simulated int16 pair saturation, on the calibration data, costs
                        /// less than the extra bit saves (see `quantize::saturation`).
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .reduce_range(false)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn reduce_range(enable: bool) = enable;
                    },
                }
                /// `activations = "auto" | "static" | "dynamic"`: how the activations read by
                /// MatMul and Gemm with a constant weight are quantized: calibrated QDQ
                /// (`"static"`), at run time (`"dynamic"`), or chosen by measured fidelity
                /// (default `"auto"`).
                activations: $crate::Activations {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: $crate::Activations = |_| $crate::Activations::Auto,
                    setter: {
                        /// How activations read by MatMul and Gemm with a constant weight are
                        /// quantized (default [`Activations::Auto`](crate::Activations::Auto);
                        /// see `quantize::dynamic`): `Static` calibrates their ranges (QDQ,
                        /// fused by ONNX Runtime into `QLinearMatMul`/`QGemm`), `Dynamic`
                        /// computes them per run (`DynamicQuantizeLinear` + `MatMulInteger`,
                        /// fused into `DynamicQuantizeMatMul`) with int8 per-channel weights and
                        /// int8 embedding tables, `Auto` builds both where MatMul and Gemm hold
                        /// most of the weights and keeps the one closer to FP32 on held-out
                        /// samples.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/encoder.onnx")
                        ///     .activations(kenosis_build::Activations::Dynamic)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn activations(mode: $crate::Activations) = mode;
                    },
                }
                /// `weights = "int8" | "int4" | "int4(B)"`: precision of MatMul weights;
                /// `"int4"` stores them in blocks of 32 (or `B`) rows with one scale each,
                /// weight-only (default `"int8"`).
                weights: $crate::Weights {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: $crate::Weights = |_| $crate::Weights::Int8,
                    setter: {
                        /// Precision of the weights of MatMul nodes with a constant weight
                        /// (default [`Weights::Int8`](crate::Weights::Int8)). `Int4` stores
                        /// them as 4-bit codes with one scale per block of `block_size` rows of
                        /// each column, run by ONNX Runtime's `MatMulNBits` contrib op
                        /// (weight-only: activations stay float; see `quantize::int4`).
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/encoder.onnx")
                        ///     .weights(kenosis_build::Weights::Int4 { block_size: 32 })
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn weights(weights: $crate::Weights) = weights;
                    },
                }
                /// `bias_correction = bool`: corrects each bias for the mean shift its weights'
                /// quantization causes (default `true`).
                bias_correction: bool {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: bool = |_| true,
                    setter: {
                        /// Bias correction for weight quantization (default `true`; see
                        /// `quantize::bias_correction`).
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .bias_correction(false)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn bias_correction(enable: bool) = enable;
                    },
                }
                /// `fp32_where_faster = bool`: returns regions to FP32 where the target's kernel
                /// costs estimate them slower in INT8; `false` quantizes all the plan allows,
                /// for the smallest artifact (default `true`).
                fp32_where_faster: bool {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: bool = |_| true,
                    setter: {
                        /// Regions estimated slower in INT8 than in FP32 on the target stay
                        /// FP32 (default `true`; see `quantize::domain`). `false` keeps every
                        /// node the placement allows in INT8: a smaller artifact, maybe slower.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .fp32_where_faster(false)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn fp32_where_faster(enable: bool) = enable;
                    },
                }
                /// `gptq_rounding = bool`: error-compensating (GPTQ) rounding of ungrouped 2-D
                /// Conv weights; other weights use nearest rounding (default `true`).
                gptq_rounding: bool {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: bool = |_| true,
                    setter: {
                        /// Error-compensating (GPTQ) rounding of ungrouped 2-D Conv weights, from
                        /// their input patches observed during calibration (default `true`; see
                        /// `quantize::gptq`).
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .gptq_rounding(false)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn gptq_rounding(enable: bool) = enable;
                    },
                }
                /// `min_cosine = x`, `x` in `[-1, 1]`: fidelity floor, the mean cosine similarity
                /// to FP32 on held-out samples (default: none, and then real data of 10 or more
                /// samples is held to `fidelity::DEFAULT_FLOOR`, whose miss ships FP32).
                min_cosine: f64 {
                    check: $crate::check::min_cosine,
                    merge: replace,
                    resolved: Option<f64> = |_| None,
                    setter: {
                        /// Requires the INT8 model's first output to have a mean cosine similarity
                        /// of at least `min` with FP32 on held-out calibration samples (a fifth of
                        /// them), checked on the 95% lower confidence bound of that mean (see
                        /// `fidelity`) so that it carries over to unseen inputs; the most
                        /// sensitive ops and activations (measured, see `fidelity::meet_target`)
                        /// are kept in FP32 until it holds, else the build fails with a report.
                        /// It replaces the default floor (`fidelity::DEFAULT_FLOOR`), whose miss
                        /// ships the FP32 model with a warning instead of failing.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .calibration_npy_dir("calib/net")
                        ///     .min_cosine(0.995)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn min_cosine(min: f64) = min;
                    },
                }
                /// `min_top1_agreement = x`, `x` in `[0, 1]`: fidelity floor, the fraction of
                /// held-out samples whose first output has FP32's argmax (default: none; see
                /// `min_cosine` for the default floor). Either replaces the default floor.
                min_top1_agreement: f64 {
                    check: $crate::check::min_top1_agreement,
                    merge: replace,
                    resolved: Option<f64> = |_| None,
                    setter: {
                        /// Like [`Config::min_cosine`](crate::Config::min_cosine) for the fraction
                        /// of held-out samples whose first output has the same argmax (top-1
                        /// class) as FP32, in `[0, 1]`.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .calibration_npy_dir("calib/net")
                        ///     .min_top1_agreement(0.95)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn min_top1_agreement(min: f64) = min;
                    },
                }
                /// `min_speedup = x`, `x` in `(0, 100]`: speed floor, the INT8 model's latency
                /// advantage over FP32 (FP32 time / INT8 time, at one thread and at
                /// `intra_threads`) measured at build time when the build machine runs the
                /// target's code (default: none).
                min_speedup: f64 {
                    check: $crate::check::min_speedup,
                    merge: replace,
                    resolved: Option<f64> = |_| None,
                    setter: {
                        /// Requires the INT8 model to run at least `min` times as fast as FP32
                        /// (median latency ratio on one calibration sample at one thread and at
                        /// the application's thread count, `intra_threads`, measured in the
                        /// build when the build machine runs the target's code, see `speed`). With `min` at most 1, an INT8 model slower than FP32 is
                        /// replaced by the FP32 model, with a warning; above 1, a slower one
                        /// fails the build with the measured figures. Timing depends on the
                        /// machine's load: a check that passes on a quiet machine may fail on a
                        /// busy one.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .min_speedup(1.0)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn min_speedup(min: f64) = min;
                    },
                }
                /// `speed_check = bool`: where the build machine can time the target's code,
                /// times the artifact against FP32 and ships FP32 rather than a slower INT8
                /// model (default `true`; off with `fp32_where_faster = false`).
                speed_check: bool {
                    check: $crate::check::any,
                    merge: replace,
                    resolved: bool = |_| true,
                    setter: {
                        /// Times the finished artifact against FP32 where the build machine can
                        /// run the target's code (default `true`; see `speed`): median latency
                        /// ratio on one calibration sample at one thread and at the
                        /// application's thread count (`intra_threads`), the two models
                        /// interleaved, within a budget of a share of the quantization time.
                        /// An INT8 model slower than FP32 is placed again with the conversions
                        /// priced higher, and if it is still slower the artifact is the FP32
                        /// model, with a warning. `false` skips the timing, for an artifact that
                        /// does not depend on the machine's load, and so does
                        /// `fp32_where_faster(false)`, which asks for every node in INT8;
                        /// `min_speedup` sets a floor of its own either way.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .speed_check(false)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn speed_check(enable: bool) = enable;
                    },
                }
                /// `intra_threads = n`, `n` in `[1, 256]`: the intra-op thread count the
                /// application runs the model at; the speed check times it (and one thread),
                /// and `include_quantized!`'s wrapper uses it (default: the runtime's default
                /// for the machine, `kenosis_runtime::default_intra_threads`).
                intra_threads: usize {
                    check: $crate::check::intra_threads,
                    merge: replace,
                    resolved: Option<usize> = |_| None,
                    setter: {
                        /// The intra-op thread count the application runs this model at, for
                        /// programs that set their own: the speed check times the artifact
                        /// against FP32 at `threads` and at one thread (see `speed`), and
                        /// `include_quantized!`'s wrapper creates its session with `threads`
                        /// unless the program calls `set_intra_threads`. Default: the count
                        /// `kenosis_runtime::default_intra_threads` gives the machine the
                        /// program runs on.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .intra_threads(2)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn intra_threads(threads: usize) = threads;
                    },
                }
                /// `synthetic_samples = n`, `n` in `[1, 4096]`: synthetic calibration samples
                /// when no calibration data is given (default 16).
                synthetic_samples: usize {
                    check: $crate::check::synthetic_samples,
                    merge: replace,
                    resolved: usize = |_| 16,
                    setter: {
                        /// Number of synthetic calibration samples when no data is given (default
                        /// 16).
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .synthetic_samples(64)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn synthetic_samples(count: usize) = count;
                    },
                }
                /// `synthetic_image_range = "[low, high]"`: value range of synthetic image
                /// inputs, finite with `low < high` (default: inferred from the stem Convs,
                /// `[-2.118, 2.64]` or `[0, 255]`).
                synthetic_image_range: [f32; 2] {
                    check: $crate::check::image_range,
                    merge: replace,
                    resolved: Option<[f32; 2]> = |_| None,
                    setter: {
                        /// Value range `[low, high]` of synthetic image inputs (float
                        /// `[N, 3, H, W]`), in the model's input units: e.g. `(0.0, 1.0)` for a
                        /// model that reads pixels divided by 255, `(-123.0, 151.0)` for SqueezeNet
                        /// 1.0's mean-subtracted pixels. Default: inferred from the stem Convs as
                        /// normalized photographs (`[-2.118, 2.64]`, which contains `[-1, 1]`) or
                        /// pixels (`[0, 255]`; see `calibrate::image_range`), which assumes a
                        /// network trained with BatchNorm. Without a range that matches, synthetic
                        /// calibration is useless (docs/benchmarks.md has SqueezeNet 1.0's case).
                        /// [`Config::compile`](crate::Config::compile) fails with
                        /// [`Error::Config`](crate::Error::Config) unless both bounds are
                        /// finite and `low < high`.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/squeezenet1.0.onnx")
                        ///     .synthetic_image_range(-123.0, 151.0)
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn synthetic_image_range(low: f32, high: f32) = [low, high];
                    },
                }
                /// `keep_float = ["node", ...]` (or one `"node"`): nodes kept in FP32, by their
                /// name in the model file; added to the names the build script gives (default:
                /// none).
                keep_float: Vec<String> {
                    check: $crate::check::node_names,
                    merge: extend,
                    resolved: Vec<String> = |_| Vec::new(),
                    setter: {
                        /// Keeps the node named `name` in FP32 (in every model; a call site's
                        /// `keep_float = [...]` adds names for its model). Names are those of the
                        /// model file's nodes; each report lists the names its model has no node
                        /// for (`keep_float_unmatched`), and a name no model has gets a
                        /// `cargo:warning`.
                        ///
                        /// ```no_run
                        /// kenosis_build::Config::new()
                        ///     .model("models/net.onnx")
                        ///     .keep_float("head/Conv")
                        ///     .compile()
                        ///     .expect("kenosis: quantization failed");
                        /// ```
                        fn keep_float(name: impl Into<String>) = vec![name.into()];
                    },
                }
            }
        }
    };
}
