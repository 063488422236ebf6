//! `kenosis inspect MODEL`: what a model holds, as a person reads it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use kenosis_quantize::model::{self, ElemType, ModelProto, ValueInfoProto};
use serde::Serialize;

use crate::error::Result;
use crate::format::{Format, Tensor};

/// How many of the largest initializers are listed.
const LARGEST: usize = 5;

/// Prints the summary of the model at `path`, as text or as JSON ([`Inspection`]).
///
/// # Errors
/// As [`crate::model::read`].
pub fn run(path: &Path, format: Format) -> Result<()> {
    let (model, size) = crate::model::read(path)?;
    match format {
        Format::Text => print!("{}", summary(path, &model, size)),
        Format::Json => crate::format::print_json(&inspection(path, &model, size))?,
    }
    Ok(())
}

/// What `kenosis inspect --format json` prints (see `docs/cli-json.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// The model file as given.
    pub path: String,
    /// Its size in bytes.
    pub size_bytes: usize,
    /// `ModelProto.ir_version`.
    pub ir_version: i64,
    /// The operator sets imported: `ai.onnx` for the default domain.
    pub opsets: Vec<Opset>,
    /// `ModelProto.producer_name`.
    pub producer_name: String,
    /// `ModelProto.producer_version`.
    pub producer_version: String,
    /// What the model holds, as `kenosis validate` labels it (`INT8`, `FP16`, `INT8+FP16`,
    /// ...; see [`precision`]); `null` for an FP32 model.
    pub precision: Option<String>,
    /// Graph inputs (initializers excluded), in declaration order.
    pub inputs: Vec<Tensor>,
    /// Graph outputs, in declaration order.
    pub outputs: Vec<Tensor>,
    /// Nodes of the main graph.
    pub nodes: usize,
    /// Nodes per operator (`domain.Op` outside the default domain), by name.
    pub operators: BTreeMap<String, usize>,
    /// Parameters: elements over all initializers.
    pub parameters: usize,
    /// Initializers.
    pub initializers: usize,
    /// Bytes of initializer payload held in the file.
    pub initializer_bytes: usize,
    /// Initializers per element type (see [`crate::format::dtype`]).
    pub initializer_dtypes: BTreeMap<String, usize>,
    /// The largest initializers by element count, most first (at most five).
    pub largest: Vec<Initializer>,
}

/// One imported operator set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Opset {
    /// The domain: `ai.onnx` for the default one.
    pub domain: String,
    /// Its version.
    pub version: i64,
}

/// One initializer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Initializer {
    /// Its name.
    pub name: String,
    /// Its element type (see [`crate::format::dtype`]).
    pub dtype: String,
    /// Its dimensions.
    pub shape: Vec<i64>,
    /// Its element count.
    pub elements: usize,
}

/// The [`Inspection`] of `model`, read from `path` (`size` bytes).
pub fn inspection(path: &Path, model: &ModelProto, size: usize) -> Inspection {
    let empty = model::GraphProto::default();
    let graph = model.graph.as_ref().unwrap_or(&empty);
    let initializers: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name()).collect();
    let mut initializer_dtypes: BTreeMap<String, usize> = BTreeMap::new();
    for t in &graph.initializer {
        *initializer_dtypes
            .entry(crate::format::dtype(t.elem_type()))
            .or_default() += 1;
    }
    let mut largest: Vec<&model::TensorProto> = graph.initializer.iter().collect();
    largest.sort_by_key(|t| std::cmp::Reverse(model::element_count(&t.dims)));
    Inspection {
        path: path.display().to_string(),
        size_bytes: size,
        ir_version: model.ir_version(),
        opsets: (model.opset_import.iter())
            .map(|o| Opset {
                domain: if model::is_default_domain(o.domain()) {
                    "ai.onnx".into()
                } else {
                    o.domain().to_owned()
                },
                version: o.version(),
            })
            .collect(),
        producer_name: model.producer_name().to_owned(),
        producer_version: model.producer_version().to_owned(),
        precision: precision(model),
        inputs: (graph.input.iter())
            .filter(|i| !initializers.contains(i.name()))
            .map(Tensor::of_value)
            .collect(),
        outputs: graph.output.iter().map(Tensor::of_value).collect(),
        nodes: graph.node.len(),
        operators: op_counts(model).into_iter().collect(),
        parameters: (graph.initializer.iter())
            .map(|t| model::element_count(&t.dims).unwrap_or(0))
            .sum(),
        initializers: graph.initializer.len(),
        initializer_bytes: graph.initializer.iter().map(model::payload_bytes).sum(),
        initializer_dtypes,
        largest: (largest.into_iter().take(LARGEST))
            .map(|t| Initializer {
                name: t.name().to_owned(),
                dtype: crate::format::dtype(t.elem_type()),
                shape: t.dims.clone(),
                elements: model::element_count(&t.dims).unwrap_or(0),
            })
            .collect(),
    }
}

/// The summary `kenosis inspect` prints.
pub fn summary(path: &Path, model: &ModelProto, size: usize) -> String {
    let mut out = String::new();
    let opsets: Vec<String> = (model.opset_import.iter())
        .map(|o| {
            let domain = if model::is_default_domain(o.domain()) {
                "ai.onnx"
            } else {
                o.domain()
            };
            format!("{domain} {}", o.version())
        })
        .collect();
    let _ = writeln!(
        out,
        "{}: {}, IR version {}, opsets {}, producer {} {}",
        path.display(),
        megabytes(size),
        model.ir_version(),
        opsets.join(", "),
        model.producer_name(),
        model.producer_version()
    );
    let empty = model::GraphProto::default();
    let graph = model.graph.as_ref().unwrap_or(&empty);
    let initializers: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name()).collect();
    out.push_str("inputs:\n");
    for vi in graph
        .input
        .iter()
        .filter(|i| !initializers.contains(i.name()))
    {
        let _ = writeln!(out, "  {}", value_info(vi));
    }
    out.push_str("outputs:\n");
    for vi in &graph.output {
        let _ = writeln!(out, "  {}", value_info(vi));
    }
    let _ = writeln!(out, "operators ({} nodes):", graph.node.len());
    for (op, count) in op_counts(model) {
        let _ = writeln!(out, "  {op} {count}");
    }
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    let mut parameters = 0usize;
    let mut bytes = 0usize;
    for t in &graph.initializer {
        parameters += model::element_count(&t.dims).unwrap_or(0);
        bytes += model::payload_bytes(t);
        *by_type.entry(type_name(t.elem_type())).or_default() += 1;
    }
    let types: Vec<String> = by_type.iter().map(|(t, n)| format!("{t}: {n}")).collect();
    let _ = writeln!(
        out,
        "parameters: {parameters} in {} initializers ({}); {}",
        graph.initializer.len(),
        megabytes(bytes),
        types.join(", ")
    );
    let mut largest: Vec<&model::TensorProto> = graph.initializer.iter().collect();
    largest.sort_by_key(|t| std::cmp::Reverse(model::element_count(&t.dims)));
    out.push_str("largest tensors:\n");
    for t in largest.into_iter().take(LARGEST) {
        let _ = writeln!(
            out,
            "  {} {} {:?} ({} values)",
            t.name(),
            type_name(t.elem_type()),
            t.dims,
            model::element_count(&t.dims).unwrap_or(0)
        );
    }
    out
}

/// Nodes per operator of the main graph (`domain.Op` outside the default domain), most
/// frequent first, ties by name.
pub fn op_counts(model: &ModelProto) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for n in model.graph.iter().flat_map(|g| &g.node) {
        let name = if model::is_default_domain(n.domain()) {
            n.op_type().to_owned()
        } else {
            format!("{}.{}", n.domain(), n.op_type())
        };
        *counts.entry(name).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts
}

/// Operators (outside any domain) that compute with or convert to integer codes: Q/DQ, ONNX
/// Runtime's integer kernels, and dynamic quantization. `QLinear*` ops count too.
const INTEGER_OPS: &[&str] = &[
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "ConvInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "QGemm",
    "QAttention",
];

/// What `model` is stored and computed in, as a short label read from the model itself:
/// `INT8` when it holds quantization or integer-kernel operators (see [`op_counts`]), `INT4`
/// with 4-bit `MatMulNBits` weights, `FP16` or `BF16` when weights or inputs are stored in
/// 16 bits (a `kenosis cast` model), joined by `+` when several hold (an INT8 model cast to
/// FP16 is `INT8+FP16`); `None` when none does (an FP32 model, or another kind).
pub fn precision(model: &ModelProto) -> Option<String> {
    let ops = op_counts(model);
    let has_op = |test: &dyn Fn(&str) -> bool| {
        (ops.iter()).any(|(name, _)| test(name.rsplit('.').next().unwrap_or(name)))
    };
    let empty = model::GraphProto::default();
    let graph = model.graph.as_ref().unwrap_or(&empty);
    let stored = |t: model::DataType| {
        graph
            .initializer
            .iter()
            .any(|i| i.elem_type().known() == Some(t))
            || (graph.input.iter())
                .any(|vi| model::declared_tensor(vi).is_some_and(|(e, _)| e.known() == Some(t)))
    };
    let labels: Vec<&str> = [
        ("INT4", has_op(&|op| op == "MatMulNBits")),
        (
            "INT8",
            has_op(&|op| INTEGER_OPS.contains(&op) || op.starts_with("QLinear")),
        ),
        ("FP16", stored(model::DataType::Float16)),
        ("BF16", stored(model::DataType::Bfloat16)),
    ]
    .into_iter()
    .filter_map(|(label, holds)| holds.then_some(label))
    .collect();
    (!labels.is_empty()).then(|| labels.join("+"))
}

/// `name TYPE [d0, d1, ...]`, symbolic dims by name (`?` when unnamed).
pub fn value_info(vi: &ValueInfoProto) -> String {
    let Some((elem, dims)) = model::declared_tensor(vi) else {
        return format!("{} (not a tensor)", vi.name());
    };
    let names = model::declared_dim_names(vi);
    let dims = dims.map_or_else(
        || "(shape not declared)".to_owned(),
        |dims| {
            let dims: Vec<String> = (dims.iter().enumerate())
                .map(|(k, d)| match d {
                    Some(v) => v.to_string(),
                    None => names
                        .get(k)
                        .cloned()
                        .flatten()
                        .unwrap_or_else(|| "?".into()),
                })
                .collect();
            format!("[{}]", dims.join(", "))
        },
    );
    format!("{} {} {dims}", vi.name(), type_name(elem))
}

fn type_name(elem: ElemType) -> String {
    elem.known()
        .map_or_else(|| elem.to_string(), |t| t.as_str_name().to_owned())
}

/// `n` bytes in MB (10^6 bytes), two decimals.
pub fn megabytes(n: usize) -> String {
    format!("{:.2} MB", n as f64 / 1e6)
}

/// The first `shown` of `names`, comma-separated, then how many more there are.
pub fn first_names(names: &[impl AsRef<str>], shown: usize) -> String {
    let first: Vec<&str> = names.iter().take(shown).map(AsRef::as_ref).collect();
    match names.len().saturating_sub(shown) {
        0 => first.join(", "),
        more => format!("{}, and {more} more", first.join(", ")),
    }
}
