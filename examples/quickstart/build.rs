fn main() {
    // Quantizes every model an `include_quantized!` call of this package names.
    kenosis_build::discover().expect("kenosis: quantization failed");
}
