//! Quantizes the tiny test fixture (registered explicitly) and every model an
//! `include_quantized!` call of this crate's targets names (discovered: `tiny_io.onnx` in
//! `tests/typed_run.rs`), and writes the manifest that `tests/ui.rs` forwards to its
//! compile-fail cases.
//!
//! `../kenosis-runtime/testdata/tiny_conv.onnx` is deliberately not registered here: the
//! trybuild case `ui/unregistered.rs` checks the error for a model the build script did not
//! quantize.

fn main() {
    // The fixtures' layers are too small to repay any Q/DQ: without `fp32_where_faster(false)`
    // the time estimate would keep them FP32, and the tests check INT8 artifacts.
    kenosis_build::Config::new()
        .fp32_where_faster(false)
        .model("fixtures/tiny/tiny_conv.onnx")
        .discover()
        .compile()
        .expect("kenosis: quantizing the test fixtures failed");
}
