//! One model from FP32 bytes to INT8 QDQ bytes: decode → normalize → plan → calibrate →
//! choose parameters → rewrite → encode.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

use prost::Message;

use crate::calibrate::gram;
use crate::calibrate::rules::{
    held_out_count, spread_to_end, synthetic_rejected, MIN_BULK_STEPS, MIN_SAMPLES_TO_HOLD_OUT,
};
use crate::calibrate::runnable::Blocked;
use crate::calibrate::session::GramRequest;
use crate::calibrate::stats::{ChannelAxis, ChannelMoments};
use crate::calibrate::synthetic::ImageRange;
use crate::calibrate::{self, data::input_specs, CalibrationData};
use crate::error::{Error, Result, Unsupported};
use crate::fidelity;
use crate::normalize::Normalized;
use crate::onnx::{self, DataType, ModelProto, NodeProto, TensorProto};
use crate::quantize::build::{ActivationMode, Builder, Built, KeptFloat, Statistics};
use crate::quantize::plan::{self, PlanOptions};
use crate::quantize::reason::FloatReason;
use crate::quantize::rewrite::{Range, WeightOptions};
use crate::report::{tensor_info, ActivationsChoice, Report};
use crate::speed;

pub use crate::options::QuantizeOptions;

/// Where calibration samples come from.
#[derive(Debug, Clone)]
pub enum Calibration {
    /// `.npy` files in a folder (see [`calibrate::data::load_npy_dir`]).
    NpyDir(std::path::PathBuf),
    /// The images in a folder, preprocessed by a spec, one sample each, for a model with one
    /// image input (see `calibrate::images::samples`; feature `images`).
    Images {
        /// The folder.
        dir: std::path::PathBuf,
        /// How an image becomes the model's input.
        preprocess: kenosis_options::preprocess::ImagePreprocess,
    },
    /// UTF-8 text (a file or a folder of them) tokenized into windows, one sample each, for a
    /// model whose inputs are token ids (see `calibrate::text::samples`; feature `text`).
    Text {
        /// The file or folder.
        path: std::path::PathBuf,
        /// The model's `tokenizer.json` (Hugging Face `tokenizers`).
        tokenizer: std::path::PathBuf,
        /// Tokens per window; `None`: the model's fixed length, else the tokenizer's, else
        /// `calibrate::text::DEFAULT_MAX_LEN`.
        max_len: Option<usize>,
    },
    /// Samples already in memory.
    Data(CalibrationData),
    /// Deterministic synthetic inputs.
    Synthetic,
}

/// The result of quantizing one model.
#[derive(Debug, Clone)]
pub struct Quantized {
    /// The INT8 QDQ model, encoded.
    pub bytes: Vec<u8>,
    /// What was done (the `key` and `artifact_blake3` fields are filled here too).
    pub report: Report,
}

/// A stage of one model's quantization, as [`quantize_with_progress`] reports it when the
/// stage begins, each once, in this order (`SpeedCheck` only where a speed floor applies:
/// `speed_check` with `fp32_where_faster`, or `min_speedup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Decoding the protobuf.
    Decode,
    /// Normalizing the graph (constants, opset, folds) and planning the placement.
    Normalize,
    /// Running the FP32 model on `samples` calibration samples in ONNX Runtime.
    Calibrate {
        /// Samples the ranges are fitted on (the held-out ones come later, in `Fidelity`).
        samples: usize,
    },
    /// Choosing activation ranges from the observed statistics.
    Ranges,
    /// Quantizing weights and rewriting the graph with QuantizeLinear/DequantizeLinear.
    Rewrite,
    /// Measuring the INT8 model against FP32 (and keeping ops FP32 to meet a floor).
    Fidelity,
    /// Timing the INT8 model against FP32 on this machine.
    SpeedCheck,
}

pub use crate::model_files::{external_files, model_dir};

/// Largest message protobuf implementations (and so ONNX Runtime) parse: 2 GiB - 1.
const PROTOBUF_LIMIT: usize = i32::MAX as usize;

/// Quantizes `model_bytes` (the FP32 model at `path`) to a static INT8 QDQ model.
/// Tensors kept in external data files beside `path` are read in: the artifact is always one
/// self-contained file.
///
/// # Errors
/// Any [`Error`]: options out of bounds ([`QuantizeOptions::check`]), invalid or unsupported
/// model, bad calibration data, ONNX Runtime failures.
pub fn quantize(
    path: &Path,
    model_bytes: &[u8],
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<Quantized> {
    quantize_with_progress(path, model_bytes, calibration, options, &|_| {})
}

/// [`quantize`], calling `progress` as each [`Stage`] begins (e.g. to show it on a terminal).
///
/// # Errors
/// As [`quantize`].
pub fn quantize_with_progress(
    path: &Path,
    model_bytes: &[u8],
    calibration: &Calibration,
    options: &QuantizeOptions,
    progress: &dyn Fn(Stage),
) -> Result<Quantized> {
    progress(Stage::Decode);
    let model = onnx::decode(path, model_bytes)?;
    let size = model_bytes.len();
    quantize_decoded_with_progress(path, model, size, calibration, options, progress)
}

/// [`quantize`] for the model file at `path`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; otherwise as [`quantize`].
pub fn quantize_file(
    path: &Path,
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<Quantized> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    quantize(path, &bytes, calibration, options)
}

/// [`quantize`] for a model already decoded with [`onnx::decode`] from a file of `size_fp32`
/// bytes, so that the caller can drop the encoded bytes first (peak memory: the encoded
/// model is one more model-sized buffer).
///
/// The model goes through one stage type after another, each consuming the one before:
/// the decoded `ModelProto`, [`Normalized`], `Planned` (the placement before
/// calibration), `Calibrated` (observed statistics) and [`Quantized`].
///
/// # Errors
/// As [`quantize`].
pub fn quantize_decoded(
    path: &Path,
    model: ModelProto,
    size_fp32: usize,
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<Quantized> {
    quantize_decoded_with_progress(path, model, size_fp32, calibration, options, &|_| {})
}

/// [`quantize_decoded`], calling `progress` as each [`Stage`] after decoding begins.
///
/// # Errors
/// As [`quantize`].
pub fn quantize_decoded_with_progress(
    path: &Path,
    model: ModelProto,
    size_fp32: usize,
    calibration: &Calibration,
    options: &QuantizeOptions,
    progress: &dyn Fn(Stage),
) -> Result<Quantized> {
    options.check()?;
    let started = Instant::now();
    progress(Stage::Normalize);
    let normalized = normalize_decoded(path, model)?;
    let planned = Planned::new(path, normalized, options)?;
    let calibrated = planned.calibrate(calibration, options, progress)?;
    calibrated.quantize(size_fp32, options, started, progress)
}

/// The model decoded from the file at `path` with its external tensors read in from the
/// model's folder (see [`onnx::external::inline`]), normalized: the first stage every build
/// runs, and what the `external_data` fuzz target drives.
///
/// # Errors
/// [`Error::InvalidModel`], [`Error::UnsafePath`] or [`Error::Io`] for external data as
/// [`external_files`] gives them; [`Error::Unsupported`] when normalization refuses the
/// model.
pub fn normalize_decoded(path: &Path, mut model: ModelProto) -> Result<Normalized> {
    onnx::external::inline(&mut model, model_dir(path))
        .map_err(|e| crate::model_files::external_error(path, e))?;
    crate::normalize::normalize(model).map_err(|r| crate::error::unsupported(path, r))
}

/// The placement of the normalized FP32 model before calibration: what stays FP32 from the
/// start and which tensors calibration observes.
struct Planned<'p> {
    path: &'p Path,
    normalized: Normalized,
    /// Element type of each tensor (see [`crate::types::infer_elem_types`]).
    types: HashMap<String, DataType>,
    specs: Vec<calibrate::data::InputSpec>,
    /// Nodes ONNX Runtime cannot run and those depending on them, with the reason to report
    /// (`Blocked::CustomOp` when not worth naming): they stay FP32, and calibration runs the
    /// rest.
    uncalibratable: BTreeMap<String, Blocked>,
    /// The user's `keep_float` and the uncalibratable nodes given a reason.
    keep: HashSet<String>,
    /// Those reasons, by node name, for the report.
    keep_float_reasons: HashMap<String, FloatReason>,
    /// `keep_float` names that name no node.
    keep_float_unmatched: Vec<String>,
    plan: plan::Plan,
    /// `activations = "auto"` will build both activation modes and keep the closer to FP32
    /// (see [`compares_activation_modes`]).
    compares_activations: bool,
}

impl<'p> Planned<'p> {
    /// Plans `normalized` before calibration: the user's `keep_float` and the nodes ONNX
    /// Runtime cannot run stay FP32, and the plan names the tensors calibration observes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when a fidelity target is set but the FP32 model needs a
    /// kernel ONNX Runtime does not have, so it cannot be measured.
    fn new(path: &'p Path, normalized: Normalized, options: &QuantizeOptions) -> Result<Self> {
        let graph = normalized.graph();
        let uncalibratable = calibrate::runnable::uncalibratable(normalized.model());
        if let (Some(target), Some(custom)) = (
            options.fidelity_target(),
            (graph.node.iter()).find(|n| uncalibratable.contains_key(n.name())),
        ) {
            return Err(crate::error::unsupported(
                path,
                Unsupported::TargetUncheckable {
                    target: format!("{target:?}"),
                    node: crate::onnx::node_ref(custom),
                    domain: custom.domain().to_owned(),
                },
            ));
        }
        let node_names: HashSet<&str> = graph.node.iter().map(|n| n.name()).collect();
        let mut keep_float_unmatched: Vec<String> = (options.keep_float.iter())
            .filter(|name| !node_names.contains(name.as_str()))
            .cloned()
            .collect();
        keep_float_unmatched.sort_unstable();
        // Nodes that depend on one ONNX Runtime cannot run are kept with their reason; the
        // op itself (no reason given) stays FP32 by its own rule.
        let mut reasons = keep_float_reasons(&uncalibratable);
        reasons.extend(non_finite_weight_readers(graph));
        let mut keep: HashSet<String> = options.keep_float.iter().cloned().collect();
        keep.extend(reasons.keys().cloned());
        let types = crate::types::infer_elem_types(graph);
        let plan_options = PlanOptions {
            keep_float: keep.clone(),
            keep_float_reasons: reasons,
            ..Default::default()
        };
        let plan = plan::plan(graph, &types, &plan_options);
        let specs = input_specs(graph);
        let compares_activations = options.activations == kenosis_options::Activations::Auto
            && compares_activation_modes(graph, &types);
        Ok(Self {
            path,
            normalized,
            types,
            specs,
            uncalibratable,
            keep,
            keep_float_reasons: plan_options.keep_float_reasons,
            keep_float_unmatched,
            plan,
            compares_activations,
        })
    }

    /// Weighted ops whose data input is computed, not a constant, with their weight: the
    /// inputs bias correction and GPTQ rounding observe.
    fn weighted(&self) -> Vec<(&NodeProto, &TensorProto)> {
        let graph = self.normalized.graph();
        let initializers: HashMap<&str, &TensorProto> =
            graph.initializer.iter().map(|t| (t.name(), t)).collect();
        (self.plan.weights.iter())
            .filter_map(|w| {
                let node = &graph.node[w.node];
                let weight = initializers.get(node.input[w.weight_slot].as_str())?;
                (!initializers.contains_key(node.input[0].as_str())).then_some((node, *weight))
            })
            .collect()
    }

    fn input_names(&self) -> Vec<String> {
        self.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// Runs the part of the model ONNX Runtime can run on the calibration samples and turns
    /// what it observed into [`Statistics`].
    ///
    /// # Errors
    /// [`Error::Calibration`] for bad or missing samples (or synthetic ones ONNX Runtime
    /// rejects), [`Error::Runtime`] on other ONNX Runtime failures.
    fn calibrate(
        self,
        calibration: &Calibration,
        options: &QuantizeOptions,
        progress: &dyn Fn(Stage),
    ) -> Result<Calibrated<'p>> {
        let runnable = (!self.uncalibratable.is_empty()).then(|| {
            calibrate::runnable::runnable_part(self.normalized.model(), &self.uncalibratable)
        });
        let calibration_model = runnable.as_ref().unwrap_or(self.normalized.model());
        let (mut data, synthetic_image_ranges) = calibration_data(
            calibration,
            calibration_model,
            &self.specs,
            options,
            self.path,
        )?;
        let held_out = held_out_count(data.samples.len());
        // Held out of range calibration whenever real data holds enough samples, and when a
        // target or the activation-mode choice is judged on them.
        let judged = options.fidelity_target().is_some()
            || self.compares_activations
            || (!data.synthetic && data.samples.len() >= MIN_SAMPLES_TO_HOLD_OUT);
        let calibrated_on = if judged && data.samples.len() > 1 {
            data.samples.len() - held_out
        } else {
            data.samples.len()
        };
        if calibrated_on < data.samples.len() {
            spread_to_end(&mut data.samples, held_out);
        }
        // Uncalibratable nodes are kept FP32 above, so every observed tensor is one the
        // runnable part computes. Tensors that share another's parameters are observed too:
        // a build that keeps their writer FP32 (the time estimate, a fidelity target)
        // quantizes them with parameters of their own.
        let observed: Vec<String> = (self.plan.tensors.iter())
            .filter(|(_, source)| !matches!(source, plan::RangeSource::Constant))
            .map(|(t, _)| t.clone())
            .collect();
        let weighted = self.weighted();
        let dynamic = self.compares_activations
            || options.activations == kenosis_options::Activations::Dynamic;
        let (moments, grams) = observation_requests(&weighted, options, dynamic);
        let sized = crate::quantize::domain::sized_tensors(self.normalized.graph(), &self.plan);
        let requests = calibrate::session::Requests {
            histograms: &observed,
            moments: &moments,
            grams: &grams,
            sized: &sized,
        };
        progress(Stage::Calibrate {
            samples: calibrated_on,
        });
        let observations = calibrate::session::observe(
            calibration_model,
            &requests,
            &self.input_names(),
            &data.samples[..calibrated_on],
            self.path,
        )
        .map_err(|e| match e {
            Error::Runtime { path, source } if data.synthetic => Error::Calibration {
                path,
                reason: synthetic_rejected(&self.specs, &source),
            },
            e => e,
        })?;
        drop(runnable);
        progress(Stage::Ranges);
        let statistics = self.statistics(&weighted, observations, options.method);
        Ok(Calibrated {
            planned: self,
            data,
            synthetic_image_ranges,
            calibrated_on,
            held_out,
            statistics,
        })
    }

    /// Activation ranges chosen by `method`, per-channel means and the tensors unfit for
    /// uint8, from what calibration `observed`.
    fn statistics(
        &self,
        weighted: &[(&NodeProto, &TensorProto)],
        observed: calibrate::session::Observed,
        method: calibrate::Method,
    ) -> Statistics {
        let graph = self.normalized.graph();
        let moments = |f: fn(&ChannelMoments) -> Vec<f64>| -> HashMap<String, Vec<f64>> {
            (observed.channel_moments.iter())
                .map(|(t, m)| (t.clone(), f(m)))
                .collect()
        };
        let channel_means = moments(ChannelMoments::means);
        let channel_spreads = moments(ChannelMoments::std_devs);
        let matmul_inputs: HashMap<String, ChannelMoments> = (weighted.iter())
            .filter(|(n, _)| matches!(n.op_type(), "MatMul" | "Gemm"))
            .filter_map(|(n, _)| {
                let t = &n.input[0];
                Some((t.clone(), observed.channel_moments.get(t)?.clone()))
            })
            .collect();
        // Ranges of tensors feeding only a SiLU, Sigmoid or Tanh are judged after it.
        let read_by = calibrate::activation::sole_readers(graph);
        let ranges: HashMap<String, Range> = (observed.histograms.iter())
            .filter_map(|(name, h)| {
                calibrate::range::choose(h, method, read_by.get(name).copied())
                    .map(|(min, max)| (name.clone(), Range { min, max }))
            })
            .collect();
        // Only tensors the plan quantizes with parameters of their own are judged: a
        // shared-scale tensor takes its writer's input parameters, whose fitness is judged.
        let own: HashMap<String, Range> = (self.plan.observed_tensors())
            .filter_map(|t| Some((t.to_owned(), *ranges.get(t)?)))
            .collect();
        let unfit_tensors = unfit_tensors(
            graph,
            weighted,
            &observed.histograms,
            &own,
            &channel_spreads,
        );
        Statistics {
            ranges,
            channel_means,
            patch_grams: observed.patch_grams,
            unfit_tensors,
            elements: observed.elements,
            matmul_inputs,
        }
    }
}

/// The reasons of the `uncalibratable` nodes worth naming, for the report.
fn keep_float_reasons(uncalibratable: &BTreeMap<String, Blocked>) -> HashMap<String, FloatReason> {
    (uncalibratable.iter())
        .filter(|(_, blocked)| **blocked != Blocked::CustomOp)
        .map(|(name, blocked)| (name.clone(), FloatReason::Uncalibratable(blocked.clone())))
        .collect()
}

/// The nodes that read a float initializer holding NaN or ±inf (a `-inf` mask table),
/// with [`FloatReason::NonFinite`]: they stay FP32, so the table keeps its values; what they
/// compute from it is kept float by calibration when it carries non-finite values too (see
/// [`unfit_tensors`]). Weights read through `Identity` nodes are read directly by now:
/// normalization folds those (`normalize::layout::fold`).
fn non_finite_weight_readers(graph: &onnx::GraphProto) -> HashMap<String, FloatReason> {
    use kenosis_numerics::stats::count_non_finite;
    let non_finite: HashSet<&str> = (graph.initializer.iter())
        .filter(|t| t.elem_type() == DataType::Float)
        .filter(|t| onnx::tensor::to_f32(t).is_ok_and(|v| count_non_finite(&v) > 0))
        .map(|t| t.name())
        .collect();
    (graph.node.iter())
        .filter_map(|node| {
            let tensor = node
                .input
                .iter()
                .find(|i| non_finite.contains(i.as_str()))?;
            let reason = FloatReason::NonFinite {
                tensor: tensor.clone(),
            };
            Some((node.name().to_owned(), reason))
        })
        .collect()
}

/// Shortest time the search for the default floor may take (see
/// [`Calibrated::meet_target`]).
const MIN_FLOOR_SEARCH: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the per-group choice of activation mode ([`Calibrated::flip_groups`]) may take,
/// in multiples of the build's time before it (at least [`MIN_FLOOR_SEARCH`]): each group
/// costs one build and one run of the held-out samples, about a tenth of a first build's
/// time on an encoder, so a pass over a 12-layer encoder's 48 groups fits.
const GROUP_SEARCH_SHARE: f64 = 12.0;

/// Placements the speed check tries again before it ships FP32 (see
/// `Calibrated::meet_speedup`).
const REVISIONS: usize = 2;
/// How much more each revision prices the domain changes (conversions, layout changes):
/// `REVISION_FACTOR^k` for the `k`-th.
const REVISION_FACTOR: f64 = 2.0;

/// What ships after the speed check `report`: `built` with its fidelity, or, when INT8 missed
/// the floor, the FP32 model `fp32` with no placement and no fidelity report, whose figures
/// were the slower INT8 model's (see `Report::shipped_fp32`).
fn shipped(
    (built, fidelity): (Built, Option<fidelity::FidelityReport>),
    fp32: &ModelProto,
    report: &speed::SpeedReport,
) -> (Built, Option<fidelity::FidelityReport>) {
    if !report.kept_fp32 {
        return (built, fidelity);
    }
    let fp32 = Built {
        model: fp32.clone(),
        plan: plan::Plan::default(),
        rewrite: Default::default(),
    };
    (fp32, None)
}

/// A planned model with its calibration samples and statistics.
struct Calibrated<'p> {
    planned: Planned<'p>,
    data: CalibrationData,
    /// Value range of each synthetic image input, by input name, for the report.
    synthetic_image_ranges: ImageRangeLabels,
    /// Ranges were calibrated on the first `calibrated_on` samples.
    calibrated_on: usize,
    /// The fidelity check measures on the last `held_out` samples: held out of range
    /// calibration when a target is set, shared with it otherwise.
    held_out: usize,
    statistics: Statistics,
}

impl Calibrated<'_> {
    /// Builds the INT8 model, meets the fidelity target if one is set, and reports.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the rewrite fails or the artifact exceeds protobuf's
    /// limit, [`Error::FidelityTarget`] when the target cannot be met, [`Error::Runtime`].
    fn quantize(
        mut self,
        size_fp32: usize,
        options: &QuantizeOptions,
        started: Instant,
        progress: &dyn Fn(Stage),
    ) -> Result<Quantized> {
        progress(Stage::Rewrite);
        let planned = &self.planned;
        // Every build reuses this calibration: keeping more nodes in FP32 changes which
        // tensors are quantized, never the FP32 statistics they are quantized with.
        let mut builder = Builder::new(
            planned.normalized.model(),
            &planned.types,
            std::mem::take(&mut self.statistics),
            planned.keep_float_reasons.clone(),
            WeightOptions {
                per_channel: options.per_channel,
                reduce_range: options.reduce_range,
                bias_correction: options.bias_correction,
                gptq_rounding: options.gptq_rounding,
            },
            (options.fp32_where_faster).then(|| options.pricing()),
            options.fidelity_target().is_some() || planned.compares_activations,
        );
        let mut kept = KeptFloat {
            ops: planned.keep.clone(),
            tensors: HashSet::new(),
        };
        let (built, activations) =
            self.choose_activations(&mut builder, &kept, options, started.elapsed())?;
        let build = |builder: &Builder<'_>, kept: &KeptFloat| {
            builder
                .build(kept)
                .map_err(|r| crate::error::unsupported(planned.path, r))
        };
        progress(Stage::Fidelity);
        let (built, fidelity) = self.meet_target(
            built,
            &mut kept,
            |k| build(&builder, k),
            options,
            started.elapsed(),
        )?;
        if options.min_speedup.is_some() || (options.speed_check && options.fp32_where_faster) {
            progress(Stage::SpeedCheck);
        }
        let (built, fidelity, speed) = self.meet_speedup(
            (built, fidelity),
            (&mut builder, &kept, build),
            options,
            started.elapsed(),
        )?;
        self.report(
            built,
            fidelity,
            (speed, activations),
            size_fp32,
            options,
            started,
        )
    }

    /// The activation mode of `options` set on `builder`, and its first build. With
    /// `activations = "auto"` on a model where [`compares_activation_modes`] holds, both
    /// modes are built and measured against FP32 on the held-out samples, and the one with
    /// the higher mean cosine is kept (static on a tie); then MatMuls may take the other mode
    /// group by group ([`Self::flip_groups`], within [`GROUP_SEARCH_SHARE`] times `spent`).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when a rewrite fails, [`Error::Runtime`] when ONNX Runtime
    /// fails to run a build.
    fn choose_activations(
        &self,
        builder: &mut Builder<'_>,
        kept: &KeptFloat,
        options: &QuantizeOptions,
        spent: std::time::Duration,
    ) -> Result<(Built, ActivationsChoice)> {
        let planned = &self.planned;
        let path = planned.path;
        let build = |b: &Builder<'_>| {
            b.build(kept)
                .map_err(|r| crate::error::unsupported(path, r))
        };
        let fixed = |mode: ActivationMode, why: &str| ActivationsChoice {
            mode: mode_name(mode).into(),
            static_cosine: None,
            dynamic_cosine: None,
            reason: why.into(),
            flipped: Vec::new(),
            mixed_cosine: None,
        };
        if let kenosis_options::Weights::Int4 { block_size } = options.weights {
            // Weight-only: activations stay float; embedding tables int8.
            builder.set_int4(Some(block_size as usize), self.planned.keep.clone());
            // Size is what int4 is asked for: its kernel's price informs, it does not place.
            let priced = (builder.pricing()).map_or(String::new(), |p| {
                format!(
                    "; its multiply-add at {:.2}x FP32's ({})",
                    p.costs.int4_dense,
                    p.describe()
                )
            });
            let choice = ActivationsChoice {
                mode: "float (int4 weights)".into(),
                static_cosine: None,
                dynamic_cosine: None,
                reason: format!("weights = \"int4\": MatMulNBits, weight-only{priced}"),
                flipped: Vec::new(),
                mixed_cosine: None,
            };
            return Ok((build(builder)?, choice));
        }
        match options.activations {
            kenosis_options::Activations::Static => {
                return Ok((build(builder)?, fixed(ActivationMode::Static, "requested")));
            }
            kenosis_options::Activations::Dynamic => {
                builder.set_activations(ActivationMode::Dynamic);
                return Ok((build(builder)?, fixed(ActivationMode::Dynamic, "requested")));
            }
            kenosis_options::Activations::Auto => {}
        }
        let compared = fidelity::compared(planned.normalized.graph(), &planned.types);
        if !planned.compares_activations
            || !planned.uncalibratable.is_empty()
            || compared == fidelity::Compared::Nothing
        {
            let why = "MatMul and Gemm hold less than half of the weights: calibrated (static) activations";
            return Ok((build(builder)?, fixed(ActivationMode::Static, why)));
        }
        let input_names = planned.input_names();
        let samples = &self.data.samples;
        let held_out = fidelity::Evaluator::new(
            planned.normalized.model(),
            &compared,
            &input_names,
            &samples[samples.len() - self.held_out..],
            path,
            options.evaluation,
        )?;
        let static_built = build(builder)?;
        let static_samples = held_out.sample_cosines(&static_built.model)?;
        builder.set_activations(ActivationMode::Dynamic);
        let dynamic_built = build(builder)?;
        let dynamic_samples = held_out.sample_cosines(&dynamic_built.model)?;
        let (static_cosine, dynamic_cosine) = (mean(&static_samples), mean(&dynamic_samples));
        let (built, mode, whole) = if dynamic_cosine > static_cosine {
            (dynamic_built, ActivationMode::Dynamic, dynamic_samples)
        } else {
            builder.set_activations(ActivationMode::Static);
            (static_built, ActivationMode::Static, static_samples)
        };
        let deadline = Instant::now() + spent.max(MIN_FLOOR_SEARCH).mul_f64(GROUP_SEARCH_SHARE);
        let (built, mixed) =
            self.flip_groups(builder, kept, &held_out, (built, whole), deadline)?;
        let mut flipped: Vec<String> = builder.flipped().iter().cloned().collect();
        flipped.sort_unstable();
        let choice = ActivationsChoice {
            mode: mode_name(mode).into(),
            static_cosine: Some(static_cosine),
            dynamic_cosine: Some(dynamic_cosine),
            reason: "closer to FP32 on the held-out samples".into(),
            flipped,
            mixed_cosine: mixed,
        };
        Ok((built, choice))
    }

    /// The per-node choice of activation mode, from each choice's measured effect on the
    /// held-out output. Starting from `built`, the better whole-model mode, with per-sample
    /// cosines `whole` on the held-out samples, each group of MatMuls that reads one input
    /// tensor ([`crate::quantize::dynamic::DynamicPlan::groups`]: an attention block's
    /// projections, its output projection, the FFN's two) is built alone in the other
    /// mode and measured, in graph order until `deadline`. "Closer than `whole`" means
    /// clearly so ([`fidelity::clearly_closer`]: the paired gain over the held-out samples
    /// clears its own noise), since a flip to static ranges that gains within the noise of
    /// a few samples can lose on other inputs. The groups that measured closer are then
    /// built flipped together: that build is kept when it is closer than `whole` and has a
    /// higher mean than the best single flip; else the best single flip, when closer than
    /// `whole`; else `built`. The kept flips stay set on `builder`, so that later builds
    /// (the fidelity floor, the speed check's revisions) keep them. A flip counts only when
    /// every flipped MatMul runs quantized in the other mode: one the static placement
    /// declines (an outlier-dominated input) or whose dynamic form does not repay its
    /// run-time quantization would be FP32, a choice of size and speed left to the floor.
    ///
    /// Returns the kept build and, when it has flips, its mean cosine.
    ///
    /// # Errors
    /// As [`Self::choose_activations`].
    fn flip_groups(
        &self,
        builder: &mut Builder<'_>,
        kept: &KeptFloat,
        held_out: &fidelity::Evaluator,
        (built, whole): (Built, Vec<f64>),
        deadline: Instant,
    ) -> Result<(Built, Option<f64>)> {
        let planned = &self.planned;
        let graph = planned.normalized.graph();
        let costs = builder.pricing().map(|p| p.costs);
        let groups =
            crate::quantize::dynamic::plan(graph, &planned.types, &kept.ops, costs.as_ref())
                .groups(graph);
        if groups.len() < 2 {
            return Ok((built, None));
        }
        let flipped_mode = builder.activations().other();
        // `None` when a flipped MatMul did not take the other mode (the static placement
        // declined it, or its dynamic form does not pay): that is no mode choice but an FP32
        // one, which costs size and speed and is the fidelity floor's to make.
        let measure = |builder: &mut Builder<'_>,
                       flipped: HashSet<String>|
         -> Result<Option<(Built, Vec<f64>)>> {
            builder.set_flipped(flipped);
            let b = builder
                .build(kept)
                .map_err(|r| crate::error::unsupported(planned.path, r))?;
            let in_mode = match flipped_mode {
                ActivationMode::Static => &b.rewrite.static_matmuls,
                ActivationMode::Dynamic => &b.rewrite.dynamic_nodes,
            };
            if !(builder.flipped().iter()).all(|name| in_mode.contains(name)) {
                return Ok(None);
            }
            let cosines = held_out.sample_cosines(&b.model)?;
            Ok(Some((b, cosines)))
        };
        // Only the best single flip's build is held: an encoder's model is large.
        let mut closer: Vec<HashSet<String>> = Vec::new();
        let mut best: Option<(f64, HashSet<String>, Built)> = None;
        for group in groups {
            if Instant::now() >= deadline {
                break;
            }
            let flipped: HashSet<String> = group.into_iter().collect();
            let Some((b, cosines)) = measure(builder, flipped.clone())? else {
                continue;
            };
            if fidelity::clearly_closer(&cosines, &whole) {
                let cosine = mean(&cosines);
                closer.push(flipped.clone());
                if best.as_ref().is_none_or(|(c, _, _)| cosine > *c) {
                    best = Some((cosine, flipped, b));
                }
            }
        }
        let Some((best_single, flipped, best_built)) = best else {
            builder.set_flipped(HashSet::new());
            return Ok((built, None));
        };
        if closer.len() > 1 {
            let all: HashSet<String> = closer.into_iter().flatten().collect();
            if let Some((b, cosines)) = measure(builder, all)? {
                if mean(&cosines) > best_single && fidelity::clearly_closer(&cosines, &whole) {
                    return Ok((b, Some(mean(&cosines))));
                }
            }
        }
        builder.set_flipped(flipped);
        Ok((best_built, Some(best_single)))
    }

    /// With a speed floor (`min_speedup`, or 1 with `speed_check` and `fp32_where_faster`
    /// on, their defaults), times `built` against the normalized FP32 model on one
    /// calibration sample at one thread and at the application's count
    /// ([`speed::thread_counts`]), where the build machine runs the target's code (see
    /// [`crate::speed`]), within [`speed::BUDGET_SHARE`] of `spent`, the quantization's time
    /// so far. An INT8 model below a floor of at most 1 is
    /// placed again with domain changes priced [`REVISION_FACTOR`] times higher, up to
    /// [`REVISIONS`] times (not with a fidelity target, which chose the FP32 nodes it needs),
    /// each revision measured for fidelity and timed again; if none reaches the floor, the
    /// FP32 model takes its place.
    ///
    /// # Errors
    /// [`Error::SpeedTarget`] when INT8 misses a floor above 1; [`Error::Runtime`],
    /// [`Error::Unsupported`] from a revision's build.
    fn meet_speedup<'b>(
        &self,
        (built, fidelity): (Built, Option<fidelity::FidelityReport>),
        (builder, kept, build): (
            &mut Builder<'b>,
            &KeptFloat,
            impl Fn(&Builder<'b>, &KeptFloat) -> Result<Built>,
        ),
        options: &QuantizeOptions,
        spent: std::time::Duration,
    ) -> Result<(
        Built,
        Option<fidelity::FidelityReport>,
        Option<speed::SpeedCheck>,
    )> {
        let checked = options.speed_check && options.fp32_where_faster;
        let floor = (options.min_speedup).or(checked.then_some(1.0));
        let Some(min_speedup) = floor else {
            return Ok((built, fidelity, None));
        };
        let planned = &self.planned;
        let why_not = if !options.host_runs_target {
            Some(speed::NOT_THE_TARGET)
        } else if built.quantizes_nothing() {
            Some("no op is quantized: the artifact is the FP32 graph")
        } else if !planned.uncalibratable.is_empty() {
            Some("the model holds an op ONNX Runtime cannot run")
        } else {
            None
        };
        let (Some(sample), None) = (self.data.samples.last(), why_not) else {
            let why = why_not.unwrap_or("no calibration sample");
            let check = speed::SpeedCheck::NotMeasured(why.into());
            return Ok((built, fidelity, Some(check)));
        };
        let fp32 = planned.normalized.model();
        let input_names = planned.input_names();
        let budget = spent.mul_f64(speed::BUDGET_SHARE);
        let threads = speed::thread_counts(options.intra_threads);
        let time = |built: &Built| -> Result<speed::SpeedReport> {
            let models = (fp32, &built.model);
            let timings =
                speed::measure(models, &input_names, sample, planned.path, &threads, budget)?;
            speed::check(timings, min_speedup, planned.path)
        };
        let (mut built, mut fidelity) = (built, fidelity);
        let mut report = time(&built)?;
        let first_pricing = builder.pricing();
        let revisable = first_pricing.is_some() && options.fidelity_target().is_none();
        while report.kept_fp32 && revisable && report.revisions < REVISIONS {
            let revisions = report.revisions + 1;
            let factor = REVISION_FACTOR.powi(revisions as i32);
            builder.set_pricing((first_pricing.clone()).map(|p| p.with_boundaries_scaled(factor)));
            let revised = build(builder, kept)?;
            let mut kept = kept.clone();
            let (revised, revised_fidelity) =
                self.meet_target(revised, &mut kept, |k| build(builder, k), options, spent)?;
            (built, fidelity) = (revised, revised_fidelity);
            report = speed::SpeedReport {
                revisions,
                ..time(&built)?
            };
        }
        let (built, fidelity) = shipped((built, fidelity), fp32, &report);
        Ok((built, fidelity, Some(speed::SpeedCheck::Measured(report))))
    }

    /// Measures `built` against FP32 and, with a fidelity target (or the default floor, on
    /// real held-out samples), keeps candidates FP32 until it holds (see
    /// [`fidelity::meet_target`]); the normalized FP32 model when the default floor is
    /// missed even so (the report says `floor_missed`). Nothing is measured when part of
    /// the model needs a kernel ONNX Runtime lacks, or when no tensor is float and no
    /// target is set.
    fn meet_target(
        &self,
        built: Built,
        kept: &mut KeptFloat,
        build: impl Fn(&KeptFloat) -> Result<Built>,
        options: &QuantizeOptions,
        spent: std::time::Duration,
    ) -> Result<(Built, Option<fidelity::FidelityReport>)> {
        let planned = &self.planned;
        let (model, path) = (planned.normalized.model(), planned.path);
        let compared = fidelity::compared(planned.normalized.graph(), &planned.types);
        let measurable =
            compared != fidelity::Compared::Nothing || options.fidelity_target().is_some();
        if !planned.uncalibratable.is_empty() || !measurable {
            return Ok((built, None));
        }
        let input_names = planned.input_names();
        let samples = &self.data.samples;
        let evaluator = |samples| {
            fidelity::Evaluator::new(
                model,
                &compared,
                &input_names,
                samples,
                path,
                options.evaluation,
            )
        };
        let held_out = evaluator(&samples[samples.len() - self.held_out..])?;
        let candidates = self.candidates(&built);
        // Ranked on the samples ranges were calibrated on, so that the held-out ones that
        // check the target took no part in choosing what to keep.
        let was_held_out = self.calibrated_on < samples.len();
        // The floor's search may take as long as the build before it, at least
        // `MIN_FLOOR_SEARCH`: the whole build then stays within about twice a build
        // without it.
        let deadline = Instant::now() + spent.max(MIN_FLOOR_SEARCH);
        // The default floor needs real samples the ranges were not fitted to: on synthetic
        // or calibration samples agreement says too little to send ops back to FP32. It
        // holds the default int8 weights: `weights = "int4"` trades fidelity for size by
        // request, and only a target the user names judges that trade.
        let int8 = matches!(options.weights, kenosis_options::Weights::Int8);
        let judge = match options.fidelity_target() {
            Some(target) => Some(fidelity::Judge::Requested(target)),
            None if was_held_out && !self.data.synthetic && int8 => Some(fidelity::Judge::Floor {
                floor: fidelity::DEFAULT_FLOOR,
                deadline,
            }),
            None => None,
        };
        let ranked = match judge {
            Some(fidelity::Judge::Floor { .. }) => fidelity::FLOOR_RANKING_SAMPLES,
            _ => fidelity::RANKING_SAMPLES,
        };
        let ranking_samples = &samples[..self.calibrated_on.min(ranked)];
        let (met, mut report) = fidelity::meet_target(
            &held_out,
            built,
            judge,
            || evaluator(ranking_samples),
            &candidates,
            kept,
            build,
        )?;
        report.held_out = was_held_out;
        let built = met.unwrap_or_else(|| Built {
            model: model.clone(),
            plan: plan::Plan::default(),
            rewrite: Default::default(),
        });
        Ok((built, Some(report)))
    }

    /// What the fidelity search may return to FP32: ops whose quantization adds error of
    /// their own (those with an integer kernel, and Gathers from a constant table, whose
    /// table is stored as uint8; other data-movement ops only pass codes on), then every
    /// quantized activation (see [`fidelity::Candidate::Tensor`]).
    fn candidates(&self, built: &Built) -> Vec<fidelity::Candidate> {
        let graph = self.planned.normalized.graph();
        let tables: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
        let ops = (built.plan.quantized_nodes.iter())
            .map(|&i| &graph.node[i])
            .filter(|n| {
                matches!(
                    crate::ops::rule_of(n),
                    crate::ops::OpRule::Weighted { .. } | crate::ops::OpRule::QLinear
                ) || (n.op_type() == "Gather" && tables.contains(n.input[0].as_str()))
            })
            .map(|n| fidelity::Candidate::Op(n.name().to_owned()));
        // MatMuls with dynamic activations (or 4-bit weights) return to FP32 the same way:
        // a kept name is left out of the dynamic plan.
        let dynamic =
            (built.rewrite.dynamic_nodes.iter()).map(|n| fidelity::Candidate::Op(n.clone()));
        let activations =
            (built.plan.observed_tensors()).map(|t| fidelity::Candidate::Tensor(t.to_owned()));
        ops.chain(dynamic).chain(activations).collect()
    }

    /// Encodes `built` and reports what was done.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the encoded model exceeds protobuf's 2 GiB limit.
    fn report(
        self,
        built: Built,
        fidelity: Option<fidelity::FidelityReport>,
        (speed, activations): (Option<speed::SpeedCheck>, ActivationsChoice),
        size_fp32: usize,
        options: &QuantizeOptions,
        started: Instant,
    ) -> Result<Quantized> {
        let Built {
            model: quantized,
            plan,
            rewrite: rewrite_summary,
        } = built;
        let Planned {
            path,
            normalized,
            keep_float_unmatched,
            ..
        } = self.planned;
        let mut ops_quantized = ops_by_type(normalized.graph(), &plan);
        // Dynamic nodes, by op type, apart from the static ones.
        let dynamic: HashSet<&str> = (rewrite_summary.dynamic_nodes.iter())
            .map(String::as_str)
            .collect();
        for node in normalized
            .graph()
            .node
            .iter()
            .filter(|n| dynamic.contains(n.name()))
        {
            *ops_quantized
                .entry(format!("{} (dynamic)", node.op_type()))
                .or_default() += 1;
        }
        if rewrite_summary.int4_matmuls > 0 {
            let dynamic = ops_quantized.remove("MatMul (dynamic)").unwrap_or(0);
            ops_quantized.insert("MatMul (int4)".into(), rewrite_summary.int4_matmuls);
            if dynamic > rewrite_summary.int4_matmuls {
                ops_quantized.insert(
                    "MatMul (dynamic)".into(),
                    dynamic - rewrite_summary.int4_matmuls,
                );
            }
        }
        if rewrite_summary.dynamic.tables > 0 {
            ops_quantized.insert(
                "embedding table (int8)".into(),
                rewrite_summary.dynamic.tables,
            );
        }
        let bytes = quantized.encode_to_vec();
        if bytes.len() > PROTOBUF_LIMIT {
            return Err(crate::error::unsupported(
                path,
                Unsupported::TooLarge { bytes: bytes.len() },
            ));
        }
        crate::quantize::size::check(path, size_fp32, &quantized, bytes.len())?;
        let graph = quantized.graph.unwrap_or_default();
        let report = Report {
            source: path.display().to_string(),
            key: String::new(),
            artifact_blake3: blake3::hash(&bytes).to_hex().to_string(),
            normalize: normalized.summary,
            ops_quantized,
            nodes_fp32: plan.float_nodes,
            keep_float_unmatched,
            activations_absorbed: plan.absorbed.len(),
            rewrite: rewrite_summary,
            calibration_method: options.method.canonical(),
            calibration_samples: self.calibrated_on,
            calibration_synthetic: self.data.synthetic,
            synthetic_image_ranges: self.synthetic_image_ranges,
            fidelity: fidelity.map(|f| f.measured_on(self.data.synthetic)),
            speed,
            kernel_costs: (options.fp32_where_faster).then(|| options.pricing()),
            activations: Some(activations),
            options: options.canonical(),
            size_fp32,
            size_int8: bytes.len(),
            seconds: started.elapsed().as_secs_f64(),
            inputs: graph.input.iter().map(tensor_info).collect(),
            outputs: graph.output.iter().map(tensor_info).collect(),
        };
        Ok(Quantized { bytes, report })
    }
}

/// Synthetic image input name → label of the value range its images span, e.g. `[0, 255]`.
pub type ImageRangeLabels = BTreeMap<String, String>;

/// The calibration samples `calibration` names, with the value range of each synthetic image
/// input (input name → label such as `[0, 255]`, for the report); synthetic samples are shaped
/// on `calibration_model`, the part of the model ONNX Runtime can run.
///
/// # Errors
/// [`Error::Calibration`] for unreadable or mis-shaped `.npy` files, or no sample at all;
/// shape resolution and image-range inference errors for synthetic data.
pub fn calibration_data(
    calibration: &Calibration,
    calibration_model: &ModelProto,
    specs: &[calibrate::data::InputSpec],
    options: &QuantizeOptions,
    path: &Path,
) -> Result<(CalibrationData, ImageRangeLabels)> {
    let mut synthetic_image_ranges = BTreeMap::new();
    let data = match calibration {
        Calibration::NpyDir(dir) => calibrate::data::load_npy_dir(dir, specs)?,
        #[cfg(feature = "images")]
        Calibration::Images { dir, preprocess } => {
            calibrate::images::samples(dir, preprocess, path, specs)?.0
        }
        #[cfg(feature = "text")]
        Calibration::Text {
            path: text,
            tokenizer,
            max_len,
        } => calibrate::text::samples(text, tokenizer, *max_len, path, specs)?.0,
        #[cfg(not(feature = "images"))]
        Calibration::Images { dir, .. } => return Err(without_feature("images", dir)),
        #[cfg(not(feature = "text"))]
        Calibration::Text { path: text, .. } => return Err(without_feature("text", text)),
        Calibration::Data(d) => d.clone(),
        Calibration::Synthetic => {
            let dims = calibrate::shapes::resolve(calibration_model, specs, path)?;
            let ranges = match options.synthetic_image_range {
                Some([low, high]) => vec![ImageRange::Given { low, high }; specs.len()],
                None => calibrate::image_range::infer(calibration_model, specs, &dims, path)?,
            };
            for ((spec, dims), range) in specs.iter().zip(&dims).zip(&ranges) {
                if calibrate::synthetic::synthesizes_image(spec, dims) {
                    synthetic_image_ranges.insert(spec.name.clone(), range.label());
                }
            }
            calibrate::synthetic::synthetic_with_dims(
                specs,
                &dims,
                &ranges,
                options.synthetic_samples,
                path,
            )?
        }
    };
    if data.samples.is_empty() {
        return Err(Error::Calibration {
            path: path.to_owned(),
            reason: "no calibration samples".into(),
        });
    }
    Ok((data, synthetic_image_ranges))
}

/// The error for calibration data at `source` that needs kenosis-quantize's `feature`.
#[cfg(not(all(feature = "images", feature = "text")))]
fn without_feature(feature: &str, source: &Path) -> Error {
    Error::Config(format!(
        "{}: this quantizer was built without kenosis-quantize's `{feature}` feature, which \
         reads this calibration data",
        source.display()
    ))
}

/// What the calibration pass streams besides histograms, for the weighted ops that read a
/// computed input (`weighted`): per-channel moments of that input (means for bias
/// correction, spreads for depthwise inputs, see [`crate::quantize::channel_spread`]) and
/// Conv input patches (their second moments for GPTQ rounding, and kept patches for the
/// saturation check of reduce-range, see [`crate::quantize::saturation`]). With `dynamic`
/// (builds may quantize MatMul activations at run time), MatMul and Gemm inputs' moments too,
/// for SmoothQuant's migration ([`crate::quantize::smooth`]).
fn observation_requests(
    weighted: &[(&NodeProto, &TensorProto)],
    options: &QuantizeOptions,
    dynamic: bool,
) -> (Vec<(String, ChannelAxis)>, Vec<GramRequest>) {
    let moments = weighted
        .iter()
        .filter(|(n, w)| {
            options.bias_correction
                || crate::ops::is_depthwise(n, &w.dims)
                || (dynamic && matches!(n.op_type(), "MatMul" | "Gemm"))
        })
        .map(|(n, _)| {
            let axis = if matches!(n.op_type(), "Conv" | "ConvTranspose") {
                ChannelAxis::Second
            } else {
                ChannelAxis::Last
            };
            (n.input[0].clone(), axis)
        })
        .collect();
    let grams = weighted
        .iter()
        .filter(|_| options.gptq_rounding || options.reduce_range)
        .filter_map(|(node, weight)| {
            Some(GramRequest {
                key: node.output.first()?.clone(),
                input: node.input[0].clone(),
                geometry: gram::conv_geometry(node, &weight.dims)?,
                second_moments: options.gptq_rounding,
            })
        })
        .collect();
    (moments, grams)
}

/// Activation tensors calibration found unfit for uint8, with the reason for the report:
/// those that carried NaN or ±inf, those whose calibrated range is set by rare outliers (see
/// [`calibrate::range::bulk_steps`] and [`MIN_BULK_STEPS`]), and
/// depthwise inputs with unresolved channels (see
/// [`crate::quantize::channel_spread::unresolved_depthwise_inputs`]).
fn unfit_tensors(
    graph: &onnx::GraphProto,
    weighted: &[(&NodeProto, &TensorProto)],
    histograms: &HashMap<String, calibrate::stats::Histogram>,
    ranges: &HashMap<String, Range>,
    channel_spreads: &HashMap<String, Vec<f64>>,
) -> HashMap<String, FloatReason> {
    let mut unfit: HashMap<String, FloatReason> = ranges
        .iter()
        .filter_map(|(name, r)| {
            if histograms[name].non_finite > 0 {
                let tensor = name.clone();
                return Some((name.clone(), FloatReason::NonFinite { tensor }));
            }
            let steps = calibrate::range::bulk_steps(&histograms[name], (r.min, r.max))?;
            (steps < MIN_BULK_STEPS)
                .then(|| (name.clone(), FloatReason::outlier_dominated(name, steps)))
        })
        .collect();
    for (tensor, reason) in crate::quantize::channel_spread::unresolved_depthwise_inputs(
        graph,
        weighted,
        ranges,
        channel_spreads,
    ) {
        unfit.entry(tensor).or_insert(reason);
    }
    unfit
}

/// How many nodes of each op type `plan` quantizes in `graph`.
fn ops_by_type(graph: &onnx::GraphProto, plan: &plan::Plan) -> BTreeMap<String, usize> {
    let mut ops: BTreeMap<String, usize> = BTreeMap::new();
    for &i in &plan.quantized_nodes {
        *ops.entry(graph.node[i].op_type().to_owned()).or_default() += 1;
    }
    ops
}

/// The graph half of [`quantize`] without ONNX Runtime: decode, normalize, plan and rewrite
/// `model_bytes` with every planned activation range set to `[-1, 1]` and no bias
/// correction, then encode. The result is not a useful model; the function exists so that
/// every graph-rewriting path can be driven by arbitrary bytes (the `cargo fuzz` target) and
/// must return an error, never panic or hang, on bad input.
///
/// # Errors
/// [`Error::InvalidModel`] or [`Error::Unsupported`] as [`quantize`] gives them.
pub fn quantize_offline(path: &Path, model_bytes: &[u8]) -> Result<Vec<u8>> {
    let model = onnx::decode(path, model_bytes)?;
    if !onnx::outline::read(path, model_bytes)?.external.is_empty() {
        return Err(crate::error::unsupported(
            path,
            Unsupported::ExternalOffline,
        ));
    }
    let normalized =
        crate::normalize::normalize(model).map_err(|r| crate::error::unsupported(path, r))?;
    let types = crate::types::infer_elem_types(normalized.graph());
    let plan = plan::plan(normalized.graph(), &types, &PlanOptions::default());
    let unit = Range {
        min: -1.0,
        max: 1.0,
    };
    let statistics = Statistics {
        ranges: plan
            .observed_tensors()
            .map(|t| (t.to_owned(), unit))
            .collect(),
        ..Statistics::default()
    };
    let weights = WeightOptions {
        per_channel: true,
        reduce_range: true,
        bias_correction: false,
        gptq_rounding: false,
    };
    let builder = Builder::new(
        normalized.model(),
        &types,
        statistics,
        HashMap::new(),
        weights,
        None,
        false,
    );
    let built =
        (builder.build(&KeptFloat::default())).map_err(|r| crate::error::unsupported(path, r))?;
    Ok(built.model.encode_to_vec())
}

/// The mean of per-sample cosines (0 for none).
fn mean(cosines: &[f64]) -> f64 {
    cosines.iter().sum::<f64>() / cosines.len().max(1) as f64
}

/// Smallest share of the weights (see [`crate::quantize::dynamic::matmul_weight_share`])
/// that MatMuls, Gemms and embedding tables must hold for `activations = "auto"` to try
/// dynamic activations: the transformer encoders it is for hold nearly all of theirs there,
/// CNNs a classifier head's share, whose static placement stays as it is.
const DYNAMIC_WEIGHT_SHARE: f64 = 0.5;

/// Whether `activations = "auto"` builds `graph` (element `types`) both ways: when
/// MatMuls, Gemms and embedding tables hold at least [`DYNAMIC_WEIGHT_SHARE`] of its weights.
fn compares_activation_modes(graph: &onnx::GraphProto, types: &HashMap<String, DataType>) -> bool {
    crate::quantize::dynamic::matmul_weight_share(graph, types) >= DYNAMIC_WEIGHT_SHARE
}

/// The report's spelling of `mode`.
fn mode_name(mode: ActivationMode) -> &'static str {
    match mode {
        ActivationMode::Static => "static",
        ActivationMode::Dynamic => "dynamic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{fidelity_report, model, node};

    /// After the speed check, a slower INT8 model gives way to FP32, and its placement and
    /// fidelity figures with it: the report describes the artifact that ships.
    #[test]
    fn a_slower_int8_model_ships_as_fp32_without_its_placement_or_fidelity() {
        let fp32 = model(vec![node("Relu", &["x"], "y")], &["y"], vec![]);
        let mut int8 = fp32.clone();
        int8.producer_name = Some("int8".into());
        let built = || Built {
            model: int8.clone(),
            plan: plan::Plan {
                quantized_nodes: vec![0],
                ..Default::default()
            },
            rewrite: Default::default(),
        };
        let fidelity = fidelity_report(0.98);
        let path = Path::new("m.onnx");

        let slower =
            speed::check(vec![speed::timed(1, 1.0, 2.0)], 1.0, path).expect("a floor of 1");
        let (shipped_fp32, no_fidelity) =
            shipped((built(), Some(fidelity.clone())), &fp32, &slower);
        assert_eq!(shipped_fp32.model, fp32);
        assert!(shipped_fp32.quantizes_nothing());
        assert_eq!(
            ops_by_type(fp32.graph.as_ref().expect("graph"), &shipped_fp32.plan).len(),
            0
        );
        assert_eq!(no_fidelity, None);

        let faster =
            speed::check(vec![speed::timed(1, 2.0, 1.0)], 1.0, path).expect("a floor of 1");
        let (shipped_int8, kept) = shipped((built(), Some(fidelity.clone())), &fp32, &faster);
        assert_eq!(shipped_int8.model, int8);
        assert!(!shipped_int8.quantizes_nothing());
        assert_eq!(kept, Some(fidelity));
    }
}
