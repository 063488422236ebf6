//! Evaluation helpers shared by the tests and the benchmark: the real models and images in
//! `../shared`, ONNX Runtime sessions, and fidelity metrics (top-1 agreement, cosine).

pub mod audio;
pub mod documents;
pub mod graph;
pub mod mpnet;
pub mod prose;
pub mod vit;

use std::path::{Path, PathBuf};

use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use ndarray::{Array3, Array4, Axis};
use ort::session::{builder::GraphOptimizationLevel, Session};
use ort::value::Tensor;

/// Where `cargo xtask test` fetches the PP-OCR, MiniLM and Silero VAD models
/// (`../shared/fetch-models.sh`): `$KENOSIS_MODELS` when set and non-empty, else the
/// `kenosis-models` in the workspace's target folder ([`target_dir`]).
pub fn fetched_models_dir() -> PathBuf {
    std::env::var_os("KENOSIS_MODELS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("kenosis-models"))
}

/// The fetched model `file` in [`fetched_models_dir`]; `None`, with a note on stderr, when it
/// was not fetched, for a test to skip.
///
/// # Panics
/// When it is missing under `CI=true`: CI fetches every model, so a skip would hide a failure.
pub fn fetched_model(file: &str) -> Option<PathBuf> {
    let path = fetched_models_dir().join(file);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} not found (CI=true: refusing to skip; run ../shared/fetch-models.sh)",
        path.display()
    );
    eprintln!(
        "note: skipping, {} not fetched (../shared/fetch-models.sh)",
        path.display()
    );
    None
}

/// The workspace's target folder as cargo resolves it (`CARGO_TARGET_DIR`, `build.target-dir`
/// of a config file, else `<workspace>/target`): `cargo metadata`'s `target_directory`, asked
/// once per process. Tests put every folder of their own under it.
///
/// # Panics
/// When `cargo metadata` cannot run or prints no `target_directory` (a test set-up failure).
pub fn target_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = std::process::Command::new(cargo)
            .current_dir(workspace_root())
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .output()
            .expect("`cargo metadata` runs");
        assert!(
            output.status.success(),
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("`cargo metadata` prints JSON");
        PathBuf::from(
            metadata["target_directory"]
                .as_str()
                .expect("`cargo metadata` prints a target_directory"),
        )
    })
    .clone()
}

/// The workspace folder (the parent of this crate's manifest directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kenosis-eval has a parent")
        .to_path_buf()
}

/// `../shared` (or `$KENOSIS_SHARED_DIR`). `None` (test skipped, with a note) when missing,
/// except under `CI=true`, where a missing folder fails the test instead of hiding it.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KENOSIS_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared"));
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "shared data not found at {} (CI=true: refusing to skip)",
            dir.display()
        );
    }
    eprintln!("note: skipping, shared data not found at {}", dir.display());
    None
}

/// How a classifier expects its 224x224 input.
#[derive(Debug, Clone, Copy)]
pub enum Preprocess {
    /// RGB, `(x - 127) / 128` (EfficientNet-Lite0).
    RgbCentered,
    /// BGR, `x - [104, 117, 123]` (SqueezeNet 1.0 from Caffe).
    BgrMeanSubtracted,
}

/// The sorted JPEG file names of `images/imagenet-224`.
pub fn imagenet_files(shared: &Path) -> Vec<PathBuf> {
    sorted_files(&shared.join("images/imagenet-224"), "JPEG")
}

/// The sorted JPEG file names of `images/coco-300`.
pub fn coco_files(shared: &Path) -> Vec<PathBuf> {
    sorted_files(&shared.join("images/coco-300"), "jpg")
}

/// The sorted paths of the files with extension `ext` in `dir` (panics naming `dir` when it
/// cannot be read).
pub fn sorted_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files
}

/// Decodes a 224x224 JPEG into a `[3, 224, 224]` f32 tensor.
pub fn load_image(path: &Path, pre: Preprocess) -> Array3<f32> {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    let img = image::imageops::resize(&img, 224, 224, image::imageops::FilterType::Triangle);
    let mut out = Array3::<f32>::zeros((3, 224, 224));
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            let (v, dst) = match pre {
                Preprocess::RgbCentered => ((f32::from(p[c]) - 127.0) / 128.0, c),
                Preprocess::BgrMeanSubtracted => {
                    (f32::from(p[c]) - [123.0, 117.0, 104.0][c], 2 - c)
                }
            };
            out[[dst, y as usize, x as usize]] = v;
        }
    }
    out
}

/// Batch-of-one inputs for `files`.
pub fn load_batch(files: &[PathBuf], pre: Preprocess) -> Vec<Array4<f32>> {
    files
        .iter()
        .map(|f| load_image(f, pre).insert_axis(Axis(0)))
        .collect()
}

/// Calibration data from in-memory single-input samples.
pub fn calibration(samples: &[Array4<f32>]) -> CalibrationData {
    CalibrationData {
        samples: samples
            .iter()
            .map(|s| vec![SampleValue::F32(s.clone().into_dyn())])
            .collect(),
        files: Vec::new(),
        synthetic: false,
    }
}

/// Every output of `session` on `sample` (inputs `names`), flattened; non-float outputs are
/// empty.
pub fn run_sample(
    session: &mut Session,
    names: &[String],
    sample: &[SampleValue],
) -> Vec<Vec<f32>> {
    use kenosis_quantize::calibrate::session::{borrowed, sample_inputs};
    let inputs = sample_inputs(names, sample, Path::new("kenosis-eval")).expect("inputs");
    let outputs = session.run(borrowed(&inputs)).expect("run");
    outputs
        .iter()
        .map(|(_, v)| {
            v.try_extract_tensor::<f32>()
                .map(|(_, x)| x.to_vec())
                .unwrap_or_default()
        })
        .collect()
}

/// An ORT session (1 intra-op thread) at `level`, optionally saving the optimized graph.
pub fn session(
    bytes: &[u8],
    level: GraphOptimizationLevel,
    save_optimized: Option<&Path>,
) -> Session {
    session_with_config(bytes, level, save_optimized, &[])
}

/// [`session`] with ORT session configuration entries, e.g. `Evaluation::session_config`'s.
pub fn session_with_config(
    bytes: &[u8],
    level: GraphOptimizationLevel,
    save_optimized: Option<&Path>,
    config: &[(&str, &str)],
) -> Session {
    try_session(bytes, level, save_optimized, config).expect("ORT loads the model")
}

/// [`session_with_config`] returning ONNX Runtime's message instead of panicking, for the
/// benchmark, which reports a model that fails and goes on.
///
/// # Errors
/// ONNX Runtime's message when it refuses an option or the model.
pub fn try_session(
    bytes: &[u8],
    level: GraphOptimizationLevel,
    save_optimized: Option<&Path>,
    config: &[(&str, &str)],
) -> Result<Session, String> {
    try_session_threads(bytes, level, save_optimized, config, 1)
}

/// [`try_session`] with `threads` intra-op threads.
///
/// # Errors
/// As [`try_session`].
pub fn try_session_threads(
    bytes: &[u8],
    level: GraphOptimizationLevel,
    save_optimized: Option<&Path>,
    config: &[(&str, &str)],
    threads: usize,
) -> Result<Session, String> {
    let env = kenosis_quantize::calibrate::session::environment(Path::new("kenosis-eval"))
        .map_err(|e| e.to_string())?;
    let mut b = Session::builder(env)
        .map_err(|e| e.to_string())?
        .with_optimization_level(level)
        .map_err(|e| e.to_string())?
        .with_intra_threads(threads)
        .map_err(|e| e.to_string())?;
    for (key, value) in config {
        b = b.with_config_entry(key, value).map_err(|e| e.to_string())?;
    }
    if let Some(p) = save_optimized {
        b = b.with_optimized_model_path(p).map_err(|e| e.to_string())?;
    }
    b.commit_from_memory(bytes).map_err(|e| e.to_string())
}

/// An ORT session of `bytes` at [`GraphOptimizationLevel::All`] (1 intra-op thread) and the
/// nodes of the graph ORT optimized the model into: what actually runs (QLinearConv, fused
/// kernels, the NHWC rewrite).
pub fn optimized_session(bytes: &[u8]) -> (Session, Vec<kenosis_quantize::onnx::NodeProto>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("optimized.onnx");
    let s = session(bytes, GraphOptimizationLevel::All, Some(&path));
    let written = std::fs::read(&path).expect("optimized model written");
    let model = kenosis_quantize::onnx::decode(&path, &written).expect("optimized model decodes");
    (s, model.graph.expect("graph").node)
}

/// Op types of the graph ORT runs for the model `bytes` (see [`optimized_session`]).
pub fn optimized_op_types(bytes: &[u8]) -> Vec<String> {
    optimized_session(bytes)
        .1
        .iter()
        .map(|n| n.op_type().to_owned())
        .collect()
}

/// Runs a single-input, single-output model on `x`, returning output 0 flattened.
pub fn run(session: &mut Session, x: &Array4<f32>) -> Vec<f32> {
    let input = Tensor::from_array(x.clone()).expect("tensor");
    let outputs = session.run(ort::inputs![input]).expect("run");
    let (_, values) = outputs[0].try_extract_tensor::<f32>().expect("f32 output");
    values.to_vec()
}

pub use kenosis_quantize::fidelity::cosine;

/// Index of the largest value.
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
        .expect("non-empty")
}

/// Agreement and output similarity of two models over a set of inputs.
#[derive(Debug, Clone, Copy)]
pub struct Fidelity {
    /// Fraction of inputs whose top-1 class is the same.
    pub top1_agreement: f64,
    /// Mean cosine of the output vectors.
    pub mean_cosine: f64,
    /// Smallest cosine.
    pub min_cosine: f64,
}

/// Compares `b` against reference `a` on `inputs`.
pub fn compare(a: &mut Session, b: &mut Session, inputs: &[Array4<f32>]) -> Fidelity {
    let (mut agree, mut sum, mut min) = (0usize, 0f64, f64::INFINITY);
    for x in inputs {
        let (ya, yb) = (run(a, x), run(b, x));
        agree += usize::from(argmax(&ya) == argmax(&yb));
        let c = cosine(&ya, &yb);
        sum += c;
        min = min.min(c);
    }
    let n = inputs.len() as f64;
    Fidelity {
        top1_agreement: agree as f64 / n,
        mean_cosine: sum / n,
        min_cosine: min,
    }
}

/// Uniform values in [-1, 1) from a fixed xorshift64 sequence (Marsaglia 2003): seeded
/// random weights and inputs for the tests that build or fill in models. The seed must not
/// be 0.
pub struct Uniform(pub u64);

impl Uniform {
    /// The next value.
    pub fn draw(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Op types of the nodes of an ONNX model file (e.g. ORT's saved optimized graph).
pub fn op_types(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).expect("optimized model written");
    model_op_types(path, &bytes)
}

/// Op types of the main graph's nodes of the ONNX model `bytes` (`path` names it in errors).
pub fn model_op_types(path: &Path, bytes: &[u8]) -> Vec<String> {
    let model = kenosis_quantize::onnx::decode(path, bytes).expect("decodes");
    model
        .graph
        .expect("graph")
        .node
        .iter()
        .map(|n| n.op_type().to_owned())
        .collect()
}

/// Convolutions in an op list from ORT's optimized graph: `(QLinearConv nodes, float
/// convolutions)`, the float ones being `Conv`, `FusedConv` (Conv+activation) and
/// `NchwcConv` (ORT's blocked-layout Conv).
pub fn conv_counts(ops: &[String]) -> (usize, usize) {
    let qlinear = ops.iter().filter(|o| *o == "QLinearConv").count();
    let float = ops
        .iter()
        .filter(|o| matches!(o.as_str(), "Conv" | "FusedConv" | "NchwcConv"))
        .count();
    (qlinear, float)
}
