//! Quantizes the tiny test fixture so `tests/embed_tiny.rs` can `include_quantized!` it, and
//! writes the manifest that `tests/ui.rs` forwards to its compile-fail cases.
//!
//! `fixtures/tiny/unregistered.onnx` is deliberately not registered here: the trybuild case
//! `ui/unregistered.rs` checks the error for a model the build script did not quantize.

fn main() {
    kenosis_build::Config::new()
        .model("fixtures/tiny/tiny_conv.onnx")
        .model("fixtures/tiny/tiny_io.onnx")
        .compile()
        .expect("kenosis: quantizing the test fixtures failed");
}
