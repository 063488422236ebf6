//! Developer tasks for the Kenosis workspace, run as `cargo xtask <command>`.
//!
//! Every command that starts cargo first makes sure ONNX Runtime is available (see [`ort`]),
//! then runs the child cargo with the environment that points `ort-sys` at it.
//!
//! To add a command: add a module under `commands/`, a variant to [`Command`] and one arm
//! to the `match` in [`run`].

mod cargo;
mod commands;
mod cross;
mod docs;
mod ort;
mod wheel;
mod wheel_models;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Developer tasks for Kenosis"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    SetupOrt(commands::setup_ort::Args),
    Demo(commands::demo::Args),
    Test(commands::test::Args),
    Bench(commands::bench::Args),
    Fuzz(commands::fuzz::Args),
    Layers(commands::layers::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::SetupOrt(args) => commands::setup_ort::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Test(args) => commands::test::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Fuzz(args) => commands::fuzz::run(args),
        Command::Layers(args) => commands::layers::run(args),
    }
}

/// The workspace root: xtask always lives at `<workspace>/xtask`.
///
/// Not canonicalized on purpose: `ORT_LIB_PATH` derived from it must be the same string
/// however cargo was invoked, or `ort-sys` (which watches that variable) rebuilds.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask's manifest dir has a parent")
        .to_path_buf()
}
