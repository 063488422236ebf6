//! `kenosis quantize MODEL -o OUT [--calibration DIR] [key=value ...]`: one model quantized
//! as a build quantizes an `include_quantized!` call with the same options.

use std::path::{Path, PathBuf};

use kenosis_options::Options;
use kenosis_quantize::{Calibration, QuantizeOptions, Report};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::Format;
use crate::samples::DataSource;

/// The arguments of `kenosis quantize`.
#[derive(clap::Args)]
pub struct Args {
    /// The FP32 ONNX model
    model: PathBuf,
    /// Where to write the INT8 model (its JSON report goes beside it, with `.json`)
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
    /// A folder of `.npy` calibration samples, one per file (one subfolder per input for
    /// several inputs); default: synthetic inputs
    #[arg(long, value_name = "DIR", conflicts_with_all = crate::samples::CONFLICTS)]
    calibration: Option<PathBuf>,
    /// Images or text as calibration samples
    #[command(flatten)]
    samples: crate::samples::SampleArgs,
    /// Options as in `include_quantized!`, e.g. `method="mse"` `per_channel=false`
    #[arg(value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Print lines for people (text) or one JSON document for scripts: the paths written,
    /// where the samples came from, and the build report (see docs/cli-json.md)
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// What `kenosis quantize --format json` prints (see `docs/cli-json.md`).
#[derive(Debug, Serialize)]
pub struct Quantization<'a> {
    /// The FP32 model as given.
    pub source: String,
    /// The INT8 artifact written.
    pub artifact_path: String,
    /// Its JSON report, written beside it.
    pub report_path: String,
    /// Where the calibration samples came from.
    pub data: DataSource,
    /// The report, as written to `report_path`.
    pub report: &'a Report,
}

/// Quantizes `args.model` and writes the artifact and its report.
///
/// # Errors
/// [`Error::Option`] for an option that does not parse; [`Error::Kenosis`] when the model
/// cannot be quantized (the message names the file); [`Error::Write`].
pub fn run(args: &Args) -> Result<()> {
    let mut layers = Options::default();
    for arg in &args.options {
        layers.merge(&parse_option(arg)?);
    }
    // Decoded once, the encoded bytes dropped before quantizing (peak memory).
    let (model, size) = crate::model::read(&args.model)?;
    let empty = kenosis_quantize::model::GraphProto::default();
    let inputs = kenosis_quantize::samples::input_specs(model.graph.as_ref().unwrap_or(&empty));
    let made = args.samples.make(&args.model, &inputs)?;
    let mut source = None;
    let calibration = match made {
        Some((data, made)) => {
            if args.format == Format::Text {
                println!("calibrating on {} {made}", data.samples.len());
            }
            source = Some(made);
            Calibration::Data(data)
        }
        None => match (&args.calibration, &layers.calibration) {
            (Some(dir), _) => Calibration::NpyDir(dir.clone()),
            (None, Some(dir)) => Calibration::NpyDir(PathBuf::from(dir)),
            (None, None) => Calibration::Synthetic,
        },
    };
    let options = QuantizeOptions::for_host(&layers);
    // Each stage as the library begins it: the spinner's message on a terminal, a line
    // otherwise.
    let name = args.model.display().to_string();
    let spinner = crate::progress::spinner(&format!("quantizing {name}"));
    let quantized = kenosis_quantize::quantize_decoded_with_progress(
        &args.model,
        model,
        size,
        &calibration,
        &options,
        &|stage| crate::progress::stage(&spinner, &name, stage),
    );
    spinner.finish_and_clear();
    let quantized = quantized?;
    crate::model::write_atomic(&args.output, &quantized.bytes)?;
    let report = serde_json::to_vec_pretty(&quantized.report)
        .map_err(|e| Error::Mismatch(format!("the report does not serialize: {e}")))?;
    let report_path = report_path(&args.output);
    crate::model::write_atomic(&report_path, &report)?;
    if args.format == Format::Json {
        let npy = match &calibration {
            Calibration::NpyDir(dir) => Some(dir.as_path()),
            _ => None,
        };
        return crate::format::print_json(&Quantization {
            source: args.model.display().to_string(),
            artifact_path: args.output.display().to_string(),
            report_path: report_path.display().to_string(),
            data: DataSource::new(
                source.as_ref(),
                npy,
                quantized.report.synthetic_image_ranges.clone(),
            ),
            report: &quantized.report,
        });
    }
    println!("{}", quantized.report.summary_line());
    if quantized.report.calibration_synthetic {
        // The line names the range assumed; say how to give real samples instead.
        println!(
            "the ranges come from synthetic samples: give --calibration, --images or --text \
             for ranges that hold on real data"
        );
    }
    println!(
        "wrote {} and {}",
        args.output.display(),
        report_path.display()
    );
    Ok(())
}

/// The report's path for the artifact `out`: `out` with the extension `json`.
fn report_path(out: &Path) -> PathBuf {
    out.with_extension("json")
}

/// One option argument in `include_quantized!` syntax (`key = value`); a value that does not
/// parse is retried as a string literal, so that `method=mse` means `method = "mse"`.
///
/// # Errors
/// [`Error::Option`] with the parser's message for the argument as written.
fn parse_option(arg: &str) -> Result<Options> {
    let first = match Options::parse_str(arg) {
        Ok(options) => return Ok(options),
        Err(e) => e,
    };
    if let Some((key, value)) = arg.split_once('=') {
        let quoted = format!(
            "{} = \"{}\"",
            key.trim(),
            value.trim().replace('\\', "\\\\").replace('"', "\\\"")
        );
        if let Ok(options) = Options::parse_str(&quoted) {
            return Ok(options);
        }
    }
    Err(Error::Option {
        arg: arg.to_owned(),
        message: first.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_option;

    #[test]
    fn options_parse_as_written_or_with_a_bare_string() {
        let written = parse_option("method = \"mse\"").expect("parses");
        let bare = parse_option("method=mse").expect("parses");
        assert_eq!(written, bare);
        assert_eq!(bare.canonical(), "method = \"mse\"");
        assert_eq!(
            parse_option("per_channel=false")
                .expect("parses")
                .canonical(),
            "per_channel = false"
        );
        let err = parse_option("no_such_option=1").expect_err("unknown");
        assert!(err.to_string().contains("no_such_option"), "{err}");
    }
}
