//! `cargo xtask bench`: Kenosis INT8 vs FP32 vs ONNX Runtime's quantizer on the shared models
//! (fidelity, single-thread latency, size, quantization time). See `src/bench/mod.rs`.

#[path = "../bench/mod.rs"]
mod bench;

use std::process::ExitCode;

fn main() -> ExitCode {
    match bench::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}
