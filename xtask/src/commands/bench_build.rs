//! What Kenosis costs its users at build time: a downstream crate that quantizes SqueezeNet 1.0
//! with `kenosis_build::discover()` and embeds it with `include_quantized!`, against the
//! hand-made alternative, `ort` plus `include_bytes!` of the same INT8 model quantized
//! beforehand. Both crates are generated under `target/bench-build/`, outside the workspace
//! (each its own `[workspace]`, with the workspace's `Cargo.lock` so that they build offline),
//! and built in one run, back to back, in release with a clean target folder each: the
//! hand-made crate; Kenosis on a machine without the quantizer (the first build ever, which
//! builds `kenosis` into the per-user folder, here a bench folder set as `XDG_CACHE_HOME`);
//! Kenosis with an empty then a warm `KENOSIS_CACHE_DIR` once the quantizer exists; a second,
//! unrelated Kenosis crate (EfficientNet-Lite0) with an empty cache; the hand-made crate
//! again; then [`REBUILDS`] no-change rebuilds of each (medians). The ratios are against the
//! mean of the two hand-made builds, which bracket the Kenosis ones: a change of machine speed
//! during the run moves the baseline too. Written to `target/bench/build.md` and to the `build`
//! section of `docs/benchmarks.md`, with the targets and whether this run met them.
//!
//! The Kenosis crate is what a user following the README writes: `default-features = false`
//! (offline: ONNX Runtime from `ORT_LIB_PATH`, no downloader, no TLS), no profile override,
//! no `KENOSIS_QUANTIZER` and no `kenosis` on `PATH`. The hand-made crate depends on `ort`
//! with the workspace's version and features, so that the difference is Kenosis alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::ort::OrtEnv;

/// No-change rebuilds per crate; the medians are reported.
const REBUILDS: usize = 5;
/// The model both crates embed, relative to the workspace root.
const MODEL: &str = "../shared/models/squeezenet1.0.onnx";
/// The second, unrelated crate's model.
const SECOND_MODEL: &str = "../shared/models/efficientnet_lite0.onnx";
/// The first build on a machine, compiling the quantizer, at most this times the hand-made
/// one (the clean build's ratio before the quantizer moved out of the build script).
const MAX_FIRST_BUILD_RATIO: f64 = 5.6;
/// Issue 32's targets: clean build with an empty cache, at most this times the hand-made one.
const MAX_EMPTY_CACHE_RATIO: f64 = 2.0;
/// Clean build with a warm `KENOSIS_CACHE_DIR`, at most this times the hand-made one.
const MAX_WARM_CACHE_RATIO: f64 = 1.3;
/// Issue 55's targets against a typical edge application (clap, serde_json, image, thiserror,
/// ort and ndarray) hand-made: clean build with a warm cache at most this times it...
const MAX_APP_WARM_RATIO: f64 = 1.3;
/// ... and with an empty cache, at most this times it.
const MAX_APP_EMPTY_RATIO: f64 = 1.5;
/// A no-change rebuild adds at most this many seconds to the hand-made one's.
const MAX_REBUILD_EXTRA_S: f64 = 0.1;
/// What the build script says when it builds the quantizer.
const BUILDING_QUANTIZER: &str = "kenosis: building the quantizer";
/// Starts of the build script's summary line when it quantized (not on a cache hit): the
/// second when the speed check shipped the FP32 model.
const QUANTIZED: [&str; 2] = ["kenosis: quantized ", "kenosis: kept "];

/// One `cargo build`.
struct Build {
    seconds: f64,
    /// User and system CPU time of cargo and everything it waited for (rustc, build scripts):
    /// less sensitive than `seconds` to other work on the machine.
    cpu_seconds: f64,
    /// Packages compiled (`Compiling` lines).
    compiled: usize,
    /// Cargo's standard error: its progress lines and the build script's warnings.
    stderr: String,
}

/// The generated crates and their folders.
struct Layout {
    kenosis: PathBuf,
    second: PathBuf,
    handmade: PathBuf,
    /// The Kenosis crate's target folder for the (untimed) build that makes the hand-made
    /// crate's model; kept between runs, like its cache.
    prepare_target: PathBuf,
    prepare_cache: PathBuf,
    kenosis_target: PathBuf,
    second_target: PathBuf,
    handmade_target: PathBuf,
    cache: PathBuf,
    /// `XDG_CACHE_HOME` of the Kenosis builds: the per-user folder the quantizer is built
    /// into.
    user_cache: PathBuf,
    /// The typical edge application, hand-made and with Kenosis (see [`app_crate`]).
    app_handmade: PathBuf,
    app_kenosis: PathBuf,
    app_handmade_target: PathBuf,
    app_kenosis_target: PathBuf,
}

impl Layout {
    fn new(dir: &Path) -> Self {
        Layout {
            kenosis: dir.join("kenosis"),
            second: dir.join("second"),
            handmade: dir.join("handmade"),
            prepare_target: dir.join("target-prepare"),
            prepare_cache: dir.join("cache-prepare"),
            kenosis_target: dir.join("target-kenosis"),
            second_target: dir.join("target-second"),
            handmade_target: dir.join("target-handmade"),
            cache: dir.join("cache"),
            user_cache: dir.join("user-cache"),
            app_handmade: dir.join("app-handmade"),
            app_kenosis: dir.join("app-kenosis"),
            app_handmade_target: dir.join("target-app-handmade"),
            app_kenosis_target: dir.join("target-app-kenosis"),
        }
    }
}

/// Generates both crates, measures them and writes the markdown section into `out`.
pub fn run(ort: &OrtEnv, out: &Path) -> Result<()> {
    if matches!(ort, OrtEnv::Unmanaged) {
        bail!(
            "the build bench builds without ort's download: it needs the managed ONNX Runtime \
             or ORT_LIB_PATH"
        );
    }
    let root = crate::workspace_root();
    let dirs = Layout::new(&crate::cargo::target_dir()?.join("bench-build"));
    kenosis_crate(&root, &dirs.kenosis, "kenosis", MODEL)?;
    kenosis_crate(&root, &dirs.second, "second", SECOND_MODEL)?;

    // The hand-made crate embeds the model Kenosis makes; built beforehand, untimed, with the
    // workspace's quantizer.
    eprintln!("xtask: bench-build: quantizing SqueezeNet for the hand-made crate");
    let quantizer = crate::cargo::quantizer(ort)?;
    let mut prepare = cargo_command(
        ort,
        &dirs.kenosis,
        &dirs.prepare_target,
        Some(&dirs.prepare_cache),
    );
    prepare.env("KENOSIS_QUANTIZER", quantizer);
    timed(prepare, &dirs.kenosis)?;
    let artifact = newest_artifact(&dirs.prepare_target)?;
    handmade_crate(&root, &dirs.handmade, &artifact)?;
    app_crate(&root, &dirs.app_handmade, App::Handmade(&artifact))?;
    app_crate(&root, &dirs.app_kenosis, App::Kenosis)?;

    let text = section(&measure(ort, &dirs)?);
    crate::docs::publish(out, "build", &text)
}

/// The timed builds, in order: hand-made clean; Kenosis's first build on the machine, then
/// clean with an empty and a warm cache; the second crate; hand-made clean again (both
/// binaries run and must agree); then the interleaved no-change rebuilds.
fn measure(ort: &OrtEnv, dirs: &Layout) -> Result<Measured> {
    let load_before = load_average();
    eprintln!("xtask: bench-build: clean build, hand-made");
    clean(&dirs.handmade_target)?;
    let handmade_before = cargo_build(ort, &dirs.handmade, &dirs.handmade_target, None)?;
    eprintln!("xtask: bench-build: first build on a machine (the quantizer is built), Kenosis");
    clean(&dirs.kenosis_target)?;
    clean(&dirs.cache)?;
    clean(&dirs.user_cache)?;
    let first = kenosis_build(ort, dirs, &dirs.kenosis, &dirs.kenosis_target)?;
    ensure!(
        first.stderr.contains(BUILDING_QUANTIZER),
        "the first build did not build the quantizer:\n{}",
        first.stderr
    );
    eprintln!("xtask: bench-build: clean build, Kenosis, empty cache");
    clean(&dirs.kenosis_target)?;
    clean(&dirs.cache)?;
    let empty = kenosis_build(ort, dirs, &dirs.kenosis, &dirs.kenosis_target)?;
    ensure!(
        !empty.stderr.contains(BUILDING_QUANTIZER),
        "the quantizer was built again:\n{}",
        empty.stderr
    );
    let quantize_s = quantize_seconds(&empty.stderr)
        .context("the empty-cache build printed no `kenosis: quantized` line")?;
    eprintln!("xtask: bench-build: clean build, Kenosis, warm cache");
    clean(&dirs.kenosis_target)?;
    let warm = kenosis_build(ort, dirs, &dirs.kenosis, &dirs.kenosis_target)?;
    ensure!(
        !says_quantized(&warm.stderr),
        "the warm-cache build quantized again:\n{}",
        warm.stderr
    );
    eprintln!("xtask: bench-build: clean build, a second Kenosis crate, empty cache");
    clean(&dirs.second_target)?;
    clean(&dirs.cache)?;
    let second = kenosis_build(ort, dirs, &dirs.second, &dirs.second_target)?;
    ensure!(
        says_quantized(&second.stderr) && !second.stderr.contains(BUILDING_QUANTIZER),
        "the second crate did not quantize with the existing quantizer:\n{}",
        second.stderr
    );

    eprintln!("xtask: bench-build: clean build, hand-made, again");
    clean(&dirs.handmade_target)?;
    let handmade_after = cargo_build(ort, &dirs.handmade, &dirs.handmade_target, None)?;

    same_answer(
        ort,
        &dirs.handmade_target.join("release/handmade"),
        &dirs.kenosis_target.join("release/kenosis"),
    )?;

    eprintln!("xtask: bench-build: {REBUILDS} no-change rebuilds each");
    let mut handmade_rebuilds = Vec::with_capacity(REBUILDS);
    let mut kenosis_rebuilds = Vec::with_capacity(REBUILDS);
    for _ in 0..REBUILDS {
        // Interleaved, so that a burst of load on the machine hits both.
        let h = cargo_build(ort, &dirs.handmade, &dirs.handmade_target, None)?;
        let k = kenosis_build(ort, dirs, &dirs.kenosis, &dirs.kenosis_target)?;
        ensure!(
            h.compiled == 0 && k.compiled == 0,
            "a no-change rebuild compiled something:\n{}\n{}",
            h.stderr,
            k.stderr
        );
        handmade_rebuilds.push(h);
        kenosis_rebuilds.push(k);
    }
    let app = measure_app(ort, dirs)?;
    let load_after = load_average();

    Ok(Measured {
        handmade: [handmade_before, handmade_after],
        first,
        empty,
        warm,
        second,
        quantize_s,
        handmade_rebuild: median(handmade_rebuilds),
        kenosis_rebuild: median(kenosis_rebuilds),
        app,
        load: (load_before, load_after),
    })
}

/// The typical application's clean builds, in order: hand-made; Kenosis with an empty cache,
/// then a warm one (the quantizer exists by now); hand-made again. Both binaries must agree.
fn measure_app(ort: &OrtEnv, dirs: &Layout) -> Result<AppMeasured> {
    eprintln!("xtask: bench-build: clean build, typical application, hand-made");
    clean(&dirs.app_handmade_target)?;
    let before = cargo_build(ort, &dirs.app_handmade, &dirs.app_handmade_target, None)?;
    eprintln!("xtask: bench-build: clean build, typical application with Kenosis, empty cache");
    clean(&dirs.app_kenosis_target)?;
    clean(&dirs.cache)?;
    let empty = kenosis_build(ort, dirs, &dirs.app_kenosis, &dirs.app_kenosis_target)?;
    ensure!(
        says_quantized(&empty.stderr) && !empty.stderr.contains(BUILDING_QUANTIZER),
        "the application did not quantize with the existing quantizer:\n{}",
        empty.stderr
    );
    eprintln!("xtask: bench-build: clean build, typical application with Kenosis, warm cache");
    clean(&dirs.app_kenosis_target)?;
    let warm = kenosis_build(ort, dirs, &dirs.app_kenosis, &dirs.app_kenosis_target)?;
    ensure!(
        !says_quantized(&warm.stderr),
        "the application's warm-cache build quantized again:\n{}",
        warm.stderr
    );
    eprintln!("xtask: bench-build: clean build, typical application, hand-made, again");
    clean(&dirs.app_handmade_target)?;
    let after = cargo_build(ort, &dirs.app_handmade, &dirs.app_handmade_target, None)?;
    same_answer(
        ort,
        &dirs.app_handmade_target.join("release/app"),
        &dirs.app_kenosis_target.join("release/app"),
    )?;
    Ok(AppMeasured {
        handmade: [before, after],
        empty,
        warm,
    })
}

/// The typical application's figures.
struct AppMeasured {
    /// Its hand-made clean builds, before the Kenosis ones and after.
    handmade: [Build; 2],
    /// With Kenosis, clean, empty cache.
    empty: Build,
    /// With Kenosis, clean, warm cache.
    warm: Build,
}

/// One run's figures.
struct Measured {
    /// The hand-made crate's clean builds, before the Kenosis ones and after.
    handmade: [Build; 2],
    first: Build,
    empty: Build,
    warm: Build,
    second: Build,
    /// Quantization time the empty-cache build's script reported.
    quantize_s: f64,
    /// Median wall and CPU seconds of the no-change rebuilds.
    handmade_rebuild: (f64, f64),
    kenosis_rebuild: (f64, f64),
    /// The typical edge application, the second baseline.
    app: AppMeasured,
    /// One-minute load average before the first timed build and after the last.
    load: (Option<f64>, Option<f64>),
}

/// The markdown section: the table, the targets and whether they were met. The targets are
/// on wall time, as a user waits for it; CPU time is shown beside it because other work on a
/// shared machine stretches wall time far more.
fn section(m: &Measured) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    // The baseline: the mean of the hand-made builds before and after the Kenosis ones.
    let wall = m.handmade.iter().map(|b| b.seconds).sum::<f64>() / 2.0;
    let cpu = m.handmade.iter().map(|b| b.cpu_seconds).sum::<f64>() / 2.0;
    let first_ratio = m.first.seconds / wall;
    let empty_ratio = m.empty.seconds / wall;
    let second_ratio = m.second.seconds / wall;
    let warm_ratio = m.warm.seconds / wall;
    let extra = m.kenosis_rebuild.0 - m.handmade_rebuild.0;
    let load = |l: Option<f64>| l.map_or("unknown".to_owned(), |l| format!("{l:.1}"));
    let clean_row = |name: &str, b: &Build, target: &str| {
        format!(
            "| {name} | {:.1} | {:.1} | {} | {:.2}x | {:.2}x | {target} |\n",
            b.seconds,
            b.cpu_seconds,
            b.compiled,
            b.seconds / wall,
            b.cpu_seconds / cpu,
        )
    };
    let mut text = format!(
        "## Build cost: a downstream crate with Kenosis against the hand-made alternative\n\n\
         Crates outside the workspace, generated by `cargo xtask bench --build-only`, \
         embedding SqueezeNet 1.0 INT8: Kenosis (`kenosis_build::discover()` in build.rs, \
         `include_quantized!`, `default-features = false`, no profile override, the \
         quantizer found or built by the build script itself) and hand-made (`ort` with \
         the same version and features, `ndarray`, `include_bytes!` of the artifact Kenosis \
         made). The first Kenosis build starts without the quantizer on the machine and \
         builds it (a nested `cargo install` into the per-user folder); the later ones find \
         it there. The second crate is an unrelated one (EfficientNet-Lite0) built once the \
         quantizer exists. Release \
         builds, back to back in one run, each from a clean target folder; the hand-made \
         crate is built first and again after the Kenosis crates, and the ratios are \
         against the mean of those two builds ({wall:.1} s wall, {cpu:.1} s CPU); the no-change \
         rebuilds are the medians of {REBUILDS} interleaved `cargo build --release` with \
         nothing touched. Wall time is what the targets are on; CPU time (user + system of \
         cargo, rustc and the build scripts) is shown beside it because other work on the \
         machine stretches wall time far more: {}, load average {} before and {} after.\n\n\
         | build | wall s | CPU s | packages compiled | wall vs hand-made | CPU vs hand-made | \
         target (wall) |\n\
         |---|---:|---:|---:|---:|---:|---|\n",
        super::bench_deploy::cpu_name(),
        load(m.load.0),
        load(m.load.1),
    );
    text += &clean_row("hand-made, clean (before)", &m.handmade[0], "");
    text += &clean_row("hand-made, clean (after)", &m.handmade[1], "");
    text += &clean_row(
        "Kenosis, first build on the machine (quantizer built), empty cache",
        &m.first,
        &format!(
            "≤ {MAX_FIRST_BUILD_RATIO}x: {}",
            verdict(first_ratio <= MAX_FIRST_BUILD_RATIO)
        ),
    );
    text += &clean_row(
        "Kenosis, clean, empty `KENOSIS_CACHE_DIR`",
        &m.empty,
        &format!(
            "≤ {MAX_EMPTY_CACHE_RATIO}x: {}",
            verdict(empty_ratio <= MAX_EMPTY_CACHE_RATIO)
        ),
    );
    text += &clean_row(
        "Kenosis, clean, warm `KENOSIS_CACHE_DIR`",
        &m.warm,
        &format!(
            "≤ {MAX_WARM_CACHE_RATIO}x: {}",
            verdict(warm_ratio <= MAX_WARM_CACHE_RATIO)
        ),
    );
    text += &clean_row(
        "second crate (EfficientNet-Lite0), clean, empty cache",
        &m.second,
        &format!(
            "≤ {MAX_EMPTY_CACHE_RATIO}x: {}",
            verdict(second_ratio <= MAX_EMPTY_CACHE_RATIO)
        ),
    );
    text += &format!(
        "| hand-made, no-change rebuild | {:.2} | {:.2} | 0 | | | |\n\
         | Kenosis, no-change rebuild | {:.2} | {:.2} | 0 | {extra:+.2} s | {:+.2} s | \
         ≤ +{MAX_REBUILD_EXTRA_S} s: {} |\n\n\
         Quantizing took {:.1} s of the empty-cache build (the build script's own figure); \
         the rest of the difference is compiling what Kenosis adds.\n",
        m.handmade_rebuild.0,
        m.handmade_rebuild.1,
        m.kenosis_rebuild.0,
        m.kenosis_rebuild.1,
        m.kenosis_rebuild.1 - m.handmade_rebuild.1,
        verdict(extra <= MAX_REBUILD_EXTRA_S),
        m.quantize_s,
    );
    text + &app_section(&m.app)
}

/// The second baseline's table: the typical application hand-made and with Kenosis.
fn app_section(a: &AppMeasured) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    let wall = a.handmade.iter().map(|b| b.seconds).sum::<f64>() / 2.0;
    let cpu = a.handmade.iter().map(|b| b.cpu_seconds).sum::<f64>() / 2.0;
    let row = |name: &str, b: &Build, target: String| {
        format!(
            "| {name} | {:.1} | {:.1} | {} | {:.2}x | {:.2}x | {target} |\n",
            b.seconds,
            b.cpu_seconds,
            b.compiled,
            b.seconds / wall,
            b.cpu_seconds / cpu,
        )
    };
    let mut text = format!(
        "\n### Against a typical edge application\n\n\
         The same SqueezeNet 1.0 INT8 in what an edge application compiles anyway: `clap` \
         with derive, `serde` with `serde_json`, `image` (JPEG), `thiserror`, `ort` and \
         `ndarray`; it reads a JPEG, classifies it and prints JSON. Hand-made \
         (`include_bytes!` of the artifact) and with Kenosis (`include_quantized!`, \
         `discover()`, the quantizer already on the machine), clean release builds; the \
         ratios are against the mean of the hand-made builds before and after \
         ({wall:.1} s wall, {cpu:.1} s CPU).\n\n\
         | build | wall s | CPU s | packages compiled | wall vs hand-made | CPU vs hand-made | \
         target (wall) |\n\
         |---|---:|---:|---:|---:|---:|---|\n"
    );
    text += &row(
        "application, hand-made (before)",
        &a.handmade[0],
        String::new(),
    );
    text += &row(
        "application, hand-made (after)",
        &a.handmade[1],
        String::new(),
    );
    text += &row(
        "application with Kenosis, empty `KENOSIS_CACHE_DIR`",
        &a.empty,
        format!(
            "≤ {MAX_APP_EMPTY_RATIO}x: {}",
            verdict(a.empty.seconds / wall <= MAX_APP_EMPTY_RATIO)
        ),
    );
    text += &row(
        "application with Kenosis, warm `KENOSIS_CACHE_DIR`",
        &a.warm,
        format!(
            "≤ {MAX_APP_WARM_RATIO}x: {}",
            verdict(a.warm.seconds / wall <= MAX_APP_WARM_RATIO)
        ),
    );
    text
}

/// Writes a Kenosis crate named `name` into `dir`: the README's quick start with `model`
/// (relative to the workspace root; an image classifier with one `[1, 3, 224, 224]` input).
fn kenosis_crate(root: &Path, dir: &Path, name: &str, model: &str) -> Result<()> {
    let path = |krate: &str| root.join(krate).display().to_string();
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n\
         [dependencies]\n\
         kenosis-runtime = {{ path = {:?}, default-features = false }}\n\n\
         [build-dependencies]\n\
         kenosis-build = {{ path = {:?}, default-features = false }}\n",
        path("kenosis-runtime"),
        path("kenosis-build"),
    );
    let file = Path::new(model)
        .file_name()
        .context("a model file name")?
        .to_string_lossy()
        .into_owned();
    let build_rs = "fn main() {\n    \
                    kenosis_build::discover().expect(\"kenosis: quantization failed\");\n}\n";
    let main_rs = format!(
        "use kenosis_runtime::ndarray::Array4;\n\n\
         kenosis_runtime::include_quantized!(struct Net = \"models/{file}\");\n\n\
         fn main() -> Result<(), kenosis_runtime::Error> {{\n    \
         let image = Array4::<f32>::zeros((1, 3, 224, 224));\n    \
         let scores = Net.run(image.view())?;\n    \
         let best = scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1));\n    \
         println!(\"class {{:?}}\", best.map(|(class, _)| class));\n    \
         Ok(())\n}}\n"
    );
    write_crate(root, dir, &manifest, Some(build_rs), &main_rs)?;
    std::fs::copy(root.join(model), dir.join("models").join(&file))
        .with_context(|| format!("copying {model} (run `cargo xtask test` to fetch it)"))?;
    Ok(())
}

/// How the typical application gets its model.
enum App<'a> {
    /// `include_bytes!` of this artifact, run with `ort`.
    Handmade(&'a Path),
    /// `include_quantized!` of SqueezeNet 1.0, quantized by `discover()` in `build.rs`.
    Kenosis,
}

/// Writes the typical edge application into `dir`: a `clap` command that reads a JPEG with
/// `image` (a gray image without one), classifies it with SqueezeNet 1.0 INT8 and prints the
/// class as JSON with `serde_json`, its errors a `thiserror` enum. The dependencies are the
/// workspace's lines (its `Cargo.lock` pins them all), so it builds offline.
fn app_crate(root: &Path, dir: &Path, app: App<'_>) -> Result<()> {
    let toml = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let line = |name: &str| {
        toml.lines()
            .find(|l| l.starts_with(&format!("{name} = ")))
            .map(str::to_owned)
            .with_context(|| format!("no `{name} = ` line in the workspace's Cargo.toml"))
    };
    let common = [
        "clap = { version = \"4.6\", features = [\"derive\"] }".to_owned(),
        line("serde")?,
        line("serde_json")?,
        line("image")?,
        line("thiserror")?,
        line("ndarray")?,
    ]
    .join("\n");
    let (deps, build_rs, model_code) = match app {
        App::Handmade(_) => (
            line("ort")?,
            None,
            "static MODEL: &[u8] = include_bytes!(\"../models/squeezenet1.0.int8.onnx\");\n\n\
             fn classify(x: ndarray::Array4<f32>) -> ort::Result<Vec<f32>> {\n    \
             let environment = ort::init().with_name(\"app\").build()?;\n    \
             let mut session =\n        \
             ort::session::Session::builder(&environment)?.commit_from_memory(MODEL)?;\n    \
             let outputs = session.run(ort::inputs![ort::value::Tensor::from_array(x)?])?;\n    \
             Ok(outputs[0].try_extract_array::<f32>()?.iter().copied().collect())\n}\n",
        ),
        App::Kenosis => (
            format!(
                "kenosis-runtime = {{ path = {:?}, default-features = false }}\n\n\
                 [build-dependencies]\n\
                 kenosis-build = {{ path = {:?}, default-features = false }}",
                root.join("kenosis-runtime").display().to_string(),
                root.join("kenosis-build").display().to_string(),
            ),
            Some(
                "fn main() {\n    \
                 kenosis_build::discover().expect(\"kenosis: quantization failed\");\n}\n",
            ),
            "kenosis_runtime::include_quantized!(struct Net = \"models/squeezenet1.0.onnx\");\n\n\
             fn classify(x: ndarray::Array4<f32>) -> Result<Vec<f32>, kenosis_runtime::Error> {\n    \
             Ok(Net.run(x.view())?.iter().copied().collect())\n}\n",
        ),
    };
    let manifest = format!(
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\n{common}\n{deps}\n"
    );
    let main_rs = format!(
        "use clap::Parser;\n\n\
         /// Classifies a photograph with SqueezeNet 1.0 and prints the class as JSON\n\
         #[derive(Parser)]\n\
         struct Args {{\n    \
         /// A JPEG (none: a gray image)\n    \
         image: Option<std::path::PathBuf>,\n}}\n\n\
         #[derive(Debug, thiserror::Error)]\n\
         enum AppError {{\n    \
         #[error(\"reading the image: {{0}}\")]\n    \
         Image(#[from] image::ImageError),\n    \
         #[error(\"running the model: {{0}}\")]\n    \
         Model(String),\n}}\n\n\
         #[derive(serde::Serialize)]\n\
         struct Answer {{\n    \
         class: Option<usize>,\n}}\n\n\
         {model_code}\n\
         /// BGR, 0-255 minus the channel means, `[1, 3, 224, 224]`.\n\
         fn pixels(args: &Args) -> Result<ndarray::Array4<f32>, AppError> {{\n    \
         let mut x = ndarray::Array4::<f32>::zeros((1, 3, 224, 224));\n    \
         if let Some(path) = &args.image {{\n        \
         let rgb = image::open(path)?.to_rgb8();\n        \
         let rgb = image::imageops::resize(&rgb, 224, 224, image::imageops::FilterType::Triangle);\n        \
         for (px, py, p) in rgb.enumerate_pixels() {{\n            \
         for c in 0..3 {{\n                \
         x[[0, c, py as usize, px as usize]] = f32::from(p[2 - c]) - [104.0, 117.0, 123.0][c];\n            \
         }}\n        }}\n    }}\n    \
         Ok(x)\n}}\n\n\
         fn main() -> Result<(), AppError> {{\n    \
         let args = Args::parse();\n    \
         let scores = classify(pixels(&args)?).map_err(|e| AppError::Model(e.to_string()))?;\n    \
         let class = scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(c, _)| c);\n    \
         let json = serde_json::to_string(&Answer {{ class }}).map_err(|e| AppError::Model(e.to_string()))?;\n    \
         println!(\"{{json}}\");\n    \
         Ok(())\n}}\n"
    );
    write_crate(root, dir, &manifest, build_rs, &main_rs)?;
    match app {
        App::Handmade(artifact) => {
            std::fs::copy(artifact, dir.join("models/squeezenet1.0.int8.onnx"))?;
        }
        App::Kenosis => {
            std::fs::copy(root.join(MODEL), dir.join("models/squeezenet1.0.onnx"))
                .with_context(|| format!("copying {MODEL}"))?;
        }
    }
    Ok(())
}

/// Writes the hand-made crate into `dir`, embedding `artifact`.
fn handmade_crate(root: &Path, dir: &Path, artifact: &Path) -> Result<()> {
    let (ort, ndarray) = workspace_dependencies(root)?;
    let manifest = format!(
        "[package]\nname = \"handmade\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n\
         [dependencies]\n{ort}\n{ndarray}\n"
    );
    let main_rs = "use ort::session::Session;\nuse ort::value::Tensor;\n\n\
                   static MODEL: &[u8] = include_bytes!(\"../models/squeezenet1.0.int8.onnx\");\n\n\
                   fn main() -> ort::Result<()> {\n    \
                   let environment = ort::init().with_name(\"handmade\").build()?;\n    \
                   let mut session = Session::builder(&environment)?.commit_from_memory(MODEL)?;\n    \
                   let image = ndarray::Array4::<f32>::zeros((1, 3, 224, 224));\n    \
                   let outputs = session.run(ort::inputs![Tensor::from_array(image)?])?;\n    \
                   let scores = outputs[0].try_extract_array::<f32>()?;\n    \
                   let best = scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1));\n    \
                   println!(\"class {:?}\", best.map(|(class, _)| class));\n    \
                   Ok(())\n}\n";
    write_crate(root, dir, &manifest, None, main_rs)?;
    std::fs::copy(artifact, dir.join("models/squeezenet1.0.int8.onnx"))?;
    Ok(())
}

/// The `ort = ...` and `ndarray = ...` lines of the workspace's `[workspace.dependencies]`.
fn workspace_dependencies(root: &Path) -> Result<(String, String)> {
    let toml = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let line = |name: &str| {
        toml.lines()
            .find(|l| l.starts_with(&format!("{name} = ")))
            .map(str::to_owned)
            .with_context(|| format!("no `{name} = ` line in the workspace's Cargo.toml"))
    };
    Ok((line("ort")?, line("ndarray")?))
}

/// A fresh crate in `dir` with the workspace's `Cargo.lock` (it pins every dependency, so the
/// crate builds offline).
fn write_crate(
    root: &Path,
    dir: &Path,
    manifest: &str,
    build_rs: Option<&str>,
    main_rs: &str,
) -> Result<()> {
    clean(dir)?;
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::create_dir_all(dir.join("models"))?;
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))?;
    if let Some(build_rs) = build_rs {
        std::fs::write(dir.join("build.rs"), build_rs)?;
    }
    std::fs::write(dir.join("src/main.rs"), main_rs)?;
    Ok(())
}

/// Removes `dir` if it exists.
fn clean(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// `cargo build --release --offline` of the crate in `krate`, timed.
fn cargo_build(
    ort: &OrtEnv,
    krate: &Path,
    target_dir: &Path,
    cache: Option<&Path>,
) -> Result<Build> {
    timed(cargo_command(ort, krate, target_dir, cache), krate)
}

/// [`cargo_build`] of a Kenosis crate as a user runs it: no `KENOSIS_QUANTIZER`, no `kenosis`
/// on `PATH` (the variable is removed, and `PATH` keeps only folders without one), the
/// per-user folder under the bench's, offline (the nested build of the quantizer too).
fn kenosis_build(ort: &OrtEnv, dirs: &Layout, krate: &Path, target_dir: &Path) -> Result<Build> {
    let mut cmd = cargo_command(ort, krate, target_dir, Some(&dirs.cache));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let without: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("kenosis").exists())
        .collect();
    cmd.env_remove("KENOSIS_QUANTIZER")
        .env("PATH", std::env::join_paths(without)?)
        .env("XDG_CACHE_HOME", &dirs.user_cache)
        .env("CARGO_NET_OFFLINE", "true");
    timed(cmd, krate)
}

/// The `cargo build --release --offline` command of the crate in `krate`.
fn cargo_command(ort: &OrtEnv, krate: &Path, target_dir: &Path, cache: Option<&Path>) -> Command {
    let mut cmd = crate::cargo::command(ort);
    cmd.current_dir(krate)
        .args(["build", "--release", "--offline", "--color", "never"])
        .env("CARGO_TARGET_DIR", target_dir)
        // A compiler cache would turn the clean builds into cache lookups.
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_BUILD_RUSTC_WRAPPER");
    if let Some(cache) = cache {
        cmd.env("KENOSIS_CACHE_DIR", cache);
    }
    cmd
}

/// Runs `cmd` (a build of `krate`) and times it.
fn timed(mut cmd: Command, krate: &Path) -> Result<Build> {
    let cpu_before = children_cpu_seconds()?;
    let start = Instant::now();
    let output = cmd.output().context("starting cargo")?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = children_cpu_seconds()? - cpu_before;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        bail!(
            "building {} failed: {}\n{stderr}",
            krate.display(),
            output.status
        );
    }
    let compiled = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("Compiling "))
        .count();
    Ok(Build {
        seconds,
        cpu_seconds,
        compiled,
        stderr,
    })
}

/// Whether `text` holds the build script's summary line of a quantization.
fn says_quantized(text: &str) -> bool {
    QUANTIZED.iter().any(|q| text.contains(q))
}

/// The seconds at the end of the build script's `kenosis: quantized ...; 10.6 s` line.
fn quantize_seconds(stderr: &str) -> Option<f64> {
    let line = stderr.lines().find(|l| says_quantized(l))?;
    let (_, last) = line.trim_end().strip_suffix(" s")?.rsplit_once("; ")?;
    last.parse().ok()
}

/// The newest `*.int8.onnx` the Kenosis crate's build script wrote under `target_dir`.
fn newest_artifact(target_dir: &Path) -> Result<PathBuf> {
    let build = target_dir.join("release/build");
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(&build).with_context(|| format!("{}", build.display()))? {
        // The build script writes its artifacts to `$OUT_DIR/kenosis/`.
        let out = entry?.path().join("out/kenosis");
        let Ok(files) = std::fs::read_dir(&out) else {
            continue;
        };
        for file in files {
            let path = file?.path();
            if path.to_string_lossy().ends_with(".int8.onnx") {
                let modified = path.metadata()?.modified()?;
                if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                    newest = Some((modified, path));
                }
            }
        }
    }
    newest
        .map(|(_, path)| path)
        .with_context(|| format!("no *.int8.onnx under {}", build.display()))
}

/// Runs the hand-made binary and the Kenosis one, which run the same INT8 model on the same
/// input, and checks that they print the same answer.
fn same_answer(ort: &OrtEnv, handmade: &Path, kenosis: &Path) -> Result<()> {
    let (expected, got) = (run_binary(ort, handmade)?, run_binary(ort, kenosis)?);
    ensure!(
        expected == got,
        "{} and {} disagree: hand-made printed {expected:?}, Kenosis {got:?}",
        handmade.display(),
        kenosis.display()
    );
    Ok(())
}

/// Runs `binary` and returns what it printed.
fn run_binary(ort: &OrtEnv, binary: &Path) -> Result<String> {
    let output = Command::new(binary)
        .envs(ort.vars())
        .output()
        .with_context(|| format!("starting {}", binary.display()))?;
    ensure!(
        output.status.success(),
        "{} failed: {}\n{}",
        binary.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// User plus system CPU seconds of this process's waited-for children and their waited-for
/// descendants so far (`getrusage(RUSAGE_CHILDREN)`).
fn children_cpu_seconds() -> Result<f64> {
    // SAFETY: an all-zero `rusage` is a valid value, and `getrusage` writes only into the
    // pointer it is given, which outlives the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        bail!("getrusage: {}", std::io::Error::last_os_error());
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

/// The median wall and the median CPU seconds of `builds` (not empty).
fn median(builds: Vec<Build>) -> (f64, f64) {
    let middle = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    (
        middle(builds.iter().map(|b| b.seconds).collect()),
        middle(builds.iter().map(|b| b.cpu_seconds).collect()),
    )
}

/// The one-minute load average (`/proc/loadavg`), where there is one.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::{app_crate, quantize_seconds, App, MODEL};

    /// Both variants of the typical application are Rust that parses, with the five
    /// libraries in their manifest and the model where their code looks for it.
    #[test]
    fn the_typical_application_is_written_whole() {
        let root = crate::workspace_root();
        if !root.join(MODEL).exists() {
            eprintln!("skipped: {MODEL} is absent");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let artifact = dir.path().join("m.int8.onnx");
        std::fs::write(&artifact, b"bytes").unwrap();
        for (name, app, model) in [
            (
                "handmade",
                App::Handmade(&artifact),
                "squeezenet1.0.int8.onnx",
            ),
            ("kenosis", App::Kenosis, "squeezenet1.0.onnx"),
        ] {
            let krate = dir.path().join(name);
            app_crate(&root, &krate, app).unwrap();
            let main = std::fs::read_to_string(krate.join("src/main.rs")).unwrap();
            syn::parse_file(&main).unwrap_or_else(|e| panic!("{name}: {e}\n{main}"));
            assert!(main.contains(&format!("models/{model}")), "{main}");
            assert!(krate.join("models").join(model).is_file(), "{name}");
            let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
            for library in [
                "clap",
                "serde",
                "serde_json",
                "image",
                "thiserror",
                "ndarray",
            ] {
                assert!(manifest.contains(&format!("\n{library} = ")), "{manifest}");
            }
            assert_eq!(krate.join("build.rs").exists(), name == "kenosis");
        }
    }

    #[test]
    fn the_quantization_time_is_read_off_the_summary_line() {
        let stderr = "   Compiling kenosis v0.1.0\nwarning: kenosis@0.1.0: kenosis: quantized \
                      models/squeezenet1.0.onnx to INT8: 66 ops (Conv 26); 4.8 MB -> 1.3 MB; \
                      16 synthetic calibration samples ([0, 1]); 10.6 s\n";
        assert_eq!(quantize_seconds(stderr), Some(10.6));
        let kept = "warning: kenosis@0.1.0: kenosis: kept models/squeezenet1.0.onnx in FP32: \
                    INT8 against FP32 on this machine: 0.55x (0.52-0.58) at 1 thread (at worst \
                    INT8 2.000 ms, FP32 1.100 ms, median), below the floor 1; the artifact is \
                    the FP32 model (4.8 MB); 9.4 s\n";
        assert_eq!(quantize_seconds(kept), Some(9.4));
        assert_eq!(quantize_seconds("   Compiling kenosis v0.1.0\n"), None);
    }
}
