// The path must be a string literal: the macro reads the file while compiling.
const PATH: &str = "fixtures/tiny/tiny_conv.onnx";

fn main() {
    let _model = kenosis_runtime::include_quantized!(PATH);
}
