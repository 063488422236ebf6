//! One module per `cargo xtask` command, each with an `Args` (clap) and a `run`.

pub mod bench;
mod bench_build;
mod bench_deploy;
pub mod demo;
pub mod fuzz;
pub mod layers;
pub mod setup_ort;
pub mod test;
