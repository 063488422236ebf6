//! Fixtures and file builders shared by kenosis-build's integration tests (each test binary
//! includes this module and uses part of it).
#![allow(dead_code)]

use kenosis_build::onnx::ModelProto;
use prost::Message;

/// The tiny FP32 Conv fixture (`tests/fixtures/tiny/make_tiny.py`).
pub const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/tiny/tiny_conv.onnx"
);

/// Default options for the fixtures here, except `fp32_where_faster`: their layers are far
/// too small to repay any Q/DQ, so the time estimate would keep them FP32 and leave nothing
/// quantized to test the other rules on.
pub fn tiny_options() -> kenosis_build::QuantizeOptions {
    kenosis_build::QuantizeOptions {
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
