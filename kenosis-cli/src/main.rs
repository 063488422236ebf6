//! `kenosis`: Kenosis's quantizer as a command, for checking a model outside a build.
//!
//! - `kenosis quantize MODEL -o OUT [--calibration DIR | --images DIR --preprocess SPEC |
//!   --audio DIR | --text FILE|DIR --tokenizer tokenizer.json] [key=value ...]`: what a
//!   build does for one `include_quantized!` call, with the same options;
//! - `kenosis validate FP32 OTHER [--data DIR | --images ... | --audio ... | --text ...]
//!   [--timed N] [--threads N]`:
//!   agreement, latency and size of an INT8 or cast FP16/BF16 model against its FP32
//!   original;
//! - `kenosis inspect MODEL`: inputs, outputs, operators, parameters, largest tensors;
//! - `kenosis diff A B`: what differs between two models;
//! - `kenosis report`: what the last `cargo build` of the current package quantized;
//! - `kenosis cast MODEL --precision fp16|bf16 -o OUT`: FP32 weights stored in 16 bits
//!   behind a Cast to FP32, for a file about half the size that still computes in FP32;
//! - `kenosis probe [-o FILE]`: the kernel costs of the machine it runs on, as a device
//!   profile for builds on another machine.
//!
//! Every command but the hidden one prints one JSON document with `--format json`
//! (see [`mod@format`] and `docs/cli-json.md`); `--preprocess` is
//! `kenosis_options::preprocess::ImagePreprocess` (see `docs/preprocess.md`).
//!
//! Build scripts run it too (hidden `build-request`, see kenosis-build's `quantizer`): its
//! `--version` names the kenosis-build sources it was compiled from, which a build's front
//! end must share.

mod audio;
mod build_request;
mod cast;
mod diff;
mod error;
mod format;
mod inspect;
mod model;
mod probe;
mod progress;
mod quantize;
mod report;
mod samples;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Quantize, validate, inspect, compare and cast ONNX models with Kenosis, outside a build
#[derive(Parser)]
#[command(name = "kenosis", version = kenosis_quantize::IDENTITY, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Quantize an FP32 ONNX model to a static INT8 QDQ model, as a build would
    ///
    /// Options are written as in `include_quantized!`, one per argument, e.g.
    /// `method="mse" per_channel=false keep_float='["conv1"]'`; a bare word value is taken as
    /// a string (`method=mse`). Writes OUT and its report beside it (OUT with `.json`).
    Quantize(quantize::Args),
    /// Compare a model (INT8, or a cast FP16/BF16 one) with its FP32 original: output cosine
    /// (mean and worst sample), top-1 agreement, single-thread latency and file size, side by
    /// side, and the ops that lose the most fidelity
    Validate(validate::Args),
    /// Show a model's IR version, opsets, inputs and outputs, operators, parameters and
    /// largest tensors
    Inspect {
        /// The ONNX model
        model: PathBuf,
        /// Print lines for people (text) or one JSON document for scripts (see
        /// docs/cli-json.md)
        #[arg(long, value_enum, default_value_t = format::Format::Text)]
        format: format::Format,
    },
    /// Show what differs between two models: inputs and outputs, operator counts, nodes and
    /// weights
    Diff {
        /// The first model (e.g. the FP32 original)
        a: PathBuf,
        /// The second model (e.g. its INT8 artifact)
        b: PathBuf,
        /// Print lines for people (text) or one JSON document for scripts (see
        /// docs/cli-json.md)
        #[arg(long, value_enum, default_value_t = format::Format::Text)]
        format: format::Format,
    },
    /// Show what the last `cargo build` of the current package quantized: each model's ops
    /// in INT8 and in FP32 with the reason, fidelity, sizes, and where the artifact and its
    /// JSON report are
    Report(report::Args),
    /// Store an FP32 model's weights in FP16 or BF16, each behind a Cast to FP32: a file
    /// about half the size that still computes in FP32
    ///
    /// Serves smaller model files and binaries on any CPU: compute stays FP32 (ONNX Runtime's
    /// CPU provider has almost no FP16/BF16 kernels), so speed and session memory are those
    /// of the FP32 model (for speed, use `quantize`). The cost is at load time: ONNX Runtime
    /// constant-folds the Casts when it creates the session (graph optimizations on, the
    /// default). Float weights of at least 64 elements are cast, rounded to nearest even;
    /// small ones, quantization scales and integer weights stay as they are.
    ///
    /// fp16 has 11 bits of mantissa but loses range: a weight beyond 65504 would become
    /// infinite, and such a model is refused naming the tensor. bf16 keeps FP32's range with
    /// 8 bits of mantissa (less precise), and needs opset 13 or later. OUT is one
    /// self-contained file (external data is read in).
    Cast(cast::Args),
    /// Measure this machine's kernel costs and write them as a device profile, for builds
    /// on another machine
    ///
    /// Build `kenosis` for the device (`cargo install kenosis-cli --target ...`, see
    /// docs/cross-compiling.md), run `kenosis probe` there once, and name the file in the
    /// build with `device_profile = "FILE"` or KENOSIS_DEVICE_PROFILE: the placement then
    /// prices which regions stay FP32 with the device's own costs instead of its CPU class's
    /// table. Takes a few seconds to a minute.
    Probe(probe::Args),
    /// Quantize one model for a build script: the request (JSON) comes on standard input
    #[command(hide = true)]
    BuildRequest,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // With `bundled-ort`, `ort` uses the library embedded in this binary from here on.
    #[cfg(feature = "bundled-ort")]
    if let Err(e) = kenosis_runtime::ort_init() {
        eprintln!("kenosis: error: {e}");
        return ExitCode::FAILURE;
    }
    let done = match cli.command {
        Command::Quantize(args) => quantize::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Inspect { model, format } => inspect::run(&model, format),
        Command::Diff { a, b, format } => diff::run(&a, &b, format),
        Command::Report(args) => report::run(&args),
        Command::Cast(args) => cast::run(&args),
        Command::Probe(args) => probe::run(&args),
        Command::BuildRequest => build_request::run(),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kenosis: error: {e}");
            ExitCode::FAILURE
        }
    }
}
