//! Running the FP32 model in ONNX Runtime with planned tensors exposed as outputs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use ort::session::{builder::GraphOptimizationLevel, Session, SessionInputValue};
use ort::value::{DynValue, Tensor};
use prost::Message;

use super::data::SampleValue;
use super::stats::{ChannelAxis, ChannelMean, Histogram};
use crate::error::{Error, Result};
use crate::onnx::{type_proto, ModelProto, TypeProto, ValueInfoProto};

/// The process-wide ONNX Runtime environment (created on first use).
pub fn environment(path: &Path) -> Result<&'static ort::environment::Environment> {
    static ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> =
        OnceLock::new();
    ENV.get_or_init(|| {
        ort::init()
            .with_name("kenosis-build")
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|message| Error::Runtime {
        path: path.to_owned(),
        message: message.clone(),
    })
}

/// Creates a session for `model_bytes` with the given optimization level and thread count.
pub fn session(
    path: &Path,
    model_bytes: &[u8],
    level: GraphOptimizationLevel,
    threads: usize,
) -> Result<Session> {
    let rt = |e: ort::Error| Error::Runtime {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let rtb = |e: ort::Error<ort::session::builder::SessionBuilder>| Error::Runtime {
        path: path.to_owned(),
        message: e.to_string(),
    };
    Session::builder(environment(path)?)
        .map_err(rt)?
        .with_optimization_level(level)
        .map_err(rtb)?
        .with_intra_threads(threads)
        .map_err(rtb)?
        .commit_from_memory(model_bytes)
        .map_err(rt)
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
    let rt = |e: ort::Error| Error::Runtime {
        path: path.to_owned(),
        message: e.to_string(),
    };
    input_names
        .iter()
        .zip(sample)
        .map(|(name, value)| {
            let v: DynValue = match value {
                SampleValue::F32(a) => Tensor::from_array(a.clone()).map_err(rt)?.into_dyn(),
                SampleValue::I64(a) => Tensor::from_array(a.clone()).map_err(rt)?.into_dyn(),
            };
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

/// A copy of `model` whose graph also outputs each tensor in `tensors` (declared FLOAT).
pub fn with_observed_outputs(model: &ModelProto, tensors: &[String]) -> ModelProto {
    let mut m = model.clone();
    let graph = m.graph.as_mut().expect("normalized model has a graph");
    let existing: std::collections::HashSet<String> =
        graph.output.iter().map(|o| o.name().to_owned()).collect();
    for t in tensors.iter().filter(|t| !existing.contains(*t)) {
        graph.output.push(ValueInfoProto {
            name: Some(t.clone()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(crate::onnx::dtype::FLOAT),
                    shape: None,
                })),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    m
}

/// What one calibration pass collects.
#[derive(Debug, Default)]
pub struct Observed {
    /// Histogram (with exact min/max) per activation tensor.
    pub histograms: HashMap<String, Histogram>,
    /// Per-channel means of weighted ops' input tensors, for bias correction.
    pub channel_means: HashMap<String, ChannelMean>,
}

/// Runs every sample through `model` with the requested tensors exposed and graph
/// optimizations off (so the observed values are the FP32 graph's own), streaming a
/// histogram for each of `histograms` and per-channel means for each of `means`.
///
/// Memory is bounded by one sample's activations: each run's outputs are folded into the
/// statistics and dropped before the next run.
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime rejects the model or a sample.
pub fn observe(
    model: &ModelProto,
    histograms: &[String],
    means: &[(String, ChannelAxis)],
    input_names: &[String],
    samples: &[Vec<SampleValue>],
    path: &Path,
) -> Result<Observed> {
    let mut exposed: Vec<String> = histograms.to_vec();
    exposed.extend(
        means
            .iter()
            .map(|(t, _)| t.clone())
            .filter(|t| !histograms.contains(t)),
    );
    let calib = with_observed_outputs(model, &exposed);
    let bytes = calib.encode_to_vec();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut session = session(path, &bytes, GraphOptimizationLevel::Disable, threads)?;
    let mut observed = Observed {
        histograms: histograms
            .iter()
            .map(|t| (t.clone(), Histogram::default()))
            .collect(),
        channel_means: means
            .iter()
            .map(|(t, axis)| (t.clone(), ChannelMean::new(*axis)))
            .collect(),
    };
    let rt = |e: ort::Error| Error::Runtime {
        path: path.to_owned(),
        message: e.to_string(),
    };
    for sample in samples {
        let inputs = sample_inputs(input_names, sample, path)?;
        let outputs = session.run(borrowed(&inputs)).map_err(rt)?;
        for t in &exposed {
            let value = outputs.get(t).ok_or_else(|| Error::Runtime {
                path: path.to_owned(),
                message: format!("observed tensor `{t}` missing from outputs"),
            })?;
            // Element types are inferred without full shape inference; a tensor that turns
            // out not to be float is simply not observed, and so stays unquantized.
            let Ok((shape, values)) = value.try_extract_tensor::<f32>() else {
                observed.histograms.remove(t);
                observed.channel_means.remove(t);
                continue;
            };
            if let Some(h) = observed.histograms.get_mut(t) {
                h.update(values);
            }
            if let Some(m) = observed.channel_means.get_mut(t) {
                m.update(shape, values);
            }
        }
    }
    Ok(observed)
}
