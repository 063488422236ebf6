//! Arbitrary bytes as an ONNX model through Kenosis's graph path (decode, normalize, plan,
//! rewrite, encode; see `kenosis_quantize::pipeline::quantize_offline`): any panic, hang or
//! allocation failure is a bug. Run with `cargo xtask fuzz`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kenosis_quantize::pipeline::quantize_offline(std::path::Path::new("fuzz.onnx"), data);
});
