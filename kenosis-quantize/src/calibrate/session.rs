//! Running the FP32 model in ONNX Runtime with planned tensors exposed as outputs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock, PoisonError};

use ort::session::{builder::GraphOptimizationLevel, Session, SessionInputValue};
use ort::value::{DynValue, Tensor};
use prost::Message;

use super::data::SampleValue;
use super::gram::{ConvGeometry, PatchGram, COLUMNS_PER_CONV};
use super::stats::{ChannelAxis, ChannelMoments, Histogram};
use crate::error::{Error, OrtFailure, Result};
use crate::onnx::{type_proto, GraphProto, ModelProto, TypeProto, ValueInfoProto};

/// The process-wide ONNX Runtime environment, created on first use, or ONNX Runtime's
/// reason it could not be.
static ENV: OnceLock<std::result::Result<ort::environment::Environment, OrtFailure>> =
    OnceLock::new();

/// Whether this process has called into ONNX Runtime (created its environment): a build whose
/// models all come from the cache does not.
pub fn runtime_used() -> bool {
    ENV.get().is_some()
}

/// The process-wide ONNX Runtime environment (created on first use).
///
/// # Errors
/// [`Error::Runtime`] naming `path` when ONNX Runtime cannot create it; every later call
/// gives the same error.
pub fn environment(path: &Path) -> Result<&'static ort::environment::Environment> {
    ENV.get_or_init(|| {
        (ort::init().with_name("kenosis-build").build()).map_err(|e| crate::error::ort_failure(&e))
    })
    .as_ref()
    .map_err(|e| Error::runtime(path, e.clone()))
}

/// Creates a session for the encoded model `model_bytes` with the given optimization level
/// and thread count.
///
/// The bytes go to a temporary file and are dropped before ONNX Runtime parses that file:
/// ORT then streams the protobuf instead of holding a second copy of the model while it
/// builds its own (one model size less peak memory per session). Where no temporary file
/// can be written, the bytes are passed in memory.
///
/// The file sits in a folder of its own, readable by this user only (`tempfile`'s
/// `tempdir`, mode 0700), never directly in the shared temporary folder: ONNX Runtime
/// resolves external data paths against the model file's folder, and the model must not
/// reach a file another user planted there. (Kenosis inlines every external tensor before
/// any session is made, see `onnx::external::inline`; this holds even if one were missed.)
pub fn session(
    path: &Path,
    model_bytes: Vec<u8>,
    level: GraphOptimizationLevel,
    threads: usize,
) -> Result<Session> {
    session_with_config(path, model_bytes, level, threads, &[])
}

/// A session as `kenosis-runtime` makes one, for timing what an application runs: `threads`
/// intra-op threads, or ONNX Runtime's own choice for `None` (one per physical core), and
/// ONNX Runtime's default spinning of idle pool threads (which [`session`] turns off, for
/// sessions that share the machine with the build).
pub fn session_threads(
    path: &Path,
    model_bytes: Vec<u8>,
    level: GraphOptimizationLevel,
    threads: Option<usize>,
) -> Result<Session> {
    commit(path, model_bytes, level, (threads, true), &[])
}

/// [`session`] with ONNX Runtime session configuration entries (`key`, `value`), e.g.
/// `session.disable_quant_qdq`.
pub fn session_with_config(
    path: &Path,
    model_bytes: Vec<u8>,
    level: GraphOptimizationLevel,
    threads: usize,
    config: &[(&str, &str)],
) -> Result<Session> {
    commit(path, model_bytes, level, (Some(threads), false), config)
}

/// The session of [`session_with_config`], at ONNX Runtime's own thread count for `None`,
/// with ONNX Runtime's spinning of idle pool threads when `spinning`.
fn commit(
    path: &Path,
    model_bytes: Vec<u8>,
    level: GraphOptimizationLevel,
    (threads, spinning): (Option<usize>, bool),
    config: &[(&str, &str)],
) -> Result<Session> {
    let rt = |e: ort::Error| crate::error::runtime(path, e);
    let rtb = |e: ort::Error<ort::session::builder::SessionBuilder>| crate::error::runtime(path, e);
    let mut builder = Session::builder(environment(path)?)
        .map_err(rt)?
        .with_optimization_level(level)
        .map_err(rtb)?;
    if let Some(threads) = threads {
        builder = builder.with_intra_threads(threads).map_err(rtb)?;
    }
    if !spinning {
        builder = builder.with_intra_op_spinning(false).map_err(rtb)?;
    }
    for (key, value) in config {
        builder = builder.with_config_entry(key, value).map_err(rtb)?;
    }
    let folder = tempfile::Builder::new().prefix("kenosis-").tempdir();
    let file = folder.and_then(|folder| {
        let file = folder.path().join("model.onnx");
        std::fs::write(&file, &model_bytes).map(|()| (folder, file))
    });
    match file {
        Ok((_folder, file)) => {
            drop(model_bytes);
            builder.commit_from_file(&file).map_err(rt)
        }
        Err(_) => builder.commit_from_memory(&model_bytes).map_err(rt),
    }
}

/// ONNX Runtime input values for one sample, named after `input_names`.
///
/// The caller keeps the values alive while it reads the run's outputs: ORT may return a graph
/// input that is also a graph output as a view of the input's own buffer.
pub fn sample_inputs(
    input_names: &[String],
    sample: &[SampleValue],
    path: &Path,
) -> Result<Vec<(String, DynValue)>> {
    let rt = |e: ort::Error| crate::error::runtime(path, e);
    input_names
        .iter()
        .zip(sample)
        .map(|(name, value)| {
            let v: DynValue = super::data::with_array!(value, |a| Tensor::from_array(a.clone())
                .map_err(rt)?
                .into_dyn());
            Ok((name.clone(), v))
        })
        .collect()
}

/// Borrowed session inputs for values made by [`sample_inputs`].
pub fn borrowed(values: &[(String, DynValue)]) -> Vec<(&str, SessionInputValue<'_>)> {
    values
        .iter()
        .map(|(n, v)| (n.as_str(), SessionInputValue::from(v)))
        .collect()
}

/// `model`, encoded, with each tensor in `tensors` also a graph output (declared FLOAT).
///
/// The extra outputs are appended as a second `ModelProto` holding only them: protobuf
/// parsers merge a repeated embedded message field, so the graph gains those outputs
/// without the model (and its weights) being copied.
#[allow(
    clippy::expect_used,
    reason = "a normalized model always has a graph, and encoding into a Vec cannot run out \
              of space"
)]
pub fn encode_with_observed_outputs(model: &ModelProto, tensors: &[String]) -> Vec<u8> {
    let graph = model.graph.as_ref().expect("normalized model has a graph");
    let existing: std::collections::HashSet<&str> = graph.output.iter().map(|o| o.name()).collect();
    let output = tensors
        .iter()
        .filter(|t| !existing.contains(t.as_str()))
        .map(|t| ValueInfoProto {
            name: Some(t.clone()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(crate::onnx::DataType::Float as i32),
                    shape: None,
                })),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let extra = ModelProto {
        graph: Some(GraphProto {
            output,
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut bytes = model.encode_to_vec();
    extra
        .encode(&mut bytes)
        .expect("a Vec grows to fit any message");
    bytes
}

/// What one calibration pass collects.
#[derive(Debug, Default)]
pub struct Observed {
    /// Histogram (with exact min/max) per activation tensor.
    pub histograms: HashMap<String, Histogram>,
    /// Per-channel moments of the requested tensors (weighted ops' inputs).
    pub channel_moments: HashMap<String, ChannelMoments>,
    /// Input patch second moments per Conv (keyed by the Conv's first output), for
    /// error-compensating weight rounding.
    pub patch_grams: HashMap<String, PatchGram>,
    /// Element count of every exposed float tensor, the largest over the samples.
    pub elements: HashMap<String, usize>,
}

/// A Conv whose input patches [`observe`] accumulates into a [`PatchGram`].
#[derive(Debug, Clone)]
pub struct GramRequest {
    /// Key of the result: the Conv's first output.
    pub key: String,
    /// The Conv's data input.
    pub input: String,
    /// Its window geometry.
    pub geometry: ConvGeometry,
    /// Whether the `K × K` second moments are needed (GPTQ rounding), or only kept patches.
    pub second_moments: bool,
}

/// What [`observe`] collects, by tensor name.
#[derive(Debug, Clone, Copy, Default)]
pub struct Requests<'a> {
    /// Tensors to histogram (activation ranges).
    pub histograms: &'a [String],
    /// Tensors whose per-channel moments to accumulate, with their channel axis.
    pub moments: &'a [(String, ChannelAxis)],
    /// Convs whose input patches to accumulate.
    pub grams: &'a [GramRequest],
    /// Tensors only counted (their element count per sample).
    pub sized: &'a [String],
}

/// The statistics [`observe`] keeps for one exposed tensor.
struct TensorObserver {
    tensor: String,
    histogram: Option<Histogram>,
    moments: Option<ChannelMoments>,
    /// `(key, gram)` for every Conv reading the tensor.
    grams: Vec<(String, PatchGram)>,
    /// Cleared when the tensor turns out not to be float.
    float: bool,
    /// The largest element count seen.
    elements: usize,
}

impl TensorObserver {
    fn update(&mut self, shape: &[i64], values: &[f32]) {
        self.elements = self.elements.max(values.len());
        if let Some(h) = &mut self.histogram {
            h.update(values);
        }
        if let Some(m) = &mut self.moments {
            m.update(shape, values);
        }
        for (_, gram) in &mut self.grams {
            gram.update(shape, values);
        }
    }
}

/// Runs every sample through `model` with the requested tensors exposed and graph
/// optimizations off (so the observed values are the FP32 graph's own), streaming a
/// histogram for each of `requests.histograms`, per-channel moments for each of its
/// `moments`, patch second moments for each of its `grams` (about [`COLUMNS_PER_CONV`]
/// columns each, spread over the samples) and the element count of those and of its
/// `sized`.
///
/// Memory is bounded by one sample's activations: each run's outputs are folded into the
/// statistics and dropped before the next run. The tensors of one run are folded in on
/// every core (each tensor's statistics by one thread, in sample order, so the result does
/// not depend on the thread count).
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime rejects the model or a sample,
/// [`Error::MissingOutput`] when a run leaves out a tensor exposed as an output.
pub fn observe(
    model: &ModelProto,
    requests: &Requests<'_>,
    input_names: &[String],
    samples: &[Vec<SampleValue>],
    path: &Path,
) -> Result<Observed> {
    let Requests {
        histograms,
        moments,
        grams,
        sized,
    } = *requests;
    // Each tensor is exposed once, however many statistics (or requests) read it.
    let mut seen = std::collections::HashSet::new();
    let exposed: Vec<String> = histograms
        .iter()
        .chain(moments.iter().map(|(t, _)| t))
        .chain(grams.iter().map(|g| &g.input))
        .chain(sized)
        .filter(|t| seen.insert(t.as_str()))
        .cloned()
        .collect();
    let bytes = encode_with_observed_outputs(model, &exposed);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut session = session(path, bytes, GraphOptimizationLevel::Disable, threads)?;
    let columns_per_sample = COLUMNS_PER_CONV.div_ceil(samples.len().max(1));
    let observers: Vec<Mutex<TensorObserver>> = exposed
        .iter()
        .map(|t| {
            Mutex::new(TensorObserver {
                tensor: t.clone(),
                histogram: histograms.contains(t).then(Histogram::default),
                moments: moments
                    .iter()
                    .find(|(m, _)| m == t)
                    .map(|(_, axis)| ChannelMoments::new(*axis)),
                grams: grams
                    .iter()
                    .filter(|g| &g.input == t)
                    .map(|g| {
                        let gram = PatchGram::new(g.geometry, columns_per_sample, g.second_moments);
                        (g.key.clone(), gram)
                    })
                    .collect(),
                float: true,
                elements: 0,
            })
        })
        .collect();
    let rt = |e: ort::Error| crate::error::runtime(path, e);
    for sample in samples {
        let inputs = sample_inputs(input_names, sample, path)?;
        let outputs = session.run(borrowed(&inputs)).map_err(rt)?;
        let mut extracted = Vec::with_capacity(exposed.len());
        for t in &exposed {
            let value = outputs.get(t).ok_or_else(|| Error::MissingOutput {
                path: path.to_owned(),
                tensor: t.clone(),
            })?;
            // Element types are inferred without full shape inference; a tensor that turns
            // out not to be float is simply not observed, and so stays unquantized.
            extracted.push(
                value
                    .try_extract_tensor::<f32>()
                    .ok()
                    .map(|(shape, values)| (shape.to_vec(), values)),
            );
        }
        let work: Vec<_> = observers.iter().zip(&extracted).collect();
        crate::parallel::map(&work, |(observer, values)| {
            let mut observer = observer.lock().unwrap_or_else(PoisonError::into_inner);
            match values {
                Some((shape, values)) if observer.float => observer.update(shape, values),
                _ => observer.float = false,
            }
        });
    }
    let mut observed = Observed::default();
    for observer in observers {
        let observer = observer
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        if !observer.float {
            continue;
        }
        observed
            .elements
            .insert(observer.tensor.clone(), observer.elements);
        if let Some(h) = observer.histogram {
            observed.histograms.insert(observer.tensor.clone(), h);
        }
        if let Some(m) = observer.moments {
            observed.channel_moments.insert(observer.tensor.clone(), m);
        }
        observed.patch_grams.extend(observer.grams);
    }
    Ok(observed)
}
