//! `kenosis validate FP32 OTHER [--data DIR] [--timed N]`: how close a model (an INT8
//! artifact, a `kenosis cast` FP16 or BF16 model, ...) stays to its FP32 original on the
//! user's data, how fast it runs and how large it is, side by side. The second column is
//! labelled by what the model holds (`crate::inspect::precision`), else by its file name.
//!
//! Agreement is measured as the build's fidelity check measures it (see
//! `kenosis_quantize::fidelity`): per sample the cosine similarity of every float output both
//! models have, the sample counting with its worst output, and the argmax of the first such
//! output. Latency is the median of interleaved single-thread runs of both models on one
//! sample (see `kenosis_quantize::speed`), at ONNX Runtime's full graph optimizations, as
//! programs run them.
//!
//! Below the table, the ops that lose the most fidelity, one line each: the activations
//! both models share compared tensor by tensor on the first few samples, as ONNX Runtime's
//! QDQ debugging tool does (see [`crate::op_loss`]).

use std::path::{Path, PathBuf};

use kenosis_quantize::calibrate::data::input_specs;
use kenosis_quantize::calibrate::session::{sample_inputs, session};
use kenosis_quantize::calibrate::SampleValue;
use kenosis_quantize::onnx::ModelProto;
use kenosis_quantize::{Calibration, QuantizeOptions};
use ort::session::builder::GraphOptimizationLevel;
use prost::Message;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::Format;
use crate::inspect::megabytes;
use crate::op_loss::{Attribution, OpLoss};
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

/// Agreement over the samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// Samples compared.
    pub samples: usize,
    /// Mean over samples of each sample's worst output cosine.
    pub mean_cosine: f64,
    /// The worst sample's.
    pub min_cosine: f64,
    /// Samples whose first float output has the same argmax in both models.
    pub top1_agree: usize,
    /// One-sided 95% lower confidence bound of `mean_cosine` (see [`Measured`]).
    pub cosine_lower_bound: f64,
    /// Why the figures say nothing about the model, when they do not: see [`Uninformative`].
    pub uninformative: Option<Uninformative>,
}

/// Why an agreement says nothing: the FP32 model's first compared output does not depend on
/// the samples, so any model that outputs the same agrees (a saturated Softmax on synthetic
/// inputs of the wrong range, a dead branch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uninformative {
    /// The output holds one value repeated, on every sample.
    Constant {
        /// The output's name.
        output: String,
    },
    /// The output is the same on every sample (two or more samples).
    SameOnEverySample {
        /// The output's name.
        output: String,
    },
}

impl std::fmt::Display for Uninformative {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Constant { output } => write!(
                f,
                "the FP32 model's output `{output}` holds one value repeated on every sample"
            ),
            Self::SameOnEverySample { output } => write!(
                f,
                "the FP32 model's output `{output}` is the same on every sample (saturated)"
            ),
        }
    }
}

/// Relative difference (to the output's largest magnitude) below which two values count as
/// the same in [`uninformative`].
const SAME: f32 = 1e-6;

/// Whether the FP32 outputs `first` (the first compared output of each sample, named
/// `output`) depend on the samples; see [`Uninformative`].
fn uninformative(output: &str, first: &[&Vec<f32>]) -> Option<Uninformative> {
    let scale = |v: &[f32]| {
        v.iter()
            .fold(0f32, |m, x| m.max(x.abs()))
            .max(f32::MIN_POSITIVE)
    };
    let constant = |v: &[f32]| {
        let s = scale(v);
        v.iter().all(|x| (x - v[0]).abs() <= SAME * s)
    };
    if !first.is_empty() && first.iter().all(|v| v.is_empty() || constant(v)) {
        return Some(Uninformative::Constant {
            output: output.to_owned(),
        });
    }
    let base = first.first()?;
    let s = scale(base);
    let same = |v: &&Vec<f32>| {
        v.len() == base.len()
            && v.iter()
                .zip(base.iter())
                .all(|(x, y)| (x - y).abs() <= SAME * s)
    };
    (first.len() >= 2 && first.iter().all(same)).then(|| Uninformative::SameOnEverySample {
        output: output.to_owned(),
    })
}

/// Compares the two models and prints the table.
///
/// # Errors
/// [`Error::Kenosis`] when a model cannot be read or run, or the samples do not fit the
/// FP32 model's inputs; [`Error::Mismatch`] when the models share no float output.
pub fn run(args: &Args) -> Result<()> {
    let (fp32, size_fp32) = crate::model::read(&args.fp32)?;
    let (int8, size_int8) = crate::model::read(&args.int8)?;
    let normalized = kenosis_quantize::pipeline::normalize_decoded(&args.fp32, fp32.clone())?;
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
    let (data, synthetic_image_ranges) = kenosis_quantize::pipeline::calibration_data(
        &calibration,
        normalized.model(),
        &specs,
        &QuantizeOptions::default(),
        &args.fp32,
    )?;
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let agreement = agreement(&args.fp32, &fp32, &args.int8, &int8, &names, &data.samples)?;
    let sample = data.samples.last().map(Vec::as_slice).unwrap_or_default();
    // The timing reports no progress per run (`kenosis_quantize::speed` takes no callback).
    let spinner = crate::progress::spinner(&format!(
        "timing {} interleaved runs of each model",
        args.timed.max(1)
    ));
    let threads = usize::from(args.threads);
    let timed = kenosis_quantize::speed::measure_runs(
        &fp32,
        &int8,
        &names,
        sample,
        &args.fp32,
        (args.timed, threads),
    );
    let cpu = kenosis_request::kernels::cpu_name();
    spinner.finish_and_clear();
    let (fp32_ms, int8_ms) = timed?;
    let label = crate::inspect::precision(&int8).unwrap_or_else(|| {
        (args.int8.file_name()).map_or_else(|| "model B".into(), |f| f.to_string_lossy().into())
    });
    // Run after the table is printed in text, so that it shows while the ops are ranked.
    let attribute = || {
        crate::op_loss::attribute(
            &args.fp32,
            normalized.model(),
            &args.int8,
            &int8,
            &names,
            &data.samples,
        )
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

/// The agreement of `int8` with `fp32` on `samples` (inputs `names`).
///
/// # Errors
/// [`Error::Kenosis`] when ONNX Runtime fails; [`Error::Mismatch`] when the models share no
/// float output.
pub fn agreement(
    fp32_path: &Path,
    fp32: &ModelProto,
    int8_path: &Path,
    int8: &ModelProto,
    names: &[String],
    samples: &[Vec<SampleValue>],
) -> Result<Agreement> {
    let bar = crate::progress::bar(2 * samples.len(), "");
    let outputs = |path: &Path, model: &ModelProto| -> Result<Vec<NamedOutputs>> {
        bar.set_message(format!("running {} on the samples", path.display()));
        let mut s = session(path, model.encode_to_vec(), GraphOptimizationLevel::All, 1)?;
        samples
            .iter()
            .map(|sample| {
                bar.inc(1);
                let inputs = sample_inputs(names, sample, path)?;
                let out = crate::model::run(&mut s, path, &inputs)?;
                Ok(out
                    .iter()
                    .filter_map(|(name, v)| {
                        let (_, values) = v.try_extract_tensor::<f32>().ok()?;
                        Some((name.to_owned(), values.to_vec()))
                    })
                    .collect())
            })
            .collect()
    };
    let ran = outputs(fp32_path, fp32).and_then(|a| Ok((a, outputs(int8_path, int8)?)));
    bar.finish_and_clear();
    let (a, b) = ran?;
    let mut cosines = Vec::new();
    let mut top1_agree = 0;
    // The first compared output of FP32 on each sample, and its name.
    let mut first_outputs: Vec<&Vec<f32>> = Vec::new();
    let mut first_name = "";
    for (a, b) in a.iter().zip(&b) {
        let shared: Vec<(&str, &Vec<f32>, &Vec<f32>)> = (a.iter())
            .filter_map(|(name, x)| {
                (b.iter().find(|(n, _)| n == name)).map(|(_, y)| (name.as_str(), x, y))
            })
            .collect();
        let Some(&(name, first_a, first_b)) = shared.first() else {
            return Err(Error::Mismatch(format!(
                "{} and {} share no float output to compare",
                fp32_path.display(),
                int8_path.display()
            )));
        };
        let worst = (shared.iter())
            .map(|(_, x, y)| kenosis_quantize::fidelity::cosine(x, y))
            .fold(f64::INFINITY, f64::min);
        cosines.push(worst);
        top1_agree += usize::from(argmax(first_a) == argmax(first_b));
        first_outputs.push(first_a);
        first_name = name;
    }
    let n = cosines.len().max(1) as f64;
    let mean_cosine = cosines.iter().sum::<f64>() / n;
    let cosine_lower_bound = if cosines.len() < 2 {
        mean_cosine
    } else {
        let variance = (cosines.iter())
            .map(|c| (c - mean_cosine).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        mean_cosine - 1.645 * variance.sqrt() / n.sqrt()
    };
    Ok(Agreement {
        samples: cosines.len(),
        mean_cosine,
        min_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
        top1_agree,
        cosine_lower_bound,
        uninformative: uninformative(first_name, &first_outputs),
    })
}

/// One sample's float outputs, by output name.
type NamedOutputs = Vec<(String, Vec<f32>)>;

fn argmax(v: &[f32]) -> Option<usize> {
    (v.iter().enumerate())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
}
