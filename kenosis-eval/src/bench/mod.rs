//! The benchmark behind `cargo xtask bench`: Kenosis INT8 vs FP32 vs ONNX Runtime's own
//! quantizer on the shared real models, for fidelity, latency, size and quantization time.
//!
//! Per model: calibrate on the first 100 images (sorted) of its image set, evaluate on the
//! rest; quantize with Kenosis (default options, plus each calibration method for the
//! classifiers) and with ORT's `quantize_static` (Python, in a venv); one fidelity pass over
//! the evaluation images for every candidate against FP32; interleaved single-thread latency
//! of FP32, Kenosis and ORT on one fixed input; Conv fusion counted in ORT's saved optimized
//! graphs; Kenosis's quantization time against its bound (max(30 s, 2x ORT's)) and, in child
//! processes, its peak memory against 4x the FP32 file plus an ONNX Runtime baseline. Then
//! the fetched model families' INT8 vs FP32 latency, the new families on rendered documents
//! (`families`: YOLOv8n DocLayNet, PP-OCRv6 small rec and det, each with its task metric,
//! against ORT's static and dynamic quantizers), a vision transformer (`vit`: ViT-S/16 with
//! seeded random weights on ImageNet images, against ORT's quantizers; `--only-vit` runs it
//! alone) and the peak memory of quantizing the transformer. Results go to
//! `<out>/bench.json` and `<out>/bench.md`.

pub mod coverage;
pub mod families;
pub mod measure;
pub mod memory;
pub mod models;
pub mod ort_quantizer;
pub mod report;
pub mod transformer;
pub mod vit;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use kenosis_quantize::calibrate::Method;
use kenosis_quantize::{quantize, Calibration, QuantizeOptions, Quantized};
use ndarray::Array4;

use measure::Fidelity;
use models::ModelSpec;
use report::{
    Bench, Fp32Result, LatencySetup, MethodResult, ModelResult, OrtQuantizerSetup, QuantResult,
    TargetResult,
};

/// Calibration images per model (the first ones in sorted order).
const CALIBRATION_IMAGES: usize = 100;

/// Benchmark Kenosis INT8 against FP32 and ONNX Runtime's quantizer on the shared models
#[derive(Parser, Debug)]
#[command(name = "bench")]
pub struct Args {
    /// Fewer evaluation images (100) and latency runs (20) for a quick look
    #[arg(long)]
    quick: bool,
    /// Models to run, comma-separated: efficientnet-lite0, squeezenet1.0, yolox-nano
    /// (file stems and unique prefixes work too); default all
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    models: Vec<String>,
    /// Python with onnxruntime==1.31.1, onnx and numpy for the ORT-quantizer column
    /// (default: TARGET_FOLDER/bench-venv/bin/python if present)
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Leave the ORT-quantizer column out, giving this reason in the report
    #[arg(long, value_name = "REASON", conflicts_with = "python")]
    no_ort_quantizer: Option<String>,
    /// Output folder (default: TARGET_FOLDER/bench)
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Evaluation images per model (default: all not used for calibration; 100 with --quick)
    #[arg(long, value_name = "N")]
    eval_images: Option<usize>,
    /// Timed latency runs per model (default 100; 20 with --quick)
    #[arg(long, value_name = "N")]
    runs: Option<usize>,
    /// Worker threads of the fidelity pass (each with single-threaded sessions)
    #[arg(long, value_name = "N", default_value_t = 2)]
    fidelity_threads: usize,
    /// Skip the calibration-method comparison
    #[arg(long)]
    skip_methods: bool,
    /// Skip the peak-memory measurements (every quantized model's, in child processes, and
    /// MiniLM's from `fetch-models.sh`, found in $KENOSIS_MODELS or
    /// TARGET_FOLDER/kenosis-models)
    #[arg(long)]
    skip_memory: bool,
    /// Skip the INT8 vs FP32 latency of the fetched models (PP-OCR, MiniLM, Silero VAD)
    #[arg(long)]
    skip_coverage: bool,
    /// Skip the shared CNN models (EfficientNet-Lite0, SqueezeNet, YOLOX-Nano), running only
    /// the sections of fetched models
    #[arg(long, conflicts_with = "models")]
    skip_models: bool,
    /// Skip the transformer encoders against ORT's dynamic quantizer (real prose)
    #[arg(long)]
    skip_transformers: bool,
    /// Only these transformer encoders (model file names or their prefixes, comma-separated,
    /// e.g. `all-mpnet`); default all
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    encoders: Vec<String>,
    /// Skip the new model families on rendered documents (YOLOv8n DocLayNet, PP-OCRv6 small
    /// rec and det, from `fetch-models.sh`)
    #[arg(long)]
    skip_families: bool,
    /// Skip the vision transformer (ViT-S/16 with seeded random weights, built into the
    /// fetched-models folder when absent) against ORT's quantizers on ImageNet images
    #[arg(long)]
    skip_vit: bool,
    /// Only the vision transformer's section (every other section skipped)
    #[arg(long, conflicts_with = "skip_vit")]
    only_vit: bool,
    /// Only these families (model file names or their prefixes, comma-separated, e.g.
    /// `ppocr-v6-rec`); default all
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    families: Vec<String>,
    /// Synthetic calibration samples of the peak-memory measurement
    #[arg(long, value_name = "N", default_value_t = 100)]
    memory_samples: usize,
    /// Only this machine's kernel costs (`kenosis_quantize::kernel_bench`, the micro-benchmarks
    /// a build for this machine's CPU class runs), written to OUT_DIR/kernel-costs.md
    #[arg(long)]
    kernel_costs_only: bool,
}

/// The model whose peak memory while quantizing is measured (a transformer: the largest
/// weights of the covered models).
const MEMORY_MODEL: &str = "paraphrase-MiniLM-L3-v2.onnx";

/// The calibration methods compared on the classifiers.
const METHODS: [Method; 4] = [
    Method::MinMax,
    Method::Percentile(99.99),
    Method::Mse,
    Method::Entropy,
];

struct Ctx {
    shared: PathBuf,
    out: PathBuf,
    python: Option<PathBuf>,
    eval_images: Option<usize>,
    warmup: usize,
    runs: usize,
    fidelity_threads: usize,
    methods: bool,
    memory: bool,
    started: Instant,
    load_at_start: Option<String>,
}

impl Ctx {
    fn log(&self, msg: impl AsRef<str>) {
        eprintln!(
            "bench [{:>6.1}s] {}",
            self.started.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

/// Runs the benchmark; `Err` only when it cannot run at all.
pub fn main() -> Result<(), String> {
    let started = Instant::now();
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(memory::CHILD_FLAG) {
        return memory::child(&argv[2..]);
    }
    if argv.get(1).map(String::as_str) == Some(memory::BASELINE_FLAG) {
        return memory::baseline_child(&argv[2..]);
    }
    let args = Args::parse();
    if args.kernel_costs_only {
        let out =
            (args.out_dir.clone()).unwrap_or_else(|| kenosis_eval::target_dir().join("bench"));
        return kernel_costs(&out);
    }
    let shared = kenosis_eval::shared_dir()
        .ok_or("shared data not found: put it at ../shared or set KENOSIS_SHARED_DIR")?;
    let specs: Vec<ModelSpec> = if args.skip_models || args.only_vit {
        Vec::new()
    } else if args.models.is_empty() {
        models::MODELS.to_vec()
    } else {
        args.models
            .iter()
            .map(|name| {
                models::find(name).ok_or_else(|| {
                    let known: Vec<&str> = models::MODELS.iter().map(|m| m.key).collect();
                    format!("unknown model {name:?}; known: {}", known.join(", "))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let out = args
        .out_dir
        .clone()
        .unwrap_or_else(|| kenosis_eval::target_dir().join("bench"));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;

    let (python, note) = match (&args.python, &args.no_ort_quantizer) {
        (_, Some(reason)) => (None, Some(reason.clone())),
        (Some(p), None) => (Some(p.clone()), None),
        (None, None) => {
            let p = kenosis_eval::target_dir().join("bench-venv/bin/python");
            if p.exists() {
                (Some(p), None)
            } else {
                (
                    None,
                    Some(format!(
                        "no --python given and {} does not exist (`cargo xtask bench` creates it)",
                        p.display()
                    )),
                )
            }
        }
    };
    if let Some(n) = &note {
        eprintln!("bench: warning: running without the ORT-quantizer column: {n}");
    }

    let ctx = Ctx {
        shared,
        out: out.clone(),
        python: python.clone(),
        eval_images: args.eval_images.or(args.quick.then_some(100)),
        warmup: if args.quick { 3 } else { 10 },
        runs: args
            .runs
            .unwrap_or(if args.quick { 20 } else { 100 })
            .max(1),
        fidelity_threads: args.fidelity_threads.max(1),
        methods: !args.skip_methods,
        memory: !args.skip_memory,
        started,
        load_at_start: load_average(),
    };

    let mut results = Vec::new();
    for spec in &specs {
        ctx.log(format!("== {} ==", spec.key));
        results.push(bench_model(spec, &ctx));
        // Written after each model, so a long run leaves partial results behind.
        let bench = assemble(&args, &ctx, python.clone(), note.clone(), &results);
        write(&bench, &out)?;
    }
    let mut bench = assemble(&args, &ctx, python, note, &results);
    let fetched = kenosis_eval::fetched_models_dir();
    let others = !args.only_vit;
    if others && !args.skip_coverage {
        bench.coverage = coverage::measure(&fetched, ctx.warmup, ctx.runs, |m| ctx.log(m));
        write(&bench, &out)?;
    }
    if others && !args.skip_families {
        let setup = families::Setup {
            dir: &fetched,
            python: ctx.python.as_deref(),
            out: &ctx.out,
            quick: args.quick,
            warmup: ctx.warmup,
            runs: ctx.runs,
            memory: ctx.memory,
            only: &args.families,
        };
        bench.families = families::measure(&setup, |m| ctx.log(m));
        write(&bench, &out)?;
    }
    if others && !args.skip_transformers {
        bench.transformers = transformer::measure(
            &fetched,
            ctx.python.as_deref(),
            &ctx.out,
            &args.encoders,
            ctx.warmup,
            ctx.runs,
            |m| ctx.log(m),
        );
        write(&bench, &out)?;
    }
    if !args.skip_vit {
        ctx.log("== vision transformer ==");
        bench.vit = Some(vit::measure(
            &ctx.shared,
            &fetched,
            ctx.python.as_deref(),
            &ctx.out,
            ctx.warmup,
            ctx.runs,
            |m| ctx.log(m),
        ));
        write(&bench, &out)?;
    }
    if others && !args.skip_memory {
        let model = fetched.join(MEMORY_MODEL);
        ctx.log(format!("== peak memory: {} ==", model.display()));
        bench.memory = Some(memory::measure(
            &model,
            memory::Samples::Synthetic(args.memory_samples),
        ));
    }
    bench.total_seconds = ctx.started.elapsed().as_secs_f64();
    write(&bench, &out)?;
    println!("{}", bench.markdown());
    eprintln!(
        "bench: wrote {} and {} in {:.0} s",
        out.join("bench.json").display(),
        out.join("bench.md").display(),
        bench.total_seconds
    );
    Ok(())
}

fn assemble(
    args: &Args,
    ctx: &Ctx,
    python: Option<PathBuf>,
    note: Option<String>,
    results: &[ModelResult],
) -> Bench {
    Bench {
        command: std::env::args().collect(),
        quick: args.quick,
        onnxruntime: onnxruntime_version(),
        cpu: cpu_name(),
        cpu_flags: kernel_flags(),
        logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average: [ctx.load_at_start.clone(), load_average()],
        calibration_images: CALIBRATION_IMAGES,
        fidelity_threads: ctx.fidelity_threads,
        latency_setup: LatencySetup {
            warmup_rounds: ctx.warmup,
            runs: ctx.runs,
            intra_op_threads: 1,
            optimization_level: "ORT_ENABLE_ALL",
            input: "the first evaluation image",
            order: "interleaved: each round runs every model once, rotating which goes first",
        },
        default_method: QuantizeOptions::default().method.canonical(),
        ort_quantizer: OrtQuantizerSetup {
            available: python.is_some(),
            python,
            settings: ort_quantizer::SETTINGS,
            note,
        },
        models: results.to_vec(),
        coverage: Vec::new(),
        transformers: Vec::new(),
        families: Vec::new(),
        vit: None,
        memory: None,
        total_seconds: ctx.started.elapsed().as_secs_f64(),
    }
}

fn write(bench: &Bench, out: &Path) -> Result<(), String> {
    let json = serde_json::to_string_pretty(bench).expect("serializes");
    for (name, text) in [
        ("bench.json", json),
        ("bench.md", bench.markdown()),
        ("latency-cpu.md", bench.cpu_latency_markdown()),
    ] {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The loaded ONNX Runtime library's version (from its mapped file name, e.g.
/// `libonnxruntime.so.1.31.1`) and build string.
fn onnxruntime_version() -> String {
    let mapped = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find_map(|p| p.rsplit('/').next()?.strip_prefix("libonnxruntime.so."))
                .map(str::to_owned)
        });
    let version = mapped.unwrap_or_else(|| format!("1.{}.x", ort::MINOR_VERSION));
    format!("{version} ({})", ort::info().trim())
}

fn load_average() -> Option<String> {
    let l = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// Measures this machine's kernel costs as a build for its own CPU class does
/// (`kenosis_quantize::kernel_bench::measure`) and writes them beside the table row of its class
/// to `out/kernel-costs.md`.
fn kernel_costs(out: &Path) -> Result<(), String> {
    use kenosis_request::kernel_costs::KernelCosts;
    use kenosis_request::kernels::{IntegerKernels, TargetCpu};
    let vnni = IntegerKernels::of_host() == IntegerKernels::Exact;
    let cpu = TargetCpu::of_target("", if vnni { "avx512vnni" } else { "" });
    let table = KernelCosts::of(cpu);
    let started = Instant::now();
    let m = kenosis_quantize::kernel_bench::measure(&table, Path::new("kernel_bench"))
        .map_err(|e| e.to_string())?;
    let mut text = format!(
        "## Kernel costs\n\n{} ({}), ONNX Runtime {}, 1 thread, measured in {:.1} s by \
         `kenosis_quantize::kernel_bench` (the micro-benchmarks a build for this CPU class runs; \
         `docs/design.md`, \"Measured kernel costs\"). In FP32 dense multiply-adds, beside the \
         `{}` row of `kenosis_request::kernel_costs`:\n\n| cost | measured | table |\n|---|---:|---:|\n",
        cpu_name().unwrap_or_else(|| "unknown CPU".into()),
        kernel_flags().join(", "),
        onnxruntime_version(),
        started.elapsed().as_secs_f64(),
        cpu.canonical(),
    );
    for ((name, measured), row) in
        (KernelCosts::NAMES.iter().zip(m.costs.values())).zip(table.values())
    {
        let kept = if m.kept_from_table.iter().any(|k| k == name) {
            " (implausible: the table's)"
        } else {
            ""
        };
        text.push_str(&format!("| {name} | {measured:.2}{kept} | {row:.2} |\n"));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let path = out.join("kernel-costs.md");
    std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    print!("{text}");
    Ok(())
}

/// The flags of `/proc/cpuinfo` that choose ONNX Runtime's integer kernels.
fn kernel_flags() -> Vec<String> {
    const KERNEL_FLAGS: [&str; 6] = [
        "avx2",
        "avx512bw",
        "avx512_vnni",
        "avx_vnni",
        "asimddp",
        "i8mm",
    ];
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = (info.lines())
        .find(|l| l.starts_with("flags") || l.starts_with("Features"))
        .and_then(|l| l.split(':').nth(1))
        .map(|f| f.split_whitespace().collect())
        .unwrap_or_default();
    (KERNEL_FLAGS.iter())
        .filter(|k| flags.contains(k))
        .map(|k| (*k).to_owned())
        .collect()
}

fn cpu_name() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
}

/// A quantized model waiting for the fidelity pass.
struct Candidate {
    bytes: Vec<u8>,
    slot: Slot,
}

#[derive(Clone, Copy)]
enum Slot {
    Kenosis,
    Ort,
    Target,
    Method(usize),
}

fn bench_model(spec: &ModelSpec, ctx: &Ctx) -> ModelResult {
    let started = Instant::now();
    let model_path = ctx.shared.join("models").join(spec.file);
    let dir = ctx.out.join(spec.key);
    let _ = std::fs::create_dir_all(&dir);
    let files = spec.files(&ctx.shared);
    let (calib_files, rest) = files.split_at(CALIBRATION_IMAGES.min(files.len()));
    let eval_files = &rest[..ctx.eval_images.unwrap_or(rest.len()).min(rest.len())];
    let mut result = ModelResult {
        model: spec.key,
        file: spec.file,
        image_set: spec.image_set(),
        preprocessing: spec.preprocessing,
        metric: if spec.classifier {
            "top-1 agreement with FP32, cosine of the output"
        } else {
            "cosine of the raw output [1,3549,85] (top-1 not meaningful: n/a); secondary: \
             cosine of the objectness + class score columns 4..85"
        },
        calibration_images: calib_files.len(),
        evaluation_images: eval_files.len(),
        fp32: Fp32Result {
            size_bytes: 0,
            convs: 0,
            latency: None,
        },
        kenosis: QuantResult::default(),
        ort: QuantResult::default(),
        top1_kenosis_minus_ort: None,
        kenosis_over_ort_latency: None,
        methods: Vec::new(),
        target: None,
        threads: Vec::new(),
        time_bound: None,
        memory: None,
        error: None,
        seconds: 0.0,
    };
    let fp32 = match std::fs::read(&model_path) {
        Ok(b) => b,
        Err(e) => {
            result.error = Some(format!("{}: {e}", model_path.display()));
            return result;
        }
    };
    result.fp32.size_bytes = fp32.len();
    result.fp32.convs = kenosis_eval::model_op_types(&model_path, &fp32)
        .iter()
        .filter(|o| *o == "Conv")
        .count();
    if eval_files.is_empty() {
        result.error = Some(format!(
            "only {} images: none left to evaluate",
            files.len()
        ));
        return result;
    }

    ctx.log(format!("loading {} calibration images", calib_files.len()));
    let calib: Vec<Array4<f32>> = calib_files.iter().map(|f| spec.load(f)).collect();
    let calib_data = kenosis_eval::calibration(&calib);
    let mut candidates = Vec::new();

    // Kenosis, default options.
    let default = QuantizeOptions::default();
    let (kenosis, q) = kenosis_quantize(ctx, &model_path, &fp32, &calib_data, &default);
    result.kenosis = kenosis;
    if let Some(Quantized { bytes, .. }) = q {
        let p = dir.join("kenosis.int8.onnx");
        let _ = std::fs::write(&p, &bytes);
        result.kenosis.artifact = Some(p);
        candidates.push(Candidate {
            bytes,
            slot: Slot::Kenosis,
        });
    }

    // Kenosis, each calibration method (classifiers: fidelity only).
    if spec.classifier && ctx.methods {
        for (i, &method) in METHODS.iter().enumerate() {
            let is_default = method == default.method;
            let mut r = MethodResult {
                method: method.canonical(),
                is_default,
                status: String::new(),
                error: None,
                quantize_seconds: None,
                fidelity: None,
            };
            if is_default {
                // Same options as the main Kenosis column: its fidelity is copied below.
                r.status = result.kenosis.status.clone();
                r.error = result.kenosis.error.clone();
                r.quantize_seconds = result.kenosis.quantize_seconds;
            } else {
                let options = QuantizeOptions {
                    method,
                    ..QuantizeOptions::default()
                };
                let (column, q) = kenosis_quantize(ctx, &model_path, &fp32, &calib_data, &options);
                r.status = column.status;
                r.error = column.error;
                r.quantize_seconds = column.quantize_seconds;
                if let Some(Quantized { bytes, .. }) = q {
                    candidates.push(Candidate {
                        bytes,
                        slot: Slot::Method(i),
                    });
                }
            }
            result.methods.push(r);
        }
    }

    // Kenosis with a fidelity target: which ops it keeps FP32, and what that costs.
    if let Some(min_cosine) = spec.fidelity_target {
        let options = QuantizeOptions {
            min_cosine: Some(min_cosine),
            ..QuantizeOptions::default()
        };
        let (column, q) = kenosis_quantize(ctx, &model_path, &fp32, &calib_data, &options);
        let built = q.as_ref().and_then(|q| q.report.fidelity.as_ref());
        result.target = Some(TargetResult {
            min_cosine,
            build_cosine: built.map(|f| f.measured.mean_cosine),
            build_cosine_bound: built.map(|f| f.measured.cosine_lower_bound),
            build_samples: built.map(|f| f.samples),
            kept_fp32: built.map(|f| f.kept_fp32.clone()).unwrap_or_default(),
            result: column,
            latency_vs_default: None,
        });
        if let Some(Quantized { bytes, .. }) = q {
            candidates.push(Candidate {
                bytes,
                slot: Slot::Target,
            });
        }
    }
    drop(calib_data);

    // ONNX Runtime's quantizer.
    result.ort = match &ctx.python {
        None => QuantResult::skipped("ORT quantizer not available (see ort_quantizer.note)"),
        Some(python) => {
            ctx.log("ORT quantize_static (Python)");
            let out = dir.join("ort.int8.onnx");
            match ort_quantizer::quantize(python, &model_path, &calib, &out) {
                Ok(q) => {
                    ctx.log(format!("ORT quantizer: {:.1} s", q.seconds));
                    let mut notes = q.steps;
                    notes.push(format!(
                        "Python process {:.1} s including start-up",
                        q.process_seconds
                    ));
                    let r = QuantResult {
                        status: "ok".into(),
                        artifact: Some(out),
                        size_bytes: Some(q.bytes.len()),
                        quantize_seconds: Some(q.seconds),
                        notes,
                        ..Default::default()
                    };
                    candidates.push(Candidate {
                        bytes: q.bytes,
                        slot: Slot::Ort,
                    });
                    r
                }
                Err(f) => {
                    ctx.log(format!("ORT quantizer failed: {}", f.error));
                    let mut r = QuantResult::failed(f.error);
                    r.notes = f.steps;
                    r
                }
            }
        }
    };
    result.time_bound = (result.kenosis.quantize_seconds)
        .map(|k| report::TimeBound::new(k, result.ort.quantize_seconds));
    if ctx.memory {
        ctx.log("peak memory of Kenosis quantizing (child processes)");
        result.memory = Some(memory::measure(&model_path, memory::Samples::Real(&calib)));
    }
    drop(calib);

    // Fidelity: every candidate against FP32, one pass over the evaluation images.
    ctx.log(format!(
        "fidelity of {} model(s) on {} images, {} worker(s)",
        candidates.len(),
        eval_files.len(),
        ctx.fidelity_threads
    ));
    let load = |p: &Path| spec.load(p);
    let blobs: Vec<&[u8]> = candidates.iter().map(|c| c.bytes.as_slice()).collect();
    match measure::fidelity(
        &fp32,
        &blobs,
        eval_files,
        &load,
        spec.classifier,
        spec.score_columns,
        ctx.fidelity_threads,
    ) {
        Err(e) => {
            result.error = Some(format!("FP32 model: {e}"));
            result.seconds = started.elapsed().as_secs_f64();
            return result;
        }
        Ok(fids) => {
            let mut agreed = (None, None);
            for (c, f) in candidates.iter().zip(fids) {
                let f = f.map(|(f, each)| {
                    match c.slot {
                        Slot::Kenosis => agreed.0 = Some(each),
                        Slot::Ort => agreed.1 = Some(each),
                        _ => {}
                    }
                    f
                });
                assign_fidelity(&mut result, c.slot, f);
            }
            if let (true, Some(k), Some(o)) = (spec.classifier, agreed.0, agreed.1) {
                result.top1_kenosis_minus_ort = measure::PairedTop1::new(&k, &o);
            }
        }
    }
    if let Some(r) = result.methods.iter_mut().find(|r| r.is_default) {
        r.fidelity = result.kenosis.fidelity;
    }
    for (name, r) in [("Kenosis", &result.kenosis), ("ORT", &result.ort)] {
        if let Some(f) = r.fidelity {
            ctx.log(format!("  {name:<18} {}", describe(&f)));
        }
    }
    if let Some(p) = result.top1_kenosis_minus_ort {
        ctx.log(format!(
            "  Kenosis - ORT top-1 {}",
            report::describe_paired(&p)
        ));
    }
    for r in result.methods.iter().filter(|r| !r.is_default) {
        if let Some(f) = r.fidelity {
            ctx.log(format!("  {:<18} {}", r.method, describe(&f)));
        }
    }

    // Latency, FP32 vs Kenosis vs ORT, interleaved; Conv fusion from the saved graphs.
    ctx.log(format!(
        "latency: {} warm-up + {} runs, interleaved",
        ctx.warmup, ctx.runs
    ));
    let x = spec.load(&eval_files[0]);
    let mut fp32_session = match measure::session(&fp32, None) {
        Ok(s) => s,
        Err(e) => {
            result.error = Some(format!("FP32 model: {e}"));
            return result;
        }
    };
    let mut kenosis_session = None;
    let mut ort_session = None;
    let mut target_session = None;
    for c in &candidates {
        let (name, target, column) = match (c.slot, result.target.as_mut()) {
            (Slot::Kenosis, _) => ("kenosis", &mut kenosis_session, &mut result.kenosis),
            (Slot::Ort, _) => ("ort", &mut ort_session, &mut result.ort),
            (Slot::Target, Some(t)) => ("kenosis-target", &mut target_session, &mut t.result),
            (Slot::Target, None) | (Slot::Method(_), _) => continue,
        };
        if column.status != "ok" {
            continue;
        }
        let optimized = dir.join(format!("{name}.optimized.onnx"));
        match measure::session(&c.bytes, Some(&optimized)) {
            Ok(s) => {
                column.conv_fusion = Some(measure::conv_fusion(&c.bytes, &optimized));
                *target = Some(s);
            }
            Err(e) => {
                column.status = "failed".into();
                column.error = Some(format!("session: {e}"));
            }
        }
    }
    let mut sessions: Vec<&mut ort::session::Session> = vec![&mut fp32_session];
    let k = kenosis_session.as_mut().map(|s| {
        sessions.push(s);
        sessions.len() - 1
    });
    let o = ort_session.as_mut().map(|s| {
        sessions.push(s);
        sessions.len() - 1
    });
    let t = target_session.as_mut().map(|s| {
        sessions.push(s);
        sessions.len() - 1
    });
    match measure::latency(&mut sessions, &x, ctx.warmup, ctx.runs) {
        Ok(l) => {
            result.fp32.latency = Some(l[0]);
            let base = l[0].median_ms;
            if let Some(i) = k {
                result.kenosis.latency = Some(l[i]);
                result.kenosis.speedup_vs_fp32 = Some(base / l[i].median_ms);
            }
            if let Some(i) = o {
                result.ort.latency = Some(l[i]);
                result.ort.speedup_vs_fp32 = Some(base / l[i].median_ms);
            }
            if let (Some(a), Some(b)) = (k, o) {
                result.kenosis_over_ort_latency = Some(l[a].median_ms / l[b].median_ms);
            }
            if let (Some(i), Some(target)) = (t, result.target.as_mut()) {
                target.result.latency = Some(l[i]);
                target.result.speedup_vs_fp32 = Some(base / l[i].median_ms);
                target.latency_vs_default = k.map(|d| l[i].median_ms / l[d].median_ms);
            }
            ctx.log(format!(
                "latency ms: FP32 {:.2}, Kenosis {}, ORT {}",
                base,
                k.map_or("—".into(), |i| format!("{:.2}", l[i].median_ms)),
                o.map_or("—".into(), |i| format!("{:.2}", l[i].median_ms)),
            ));
        }
        Err(e) => result.error = Some(format!("latency: {e}")),
    }
    // The intra-op thread count's effect: FP32 against the shipped Kenosis artifact at 1, 2,
    // 4 and all threads, with the noise band of each speedup.
    let kenosis = (candidates.iter())
        .find(|c| matches!(c.slot, Slot::Kenosis) && result.kenosis.status == "ok")
        .map(|c| c.bytes.as_slice());
    match measure::thread_latencies(&fp32, kenosis, &x, ctx.runs) {
        Ok(t) => {
            ctx.log(format!("threads (FP32 / Kenosis ms): {t:?}"));
            result.threads = t;
        }
        Err(e) => result.error = Some(format!("thread latency: {e}")),
    }
    result.seconds = started.elapsed().as_secs_f64();
    result
}

fn describe(f: &Fidelity) -> String {
    let scores = match (f.score_mean_cosine, f.score_min_cosine) {
        (Some(m), Some(n)) => format!(", score cosine mean {m:.4} min {n:.4}"),
        _ => String::new(),
    };
    format!(
        "top-1 {}, cosine mean {:.4} min {:.4}{scores} ({} images)",
        f.top1_agreement
            .map_or("n/a".into(), |t| format!("{:.1}%", t * 100.0)),
        f.mean_cosine,
        f.min_cosine,
        f.images
    )
}

fn assign_fidelity(result: &mut ModelResult, slot: Slot, f: Result<Fidelity, String>) {
    let (status, error, fidelity) = match slot {
        Slot::Kenosis => (
            &mut result.kenosis.status,
            &mut result.kenosis.error,
            &mut result.kenosis.fidelity,
        ),
        Slot::Ort => (
            &mut result.ort.status,
            &mut result.ort.error,
            &mut result.ort.fidelity,
        ),
        Slot::Target => {
            let Some(t) = result.target.as_mut() else {
                return;
            };
            (
                &mut t.result.status,
                &mut t.result.error,
                &mut t.result.fidelity,
            )
        }
        Slot::Method(i) => {
            let Some(r) = result
                .methods
                .iter_mut()
                .find(|r| r.method == METHODS[i].canonical())
            else {
                return;
            };
            (&mut r.status, &mut r.error, &mut r.fidelity)
        }
    };
    match f {
        Ok(f) => *fidelity = Some(f),
        Err(e) => {
            *status = "failed".into();
            *error = Some(format!("inference: {e}"));
        }
    }
}

/// Quantizes with Kenosis, timing it; the result column and the artifact on success.
fn kenosis_quantize(
    ctx: &Ctx,
    path: &Path,
    fp32: &[u8],
    calib: &kenosis_quantize::calibrate::CalibrationData,
    options: &QuantizeOptions,
) -> (QuantResult, Option<Quantized>) {
    ctx.log(format!("Kenosis quantize ({})", options.method.canonical()));
    let t = Instant::now();
    let q = quantize(path, fp32, &Calibration::Data(calib.clone()), options);
    let seconds = t.elapsed().as_secs_f64();
    match q {
        Ok(q) => {
            ctx.log(format!("Kenosis: {seconds:.1} s"));
            let per_op: Vec<String> = q
                .report
                .ops_quantized
                .iter()
                .map(|(op, n)| format!("{n} {op}"))
                .collect();
            let mut notes = vec![format!("quantized: {}", per_op.join(", "))];
            if !q.report.nodes_fp32.is_empty() {
                notes.push(format!(
                    "{} quantizable node(s) left FP32",
                    q.report.nodes_fp32.len()
                ));
            }
            let r = QuantResult {
                status: "ok".into(),
                size_bytes: Some(q.bytes.len()),
                quantize_seconds: Some(seconds),
                notes,
                ..Default::default()
            };
            (r, Some(q))
        }
        Err(e) => {
            let e = e.to_string();
            ctx.log(format!("Kenosis failed: {e}"));
            (QuantResult::failed(e), None)
        }
    }
}
