//! FP32 weights stored as FLOAT16 or BFLOAT16, each followed by a `Cast` back to FLOAT: a
//! model about half the size that computes exactly as before, in FP32, on any ONNX Runtime
//! provider (`kenosis cast`).
//!
//! ONNX Runtime's CPU provider has almost no FLOAT16/BFLOAT16 compute kernels, so a model
//! that computed in half precision would not run there. This transform changes only how the
//! weights are *stored*: every cast initializer `w` (FLOAT, dims `D`) becomes an initializer
//! `w_fp16` or `w_bf16` (FLOAT16 or BFLOAT16, the same dims `D`) and a node
//! `Cast(w_fp16, to = FLOAT) -> w`, placed first in `w`'s graph. Every node reading `w`, in
//! the graph or in its subgraphs, still reads a FLOAT tensor of dims `D` named `w`: one Cast
//! serves all of them, and graph inputs, outputs and `value_info` stay valid. ONNX Runtime
//! constant-folds those Casts when it creates a session (the Cast's only input is a constant
//! initializer), so the cost is paid once, at load time, and the session holds FP32 weights
//! (the memory of a session is that of the FP32 model; the file is what shrinks).
//!
//! Which initializers are cast: FLOAT initializers of at least [`MIN_ELEMENTS`] elements
//! that some node reads and that no `QuantizeLinear`/`DequantizeLinear` reads. Small ones
//! (scalars, shape-like vectors, `Clip` bounds, `Resize` scales, small biases) stay FP32:
//! they weigh nothing and some operators want them exact; quantization parameters (scales)
//! of an already quantized model stay FP32, exact, and its integer initializers (INT8, INT32
//! biases) are not floating point, so they are kept as they are. DOUBLE initializers, sparse
//! initializers and `Constant` nodes are not touched.
//!
//! Conversion rounds to nearest, ties to even (the `half` crate's `f16::from_f32` and
//! `bf16::from_f32`). FLOAT16 (IEEE 754 binary16: 5 exponent bits, 10 mantissa bits) has a
//! largest finite value of 65504; a finite weight of magnitude 65520 or more would round to
//! infinity, so such a model is refused with [`CastError::OutOfRange`] naming the tensor
//! (values between 65504 and 65520 round to ±65504). FLOAT16 also flushes magnitudes below
//! 2^-25 (about 3e-8) to zero; they are counted in [`CastSummary::flushed_to_zero`].
//! BFLOAT16 (8 exponent bits like FLOAT, 7 stored mantissa bits, so 8 bits of precision
//! with the implicit one) keeps FLOAT's range; only finite values within half a BFLOAT16
//! ulp of `f32::MAX` round to infinity and are refused the same way. NaN and infinities stay
//! what they are.
//!
//! ONNX references (`onnx.proto`, in `onnx/proto.rs`; the operator documentation):
//! - `TensorProto.DataType`: `FLOAT = 1`, `FLOAT16 = 10`, `BFLOAT16 = 16`.
//! - Storage: FLOAT16 and BFLOAT16 values are stored either in `int32_data`, one element per
//!   entry, "converted bit-wise into an unsigned integer representation" (the 16 bits in the
//!   low half), or in `raw_data` as fixed-width little-endian 2-byte elements. This module
//!   writes `raw_data` (2 bytes per element, half of FLOAT's 4).
//! - `Cast` (<https://onnx.ai/onnx/operators/onnx__Cast.html>): attribute `to` is an INT
//!   holding a `DataType` since opset 6 (a string before), FLOAT16 input since opset 6,
//!   BFLOAT16 input since opset 13. The model's default-domain opset must therefore be at
//!   least [`Precision::min_opset`] (6 for FLOAT16, 13 for BFLOAT16); the opset is not raised,
//!   since that could change what other operators mean, and an older model is refused with
//!   [`CastError::Opset`].
//! - IR version 3 models list initializers among the graph inputs; a cast initializer's
//!   input entry is renamed and retyped with it, so that `w` is produced by its Cast only.
//!
//! Models with external data ([`crate::onnx::external`]) are read in first, as quantizing
//! does: the result is one self-contained file, refused with [`CastError::TooLarge`] past
//! protobuf's 2 GiB limit.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::error::Error;
use crate::graph::NameGen;
use crate::onnx::{
    self, attr, tensor, tensor_proto::DataType, GraphProto, ModelProto, TensorProto,
};

/// FLOAT initializers with fewer elements stay FP32 (scalars, shape-like vectors, small
/// biases): storing them in 16 bits saves nothing that matters and adds a node each.
pub const MIN_ELEMENTS: usize = 64;

/// Largest message protobuf implementations (and so ONNX Runtime) parse: 2 GiB - 1.
const PROTOBUF_LIMIT: usize = i32::MAX as usize;

/// The 16-bit floating-point format weights are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// IEEE 754 binary16 (`FLOAT16`, code 10): 10 mantissa bits, largest finite 65504.
    Float16,
    /// bfloat16 (`BFLOAT16`, code 16): FLOAT's 8 exponent bits and range, 8 bits of
    /// precision.
    Bfloat16,
}

impl Precision {
    /// The ONNX data type the weights are stored as.
    pub fn data_type(self) -> DataType {
        match self {
            Precision::Float16 => DataType::Float16,
            Precision::Bfloat16 => DataType::Bfloat16,
        }
    }

    /// The lowest default-domain opset whose `Cast` takes this type as input (6 for FLOAT16,
    /// 13 for BFLOAT16).
    pub fn min_opset(self) -> i64 {
        match self {
            Precision::Float16 => 6,
            Precision::Bfloat16 => 13,
        }
    }

    /// The largest finite value of the format.
    pub fn max(self) -> f32 {
        match self {
            Precision::Float16 => f32::from(half::f16::MAX),
            Precision::Bfloat16 => f32::from(half::bf16::MAX),
        }
    }

    /// The suffix of a cast initializer's new name (`w` → `w_fp16`).
    fn suffix(self) -> &'static str {
        match self {
            Precision::Float16 => "fp16",
            Precision::Bfloat16 => "bf16",
        }
    }

    /// `value` rounded to nearest even, as the format's bits.
    fn bits(self, value: f32) -> u16 {
        match self {
            Precision::Float16 => half::f16::from_f32(value).to_bits(),
            Precision::Bfloat16 => half::bf16::from_f32(value).to_bits(),
        }
    }

    /// The FP32 value of the format's `bits`.
    fn value(self, bits: u16) -> f32 {
        match self {
            Precision::Float16 => f32::from(half::f16::from_bits(bits)),
            Precision::Bfloat16 => f32::from(half::bf16::from_bits(bits)),
        }
    }

    /// What to do about a weight out of range, for [`CastError::OutOfRange`].
    fn out_of_range_hint(self) -> &'static str {
        match self {
            Precision::Float16 => "use bf16, which keeps FP32's range",
            Precision::Bfloat16 => "the model's weights are at FP32's limit",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::Float16 => "FLOAT16",
            Precision::Bfloat16 => "BFLOAT16",
        })
    }
}

/// Why a model cannot be cast. Every variant names the model file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CastError {
    /// A finite weight would round to infinity in the target format.
    #[error(
        "{path}: tensor `{tensor}` holds {value:e}, beyond {precision}'s range (largest finite \
         {max}): stored as {precision} it would become infinite; {}",
        .precision.out_of_range_hint(),
        max = .precision.max()
    )]
    OutOfRange {
        /// The model file.
        path: PathBuf,
        /// The initializer (its name in the graph it belongs to).
        tensor: String,
        /// Its value of largest magnitude among those that overflow.
        value: f32,
        /// The target format.
        precision: Precision,
    },
    /// The model's default-domain opset has no `Cast` from the target format.
    #[error(
        "{path}: {precision} weights need Cast from opset {needed}, but the model imports \
         {}; convert the model to opset {needed} or later first",
        .found.map_or("no default-domain opset".to_owned(), |v| format!("opset {v}"))
    )]
    Opset {
        /// The model file.
        path: PathBuf,
        /// The target format.
        precision: Precision,
        /// The model's default-domain opset, if it imports one.
        found: Option<i64>,
        /// [`Precision::min_opset`].
        needed: i64,
    },
    /// The cast model does not fit in one protobuf message (its external data read in).
    #[error(
        "{path}: the cast model is {bytes} bytes, over protobuf's 2 GiB limit for one .onnx file"
    )]
    TooLarge {
        /// The model file.
        path: PathBuf,
        /// The encoded size.
        bytes: usize,
    },
    /// The model file cannot be read, is not an ONNX model, its external data cannot be
    /// read, or an initializer's payload does not match its dims.
    #[error(transparent)]
    Model(#[from] Error),
}

/// What [`cast`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CastSummary {
    /// Initializers stored in 16 bits (each with one Cast node), subgraphs included.
    pub cast: usize,
    /// FLOAT initializers kept FP32 for being smaller than [`MIN_ELEMENTS`] or unread.
    pub kept_small: usize,
    /// FLOAT initializers kept FP32 for being read by `QuantizeLinear`/`DequantizeLinear`.
    pub kept_quantization: usize,
    /// Payload bytes of the cast initializers before (FP32) and after (16 bits).
    pub bytes_before: usize,
    /// See [`CastSummary::bytes_before`].
    pub bytes_after: usize,
    /// Nonzero weights that became zero (FLOAT16's underflow; BFLOAT16 underflows only
    /// below FP32's own normal range).
    pub flushed_to_zero: usize,
}

/// A cast model: its encoded bytes and what was done.
#[derive(Debug, Clone)]
pub struct Cast {
    /// The encoded model, self-contained.
    pub bytes: Vec<u8>,
    /// What was cast and kept.
    pub summary: CastSummary,
}

/// The model file `model_bytes` (read from `path`, whose folder holds its external data if
/// any) with its FP32 weights stored as `precision` (see the module documentation), encoded.
///
/// # Errors
/// [`CastError::Model`] when the bytes are not an ONNX model ([`Error::InvalidModel`]) or
/// external data cannot be read (as quantizing reports it); the errors of [`cast_model`];
/// [`CastError::TooLarge`] past 2 GiB.
pub fn cast(path: &Path, model_bytes: &[u8], precision: Precision) -> Result<Cast, CastError> {
    let mut model = onnx::decode(path, model_bytes).map_err(Error::from)?;
    let dir = crate::pipeline::model_dir(path);
    // The same checks and errors as quantizing's (`pipeline::external_files`), before any
    // tensor is read.
    let outline = onnx::outline::read(path, model_bytes).map_err(Error::from)?;
    crate::pipeline::external_files(path, &outline)?;
    onnx::external::inline(&mut model, dir).map_err(|e| match e {
        onnx::external::ExternalDataError::Invalid(reason) => Error::InvalidModel {
            path: path.to_owned(),
            reason,
        },
        onnx::external::ExternalDataError::Io(file, source) => Error::Io { path: file, source },
        onnx::external::ExternalDataError::LineBreak(file) => Error::UnsafePath { path: file },
    })?;
    let summary = cast_model(path, &mut model, precision)?;
    let bytes = model.encode_to_vec();
    if bytes.len() > PROTOBUF_LIMIT {
        return Err(CastError::TooLarge {
            path: path.to_owned(),
            bytes: bytes.len(),
        });
    }
    Ok(Cast { bytes, summary })
}

/// Stores the FP32 weights of `model` (self-contained: no external data) as `precision`,
/// each followed by a `Cast` to FLOAT, in the main graph and every subgraph. `path` names
/// the model in errors. On error the model is left unchanged.
///
/// # Errors
/// [`CastError::Opset`] when the default-domain opset is below
/// [`Precision::min_opset`]; [`CastError::OutOfRange`] naming the first initializer with a
/// finite value that would become infinite; [`CastError::Model`] with
/// [`Error::InvalidModel`] when an initializer's payload does not match its dims or is
/// still external.
pub fn cast_model(
    path: &Path,
    model: &mut ModelProto,
    precision: Precision,
) -> Result<CastSummary, CastError> {
    let found = onnx::default_opset(model);
    if found.is_none_or(|v| v < precision.min_opset()) {
        return Err(CastError::Opset {
            path: path.to_owned(),
            precision,
            found,
            needed: precision.min_opset(),
        });
    }
    let Some(graph) = model.graph.as_mut() else {
        return Ok(CastSummary::default());
    };
    // Worked on a copy, so that an error leaves the model as it was.
    let mut cast = graph.clone();
    let mut names = NameGen::new(&cast);
    let mut summary = CastSummary::default();
    cast_graph(path, &mut cast, precision, &mut names, &mut summary)?;
    *graph = cast;
    Ok(summary)
}

/// [`cast_model`] on one graph, then on its nodes' subgraphs.
fn cast_graph(
    path: &Path,
    graph: &mut GraphProto,
    precision: Precision,
    names: &mut NameGen,
    summary: &mut CastSummary,
) -> Result<(), CastError> {
    let readers = Readers::of(graph);
    let mut casts = Vec::new();
    let mut renamed = HashMap::new();
    for t in &mut graph.initializer {
        if t.elem_type() != DataType::Float {
            continue;
        }
        if readers.quantization.contains(t.name()) {
            summary.kept_quantization += 1;
            continue;
        }
        let values = tensor::to_f32(t).map_err(|e| Error::InvalidModel {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        if !readers.read.contains(t.name()) || values.len() < MIN_ELEMENTS {
            summary.kept_small += 1;
            continue;
        }
        let (raw, flushed) = encode(path, t.name(), &values, precision)?;
        let name = t.name().to_owned();
        let stored = names.fresh(&format!("{name}_{}", precision.suffix()));
        summary.cast += 1;
        summary.bytes_before += values.len() * 4;
        summary.bytes_after += raw.len();
        summary.flushed_to_zero += flushed;
        *t = TensorProto {
            name: Some(stored.clone()),
            dims: t.dims.clone(),
            data_type: Some(precision.data_type() as i32),
            raw_data: Some(raw),
            doc_string: t.doc_string.take(),
            metadata_props: std::mem::take(&mut t.metadata_props),
            ..Default::default()
        };
        casts.push(onnx::make_node(
            "Cast",
            names.fresh(&format!("{name}_cast")),
            vec![stored.clone()],
            vec![name.clone()],
            vec![attr::make_int("to", DataType::Float as i64)],
        ));
        renamed.insert(name, (stored, t.dims.clone()));
    }
    // IR version 3 lists initializers among the inputs: the entry follows its initializer,
    // so that `w` is produced by the Cast alone.
    for input in &mut graph.input {
        if let Some((stored, dims)) = renamed.get(input.name()) {
            *input = onnx::tensor_info(stored, precision.data_type(), Some(dims));
        }
    }
    graph.node.splice(0..0, casts);
    for node in &mut graph.node {
        for attribute in &mut node.attribute {
            for sub in attribute.g.iter_mut().chain(&mut attribute.graphs) {
                cast_graph(path, sub, precision, names, summary)?;
            }
        }
    }
    Ok(())
}

/// The tensor names read in `graph` and its subgraphs (a subgraph may read an outer
/// initializer by name; a name it shadows counts too, which only keeps more FP32): by any
/// node in `read`, by a `QuantizeLinear`/`DequantizeLinear` in `quantization`.
#[derive(Default)]
struct Readers {
    read: HashSet<String>,
    quantization: HashSet<String>,
}

impl Readers {
    fn of(graph: &GraphProto) -> Self {
        let mut readers = Readers::default();
        readers.add(graph);
        readers
    }

    fn add(&mut self, graph: &GraphProto) {
        for node in &graph.node {
            let quantization = matches!(node.op_type(), "QuantizeLinear" | "DequantizeLinear");
            for input in node.input.iter().filter(|i| !i.is_empty()) {
                self.read.insert(input.clone());
                if quantization {
                    self.quantization.insert(input.clone());
                }
            }
            for sub in onnx::subgraphs(node) {
                self.add(sub);
            }
        }
    }
}

/// `values` (of tensor `name`) as `precision`'s little-endian bytes, rounded to nearest even,
/// and the number of nonzero values that became zero.
///
/// # Errors
/// [`CastError::OutOfRange`] when a finite value becomes infinite, with the largest such.
fn encode(
    path: &Path,
    name: &str,
    values: &[f32],
    precision: Precision,
) -> Result<(Vec<u8>, usize), CastError> {
    let mut raw = Vec::with_capacity(values.len() * 2);
    let mut flushed = 0;
    let mut overflow: Option<f32> = None;
    for &v in values {
        let bits = precision.bits(v);
        let back = precision.value(bits);
        if v.is_finite() && back.is_infinite() && overflow.is_none_or(|o| v.abs() > o.abs()) {
            overflow = Some(v);
        }
        flushed += usize::from(v != 0.0 && back == 0.0);
        raw.extend_from_slice(&bits.to_le_bytes());
    }
    match overflow {
        Some(value) => Err(CastError::OutOfRange {
            path: path.to_owned(),
            tensor: name.to_owned(),
            value,
            precision,
        }),
        None => Ok((raw, flushed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{tensor_info, NodeProto, OperatorSetIdProto};

    /// A model `y = MatMul(x, w) + Add(b)` with `w` [k, 8] and the small bias `b` [8],
    /// `w` also read by an `If` branch, at `opset` and IR `ir`.
    fn model(w: &[f32], k: i64, opset: i64, ir: i64, w_in_inputs: bool) -> ModelProto {
        let b = [0.5f32; 8];
        let mut inputs = vec![tensor_info("x", DataType::Float, Some(&[1, k]))];
        if w_in_inputs {
            inputs.push(tensor_info("w", DataType::Float, Some(&[k, 8])));
        }
        let branch = GraphProto {
            name: Some("then".into()),
            node: vec![onnx::make_node(
                "Identity",
                "inner".into(),
                vec!["w".into()],
                vec!["w_seen".into()],
                vec![],
            )],
            output: vec![tensor_info("w_seen", DataType::Float, Some(&[k, 8]))],
            ..Default::default()
        };
        let mut cond = tensor::from_i64("cond", &[], &[1]);
        cond.data_type = Some(DataType::Bool as i32);
        cond.raw_data = Some(vec![1]);
        let mut if_node = onnx::make_node(
            "If",
            "branch".into(),
            vec!["cond".into()],
            vec!["w_out".into()],
            vec![],
        );
        if_node.attribute.push(crate::onnx::AttributeProto {
            name: Some("then_branch".into()),
            r#type: Some(crate::onnx::attribute_proto::AttributeType::Graph as i32),
            g: Some(branch.clone()),
            ..Default::default()
        });
        if_node.attribute.push(crate::onnx::AttributeProto {
            name: Some("else_branch".into()),
            r#type: Some(crate::onnx::attribute_proto::AttributeType::Graph as i32),
            g: Some(branch),
            ..Default::default()
        });
        ModelProto {
            ir_version: Some(ir),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(opset),
            }],
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![
                    onnx::make_node(
                        "MatMul",
                        "mm".into(),
                        vec!["x".into(), "w".into()],
                        vec!["xw".into()],
                        vec![],
                    ),
                    onnx::make_node(
                        "Add",
                        "add".into(),
                        vec!["xw".into(), "b".into()],
                        vec!["y".into()],
                        vec![],
                    ),
                    if_node,
                ],
                initializer: vec![
                    tensor::from_f32("w", &[k, 8], w),
                    tensor::from_f32("b", &[8], &b),
                    cond,
                ],
                input: inputs,
                output: vec![
                    tensor_info("y", DataType::Float, Some(&[1, 8])),
                    tensor_info("w_out", DataType::Float, Some(&[k, 8])),
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn weights(n: usize) -> Vec<f32> {
        (0..n).map(|i| (i as f32 - 40.0) * 0.0123).collect()
    }

    #[test]
    fn large_float_weights_are_stored_in_16_bits_behind_one_cast() {
        for precision in [Precision::Float16, Precision::Bfloat16] {
            let w = weights(16 * 8);
            let mut m = model(&w, 16, 13, 8, false);
            let summary = cast_model(Path::new("m.onnx"), &mut m, precision).expect("casts");
            assert_eq!(summary.cast, 1);
            assert_eq!(summary.kept_small, 1, "the bias [8] stays FP32");
            assert_eq!((summary.bytes_before, summary.bytes_after), (512, 256));
            let g = m.graph.as_ref().expect("graph");
            let stored = (g.initializer.iter())
                .find(|t| t.name() == format!("w_{}", precision.suffix()))
                .expect("the stored weight");
            assert_eq!(stored.elem_type(), precision.data_type());
            assert_eq!(stored.dims, [16, 8]);
            let casts: Vec<&NodeProto> = g.node.iter().filter(|n| n.op_type() == "Cast").collect();
            assert_eq!(casts.len(), 1, "one Cast for the MatMul and the If branch");
            assert_eq!(casts[0].input, [stored.name()]);
            assert_eq!(casts[0].output, ["w"]);
            assert_eq!(attr::int(casts[0], "to", 0), DataType::Float as i64);
            assert_eq!(g.node[0].op_type(), "Cast", "before its readers");
            // Round to nearest even, bit for bit.
            for (i, pair) in stored.raw_data().chunks(2).enumerate() {
                let bits = u16::from_le_bytes([pair[0], pair[1]]);
                assert_eq!(bits, precision.bits(w[i]));
            }
            assert!(g
                .initializer
                .iter()
                .any(|t| t.name() == "b" && t.elem_type() == DataType::Float));
        }
    }

    #[test]
    fn ties_round_to_even() {
        // 1 + 2^-11 lies halfway between FLOAT16's 1 and 1 + 2^-10: even is 1.
        let tie = 1.0 + 2f32.powi(-11);
        assert_eq!(Precision::Float16.value(Precision::Float16.bits(tie)), 1.0);
        let above = 1.0 + 3.0 * 2f32.powi(-11);
        assert_eq!(
            Precision::Float16.value(Precision::Float16.bits(above)),
            1.0 + 2.0 * 2f32.powi(-10)
        );
        // BFLOAT16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
        let tie = 1.0 + 2f32.powi(-8);
        assert_eq!(
            Precision::Bfloat16.value(Precision::Bfloat16.bits(tie)),
            1.0
        );
    }

    #[test]
    fn a_weight_beyond_float16s_range_is_refused_naming_the_tensor() {
        let mut w = weights(16 * 8);
        w[3] = 70000.0;
        w[5] = -1.0e6;
        let mut m = model(&w, 16, 13, 8, false);
        let before = m.clone();
        let err = cast_model(Path::new("m.onnx"), &mut m, Precision::Float16).expect_err("refused");
        let text = err.to_string();
        assert!(
            matches!(&err, CastError::OutOfRange { tensor, value, .. } if tensor == "w" && *value == -1.0e6),
            "{text}"
        );
        assert!(
            text.contains("m.onnx") && text.contains("`w`") && text.contains("65504"),
            "{text}"
        );
        assert_eq!(m, before, "the model is left unchanged");
        // 65510 rounds to 65504, not to infinity; BFLOAT16 keeps the range.
        w[3] = 65510.0;
        w[5] = 0.0;
        let mut m = model(&w, 16, 13, 8, false);
        cast_model(Path::new("m.onnx"), &mut m, Precision::Float16).expect("in range");
        w[5] = 1.0e30;
        let mut m = model(&w, 16, 13, 8, false);
        cast_model(Path::new("m.onnx"), &mut m, Precision::Bfloat16).expect("in range");
    }

    #[test]
    fn an_old_opset_is_refused_for_bfloat16() {
        let mut m = model(&weights(16 * 8), 16, 11, 8, false);
        let err = cast_model(Path::new("m.onnx"), &mut m, Precision::Bfloat16).expect_err("old");
        assert!(
            matches!(
                err,
                CastError::Opset {
                    found: Some(11),
                    needed: 13,
                    ..
                }
            ),
            "{err}"
        );
        cast_model(Path::new("m.onnx"), &mut m, Precision::Float16).expect("FLOAT16 from 6");
    }

    #[test]
    fn ir3_input_entries_follow_their_initializer() {
        let mut m = model(&weights(16 * 8), 16, 13, 3, true);
        cast_model(Path::new("m.onnx"), &mut m, Precision::Float16).expect("casts");
        let g = m.graph.as_ref().expect("graph");
        let names: Vec<&str> = g.input.iter().map(|i| i.name()).collect();
        assert_eq!(names, ["x", "w_fp16"]);
        let (elem, _) = onnx::declared_tensor(&g.input[1]).expect("a tensor");
        assert_eq!(elem, DataType::Float16);
    }

    #[test]
    fn quantization_parameters_and_integer_weights_stay() {
        let mut m = model(&weights(16 * 8), 16, 13, 8, false);
        let g = m.graph.as_mut().expect("graph");
        g.initializer
            .push(tensor::from_f32("scale", &[128], &[0.01; 128]));
        g.initializer.push(tensor::from_i8("q", &[128], &[1; 128]));
        g.node.push(onnx::make_node(
            "DequantizeLinear",
            "dq".into(),
            vec!["q".into(), "scale".into()],
            vec!["dq_out".into()],
            vec![],
        ));
        let summary = cast_model(Path::new("m.onnx"), &mut m, Precision::Float16).expect("casts");
        assert_eq!(summary.kept_quantization, 1);
        assert_eq!(summary.cast, 1, "the FP32 weight beside them is cast");
        let g = m.graph.as_ref().expect("graph");
        let kept = |name: &str, t: DataType| {
            g.initializer
                .iter()
                .any(|i| i.name() == name && i.elem_type() == t)
        };
        assert!(kept("scale", DataType::Float) && kept("q", DataType::Int8));
    }

    #[test]
    fn subgraph_initializers_are_cast_in_their_graph() {
        let mut m = model(&weights(16 * 8), 16, 13, 8, false);
        let g = m.graph.as_mut().expect("graph");
        let branch = g.node[2].attribute[0].g.as_mut().expect("branch");
        branch
            .initializer
            .push(tensor::from_f32("inner_w", &[100], &[0.25; 100]));
        branch.node[0].input.push("inner_w".into());
        let summary = cast_model(Path::new("m.onnx"), &mut m, Precision::Bfloat16).expect("casts");
        assert_eq!(summary.cast, 2);
        let branch = m.graph.as_ref().expect("graph").node[3].attribute[0]
            .g
            .as_ref()
            .expect("branch");
        assert_eq!(branch.node[0].op_type(), "Cast");
        assert_eq!(branch.node[0].output, ["inner_w"]);
        assert_eq!(branch.initializer[0].name(), "inner_w_bf16");
    }
}
