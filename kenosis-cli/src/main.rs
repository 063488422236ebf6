//! `kenosis`: Kenosis's quantizer as a command, for checking a model outside a build.
//!
//! - `kenosis quantize MODEL -o OUT [--calibration DIR] [key=value ...]`: what a build does
//!   for one `include_quantized!` call, with the same options;
//! - `kenosis validate FP32 INT8 [--data DIR] [--timed N]`: agreement, latency and size of an
//!   INT8 model against its FP32 original;
//! - `kenosis inspect MODEL`: inputs, outputs, operators, parameters, largest tensors;
//! - `kenosis diff A B`: what differs between two models;
//! - `kenosis report`: what the last `cargo build` of the current package quantized.

mod diff;
mod error;
mod inspect;
mod model;
mod quantize;
mod report;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Quantize, validate, inspect and compare ONNX models with Kenosis, outside a build
#[derive(Parser)]
#[command(name = "kenosis", version, about)]
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
    /// Compare an INT8 model with its FP32 original: output cosine (mean and worst sample),
    /// top-1 agreement, single-thread latency and file size, side by side
    Validate(validate::Args),
    /// Show a model's IR version, opsets, inputs and outputs, operators, parameters and
    /// largest tensors
    Inspect {
        /// The ONNX model
        model: PathBuf,
    },
    /// Show what differs between two models: inputs and outputs, operator counts, nodes and
    /// weights
    Diff {
        /// The first model (e.g. the FP32 original)
        a: PathBuf,
        /// The second model (e.g. its INT8 artifact)
        b: PathBuf,
    },
    /// Show what the last `cargo build` of the current package quantized: each model's ops
    /// in INT8 and in FP32 with the reason, fidelity, sizes, and where the artifact and its
    /// JSON report are
    Report(report::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.command {
        Command::Quantize(args) => quantize::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Inspect { model } => inspect::run(&model),
        Command::Diff { a, b } => diff::run(&a, &b),
        Command::Report(args) => report::run(&args),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kenosis: error: {e}");
            ExitCode::FAILURE
        }
    }
}
