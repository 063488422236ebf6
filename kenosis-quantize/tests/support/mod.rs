//! Fixtures and file builders shared by kenosis-build's integration tests (each test binary
//! includes this module and uses part of it).
#![allow(dead_code)]

use kenosis_quantize::onnx::{self, ModelProto};
use prost::Message;

/// The tiny FP32 Conv fixture (`tests/fixtures/tiny/make_tiny.py`).
pub const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/tiny/tiny_conv.onnx"
);

/// Default options for the fixtures here, except `fp32_where_faster`: their layers are far
/// too small to repay any Q/DQ, so the time estimate would keep them FP32 and leave nothing
/// quantized to test the other rules on.
pub fn tiny_options() -> kenosis_quantize::QuantizeOptions {
    kenosis_quantize::QuantizeOptions {
        fp32_where_faster: false,
        ..Default::default()
    }
}

/// [`TINY`], decoded.
pub fn tiny() -> ModelProto {
    ModelProto::decode(std::fs::read(TINY).expect("fixture").as_slice()).expect("fixture decodes")
}

/// A C-order version-1 `.npy` file with the given header fields and raw payload.
pub fn npy(payload: &[u8], descr: &str, shape: &str) -> Vec<u8> {
    npy_with(payload, descr, shape, false, 1)
}

/// A version-`version` (1 or 2) `.npy` file with the given header fields and raw payload
/// (NumPy format spec: magic, version, header length, a Python-dict header padded to a
/// multiple of 64 bytes).
pub fn npy_with(payload: &[u8], descr: &str, shape: &str, fortran: bool, version: u8) -> Vec<u8> {
    let order = if fortran { "True" } else { "False" };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}")
        .into_bytes();
    let prefix = if version == 1 { 10 } else { 12 };
    while (prefix + h.len() + 1) % 64 != 0 {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((h.len() as u16).to_le_bytes());
    } else {
        out.extend((h.len() as u32).to_le_bytes());
    }
    out.extend(h);
    out.extend(payload);
    out
}

/// Moves every float initializer of `m` into external data at `location` and returns the
/// data file's bytes: one after another, or, when `shared`, every tensor reading from offset
/// 0 of a file holding the largest one.
pub fn externalize(m: &mut ModelProto, location: &str, shared: bool) -> Vec<u8> {
    let mut data = Vec::new();
    for t in &mut m.graph.as_mut().expect("graph").initializer {
        if t.elem_type() != onnx::DataType::Float {
            continue;
        }
        let bytes: Vec<u8> = (onnx::tensor::to_f32(t).expect("float initializer").iter())
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let offset = if shared { 0 } else { data.len() };
        t.raw_data = None;
        t.float_data.clear();
        t.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
        t.external_data = [
            ("location", location.to_owned()),
            ("offset", offset.to_string()),
            ("length", bytes.len().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| onnx::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        })
        .collect();
        if !shared {
            data.extend(bytes);
        } else if bytes.len() > data.len() {
            data = bytes;
        }
    }
    data
}

/// [`TINY`] with the first Conv's weight declaring 2^40 output channels over its 108 values
/// and no bias, followed by a Mul by a scalar that the affine fold would absorb: a payload
/// that does not back its dims.
pub fn tiny_with_weight_dims_beyond_payload_before_mul() -> ModelProto {
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    g.node[0].input.truncate(2);
    let weight = g.node[0].input[1].clone();
    let conv_out = g.node[0].output[0].clone();
    g.node[0].output[0] = "conv_raw".into();
    g.node.insert(
        1,
        onnx::make_node(
            "Mul",
            "mul".into(),
            vec!["conv_raw".into(), "two".into()],
            vec![conv_out],
            vec![],
        ),
    );
    g.initializer
        .push(onnx::tensor::from_f32("two", &[1, 1, 1, 1], &[2.0]));
    let w = (g.initializer.iter_mut())
        .find(|t| t.name() == weight)
        .expect("weight");
    w.dims = vec![1 << 40, 3, 3, 3];
    m
}

/// [`TINY`] with its Relu replaced by `Clip(0, -6)`: max below min, every output -6.
pub fn tiny_with_clip_max_below_min() -> ModelProto {
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    let relu = &mut g.node[1];
    relu.op_type = Some("Clip".into());
    relu.input.extend(["clip_min".into(), "clip_max".into()]);
    g.initializer
        .push(onnx::tensor::from_f32("clip_min", &[], &[0.0]));
    g.initializer
        .push(onnx::tensor::from_f32("clip_max", &[], &[-6.0]));
    m
}

/// The values of the sample calibration files the tests write: `v[i] = (i·37 mod 101)/50 − 1`
/// for `count` values.
pub fn sample_values(count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect()
}

/// `values` as little-endian float32 bytes, an `.npy` payload.
pub fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// A version-1 Fortran-order `.npy` of `shape` holding `values` given in row-major order
/// (written column-major, as `np.save(path, np.asfortranarray(x))` does).
pub fn npy_fortran(values: &[f32], shape: &[usize]) -> Vec<u8> {
    let strides: Vec<usize> = (0..shape.len())
        .map(|k| shape[k + 1..].iter().product())
        .collect();
    let count: usize = shape.iter().product();
    let mut column_major = Vec::with_capacity(count * 4);
    for f in 0..count {
        // The f-th element in column-major order: the first index varies fastest.
        let (mut rest, mut row_major) = (f, 0);
        for (k, &d) in shape.iter().enumerate() {
            row_major += (rest % d) * strides[k];
            rest /= d;
        }
        column_major.extend(values[row_major].to_le_bytes());
    }
    // As Python writes the tuple: `(3,)`, `(3, 8, 8)`.
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    npy_with(&column_major, "<f4", &shape, true, 1)
}

/// [`TINY`] with a BatchNormalization after its first Conv, whose bias becomes `bias` (4
/// values for its 4 output channels, or fewer: a bias too short to fold).
pub fn tiny_with_batchnorm(bias: &[f32]) -> ModelProto {
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    let conv_out = g.node[0].output[0].clone();
    g.node[0].output[0] = "conv_raw".into();
    let bn_inputs = ["conv_raw", "gamma", "beta", "mean", "var"].map(String::from);
    g.node.insert(
        1,
        onnx::make_node(
            "BatchNormalization",
            "bn".into(),
            bn_inputs.to_vec(),
            vec![conv_out],
            vec![],
        ),
    );
    for (name, v) in [("gamma", 1.5), ("beta", 0.1), ("mean", 0.2), ("var", 0.9)] {
        g.initializer
            .push(onnx::tensor::from_f32(name, &[4], &[v; 4]));
    }
    let name = g.node[0].input[2].clone();
    let t = (g.initializer.iter_mut())
        .find(|t| t.name() == name)
        .expect("bias");
    *t = onnx::tensor::from_f32(&name, &[bias.len() as i64], bias);
    m
}

/// [`TINY`] whose input `x` is also an initializer (holding [`sample_values`]): a model with
/// no input left to calibrate.
pub fn tiny_without_inputs() -> ModelProto {
    let mut m = tiny();
    m.graph
        .as_mut()
        .expect("graph")
        .initializer
        .push(onnx::tensor::from_f32(
            "x",
            &[1, 3, 8, 8],
            &sample_values(192),
        ));
    m
}
