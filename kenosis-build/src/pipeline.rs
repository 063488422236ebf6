//! One model from FP32 bytes to INT8 QDQ bytes: decode → normalize → plan → calibrate →
//! choose parameters → rewrite → encode.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

use kenosis_manifest::{ElementType, TensorInfo};
use prost::Message;

use crate::calibrate::gram::{ConvGeometry, PatchGram};
use crate::calibrate::image_range::ImageRange;
use crate::calibrate::session::GramRequest;
use crate::calibrate::{self, data::input_specs, stats::ChannelAxis, CalibrationData};
use crate::error::{Error, Result};
use crate::fidelity;
use crate::onnx::{self, ModelProto, NodeProto, TensorProto, ValueInfoProto};
use crate::quantize::plan::{self, PlanOptions};
use crate::quantize::rewrite::{self, Range, WeightOptions};
use crate::report::Report;

pub use crate::options::QuantizeOptions;

/// Where calibration samples come from.
#[derive(Debug, Clone)]
pub enum Calibration {
    /// `.npy` files in a folder (see [`calibrate::data::load_npy_dir`]).
    NpyDir(std::path::PathBuf),
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

/// Decodes an ONNX model, naming `path` in errors.
///
/// # Errors
/// [`Error::InvalidModel`] for empty input, bytes that are not a `ModelProto`, or a model
/// without a graph.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<ModelProto> {
    let invalid = |reason: String| Error::InvalidModel {
        path: path.to_owned(),
        reason,
    };
    if bytes.is_empty() {
        return Err(invalid("the file is empty".into()));
    }
    let model =
        ModelProto::decode(bytes).map_err(|e| invalid(format!("protobuf decoding failed: {e}")))?;
    if model.graph.is_none() || model.ir_version.is_none() {
        return Err(invalid(
            "no graph or IR version: this protobuf is not an ONNX ModelProto".into(),
        ));
    }
    Ok(model)
}

/// The folder external data locations of the model at `path` are relative to.
pub fn model_dir(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// The data files the model at `path` keeps tensors in (see [`onnx::external`]); empty for
/// a self-contained model. They are build inputs: the cache key covers their bytes.
///
/// # Errors
/// [`Error::InvalidModel`] when a tensor's data location is malformed or leaves the
/// model's folder.
pub fn external_files(path: &Path, model: &ModelProto) -> Result<Vec<std::path::PathBuf>> {
    onnx::external::files(model, model_dir(path)).map_err(|e| external_error(path, e))
}

fn external_error(path: &Path, e: onnx::external::ExternalDataError) -> Error {
    match e {
        onnx::external::ExternalDataError::Invalid(reason) => Error::InvalidModel {
            path: path.to_owned(),
            reason,
        },
        onnx::external::ExternalDataError::Io(file, source) => Error::Io { path: file, source },
    }
}

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
    let model = decode(path, model_bytes)?;
    quantize_decoded(path, model, model_bytes.len(), calibration, options)
}

/// [`quantize`] for a model already decoded with [`decode`] from a file of `size_fp32`
/// bytes, so that the caller can drop the encoded bytes first (peak memory: the encoded
/// model is one more model-sized buffer).
///
/// # Errors
/// As [`quantize`].
pub fn quantize_decoded(
    path: &Path,
    mut model: ModelProto,
    size_fp32: usize,
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<Quantized> {
    options.check()?;
    let started = Instant::now();
    let unsupported = |reason: String| Error::Unsupported {
        path: path.to_owned(),
        reason,
    };
    onnx::external::inline(&mut model, model_dir(path)).map_err(|e| external_error(path, e))?;
    let normalized = crate::normalize::normalize(&mut model).map_err(unsupported)?;
    #[allow(
        clippy::expect_used,
        reason = "a normalized model always has a graph (normalize::normalize adds an empty one)"
    )]
    let graph = model.graph.as_ref().expect("normalized");
    let specs = input_specs(graph);
    // Nodes depending on an op ORT cannot run stay FP32; the rest is calibrated on the part
    // of the model that runs without them.
    let uncalibratable = calibrate::runnable::uncalibratable(&model);
    if let (Some(target), Some(custom)) = (
        options.fidelity_target(),
        graph
            .node
            .iter()
            .find(|n| uncalibratable.contains_key(n.name())),
    ) {
        return Err(unsupported(format!(
            "the fidelity target {target:?} cannot be checked: node `{}` ({} of domain `{}`) \
             needs a kernel ONNX Runtime does not have, so the FP32 model cannot run",
            custom.name(),
            custom.op_type(),
            custom.domain()
        )));
    }
    let runnable = (!uncalibratable.is_empty())
        .then(|| calibrate::runnable::runnable_part(&model, &uncalibratable));
    let calibration_model = runnable.as_ref().unwrap_or(&model);

    let (data, synthetic_image_ranges) =
        calibration_data(calibration, calibration_model, &specs, options, path)?;

    let held_out = held_out_count(data.samples.len());
    let calibration_samples = match options.fidelity_target() {
        Some(_) if data.samples.len() > 1 => &data.samples[..data.samples.len() - held_out],
        _ => &data.samples[..],
    };

    let types = crate::types::infer_elem_types(graph);
    let keep_float_reasons: HashMap<String, String> = uncalibratable
        .iter()
        .filter(|(_, reason)| !reason.is_empty())
        .map(|(name, reason)| (name.clone(), reason.clone()))
        .collect();
    let mut keep: HashSet<String> = options.keep_float.iter().cloned().collect();
    let node_names: HashSet<&str> = graph.node.iter().map(|n| n.name()).collect();
    let mut keep_float_unmatched: Vec<String> = keep
        .iter()
        .filter(|name| !node_names.contains(name.as_str()))
        .cloned()
        .collect();
    keep_float_unmatched.sort_unstable();
    keep.extend(keep_float_reasons.keys().cloned());
    let plan_options = PlanOptions {
        keep_float: keep.clone(),
        keep_float_reasons: keep_float_reasons.clone(),
        ..Default::default()
    };
    let plan = plan::plan(graph, &types, &plan_options);

    // Uncalibratable nodes are kept FP32 above, so every observed tensor is one the
    // runnable part computes.
    let observed: Vec<String> = plan.observed_tensors().map(str::to_owned).collect();
    // Weighted ops whose data input is computed, not a constant: the inputs bias correction
    // and GPTQ rounding observe.
    let initializers: HashMap<&str, &TensorProto> =
        graph.initializer.iter().map(|t| (t.name(), t)).collect();
    let weighted: Vec<(&NodeProto, &TensorProto)> = plan
        .weights
        .iter()
        .filter_map(|w| {
            let node = &graph.node[w.node];
            let weight = initializers.get(node.input[w.weight_slot].as_str())?;
            (!initializers.contains_key(node.input[0].as_str())).then_some((node, *weight))
        })
        .collect();
    let (moments, grams) = observation_requests(&weighted, options);
    let input_names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let observations = calibrate::session::observe(
        calibration_model,
        &observed,
        &moments,
        &grams,
        &input_names,
        calibration_samples,
        path,
    )
    .map_err(|e| match e {
        Error::Runtime { path, message } if data.synthetic => Error::Calibration {
            path,
            reason: synthetic_rejected(&specs, &message),
        },
        e => e,
    })?;
    drop(runnable);
    let channel_means: HashMap<String, Vec<f64>> = observations
        .channel_moments
        .iter()
        .map(|(t, m)| (t.clone(), m.means()))
        .collect();
    let channel_spreads: HashMap<String, Vec<f64>> = observations
        .channel_moments
        .iter()
        .map(|(t, m)| (t.clone(), m.std_devs()))
        .collect();
    // Ranges of tensors feeding only a SiLU, Sigmoid or Tanh are judged after it.
    let read_by = calibrate::activation::sole_readers(graph);
    let ranges: HashMap<String, Range> = observations
        .histograms
        .iter()
        .filter_map(|(name, h)| {
            calibrate::range::choose(h, options.method, read_by.get(name).copied())
                .map(|(min, max)| (name.clone(), Range { min, max }))
        })
        .collect();
    let float_tensors = unfit_tensors(
        graph,
        &weighted,
        &observations.histograms,
        &ranges,
        &channel_spreads,
    );

    let weight_options = WeightOptions {
        per_channel: options.per_channel,
        reduce_range: options.reduce_range,
        bias_correction: options.bias_correction,
        gptq_rounding: options.gptq_rounding,
    };
    // Everything below reuses the calibration above: keeping more nodes in FP32 changes
    // which tensors are quantized, never the FP32 statistics they are quantized with.
    let weight_cache = options
        .fidelity_target()
        .map(|_| rewrite::WeightCache::default());
    let stats = Calibrated {
        model: &model,
        types: &types,
        ranges: &ranges,
        channel_means: &channel_means,
        patch_grams: &observations.patch_grams,
        float_tensors: &float_tensors,
        keep_float_reasons: &keep_float_reasons,
        weight_options,
        weight_cache: weight_cache.as_ref(),
    };
    let build = |kept: &fidelity::Kept| stats.build(kept).map_err(unsupported);
    let mut kept = fidelity::Kept {
        ops: keep,
        tensors: HashSet::new(),
    };
    let built = build(&kept)?;
    // Without a float tensor there is nothing to measure, which only matters to a target.
    let compared = fidelity::compared(graph, &types);
    let measurable = compared != fidelity::Compared::Nothing || options.fidelity_target().is_some();
    let (built, fidelity_report) = if uncalibratable.is_empty() && measurable {
        // Measured on a fifth of the calibration samples: held out of range calibration
        // when a target is set (see `data` above), shared with it otherwise.
        let eval_samples = &data.samples[data.samples.len() - held_out..];
        let evaluator = fidelity::Evaluator::new(
            &model,
            &compared,
            &input_names,
            eval_samples,
            path,
            options.evaluation,
        )?;
        #[allow(
            clippy::expect_used,
            reason = "a normalized model always has a graph (normalize::normalize adds an empty one)"
        )]
        let graph = model.graph.as_ref().expect("normalized");
        // Ops whose quantization adds error of its own: those with an integer kernel, and
        // Gathers from a constant table, whose table is stored as uint8 (other data-movement
        // ops only pass codes on); then every quantized activation (see
        // `fidelity::Candidate::Tensor`).
        let tables: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
        let ops = built
            .plan
            .quantized_nodes
            .iter()
            .map(|&i| &graph.node[i])
            .filter(|n| {
                matches!(
                    plan::rule_of(n),
                    plan::OpRule::Weighted { .. } | plan::OpRule::QLinear
                ) || (n.op_type() == "Gather" && tables.contains(n.input[0].as_str()))
            })
            .map(|n| fidelity::Candidate::Op(n.name().to_owned()));
        let activations = built
            .plan
            .observed_tensors()
            .map(|t| fidelity::Candidate::Tensor(t.to_owned()));
        let candidates: Vec<fidelity::Candidate> = ops.chain(activations).collect();
        // Ranked on the samples ranges were calibrated on, so that the held-out ones that
        // check the target took no part in choosing what to keep.
        let ranking_samples =
            &calibration_samples[..calibration_samples.len().min(fidelity::RANKING_SAMPLES)];
        let (built, report) = fidelity::meet_target(
            &evaluator,
            built,
            options.fidelity_target(),
            || {
                fidelity::Evaluator::new(
                    &model,
                    &compared,
                    &input_names,
                    ranking_samples,
                    path,
                    options.evaluation,
                )
            },
            &candidates,
            &mut kept,
            build,
        )?;
        (built, Some(report))
    } else {
        // Neither model runs without the custom kernel, or no tensor is float: nothing to
        // measure.
        (built, None)
    };
    let Built {
        model: quantized,
        plan,
        rewrite: rewrite_summary,
    } = built;

    #[allow(
        clippy::expect_used,
        reason = "a normalized model always has a graph (normalize::normalize adds an empty one)"
    )]
    let ops_quantized = ops_by_type(model.graph.as_ref().expect("normalized"), &plan);
    let bytes = quantized.encode_to_vec();
    if bytes.len() > PROTOBUF_LIMIT {
        return Err(unsupported(format!(
            "the INT8 model would be {} bytes, over protobuf's 2 GB limit for one ONNX file",
            bytes.len()
        )));
    }
    #[allow(
        clippy::expect_used,
        reason = "a normalized model always has a graph (normalize::normalize adds an empty one)"
    )]
    let graph = quantized.graph.as_ref().expect("normalized");
    let report = Report {
        source: path.display().to_string(),
        key: String::new(),
        artifact_blake3: blake3::hash(&bytes).to_hex().to_string(),
        normalize: normalized,
        ops_quantized,
        nodes_fp32: plan.float_nodes.clone(),
        keep_float_unmatched,
        activations_absorbed: plan.absorbed.len(),
        rewrite: rewrite_summary,
        calibration_method: options.method.canonical(),
        calibration_samples: calibration_samples.len(),
        calibration_synthetic: data.synthetic,
        synthetic_image_ranges,
        fidelity: fidelity_report.map(|f| f.measured_on(data.synthetic)),
        options: format!("{options:?}"),
        size_fp32,
        size_int8: bytes.len(),
        seconds: started.elapsed().as_secs_f64(),
        inputs: graph.input.iter().map(tensor_info).collect(),
        outputs: graph.output.iter().map(tensor_info).collect(),
    };
    Ok(Quantized { bytes, report })
}

/// The calibration samples `calibration` names, with the value range of each synthetic image
/// input (input name → label such as `[0, 255]`, for the report); synthetic samples are shaped
/// on `calibration_model`, the part of the model ONNX Runtime can run.
///
/// # Errors
/// [`Error::Calibration`] for unreadable or mis-shaped `.npy` files, or no sample at all;
/// shape resolution and image-range inference errors for synthetic data.
fn calibration_data(
    calibration: &Calibration,
    calibration_model: &ModelProto,
    specs: &[calibrate::data::InputSpec],
    options: &QuantizeOptions,
    path: &Path,
) -> Result<(CalibrationData, BTreeMap<String, String>)> {
    let mut synthetic_image_ranges = BTreeMap::new();
    let data = match calibration {
        Calibration::NpyDir(dir) => calibrate::data::load_npy_dir(dir, specs)?,
        Calibration::Data(d) => d.clone(),
        Calibration::Synthetic => {
            let dims = calibrate::shapes::resolve(calibration_model, specs, path)?;
            let ranges = match options.synthetic_image_range {
                Some([low, high]) => vec![ImageRange::Given { low, high }; specs.len()],
                None => calibrate::image_range::infer(calibration_model, specs, &dims, path)?,
            };
            for ((spec, dims), range) in specs.iter().zip(&dims).zip(&ranges) {
                if calibrate::data::synthesizes_image(spec, dims) {
                    synthetic_image_ranges.insert(spec.name.clone(), range.label());
                }
            }
            calibrate::data::synthetic_with_dims(
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

/// What the calibration pass streams besides histograms, for the weighted ops that read a
/// computed input (`weighted`): per-channel moments of that input (means for bias
/// correction, spreads for depthwise inputs, see [`crate::quantize::channel_spread`]) and
/// Conv input patches (their second moments for GPTQ rounding, and kept patches for the
/// saturation check of reduce-range, see [`crate::quantize::saturation`]).
fn observation_requests(
    weighted: &[(&NodeProto, &TensorProto)],
    options: &QuantizeOptions,
) -> (Vec<(String, ChannelAxis)>, Vec<GramRequest>) {
    let moments = weighted
        .iter()
        .filter(|(n, w)| options.bias_correction || plan::is_depthwise(n, &w.dims))
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
                geometry: ConvGeometry::of(node, &weight.dims)?,
                second_moments: options.gptq_rounding,
            })
        })
        .collect();
    (moments, grams)
}

/// Activation tensors calibration found unfit for uint8, with the reason for the report:
/// those whose calibrated range is set by rare outliers (see
/// [`calibrate::range::bulk_steps`]; measured: 3.0 steps for MiniLM's layer-0 FFN output,
/// against 22 or more for every other tensor of the shared and fetched models), and
/// depthwise inputs with unresolved channels (see
/// [`crate::quantize::channel_spread::unresolved_depthwise_inputs`]).
fn unfit_tensors(
    graph: &onnx::GraphProto,
    weighted: &[(&NodeProto, &TensorProto)],
    histograms: &HashMap<String, calibrate::stats::Histogram>,
    ranges: &HashMap<String, Range>,
    channel_spreads: &HashMap<String, Vec<f64>>,
) -> HashMap<String, String> {
    let mut unfit: HashMap<String, String> = ranges
        .iter()
        .filter_map(|(name, r)| {
            let steps = calibrate::range::bulk_steps(&histograms[name], (r.min, r.max))?;
            (steps < MIN_BULK_STEPS).then(|| {
                let reason = format!(
                    "`{name}` is outlier-dominated: 99% of its values span {steps:.1} uint8 steps"
                );
                (name.clone(), reason)
            })
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

/// The reason given when ONNX Runtime fails on synthetic calibration data: synthetic integer
/// inputs are token ids, which a shape, index or size input cannot take.
fn synthetic_rejected(specs: &[calibrate::data::InputSpec], message: &str) -> String {
    use crate::onnx::dtype;
    let ints: Vec<String> = specs
        .iter()
        .filter(|s| {
            [
                dtype::INT64,
                dtype::INT32,
                dtype::INT16,
                dtype::INT8,
                dtype::UINT8,
            ]
            .contains(&s.elem_type)
        })
        .map(|s| format!("`{}`", s.name))
        .collect();
    let tokens = if ints.is_empty() {
        String::new()
    } else {
        format!(
            "; its integer inputs ({}) were synthesized as token ids",
            ints.join(", ")
        )
    };
    format!(
        "ONNX Runtime failed on synthetic calibration data ({message}){tokens}; give calibration samples"
    )
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
    let unsupported = |reason: String| Error::Unsupported {
        path: path.to_owned(),
        reason,
    };
    let mut model = decode(path, model_bytes)?;
    if !onnx::external::files(&model, Path::new("")).is_ok_and(|f| f.is_empty()) {
        return Err(unsupported("external data is not read offline".into()));
    }
    crate::normalize::normalize(&mut model).map_err(unsupported)?;
    #[allow(
        clippy::expect_used,
        reason = "a normalized model always has a graph (normalize::normalize adds an empty one)"
    )]
    let graph = model.graph.as_ref().expect("normalized");
    let types = crate::types::infer_elem_types(graph);
    let plan = plan::plan(graph, &types, &PlanOptions::default());
    let ranges = plan
        .observed_tensors()
        .map(|t| {
            (
                t.to_owned(),
                Range {
                    min: -1.0,
                    max: 1.0,
                },
            )
        })
        .collect();
    let stats = Calibrated {
        model: &model,
        types: &types,
        ranges: &ranges,
        channel_means: &HashMap::new(),
        patch_grams: &HashMap::new(),
        float_tensors: &HashMap::new(),
        keep_float_reasons: &HashMap::new(),
        weight_options: WeightOptions {
            per_channel: true,
            reduce_range: true,
            bias_correction: false,
            gptq_rounding: false,
        },
        weight_cache: None,
    };
    let built = stats
        .build(&fidelity::Kept::default())
        .map_err(unsupported)?;
    Ok(built.model.encode_to_vec())
}

/// Fewest uint8 steps the central 99% of an activation's values may span before it is
/// kept FP32 as outlier-dominated.
const MIN_BULK_STEPS: f64 = 8.0;

/// Samples held out of range calibration to check a fidelity target: a fifth, at least 1.
fn held_out_count(samples: usize) -> usize {
    (samples / 5).max(1).min(samples)
}

/// A quantized model with the plan that made it.
pub struct Built {
    /// The INT8 QDQ model.
    pub model: ModelProto,
    /// Placement used.
    pub plan: plan::Plan,
    /// What the rewrite did.
    pub rewrite: rewrite::RewriteSummary,
}

/// The normalized FP32 model and its calibration statistics: all a rewrite needs.
struct Calibrated<'a> {
    model: &'a ModelProto,
    types: &'a HashMap<String, i32>,
    ranges: &'a HashMap<String, Range>,
    channel_means: &'a HashMap<String, Vec<f64>>,
    patch_grams: &'a HashMap<String, PatchGram>,
    float_tensors: &'a HashMap<String, String>,
    keep_float_reasons: &'a HashMap<String, String>,
    weight_options: WeightOptions,
    /// Set when several builds will be made (a fidelity target's trials); a single build
    /// would only hold a second copy of every weight's codes.
    weight_cache: Option<&'a rewrite::WeightCache>,
}

/// Why a node reading or writing a tensor without a calibrated range stays FP32.
const UNCALIBRATED_TENSOR_REASON: &str =
    "was not observed in calibration (nodes kept in FP32 afterwards changed which tensors are quantized), so it has no range";

/// Why the writer and readers of an activation the fidelity target left unquantized stay
/// FP32.
const TARGET_TENSOR_REASON: &str = "is kept float to meet the fidelity target";

impl Calibrated<'_> {
    /// Plans and rewrites a fresh copy of the model, keeping `kept` nodes in FP32 and `kept`
    /// activation tensors unquantized.
    fn build(&self, kept: &fidelity::Kept) -> Result<Built, String> {
        let mut model = self.model.clone();
        #[allow(
            clippy::expect_used,
            reason = "a normalized model always has a graph (normalize::normalize adds an empty one)"
        )]
        let graph = model.graph.as_mut().expect("normalized");
        // Keeping nodes in FP32 after calibration can ask for a tensor calibration did not
        // observe (a squeeze-and-excitation pool kept for a fidelity target leaves its Conv
        // reading the pool's own output): without a range it cannot be quantized, so the
        // nodes around it stay FP32 too, and the report says so.
        let mut float_tensors = self.float_tensors.clone();
        for t in &kept.tensors {
            float_tensors
                .entry(t.clone())
                .or_insert_with(|| format!("`{t}` {TARGET_TENSOR_REASON}"));
        }
        let (plan, act) = loop {
            let plan = plan::plan(
                graph,
                self.types,
                &PlanOptions {
                    keep_float: kept.ops.clone(),
                    keep_float_reasons: self.keep_float_reasons.clone(),
                    float_tensors: float_tensors.clone(),
                },
            );
            let act = rewrite::activation_params(&plan, graph, self.ranges);
            let uncalibrated: Vec<&String> = plan
                .tensors
                .keys()
                .filter(|t| !act.contains_key(*t))
                .collect();
            if uncalibrated.is_empty() {
                break (plan, act);
            }
            for t in uncalibrated {
                float_tensors.insert(t.clone(), format!("`{t}` {UNCALIBRATED_TENSOR_REASON}"));
            }
        };
        let summary = rewrite::rewrite(
            graph,
            &plan,
            &act,
            self.channel_means,
            self.patch_grams,
            self.weight_options,
            self.weight_cache,
        )?;
        crate::graph::sort_topologically(graph)?;
        model.producer_name = Some("kenosis".into());
        model.producer_version = Some(env!("CARGO_PKG_VERSION").into());
        Ok(Built {
            model,
            plan,
            rewrite: summary,
        })
    }
}

fn tensor_info(vi: &ValueInfoProto) -> TensorInfo {
    let (elem, dims) = onnx::declared_tensor(vi).unwrap_or((0, None));
    TensorInfo {
        name: vi.name().to_owned(),
        dtype: ElementType::from_onnx(elem).unwrap_or(ElementType::F32),
        shape: dims.unwrap_or_default(),
    }
}
