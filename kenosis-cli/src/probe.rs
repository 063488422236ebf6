//! `kenosis probe [-o FILE] [--format json]`: measures, on the machine it runs on, the kernel
//! costs the placement prices with, and writes them as a device profile (see
//! `kenosis_quantize::DeviceProfile`) for builds on another machine: built for the device's
//! target, copied there and run once; the profile is then committed and named by the build
//! (`device_profile = "FILE"` or `KENOSIS_DEVICE_PROFILE`).

use std::path::PathBuf;

use kenosis_quantize::{DeviceProfile, Effort, KernelCosts};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::Format;

/// The arguments of `kenosis probe`.
#[derive(clap::Args)]
pub struct Args {
    /// Where to write the device profile (JSON)
    #[arg(
        long,
        short,
        value_name = "FILE",
        default_value = "kenosis-device.json"
    )]
    output: PathBuf,
    /// Print lines for people (text) or one JSON document for scripts (see docs/cli-json.md)
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// One short measurement: noisy costs, for checking the flow where timings mean nothing
    /// (an emulator)
    #[arg(long, hide = true)]
    quick: bool,
}

/// What `--format json` prints: where the profile went, and the profile.
#[derive(Serialize)]
struct Probed<'a> {
    /// The file written.
    output: String,
    /// Its contents.
    profile: &'a DeviceProfile,
}

/// Measures the costs, writes the profile and prints what it holds.
///
/// # Errors
/// [`Error::Kenosis`] when ONNX Runtime fails; [`Error::Write`] naming the output file.
pub fn run(args: &Args) -> Result<()> {
    let spinner = crate::progress::spinner("measuring kernel costs");
    let effort = if args.quick {
        Effort::QUICK
    } else {
        Effort::FULL
    };
    let profile = kenosis_quantize::probe(&args.output, effort, &mut |threads| {
        spinner.set_message(format!(
            "measuring kernel costs at {}",
            threads_label(threads)
        ));
    });
    spinner.finish_and_clear();
    let profile = profile?;
    let json = serde_json::to_vec_pretty(&profile)
        .map_err(|e| Error::Mismatch(format!("the profile does not serialize: {e}")))?;
    crate::model::write_atomic(&args.output, &json)?;
    if args.format == Format::Json {
        return crate::format::print_json(&Probed {
            output: args.output.display().to_string(),
            profile: &profile,
        });
    }
    println!(
        "kernel costs measured on {} (class {}), {}",
        profile.cpu, profile.cpu_class, profile.onnxruntime
    );
    println!("  1 thread:   {}", costs_line(&profile.one_thread));
    if profile.default_threads != Some(1) {
        println!(
            "  {}: {}",
            threads_label(profile.default_threads),
            costs_line(&profile.at_default_threads)
        );
    }
    if !profile.kept_from_table.is_empty() {
        println!(
            "  implausible, kept from the table: {}",
            profile.kept_from_table.join(", ")
        );
    }
    println!(
        "written to {}: build with `device_profile = \"{}\"` or KENOSIS_DEVICE_PROFILE",
        args.output.display(),
        args.output.display()
    );
    Ok(())
}

/// `4 threads`, `1 thread`, or ONNX Runtime's own choice.
fn threads_label(threads: Option<usize>) -> String {
    match threads {
        Some(1) => "1 thread".to_owned(),
        Some(n) => format!("{n} threads"),
        None => "ONNX Runtime's default threads".to_owned(),
    }
}

/// The costs in FP32 dense multiply-adds, one `name value` each.
fn costs_line(c: &KernelCosts) -> String {
    let costs: Vec<String> = (KernelCosts::NAMES.iter().zip(c.values()))
        .map(|(name, value)| format!("{} {value:.2}", name.replace('_', " ")))
        .collect();
    format!("{} (FP32 dense multiply-adds)", costs.join(", "))
}
