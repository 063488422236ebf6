//! Shipping to an aarch64 device from this x86-64 machine, as a user does it: cross-build with
//! nothing but the `.cargo/config.toml` fragment `cargo xtask setup-ort --target
//! aarch64-unknown-linux-gnu` prints, copy the `bundled-ort` binary (the example's built with
//! the README's small-binary settings) alone into an empty folder, run it under
//! `qemu-aarch64`, and compare its INT8 logits with the host's FP32 model.
//!
//! `cargo xtask test` provisions the cross tools and writes the fragment to the file that
//! `KENOSIS_CROSS_CONFIG` names. Without it the tests skip with a note, except under
//! `CI=true`, where they fail. ONNX Runtime's CPU detection crashes under qemu-user on the
//! host's x86 `/proc/cpuinfo`, so the binary runs in a private mount namespace with an aarch64
//! cpuinfo (`fixtures/aarch64-cpuinfo.txt`) bound over it (needs root, as CI has).

use std::path::{Path, PathBuf};
use std::process::Command;

use kenosis_eval::{argmax, imagenet_files, shared_dir, workspace_root};
use kenosis_request::kernels::{Evaluation, IntegerKernels, TargetCpu};
use kenosis_runtime::EmbeddedModel;
use ndarray::Axis;

#[path = "../../examples/classify/src/preprocess.rs"]
mod preprocess;

const TARGET: &str = "aarch64-unknown-linux-gnu";
/// Images compared, spread over the shared ImageNet set.
const IMAGES: usize = 20;
/// Of those, how many must have the host FP32 model's top-1.
const MIN_TOP1: usize = 19;
/// Mean logits cosine against the host FP32 model.
const MIN_COSINE: f64 = 0.99;
/// How far the build's reported cosine may be from the device's on the same samples.
const REPORT_TOLERANCE: f64 = 0.005;
/// The README's small-binary release settings ("Cross-compiling for a device"), as `cargo
/// --config` values: the example is shipped as the README says.
const SMALL_BINARY: [&str; 5] = [
    "profile.release.strip=true",
    "profile.release.lto=true",
    "profile.release.codegen-units=1",
    "profile.release.panic=\"abort\"",
    "profile.release.opt-level=\"s\"",
];

/// The fragment file, or `None` (skip) outside CI.
fn cross_config() -> Option<PathBuf> {
    match std::env::var_os("KENOSIS_CROSS_CONFIG").filter(|v| !v.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("KENOSIS_CROSS_CONFIG is unset under CI=true: run through `cargo xtask test`")
        }
        None => {
            eprintln!("note: skipping, KENOSIS_CROSS_CONFIG unset (run `cargo xtask test`)");
            None
        }
    }
}

/// `cargo build --release --target aarch64` in `dir` with `args`, in the shared cross target
/// folder, with none of the ONNX Runtime variables of this process: only config files speak.
/// Returns whether it succeeded, and its output.
fn try_cross_build(dir: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(dir)
        .args(["build", "--release", "--target", TARGET])
        .args(args)
        .env("CARGO_TARGET_DIR", cross_target_dir());
    for var in [
        "ORT_LIB_PATH",
        "ORT_DYLIB_PATH",
        "ORT_PREFER_DYNAMIC_LINK",
        "LD_LIBRARY_PATH",
    ] {
        cmd.env_remove(var);
    }
    let output = cmd.output().expect("cargo runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// [`try_cross_build`], which must succeed.
fn cross_build(dir: &Path, args: &[&str]) {
    let (ok, text) = try_cross_build(dir, args);
    assert!(ok, "cross build in {} failed:\n{text}", dir.display());
}

/// `cross` in the workspace's target folder, wherever cargo puts that.
fn cross_target_dir() -> PathBuf {
    kenosis_eval::target_dir().join("cross")
}

/// Copies `binary` alone into a new empty folder and runs it there under qemu-aarch64 with
/// `flags`, then `files`; returns its stdout.
fn run_alone_on_qemu(binary: &Path, flags: &[&str], files: &[PathBuf]) -> String {
    let folder = tempfile::tempdir().expect("tempdir");
    let alone = folder.path().join(binary.file_name().expect("binary name"));
    std::fs::copy(binary, &alone).expect("copy the binary");
    let cpuinfo = workspace_root().join("tests/fixtures/aarch64-cpuinfo.txt");
    // sh -c 'mount ... && exec qemu-aarch64 -L SYSROOT "$0" "$@"' BINARY ARGS...
    let output = Command::new("unshare")
        .arg("-m")
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "mount --bind '{}' /proc/cpuinfo && exec qemu-aarch64 -L /usr/aarch64-linux-gnu \"$0\" \"$@\"",
            cpuinfo.display()
        ))
        .arg(&alone)
        .args(flags)
        .args(files)
        .current_dir(folder.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("unshare runs (util-linux)");
    assert!(
        output.status.success(),
        "{} under qemu-aarch64 failed ({}):\n{}",
        alone.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Parses `path<TAB>v0,v1,...` lines.
fn parse_logits(stdout: &str) -> Vec<Vec<f32>> {
    stdout
        .lines()
        .map(|line| {
            let (_, values) = line.split_once('\t').expect("path<TAB>logits");
            values
                .split(',')
                .map(|v| v.parse().expect("a float"))
                .collect()
        })
        .collect()
}

/// The host FP32 EfficientNet-Lite0's logits for each image, preprocessed as the example does.
fn host_fp32_logits(images: &[PathBuf]) -> Vec<Vec<f32>> {
    let path = workspace_root().join("examples/classify/models/efficientnet_lite0.onnx");
    let bytes = std::fs::read(path).expect("the example's model");
    logits(
        &EmbeddedModel::from_static_bytes("efficientnet_lite0 (FP32)", bytes.leak()),
        images,
    )
}

/// Mean cosine, and how many samples agree on top-1.
fn agreement(device: &[Vec<f32>], host: &[Vec<f32>]) -> (f64, usize) {
    assert_eq!(device.len(), host.len(), "one line per image");
    let cosine: f64 = device
        .iter()
        .zip(host)
        .map(|(a, b)| kenosis_quantize::fidelity::cosine(a, b))
        .sum::<f64>()
        / host.len() as f64;
    let top1 = device
        .iter()
        .zip(host)
        .filter(|(a, b)| argmax(a) == argmax(b))
        .count();
    (cosine, top1)
}

/// `IMAGES` shared ImageNet images spread over the set, none of the example's calibration
/// images.
fn evaluation_images(shared: &Path) -> Vec<PathBuf> {
    let calibration = calibration_images();
    let names: Vec<_> = calibration.iter().filter_map(|p| p.file_name()).collect();
    let files: Vec<PathBuf> = imagenet_files(shared)
        .into_iter()
        .filter(|p| !p.file_name().is_some_and(|n| names.contains(&n)))
        .collect();
    let images: Vec<PathBuf> = files
        .iter()
        .step_by(files.len() / IMAGES)
        .take(IMAGES)
        .cloned()
        .collect();
    assert_eq!(images.len(), IMAGES);
    images
}

/// The example's calibration images, in the file-name order its `.npy` files have.
fn calibration_images() -> Vec<PathBuf> {
    kenosis_eval::sorted_files(
        &workspace_root().join("examples/classify/calib-images"),
        "JPEG",
    )
}

/// The manifest the newest cross build of the example wrote, and the report of the artifact
/// it names.
fn newest_classify_build() -> (serde_json::Value, serde_json::Value) {
    let build = cross_target_dir().join(TARGET).join("release/build");
    let newest = std::fs::read_dir(&build)
        .expect("the cross build's build folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|dir| {
            dir.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("classify-"))
        })
        .map(|dir| dir.join("out/kenosis-manifest.json"))
        .filter_map(|m| Some((m.metadata().and_then(|d| d.modified()).ok()?, m)))
        .max()
        .map(|(_, manifest)| manifest)
        .expect("a manifest of the example's cross build");
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).expect("readable")).expect("JSON")
    };
    let manifest = read(&newest);
    let report = read(Path::new(
        manifest["models"][0]["report_path"]
            .as_str()
            .expect("report_path"),
    ));
    (manifest, report)
}

#[test]
fn the_example_cross_built_with_bundled_ort_runs_alone_on_aarch64_and_its_report_holds() {
    let (Some(shared), Some(config)) = (shared_dir(), cross_config()) else {
        return;
    };
    let config = config.to_string_lossy().into_owned();
    let mut args = vec![
        "--config",
        &config,
        "-p",
        "classify",
        "--features",
        "bundled-ort",
    ];
    for setting in SMALL_BINARY {
        args.extend(["--config", setting]);
    }
    cross_build(&workspace_root(), &args);
    let binary = cross_target_dir().join(TARGET).join("release/classify");
    // Its size is the deploy bench's business (docs/benchmarks.md); noted here for the log.
    let size = std::fs::metadata(&binary).expect("the binary").len();
    eprintln!(
        "aarch64 classify, bundled-ort, small-binary settings: {:.1} MiB",
        size as f64 / (1024.0 * 1024.0)
    );

    let images = evaluation_images(&shared);
    let device = parse_logits(&run_alone_on_qemu(&binary, &["--logits"], &images));
    let (cosine, top1) = agreement(&device, &host_fp32_logits(&images));
    eprintln!(
        "aarch64 INT8 vs host FP32 on {IMAGES} images: cosine {cosine:.4}, top-1 {top1}/{IMAGES}"
    );
    assert!(
        top1 >= MIN_TOP1,
        "top-1 agrees on {top1} of {IMAGES} images"
    );
    assert!(cosine >= MIN_COSINE, "mean cosine {cosine:.4}");

    // The build's fidelity line, measured on the host, against the device on the same samples.
    let (manifest, report) = newest_classify_build();
    let fidelity = &report["fidelity"];
    assert_eq!(
        fidelity["evaluation"],
        expected_evaluation(),
        "how an aarch64 artifact is measured on this host: {fidelity}"
    );
    let samples = fidelity["samples"].as_u64().expect("samples") as usize;
    let calibration = calibration_images();
    let compared = &calibration[calibration.len() - samples..];
    let host = host_fp32_logits(compared);
    let device = parse_logits(&run_alone_on_qemu(&binary, &["--logits"], compared));
    let (device_cosine, _) = agreement(&device, &host);
    let reported = fidelity["measured"]["mean_cosine"]
        .as_f64()
        .expect("mean_cosine");
    // The QDQ reference, whichever evaluation this host's build used: it is what a host
    // whose kernels saturate reports for this artifact.
    let artifact = manifest["models"][0]["artifact_path"]
        .as_str()
        .expect("artifact_path");
    let (reference_cosine, _) =
        agreement(&qdq_reference_logits(Path::new(artifact), compared), &host);
    eprintln!(
        "on {samples} samples: report {reported:.4}, QDQ reference {reference_cosine:.4}, aarch64 {device_cosine:.4}"
    );
    for (what, cosine) in [
        ("the report", reported),
        ("the QDQ reference", reference_cosine),
    ] {
        assert!(
            (cosine - device_cosine).abs() <= REPORT_TOLERANCE,
            "{what} says {cosine:.4}, the device gives {device_cosine:.4} on the same {samples} samples"
        );
    }
}

/// `kenosis probe` cross-built with `bundled-ort` runs alone on the device (qemu here, with
/// the quick measurement: emulated timings mean nothing and no figure is asserted), names
/// the device's CPU, and an aarch64 build with its profile prices with it: the cache key's
/// line and the report's `kernel_costs` say so.
#[test]
fn a_device_profile_probed_on_aarch64_prices_an_aarch64_build() {
    let Some(config) = cross_config() else {
        return;
    };
    let config = config.to_string_lossy().into_owned();
    cross_build(
        &workspace_root(),
        &[
            "--config",
            &config,
            "-p",
            "kenosis-cli",
            "--no-default-features",
            "--features",
            "bundled-ort",
        ],
    );
    let binary = cross_target_dir().join(TARGET).join("release/kenosis");
    let out = run_alone_on_qemu(
        &binary,
        &["probe", "--quick", "--format", "json", "-o", "board.json"],
        &[],
    );
    let printed: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("board.json");
    std::fs::write(&path, printed["profile"].to_string()).expect("writes");
    let (profile, hash) =
        kenosis_request::device_profile::DeviceProfile::read(&path).expect("a profile");
    // What `tests/fixtures/aarch64-cpuinfo.txt` names.
    assert_eq!(profile.cpu, "aarch64 (CPU implementer 0x41, part 0xd0c)");
    assert_eq!(profile.cpu_class, TargetCpu::Aarch64.canonical());
    assert!(
        profile.cpu_flags.contains("asimddp"),
        "{}",
        profile.cpu_flags
    );

    // The build quantizes in a child process: ONNX Runtime allows one environment per
    // process, and this binary's other tests make kenosis-runtime's.
    let built = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "build_with_a_device_profile",
            "--ignored",
            "--quiet",
        ])
        .env(PROFILE_BUILD_VAR, dir.path())
        .status()
        .expect("the child runs");
    assert!(built.success(), "the aarch64 build with the profile failed");
    let manifest = kenosis_manifest::Manifest::read(&kenosis_manifest::Manifest::path_in(
        &dir.path().join("out"),
    ))
    .expect("the manifest");
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&manifest.models[0].report_path).expect("the report"),
    )
    .expect("JSON");
    assert_eq!(report["kernel_costs"]["device"], profile.cpu.as_str());
    assert_eq!(
        report["kernel_costs"]["costs"],
        serde_json::to_value(profile.at_default_threads).expect("JSON")
    );
    let options = report["options"].as_str().expect("options");
    assert!(
        options.ends_with(&format!(
            "kernel_costs = measured on device profile {hash}\n"
        )),
        "{options}"
    );
}

/// The folder holding `board.json`, where [`build_with_a_device_profile`] builds.
const PROFILE_BUILD_VAR: &str = "KENOSIS_TEST_PROFILE_BUILD";

/// An aarch64 build of the tiny fixture priced with the profile `board.json` in the folder
/// [`PROFILE_BUILD_VAR`] names, into `out` there.
#[test]
#[ignore = "run by a_device_profile_probed_on_aarch64_prices_an_aarch64_build in a child process"]
fn build_with_a_device_profile() {
    let dir = PathBuf::from(std::env::var_os(PROFILE_BUILD_VAR).expect("run by the parent test"));
    kenosis_build::Config::new()
        .model("fixtures/tiny/tiny_conv.onnx")
        .manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .out_dir(dir.join("out"))
        .cache_dir(dir.join("cache"))
        .target(TARGET)
        .device_profile(dir.join("board.json"))
        .compile()
        .expect("the aarch64 build");
}

/// The evaluation an aarch64 artifact gets on this machine, by kenosis-build's own rule (the
/// QDQ reference where the host's x86 kernels saturate), as the report writes it.
fn expected_evaluation() -> serde_json::Value {
    let evaluation = Evaluation::for_kernels(
        TargetCpu::of_target(TARGET, "").integer_kernels(),
        IntegerKernels::of_host(),
    );
    serde_json::to_value(evaluation).expect("serializes")
}

/// The artifact's logits on this host with ONNX Runtime's QDQ fusions off.
fn qdq_reference_logits(artifact: &Path, images: &[PathBuf]) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(artifact).expect("the artifact");
    let model = EmbeddedModel::from_static_bytes("artifact (QDQ reference)", bytes.leak());
    model
        .configure_session(|mut b| {
            for (key, value) in Evaluation::QdqReference.session_config() {
                b = b.with_config_entry(key, value)?;
            }
            Ok(b)
        })
        .expect("not loaded yet");
    logits(&model, images)
}

/// `model`'s first output for each image, preprocessed as the example does.
fn logits(model: &EmbeddedModel, images: &[PathBuf]) -> Vec<Vec<f32>> {
    images
        .iter()
        .map(|path| {
            let jpeg = std::fs::read(path).expect("image");
            let x = preprocess::preprocess(&jpeg)
                .expect("JPEG")
                .insert_axis(Axis(0));
            let outputs = model.run([&x]).expect("runs on the host");
            outputs[0]
                .as_f32()
                .expect("float logits")
                .iter()
                .copied()
                .collect()
        })
        .collect()
}

/// The downstream crate's `Cargo.toml`: registry-style dependencies, served from the packaged
/// crates that `cargo xtask test` made (`KENOSIS_PACKAGED_DIR`, through `[patch.crates-io]`),
/// or from this repository's folders when run without it (outside CI only).
fn downstream_manifest() -> String {
    let root = workspace_root();
    // Every crate `cargo package` unpacked (`<name>-<version>/`), or this repository's.
    let sources: Vec<(String, PathBuf)> = match std::env::var_os("KENOSIS_PACKAGED_DIR") {
        Some(dir) => std::fs::read_dir(&dir)
            .expect("the packaged crates")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.join("Cargo.toml").is_file())
            .map(|path| {
                let folder = path
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned();
                let (name, _version) = folder.rsplit_once('-').expect("<name>-<version>");
                (name.to_owned(), path)
            })
            .collect(),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("KENOSIS_PACKAGED_DIR is unset under CI=true: run through `cargo xtask test`")
        }
        None => [
            "kenosis-options",
            "kenosis-manifest",
            "kenosis-numerics",
            "kenosis-macros",
            "kenosis-runtime",
            "kenosis-build",
            "kenosis-cli",
        ]
        .iter()
        .map(|name| (name.to_string(), root.join(name)))
        .collect(),
    };
    let patches: String = sources
        .iter()
        .map(|(name, dir)| {
            assert!(
                dir.join("Cargo.toml").is_file(),
                "no crate at {}",
                dir.display()
            );
            format!("{name} = {{ path = \"{}\" }}\n", dir.display())
        })
        .collect();
    format!(
        r#"[package]
name = "edge-app"
version = "0.1.0"
edition = "2021"

[dependencies]
kenosis-runtime = {{ version = "0.1", default-features = false, features = ["bundled-ort"] }}

[build-dependencies]
kenosis-build = {{ version = "0.1", default-features = false }}

[profile.release.package.zstd-sys]
opt-level = 3

[patch.crates-io]
{patches}
[workspace]
"#
    )
}

/// A crate outside this workspace, as a user writes it: `kenosis-runtime` with `bundled-ort`,
/// `discover()` in `build.rs`, EfficientNet-Lite0 calibrated on the example's images, a `main`
/// that prints `path<TAB>logits` for raw f32 `[3, 224, 224]` tensor files, and
/// `cargo_config` as its `.cargo/config.toml`.
fn downstream_crate(shared: &Path, cargo_config: &str) -> tempfile::TempDir {
    let root = workspace_root();
    let krate = tempfile::tempdir().expect("tempdir");
    let dir = krate.path();
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write("Cargo.toml", &downstream_manifest());
    write(".cargo/config.toml", cargo_config);
    // The workspace's lock file pins the same dependency versions (and shares their builds).
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("Cargo.lock");
    write(
        "build.rs",
        "fn main() {\n    kenosis_build::discover().expect(\"kenosis\");\n}\n",
    );
    write(
        "src/main.rs",
        r#"//! Prints `path<TAB>logits` for each raw f32 [3, 224, 224] tensor file given.
kenosis_runtime::include_quantized!(
    struct Net = "models/efficientnet_lite0.onnx",
    calibration = "calib",
);

fn main() {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).expect("input tensor");
        let values = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let x = kenosis_runtime::ndarray::Array4::from_shape_vec((1, 3, 224, 224), values)
            .expect("3x224x224 floats");
        let logits = Net.run(x.view()).expect("INT8 runs");
        let text: Vec<String> = logits.iter().map(f32::to_string).collect();
        println!("{path}\t{}", text.join(","));
    }
}
"#,
    );
    std::fs::create_dir_all(dir.join("models")).expect("mkdir");
    std::fs::copy(
        shared.join("models/efficientnet_lite0.onnx"),
        dir.join("models/efficientnet_lite0.onnx"),
    )
    .expect("model");
    std::fs::create_dir_all(dir.join("calib")).expect("mkdir");
    for image in calibration_images() {
        let jpeg = std::fs::read(&image).expect("image");
        let x = preprocess::preprocess(&jpeg).expect("JPEG");
        let name = image
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        let mut npy = Vec::new();
        ndarray_npy::WriteNpyExt::write_npy(&x, &mut npy).expect("npy");
        std::fs::write(dir.join("calib").join(format!("{name}.npy")), npy).expect("write npy");
    }

    krate
}

#[test]
fn a_downstream_crate_with_only_the_printed_fragment_ships_one_binary() {
    let (Some(shared), Some(config)) = (shared_dir(), cross_config()) else {
        return;
    };
    // The very text setup-ort printed, and nothing else.
    let fragment = std::fs::read_to_string(&config).expect("the fragment");
    let krate = downstream_crate(&shared, &fragment);
    let dir = krate.path();
    // Its calibration tensors are the example's: the artifact may come from the shared cache.
    cross_build(dir, &[]);
    let binary = cross_target_dir().join(TARGET).join("release/edge-app");
    let readelf = Command::new("aarch64-linux-gnu-readelf")
        .args(["-d"])
        .arg(&binary)
        .output()
        .expect("readelf runs");
    let dynamic = String::from_utf8_lossy(&readelf.stdout);
    assert!(
        !dynamic.contains("libonnxruntime"),
        "the bundled binary must not need ONNX Runtime's library:\n{dynamic}"
    );

    let images = evaluation_images(&shared);
    let inputs = tempfile::tempdir().expect("tempdir");
    let tensors: Vec<PathBuf> = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let x = preprocess::preprocess(&std::fs::read(image).expect("image")).expect("JPEG");
            let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let path = inputs.path().join(format!("{i}.f32"));
            std::fs::write(&path, bytes).expect("write tensor");
            path
        })
        .collect();
    let device = parse_logits(&run_alone_on_qemu(&binary, &[], &tensors));
    let (cosine, top1) = agreement(&device, &host_fp32_logits(&images));
    eprintln!("downstream aarch64 INT8 vs host FP32: cosine {cosine:.4}, top-1 {top1}/{IMAGES}");
    assert!(
        top1 >= MIN_TOP1,
        "top-1 agrees on {top1} of {IMAGES} images"
    );
    assert!(cosine >= MIN_COSINE, "mean cosine {cosine:.4}");
}

#[test]
fn a_target_without_its_own_library_fails_naming_what_to_provide() {
    let (Some(shared), Some(config)) = (shared_dir(), cross_config()) else {
        return;
    };
    // The fragment without its target tables: ort-sys would link the host's library.
    let fragment = std::fs::read_to_string(&config).expect("the fragment");
    let env_only = &fragment[..fragment.find("\n[target.").expect("a [target.] table")];
    let krate = downstream_crate(&shared, env_only);
    let (ok, output) = try_cross_build(krate.path(), &[]);
    assert!(!ok, "the build must fail:\n{output}");
    for expected in [
        "cannot be used for aarch64-unknown-linux-gnu: it is built for X86_64",
        "[target.aarch64-unknown-linux-gnu.onnxruntime]",
        "dylib = ",
    ] {
        assert!(output.contains(expected), "no `{expected}` in:\n{output}");
    }
}
