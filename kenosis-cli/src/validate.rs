//! `kenosis validate FP32 OTHER [--data DIR] [--timed N]`: how close a model (an INT8
//! artifact, a `kenosis cast` FP16 or BF16 model, ...) stays to its FP32 original on the
//! user's data, how fast it runs and how large it is, side by side. The second column is
//! labelled by what the model holds (`crate::inspect::precision`), else by its file name.
//!
//! Agreement is measured as the build's fidelity check measures it (see
//! `kenosis_quantize::compare::agreement`). Latency is the median of interleaved runs of both
//! models on one sample (`kenosis_quantize::compare::latency`), at ONNX Runtime's full graph
//! optimizations, as programs run them.
//!
//! Below the table, the ops that lose the most fidelity, one line each: the activations
//! both models share compared tensor by tensor on the first few samples, as ONNX Runtime's
//! QDQ debugging tool does (see `kenosis_quantize::compare::attribute`).

use std::path::{Path, PathBuf};

use kenosis_quantize::compare::{self, Attribution, Model, OpLoss};
use kenosis_quantize::samples::input_specs;
use kenosis_quantize::{Calibration, QuantizeOptions};
use serde::Serialize;

use crate::error::Result;
use crate::format::Format;
use crate::inspect::megabytes;
use crate::samples::DataSource;

/// The width of the table's two model columns, wider for a longer label.
const COLUMN: usize = 12;

/// The ops listed as losing the most fidelity, at most.
const TOP_OPS: usize = 5;

/// The arguments of `kenosis validate`.
#[derive(clap::Args)]
pub struct Args {
    /// The FP32 original
    fp32: PathBuf,
    /// The model to check against it: an INT8 artifact, a cast FP16 or BF16 model, ...
    #[arg(value_name = "OTHER")]
    int8: PathBuf,
    /// A folder of `.npy` samples, laid out as for calibration (one subfolder per input for
    /// several inputs); default: synthetic inputs, which do not predict agreement on real
    /// data
    #[arg(long, value_name = "DIR", conflicts_with_all = crate::samples::CONFLICTS)]
    data: Option<PathBuf>,
    /// Images or text as samples
    #[command(flatten)]
    samples: crate::samples::SampleArgs,
    /// Timed runs of each model for the latency (interleaved, median)
    #[arg(long, value_name = "N", default_value_t = 20)]
    timed: usize,
    /// Intra-op threads of both models' sessions while timed (as a program sets them with
    /// `set_intra_threads`, or a build with `intra_threads`)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Print lines for people (text) or one JSON document for scripts (see
    /// docs/cli-json.md)
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// What `kenosis validate --format json` prints (see `docs/cli-json.md`). The second model
/// is called `int8` as in the build's report, whatever it holds (`int8_label` says what).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validation {
    /// The FP32 original as given.
    pub fp32_path: String,
    /// The model checked against it as given.
    pub int8_path: String,
    /// What it holds (`INT8`, `FP16`, `INT8+FP16`, ...), else its file name.
    pub int8_label: String,
    /// The FP32 file's size in bytes.
    pub size_fp32: usize,
    /// The other file's size in bytes.
    pub size_int8: usize,
    /// Where the samples came from.
    pub data: DataSource,
    /// Agreement on the samples.
    pub fidelity: Fidelity,
    /// Latency of both models.
    pub speed: Speed,
    /// The ops losing the most fidelity; `null` when the models share no intermediate
    /// tensor name.
    pub op_losses: Option<OpLosses>,
}

/// Agreement, named as the build report's `fidelity`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fidelity {
    /// Samples compared.
    pub samples: usize,
    /// False when the FP32 model's first compared output does not depend on the samples
    /// (one value repeated, or the same on every sample: saturated), so that the figures
    /// say nothing about the model; `not_informative` says why.
    pub informative: bool,
    /// Why the figures are not informative; `null` when they are.
    pub not_informative: Option<String>,
    /// The figures.
    pub measured: Measured,
}

/// Agreement figures, named as the build report's `fidelity.measured`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measured {
    /// Mean over samples of each sample's worst output cosine.
    pub mean_cosine: f64,
    /// One-sided 95% lower confidence bound of `mean_cosine`: mean − 1.645·s/√n (the mean
    /// itself below 2 samples), as the build report computes it.
    pub cosine_lower_bound: f64,
    /// The worst sample's cosine.
    pub min_cosine: f64,
    /// Fraction (0 to 1) of samples whose first float output has the same argmax.
    pub top1_agreement: f64,
}

/// Single-thread latency, named as the build report's `speed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Speed {
    /// Median FP32 latency, milliseconds.
    pub fp32_ms: f64,
    /// Median latency of the other model, milliseconds.
    pub int8_ms: f64,
    /// `fp32_ms / int8_ms`: above 1 when the other model is faster.
    pub speedup: f64,
    /// Interleaved timed runs of each model.
    pub runs: usize,
    /// Intra-op threads each run used (`--threads`).
    pub threads: usize,
    /// The CPU the runs were timed on, as `/proc/cpuinfo` names it.
    pub cpu: String,
}

/// The ops losing the most fidelity, most first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpLosses {
    /// Samples the activations were compared on (the first few).
    pub samples: usize,
    /// Every node losing fidelity, most loss first.
    pub ops: Vec<OpLossJson>,
}

/// One node of [`OpLosses`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpLossJson {
    /// The node's name in the normalized FP32 graph.
    pub node: String,
    /// Its operator.
    pub op_type: String,
    /// Mean cosine of its output with the other model's.
    pub output_cosine: f64,
    /// The lowest mean cosine among its float inputs.
    pub input_cosine: f64,
    /// `input_cosine - output_cosine`.
    pub loss: f64,
}

/// Compares the two models and prints the table.
///
/// # Errors
/// [`crate::error::Error::Kenosis`] when a model cannot be read or run, the samples do not
/// fit the FP32 model's inputs, or the models share no float output.
pub fn run(args: &Args) -> Result<()> {
    let (fp32, size_fp32) = crate::model::read(&args.fp32)?;
    let (int8, size_int8) = crate::model::read(&args.int8)?;
    let normalized = kenosis_quantize::normalize_decoded(&args.fp32, fp32.clone())?;
    let specs = input_specs(normalized.graph());
    // With --images or --text, where the samples came from, as read.
    let mut source = None;
    let calibration = match (args.samples.make(&args.fp32, &specs)?, &args.data) {
        (Some((data, made)), _) => {
            source = Some(made);
            Calibration::Data(data)
        }
        (None, Some(dir)) => Calibration::NpyDir(dir.clone()),
        (None, None) => Calibration::Synthetic,
    };
    let (data, synthetic_image_ranges) = kenosis_quantize::samples::calibration_data(
        &calibration,
        normalized.model(),
        &specs,
        &QuantizeOptions::default(),
        &args.fp32,
    )?;
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let a = Model {
        path: &args.fp32,
        proto: &fp32,
    };
    let b = Model {
        path: &args.int8,
        proto: &int8,
    };
    let bar = crate::progress::bar(2 * data.samples.len(), "");
    let agreement = compare::agreement(a, b, &names, &data.samples, &mut |p| {
        bar.set_message(p.what.to_owned());
        bar.set_position(p.done as u64);
    });
    bar.finish_and_clear();
    let agreement = agreement?;
    let sample = data.samples.last().map(Vec::as_slice).unwrap_or_default();
    // The timing reports no progress per run (`compare::latency` takes no callback).
    let spinner = crate::progress::spinner(&format!(
        "timing {} interleaved runs of each model",
        args.timed.max(1)
    ));
    let threads = usize::from(args.threads);
    let timed = compare::latency(a, b, &names, sample, (args.timed, threads));
    let cpu = kenosis_request::kernels::cpu_name();
    spinner.finish_and_clear();
    let (fp32_ms, int8_ms) = timed?;
    let label = crate::inspect::precision(&int8).unwrap_or_else(|| {
        (args.int8.file_name()).map_or_else(|| "model B".into(), |f| f.to_string_lossy().into())
    });
    // Run after the table is printed in text, so that it shows while the ops are ranked.
    let attribute = || {
        let bar = crate::progress::bar(data.samples.len().min(compare::ATTRIBUTION_SAMPLES), "");
        let fp32 = Model {
            path: &args.fp32,
            proto: normalized.model(),
        };
        let attribution = compare::attribute(fp32, b, &names, &data.samples, &mut |p| {
            bar.set_message(p.what.to_owned());
            bar.set_position(p.done as u64);
        });
        bar.finish_and_clear();
        attribution
    };
    if args.format == Format::Json {
        return crate::format::print_json(&Validation {
            fp32_path: args.fp32.display().to_string(),
            int8_path: args.int8.display().to_string(),
            int8_label: label,
            size_fp32,
            size_int8,
            data: DataSource::new(
                source.as_ref(),
                args.data.as_deref(),
                synthetic_image_ranges,
            ),
            fidelity: Fidelity {
                samples: agreement.samples,
                informative: agreement.uninformative.is_none(),
                not_informative: agreement.uninformative.as_ref().map(ToString::to_string),
                measured: Measured {
                    mean_cosine: agreement.mean_cosine,
                    cosine_lower_bound: agreement.cosine_lower_bound,
                    min_cosine: agreement.min_cosine,
                    top1_agreement: agreement.top1_agree as f64 / agreement.samples.max(1) as f64,
                },
            },
            speed: Speed {
                fp32_ms,
                int8_ms,
                speedup: fp32_ms / int8_ms.max(f64::MIN_POSITIVE),
                runs: args.timed.max(1),
                threads,
                cpu,
            },
            op_losses: match attribute()? {
                Attribution::NoSharedTensors => None,
                Attribution::Ranked { samples, ops, .. } => Some(OpLosses {
                    samples,
                    ops: (ops.iter())
                        .map(|o| OpLossJson {
                            node: o.node.clone(),
                            op_type: o.op_type.clone(),
                            output_cosine: o.output_cosine,
                            input_cosine: o.input_cosine,
                            loss: o.loss(),
                        })
                        .collect(),
                }),
            },
        });
    }
    let source = match (&source, &args.data) {
        (Some(made), _) => made.to_string(),
        (None, Some(dir)) => format!("the samples in {}", dir.display()),
        _ => {
            // Which value range the synthetic images were assumed to span, and from what.
            let ranges: Vec<String> = (synthetic_image_ranges.iter())
                .map(|(input, range)| format!("image input `{input}` in {range}"))
                .collect();
            let assumed = if ranges.is_empty() {
                String::new()
            } else {
                format!(
                    "{}, as inferred from the model's first convolutions; ",
                    ranges.join(", ")
                )
            };
            format!(
                "synthetic samples ({assumed}they do not predict agreement on real data; give \
                 --data, --images or --text)"
            )
        }
    };
    let w = label.len().max(COLUMN);
    println!("{:<10} {:>w$} {:>w$}", "", "FP32", label);
    println!(
        "{:<10} {:>w$} {:>w$}",
        "size",
        megabytes(size_fp32),
        megabytes(size_int8)
    );
    println!(
        "{:<10} {:>w$} {:>w$}   {:.2}x (median of {} interleaved runs, {} on {cpu})",
        "latency",
        format!("{fp32_ms:.3} ms"),
        format!("{int8_ms:.3} ms"),
        fp32_ms / int8_ms.max(f64::MIN_POSITIVE),
        args.timed.max(1),
        if threads == 1 {
            "1 thread".to_owned()
        } else {
            format!("{threads} threads")
        },
    );
    if let Some(why) = &agreement.uninformative {
        // A cosine of 1.0 between two saturated outputs is not a verdict.
        println!(
            "agreement on {} {source}: not informative: {why}, so any model agrees with it \
             (cosine {:.4}); give samples the model responds to",
            agreement.samples, agreement.mean_cosine
        );
    } else {
        println!(
            "agreement on {} {source}: cosine mean {:.4}, worst {:.4}; top-1 agreement {:.1}% \
             ({}/{})",
            agreement.samples,
            agreement.mean_cosine,
            agreement.min_cosine,
            100.0 * agreement.top1_agree as f64 / agreement.samples.max(1) as f64,
            agreement.top1_agree,
            agreement.samples
        );
    }
    let attribution = attribute()?;
    print_op_losses(&attribution, data.samples.len(), &args.int8);
    Ok(())
}

/// The ops losing the most fidelity, one line each, under a line saying how they were
/// measured on `total` samples; or why there are none.
fn print_op_losses(attribution: &Attribution, total: usize, other: &Path) {
    let (samples, ops) = match attribution {
        Attribution::NoSharedTensors => {
            println!(
                "ops losing the most fidelity: per-op attribution needs shared tensor names, \
                 and {} shares no intermediate tensor with the FP32 model",
                other.display()
            );
            return;
        }
        Attribution::Ranked { samples, ops, .. } => (samples, ops),
    };
    let measured = format!(
        "activation cosine with FP32 on the first {samples} of {total} samples, \
         loss = input - output"
    );
    if ops.is_empty() {
        println!("ops losing the most fidelity: none ({measured})");
        return;
    }
    println!("ops losing the most fidelity ({measured}):");
    let width = (ops.iter().take(TOP_OPS))
        .map(|o| o.node.len() + o.op_type.len() + 3)
        .max()
        .unwrap_or_default();
    for op in ops.iter().take(TOP_OPS) {
        let OpLoss {
            node,
            op_type,
            output_cosine,
            input_cosine,
        } = op;
        println!(
            "  {:<width$}  output {output_cosine:.5}  input {input_cosine:.5}  loss {:.5}",
            format!("{node} ({op_type})"),
            op.loss()
        );
    }
}
