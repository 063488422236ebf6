//! The `kenosis` command driven as a user drives it, on the shared SqueezeNet 1.0 and real
//! ImageNet images: help, inspect, quantize with calibration images, validate, diff, and
//! bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kenosis_build::onnx::ModelProto;
use kenosis_eval::{imagenet_files, load_batch, shared_dir, Preprocess};
use prost::Message;

fn kenosis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kenosis"))
        .args(args)
        .output()
        .expect("kenosis runs")
}

/// stdout of a run that must succeed.
fn ok(args: &[&str]) -> String {
    let out = kenosis(args);
    assert!(
        out.status.success(),
        "kenosis {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// stderr of a run that must fail.
fn fails(args: &[&str]) -> String {
    let out = kenosis(args);
    assert!(!out.status.success(), "kenosis {args:?} succeeded");
    String::from_utf8(out.stderr).expect("UTF-8")
}

/// The first number after `label` in `text`.
fn number_after(text: &str, label: &str) -> f64 {
    let rest = &text[text
        .find(label)
        .unwrap_or_else(|| panic!("`{label}` in:\n{text}"))
        + label.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a number after `{label}` in:\n{text}"))
}

/// `.npy` files of `images` in SqueezeNet's preprocessing, in `dir`.
fn npy_folder(dir: &Path, images: &[PathBuf]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for (i, x) in load_batch(images, Preprocess::BgrMeanSubtracted)
        .iter()
        .enumerate()
    {
        ndarray_npy::write_npy(dir.join(format!("{i:03}.npy")), x).expect("write npy");
    }
}

#[test]
fn help_lists_every_command() {
    let help = ok(&["--help"]);
    for command in ["quantize", "validate", "inspect", "diff"] {
        assert!(help.contains(command), "{help}");
    }
}

#[test]
fn quantize_validate_inspect_and_diff_squeezenet() {
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/squeezenet1.0.onnx");
    let fp32_arg = fp32.to_str().expect("UTF-8 path");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = imagenet_files(&shared);
    let (calib, eval) = (dir.path().join("calib"), dir.path().join("eval"));
    npy_folder(&calib, &files[..16]);
    npy_folder(&eval, &files[files.len() - 16..]);

    // inspect: what the model declares, counted from the file itself.
    let model =
        ModelProto::decode(std::fs::read(&fp32).expect("model").as_slice()).expect("decodes");
    let graph = model.graph.as_ref().expect("graph");
    let convs = graph.node.iter().filter(|n| n.op_type() == "Conv").count();
    let shown = ok(&["inspect", fp32_arg]);
    assert!(shown.contains("data_0 FLOAT [1, 3, 224, 224]"), "{shown}");
    assert!(shown.contains(&format!("\n  Conv {convs}\n")), "{shown}");
    assert!(shown.contains("IR version 3"), "{shown}");

    // quantize, with real calibration samples and an option in the macro's syntax.
    let int8 = dir.path().join("squeezenet_int8.onnx");
    let int8_arg = int8.to_str().expect("UTF-8 path");
    let said = ok(&[
        "quantize",
        fp32_arg,
        "-o",
        int8_arg,
        "--calibration",
        calib.to_str().expect("UTF-8"),
        "method=mse",
    ]);
    assert!(said.contains("kenosis: quantized"), "{said}");
    let artifact =
        ModelProto::decode(std::fs::read(&int8).expect("artifact").as_slice()).expect("decodes");
    let qdq = (artifact.graph.iter().flat_map(|g| &g.node))
        .filter(|n| n.op_type() == "QuantizeLinear")
        .count();
    assert!(qdq > 0, "the artifact holds QuantizeLinear nodes");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(int8.with_extension("json")).expect("report"))
            .expect("JSON");
    assert_eq!(report["calibration_method"], "mse", "{report}");
    assert_eq!(report["calibration_synthetic"], false, "{report}");

    // validate: the model against itself agrees exactly; the INT8 model closely, on
    // held-out real images.
    let same = ok(&[
        "validate",
        fp32_arg,
        fp32_arg,
        "--data",
        eval.to_str().expect("UTF-8"),
        "--timed",
        "3",
    ]);
    assert_eq!(number_after(&same, "cosine mean"), 1.0, "{same}");
    assert_eq!(number_after(&same, "top-1 agreement"), 100.0, "{same}");
    let checked = ok(&[
        "validate",
        fp32_arg,
        int8_arg,
        "--data",
        eval.to_str().expect("UTF-8"),
        "--timed",
        "3",
    ]);
    let cosine = number_after(&checked, "cosine mean");
    assert!(cosine > 0.95 && cosine < 1.0, "{checked}");
    assert!(number_after(&checked, "worst") <= cosine, "{checked}");
    assert!(checked.contains("on 16 the samples in"), "{checked}");
    assert!(checked.contains("latency"), "{checked}");

    // diff: the same interface, Q/DQ pairs added.
    let diff = ok(&["diff", fp32_arg, int8_arg]);
    assert!(diff.contains("inputs: the same"), "{diff}");
    assert!(
        diff.contains(&format!("QuantizeLinear: 0 → {qdq}")),
        "{diff}"
    );
}

#[test]
fn bad_input_fails_naming_the_file_or_option_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.onnx");
    let err = fails(&["inspect", missing.to_str().expect("UTF-8")]);
    assert!(err.contains("missing.onnx"), "{err}");
    let not_onnx = dir.path().join("notes.onnx");
    std::fs::write(&not_onnx, b"not a model").expect("write");
    let out = dir.path().join("out.onnx");
    let err = fails(&[
        "quantize",
        not_onnx.to_str().expect("UTF-8"),
        "-o",
        out.to_str().expect("UTF-8"),
    ]);
    assert!(
        err.contains("notes.onnx") && err.contains("not a valid ONNX model"),
        "{err}"
    );
    let err = fails(&[
        "quantize",
        not_onnx.to_str().expect("UTF-8"),
        "-o",
        out.to_str().expect("UTF-8"),
        "no_such_option=1",
    ]);
    assert!(err.contains("no_such_option"), "{err}");
    assert!(!out.exists(), "no artifact after an error");
}

/// `kenosis report` finds the manifest a package's build script wrote last (here written by
/// `kenosis_build::Config` into the `OUT_DIR` layout cargo gives it) and describes each model
/// from its report.
#[test]
fn report_describes_what_the_last_build_quantized() {
    let dir = tempfile::tempdir().expect("tempdir");
    let krate = dir.path().join("reported");
    std::fs::create_dir_all(krate.join("src")).expect("mkdir");
    std::fs::create_dir_all(krate.join("models")).expect("mkdir");
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"reported\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .expect("write");
    std::fs::write(krate.join("src/lib.rs"), "").expect("write");
    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/tiny/tiny_conv.onnx"
    );
    std::fs::copy(tiny, krate.join("models/tiny.onnx")).expect("copy");
    let target = dir.path().join("target");
    let out_dir = target.join("debug/build/reported-0123456789abcdef/out");
    kenosis_build::Config::new()
        .manifest_dir(&krate)
        .out_dir(&out_dir)
        .cache_dir(dir.path().join("cache"))
        .target("x86_64-unknown-linux-gnu")
        .fp32_where_faster(false)
        .model("models/tiny.onnx")
        .compile()
        .expect("builds");
    let out = Command::new(env!("CARGO_BIN_EXE_kenosis"))
        .args(["report", "--manifest-path"])
        .arg(krate.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("kenosis runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("(package `reported`): 1 model(s)"), "{text}");
    assert!(
        text.contains("models/tiny.onnx (default options)"),
        "{text}"
    );
    assert!(text.contains("INT8: 1 Conv"), "{text}");
    let artifact = std::fs::read_dir(out_dir.join("kenosis"))
        .expect("artifacts")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".int8.onnx"))
        .expect("the artifact");
    assert!(
        text.contains(&format!("artifact: {}", artifact.display())),
        "{text}"
    );

    // Nothing built yet in another target folder: a clear error, not an empty report.
    let out = Command::new(env!("CARGO_BIN_EXE_kenosis"))
        .args(["report", "--manifest-path"])
        .arg(krate.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", dir.path().join("empty"))
        .output()
        .expect("kenosis runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `cargo build` first"));
}
