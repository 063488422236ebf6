//! `--format json` and `--images DIR --preprocess SPEC` driven as a script and a user drive
//! them: on the shared SqueezeNet 1.0 and EfficientNet-Lite0 and real ImageNet JPEGs, the
//! JSON parsed and checked against the model files themselves, and the image path compared
//! with the `.npy` path on the same images.

use std::path::{Path, PathBuf};

use kenosis_eval::{imagenet_files, load_batch, shared_dir, Preprocess};
use kenosis_quantize::onnx::ModelProto;
use prost::Message;
use serde_json::Value;

mod support;

use support::*;

/// SqueezeNet 1.0 (Caffe): BGR, 0-255 minus the BGR channel means.
const SQUEEZENET: &str = "bgr,nchw,224x224,stretch,mean=104:117:123";
/// EfficientNet-Lite0: RGB, (x - 127) / 128, in 0-255 units.
const EFFICIENTNET: &str = "rgb,nchw,224x224,mean=127,std=128";

fn decode(path: &Path) -> ModelProto {
    ModelProto::decode(std::fs::read(path).expect("model").as_slice()).expect("decodes")
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).expect("file").len()
}

fn f64_at(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("a number at {pointer} in {v:#}"))
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("a count at {pointer} in {v:#}"))
}

/// Nodes of `model`'s main graph with operator `op`.
fn count_op(model: &ModelProto, op: &str) -> u64 {
    (model.graph.iter().flat_map(|g| &g.node))
        .filter(|n| n.op_type() == op)
        .count() as u64
}

/// `images` copied into `dir` (a folder of images only, as `--images` reads one).
fn image_folder(dir: &Path, images: &[PathBuf]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for image in images {
        std::fs::copy(image, dir.join(image.file_name().expect("a file name"))).expect("copy");
    }
}

/// `.npy` files of `images` in preprocessing `pre` (kenosis-eval's own decoder), in `dir`,
/// in the images' order.
fn npy_folder(dir: &Path, images: &[PathBuf], pre: Preprocess) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for (i, x) in load_batch(images, pre).iter().enumerate() {
        ndarray_npy::write_npy(dir.join(format!("{i:03}.npy")), x).expect("write npy");
    }
}

/// SqueezeNet: `inspect`, `diff` and `validate` print JSON whose figures are those of the
/// files (counted here from the models themselves) and of the run; the INT8 model is
/// calibrated from JPEGs with `--images`.
#[test]
fn inspect_diff_and_validate_print_json_on_squeezenet() {
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/squeezenet1.0.onnx");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = imagenet_files(&shared);
    let (calib, eval) = (dir.path().join("calib"), dir.path().join("eval"));
    image_folder(&calib, &files[..20]);
    npy_folder(
        &eval,
        &files[files.len() - 16..],
        Preprocess::BgrMeanSubtracted,
    );
    let model = decode(&fp32);
    let graph = model.graph.as_ref().expect("graph");

    // inspect
    let shown = json(&["inspect", arg(&fp32), "--format", "json"]);
    assert_eq!(shown["size_bytes"].as_u64(), Some(file_size(&fp32)));
    assert_eq!(shown["ir_version"].as_i64(), Some(model.ir_version()));
    assert_eq!(shown["nodes"].as_u64(), Some(graph.node.len() as u64));
    assert_eq!(
        shown["operators"]["Conv"].as_u64(),
        Some(count_op(&model, "Conv"))
    );
    let inputs = shown["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 1, "{shown:#}");
    assert_eq!(inputs[0]["name"], "data_0");
    assert_eq!(inputs[0]["dtype"], "f32");
    assert_eq!(inputs[0]["shape"], serde_json::json!([1, 3, 224, 224]));
    let parameters: i64 = (graph.initializer.iter())
        .map(|t| t.dims.iter().product::<i64>())
        .sum();
    assert_eq!(shown["parameters"].as_i64(), Some(parameters));
    assert_eq!(
        shown["initializers"].as_u64(),
        Some(graph.initializer.len() as u64)
    );
    assert!(shown["precision"].is_null(), "FP32: {shown:#}");
    let largest = shown["largest"].as_array().expect("largest");
    let most = (graph.initializer.iter())
        .map(|t| t.dims.iter().product::<i64>())
        .max();
    assert_eq!(largest[0]["elements"].as_i64(), most);

    // quantize from JPEGs, BGR minus the means, as the model card says.
    let int8 = dir.path().join("squeezenet.int8.onnx");
    let said = ok(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&int8),
        "--images",
        arg(&calib),
        "--preprocess",
        SQUEEZENET,
    ]);
    assert!(said.contains("calibrating on 20 images"), "{said}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(int8.with_extension("json")).expect("report"))
            .expect("JSON");
    assert_eq!(report["calibration_synthetic"], false, "{report:#}");
    assert_eq!(
        report["calibration_samples"].as_u64(),
        Some(16),
        "{report:#}"
    );
    let artifact = decode(&int8);

    // diff
    let diff = json(&["diff", arg(&fp32), arg(&int8), "--format", "json"]);
    assert_eq!(diff["inputs"]["same"], true, "{diff:#}");
    assert_eq!(diff["a"]["size_bytes"].as_u64(), Some(file_size(&fp32)));
    assert_eq!(diff["b"]["size_bytes"].as_u64(), Some(file_size(&int8)));
    let q = count_op(&artifact, "QuantizeLinear");
    assert!(q > 0);
    assert_eq!(u64_at(&diff, "/operators/QuantizeLinear/a"), 0);
    assert_eq!(u64_at(&diff, "/operators/QuantizeLinear/b"), q);
    assert_eq!(
        u64_at(&diff, "/operators/Conv/b"),
        count_op(&artifact, "Conv")
    );
    assert_eq!(
        u64_at(&diff, "/initializers/b"),
        artifact.graph.as_ref().expect("graph").initializer.len() as u64
    );

    // cast: every FP32 weight of 64 elements or more stored in 16 bits.
    let fp16 = dir.path().join("squeezenet.fp16.onnx");
    let cast = json(&[
        "cast",
        arg(&fp32),
        "--precision",
        "fp16",
        "-o",
        arg(&fp16),
        "--format",
        "json",
    ]);
    let large_floats = (graph.initializer.iter())
        .filter(|t| t.data_type() == 1 && t.dims.iter().product::<i64>() >= 64)
        .count() as u64;
    assert_eq!(u64_at(&cast, "/cast"), large_floats, "{cast:#}");
    assert_eq!(u64_at(&cast, "/size_cast"), file_size(&fp16), "{cast:#}");
    assert_eq!(u64_at(&cast, "/size_fp32"), file_size(&fp32), "{cast:#}");
    assert_eq!(cast["precision"], "fp16");

    // validate on held-out images given as .npy: the figures the text prints, as numbers.
    let checked = json(&[
        "validate",
        arg(&fp32),
        arg(&int8),
        "--data",
        arg(&eval),
        "--timed",
        "3",
        "--threads",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(checked["data"]["kind"], "npy", "{checked:#}");
    assert_eq!(checked["int8_label"], "INT8", "{checked:#}");
    assert_eq!(checked["size_fp32"].as_u64(), Some(file_size(&fp32)));
    assert_eq!(checked["size_int8"].as_u64(), Some(file_size(&int8)));
    assert_eq!(u64_at(&checked, "/fidelity/samples"), 16);
    let mean = f64_at(&checked, "/fidelity/measured/mean_cosine");
    let worst = f64_at(&checked, "/fidelity/measured/min_cosine");
    let bound = f64_at(&checked, "/fidelity/measured/cosine_lower_bound");
    let top1 = f64_at(&checked, "/fidelity/measured/top1_agreement");
    assert!(mean > 0.95 && mean < 1.0, "{checked:#}");
    assert!(worst <= mean && bound <= mean, "{checked:#}");
    assert!((0.0..=1.0).contains(&top1), "{checked:#}");
    assert!(f64_at(&checked, "/speed/fp32_ms") > 0.0);
    assert!(f64_at(&checked, "/speed/int8_ms") > 0.0);
    assert_eq!(u64_at(&checked, "/speed/runs"), 3);
    assert_eq!(u64_at(&checked, "/speed/threads"), 2);
    let cpu = checked["speed"]["cpu"].as_str().expect("the CPU timed on");
    assert!(!cpu.is_empty() && !cpu.contains('\n'), "{checked:#}");
    let ops = checked
        .pointer("/op_losses/ops")
        .and_then(Value::as_array)
        .expect("op losses");
    assert!(!ops.is_empty(), "{checked:#}");
    for op in ops {
        let node = op["node"].as_str().expect("a node name");
        let kept = (artifact.graph.iter().flat_map(|g| &g.node)).find(|n| n.name() == node);
        assert_eq!(
            kept.map(|n| n.op_type()),
            op["op_type"].as_str(),
            "{checked:#}"
        );
    }

    // The text form says the same: the mean cosine to the four decimals it shows.
    let text = ok(&[
        "validate",
        arg(&fp32),
        arg(&int8),
        "--data",
        arg(&eval),
        "--timed",
        "1",
    ]);
    assert!(
        text.contains(&format!("cosine mean {mean:.4}")),
        "{mean:.4} in:\n{text}"
    );

    // Without data: synthetic samples, which say the range they assumed for the image.
    let synthetic = json(&[
        "validate",
        arg(&fp32),
        arg(&int8),
        "--timed",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(synthetic["data"]["kind"], "synthetic", "{synthetic:#}");
    assert!(synthetic["data"]["path"].is_null(), "{synthetic:#}");
    let range = synthetic
        .pointer("/data/synthetic_image_ranges/data_0")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("a range for data_0 in {synthetic:#}"));
    let text = ok(&["validate", arg(&fp32), arg(&int8), "--timed", "1"]);
    assert!(
        text.contains(&format!("image input `data_0` in {range}")),
        "{range} in:\n{text}"
    );
}

/// EfficientNet-Lite0 from raw JPEGs in two commands, `quantize --images` then `validate
/// --images`, gives the fidelity of the `.npy` path on the same images (decoded here by
/// kenosis-eval's own preprocessing, RGB (x - 127) / 128).
#[test]
fn efficientnet_from_images_matches_the_npy_path() {
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/efficientnet_lite0.onnx");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = imagenet_files(&shared);
    let calib_files = &files[..20];
    let eval_files: Vec<PathBuf> = files
        .iter()
        .skip(100)
        .step_by(40)
        .take(20)
        .cloned()
        .collect();
    let (calib_images, calib_npy) = (dir.path().join("calib"), dir.path().join("calib-npy"));
    let (eval_images, eval_npy) = (dir.path().join("eval"), dir.path().join("eval-npy"));
    image_folder(&calib_images, calib_files);
    npy_folder(&calib_npy, calib_files, Preprocess::RgbCentered);
    image_folder(&eval_images, &eval_files);
    npy_folder(&eval_npy, &eval_files, Preprocess::RgbCentered);

    let from_images = dir.path().join("images.int8.onnx");
    let from_npy = dir.path().join("npy.int8.onnx");
    let quantized = json(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&from_images),
        "--images",
        arg(&calib_images),
        "--preprocess",
        EFFICIENTNET,
        "--format",
        "json",
    ]);
    // The JSON names the files written and holds the report as written.
    assert_eq!(quantized["artifact_path"], arg(&from_images));
    assert_eq!(quantized["data"]["kind"], "images");
    assert_eq!(
        quantized["data"]["preprocess"],
        "rgb,nchw,224x224,stretch,scale=1,mean=127,std=128"
    );
    let written: Value = serde_json::from_slice(
        &std::fs::read(quantized["report_path"].as_str().expect("report_path")).expect("report"),
    )
    .expect("JSON");
    assert_eq!(quantized["report"], written);
    assert_eq!(
        quantized["report"]["size_int8"].as_u64(),
        Some(file_size(&from_images))
    );
    ok(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&from_npy),
        "--calibration",
        arg(&calib_npy),
    ]);
    let report = |artifact: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(artifact.with_extension("json")).expect("report"))
            .expect("JSON")
    };
    let (ri, rn) = (report(&from_images), report(&from_npy));
    assert_eq!(ri["calibration_samples"], rn["calibration_samples"]);
    let build_cosine = |r: &Value| f64_at(r, "/fidelity/measured/mean_cosine");
    eprintln!(
        "build fidelity: images {:.6}, npy {:.6}",
        build_cosine(&ri),
        build_cosine(&rn)
    );
    // Within noise: a few held-out samples, a cosine near 0.997.
    assert!(
        (build_cosine(&ri) - build_cosine(&rn)).abs() < 2e-3,
        "{ri:#}\n{rn:#}"
    );

    // validate each artifact on held-out JPEGs, and on the same images as .npy.
    let validate = |artifact: &Path, data: &[&str]| -> Value {
        let mut args = vec![
            "validate",
            arg(&fp32),
            arg(artifact),
            "--timed",
            "1",
            "--format",
            "json",
        ];
        args.extend_from_slice(data);
        json(&args)
    };
    let by_images = validate(
        &from_images,
        &[
            "--images",
            arg(&eval_images),
            "--preprocess",
            "rgb,mean=127,std=128",
        ],
    );
    let by_npy = validate(&from_npy, &["--data", arg(&eval_npy)]);
    assert_eq!(by_images["data"]["kind"], "images");
    // The size the model declares fills in the spec's.
    assert_eq!(
        by_images["data"]["preprocess"],
        "rgb,nchw,224x224,stretch,scale=1,mean=127,std=128"
    );
    assert_eq!(u64_at(&by_images, "/fidelity/samples"), 20);
    assert_eq!(u64_at(&by_npy, "/fidelity/samples"), 20);
    let (ci, cn) = (
        f64_at(&by_images, "/fidelity/measured/mean_cosine"),
        f64_at(&by_npy, "/fidelity/measured/mean_cosine"),
    );
    let (ti, tn) = (
        f64_at(&by_images, "/fidelity/measured/top1_agreement"),
        f64_at(&by_npy, "/fidelity/measured/top1_agreement"),
    );
    eprintln!("validate: images cosine {ci:.6} top-1 {ti:.3}; npy cosine {cn:.6} top-1 {tn:.3}");
    assert!(ci > 0.98 && cn > 0.98, "{by_images:#}\n{by_npy:#}");
    assert!((ci - cn).abs() < 2e-3, "{by_images:#}\n{by_npy:#}");
    // Two of 20 samples changing their top-1 is noise at this size.
    assert!((ti - tn).abs() <= 0.1 + 1e-9, "{by_images:#}\n{by_npy:#}");
}

/// Bad `--images` input fails naming the folder, the image, the model or the spec item, and
/// writes no artifact.
#[test]
fn bad_image_input_fails_naming_what_is_wrong() {
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/squeezenet1.0.onnx");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.onnx");
    let quantize = |images: &Path, spec: &str| {
        fails(&[
            "quantize",
            arg(&fp32),
            "-o",
            arg(&out),
            "--images",
            arg(images),
            "--preprocess",
            spec,
        ])
    };

    // No image in the folder.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    std::fs::write(empty.join("notes.txt"), "no image").expect("write");
    let err = quantize(&empty, SQUEEZENET);
    assert!(err.contains("empty") && err.contains("no images"), "{err}");

    // A file that is not the JPEG its name says.
    let broken = dir.path().join("broken");
    image_folder(&broken, &imagenet_files(&shared)[..2]);
    std::fs::write(broken.join("zz.jpg"), "not a JPEG").expect("write");
    let err = quantize(&broken, SQUEEZENET);
    assert!(
        err.contains("zz.jpg") && err.contains("cannot be decoded"),
        "{err}"
    );

    // A size the model does not take, a layout that puts 224 channels, a bad item.
    let good = dir.path().join("good");
    image_folder(&good, &imagenet_files(&shared)[..2]);
    let err = quantize(&good, "bgr,320x320");
    assert!(
        err.contains("squeezenet1.0.onnx") && err.contains("320x320") && err.contains("224x224"),
        "{err}"
    );
    let err = quantize(&good, "nhwc");
    assert!(err.contains("channel dimension is 224"), "{err}");
    let err = quantize(&good, "bgr,mean=1:2");
    assert!(err.contains("`mean` has 2 values"), "{err}");
    let err = quantize(&good, "bgr,crop=2");
    assert!(err.contains("crop=2"), "{err}");
    assert!(!out.exists(), "no artifact after an error");

    // --images needs --preprocess, and does not go with --calibration.
    let err = fails(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&out),
        "--images",
        arg(&good),
    ]);
    assert!(err.contains("--preprocess"), "{err}");
    let err = fails(&[
        "validate",
        arg(&fp32),
        arg(&fp32),
        "--images",
        arg(&good),
        "--preprocess",
        SQUEEZENET,
        "--data",
        arg(&good),
    ]);
    assert!(err.contains("--data"), "{err}");
}

/// `kenosis report --format json` gives each model's manifest entry and its build report, as
/// the build wrote them.
#[test]
fn report_prints_the_manifest_and_each_report_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reported = Reported::build(dir.path());
    let out = reported.report(&["--format", "json"], &reported.target);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(shown["package"], "reported");
    let models = shown["models"].as_array().expect("models");
    assert_eq!(models.len(), 1, "{shown:#}");
    let model = &models[0];
    assert_eq!(model["source"], "models/tiny.onnx");
    let artifact = PathBuf::from(model["artifact_path"].as_str().expect("artifact_path"));
    let report_path = PathBuf::from(model["report_path"].as_str().expect("report_path"));
    // The report as the build wrote it, field for field.
    let written: Value =
        serde_json::from_slice(&std::fs::read(&report_path).expect("report")).expect("JSON");
    assert_eq!(model["report"], written);
    assert_eq!(u64_at(model, "/report/ops_quantized/Conv"), 1);
    assert_eq!(
        model["report"]["size_int8"].as_u64(),
        Some(file_size(&artifact))
    );
}

/// MiniLM-L3 (fetched by `cargo xtask test`) from plain text in two commands, `quantize
/// --text` then `validate --text`, with its own `tokenizer.json`: the fidelity of the `.npy`
/// path on the same token windows (made here by kenosis-eval: `[CLS]`, 126 ids, `[SEP]`, full
/// windows only), within noise. Calibration and evaluation read different licences.
#[cfg(feature = "text")]
#[test]
fn minilm_from_text_matches_the_npy_path() {
    use kenosis_eval::prose::{licence_files, minilm_tokenizer_path, windows, LICENSES_DIR};

    let Some(fp32) = kenosis_eval::fetched_model("paraphrase-MiniLM-L3-v2.onnx") else {
        return;
    };
    let Some(texts) = licence_files(&["Apache-2.0", "MPL-2.0"]) else {
        return;
    };
    let (calib_text, eval_text) = (&texts[0], &texts[1]);
    let tokenizer = minilm_tokenizer_path();
    let dir = tempfile::tempdir().expect("tempdir");
    // The .npy path: every full window of each text, ids and an all-ones mask.
    let npy = |name: &str, text: &Path| -> (PathBuf, usize) {
        let folder = dir.path().join(name);
        let mut tok = tokenizers::Tokenizer::from_file(&tokenizer).expect("tokenizer");
        tok.with_truncation(None).expect("no truncation");
        tok.with_padding(None);
        let prose = std::fs::read_to_string(text).expect("text");
        let full = tok.encode(prose, false).expect("tokenizes").get_ids().len() / 126;
        for (sub, fill) in [("input_ids", None), ("attention_mask", Some(1i64))] {
            std::fs::create_dir_all(folder.join(sub)).expect("mkdir");
            for (i, w) in windows(&tokenizer, &[text.to_owned()], full, 128)
                .into_iter()
                .enumerate()
            {
                let values: Vec<i64> = w.iter().map(|&id| fill.unwrap_or(id)).collect();
                let x = ndarray::Array2::from_shape_vec((1, 128), values).expect("a window");
                ndarray_npy::write_npy(folder.join(sub).join(format!("{i:03}.npy")), &x)
                    .expect("write npy");
            }
        }
        (folder, full)
    };
    let (calib_npy, calib_full) = npy("calib-npy", calib_text);
    let (eval_npy, eval_full) = npy("eval-npy", eval_text);
    eprintln!("{LICENSES_DIR}: {calib_full} and {eval_full} full windows");

    let from_text = dir.path().join("text.int8.onnx");
    let from_npy = dir.path().join("npy.int8.onnx");
    let said = ok(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&from_text),
        "--text",
        arg(calib_text),
        "--tokenizer",
        arg(&tokenizer),
    ]);
    // The full windows, and the rest of the text in one padded window.
    assert!(
        said.contains(&format!(
            "calibrating on {} windows of 128 tokens",
            calib_full + 1
        )),
        "{said}"
    );
    ok(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&from_npy),
        "--calibration",
        arg(&calib_npy),
    ]);
    let report = |artifact: &Path| -> Value {
        serde_json::from_slice(&std::fs::read(artifact.with_extension("json")).expect("report"))
            .expect("JSON")
    };
    let (rt, rn) = (report(&from_text), report(&from_npy));
    assert_eq!(rt["calibration_synthetic"], false);
    let build_cosine = |r: &Value| f64_at(r, "/fidelity/measured/mean_cosine");
    eprintln!(
        "build fidelity: text {:.6}, npy {:.6}",
        build_cosine(&rt),
        build_cosine(&rn)
    );
    assert!(
        (build_cosine(&rt) - build_cosine(&rn)).abs() < 5e-3,
        "{rt:#}\n{rn:#}"
    );

    let validate = |artifact: &Path, data: &[&str]| -> Value {
        let mut args = vec![
            "validate",
            arg(&fp32),
            arg(artifact),
            "--timed",
            "1",
            "--format",
            "json",
        ];
        args.extend_from_slice(data);
        json(&args)
    };
    let by_text = validate(
        &from_text,
        &["--text", arg(eval_text), "--tokenizer", arg(&tokenizer)],
    );
    let by_npy = validate(&from_npy, &["--data", arg(&eval_npy)]);
    assert_eq!(by_text["data"]["kind"], "text");
    assert_eq!(u64_at(&by_text, "/data/max_len"), 128);
    assert_eq!(u64_at(&by_text, "/fidelity/samples"), eval_full as u64 + 1);
    assert_eq!(u64_at(&by_npy, "/fidelity/samples"), eval_full as u64);
    let (ct, cn) = (
        f64_at(&by_text, "/fidelity/measured/mean_cosine"),
        f64_at(&by_npy, "/fidelity/measured/mean_cosine"),
    );
    eprintln!("validate: text cosine {ct:.6}; npy cosine {cn:.6}");
    assert!(ct > 0.98 && cn > 0.98, "{by_text:#}\n{by_npy:#}");
    assert!((ct - cn).abs() < 5e-3, "{by_text:#}\n{by_npy:#}");
}

/// Bad `--text` input fails naming the tokenizer, the text or the model.
#[cfg(feature = "text")]
#[test]
fn bad_text_input_fails_naming_what_is_wrong() {
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/squeezenet1.0.onnx");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.onnx");
    let tokenizer = kenosis_eval::prose::minilm_tokenizer_path();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "Some prose to tokenize.").expect("write");
    let quantize = |text: &Path, tokenizer: &Path| {
        fails(&[
            "quantize",
            arg(&fp32),
            "-o",
            arg(&out),
            "--text",
            arg(text),
            "--tokenizer",
            arg(tokenizer),
        ])
    };
    // An image model takes no tokens.
    let err = quantize(&text, &tokenizer);
    assert!(
        err.contains("squeezenet1.0.onnx") && err.contains("input `data_0` is FLOAT"),
        "{err}"
    );
    // Not a tokenizer.
    let err = quantize(&text, &text);
    assert!(
        err.contains("notes.txt: bad calibration data: not a tokenizer"),
        "{err}"
    );
    // No text.
    let err = quantize(&dir.path().join("missing.txt"), &tokenizer);
    assert!(err.contains("missing.txt"), "{err}");
    // --text needs --tokenizer, and does not go with --images or --calibration.
    let err = fails(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&out),
        "--text",
        arg(&text),
    ]);
    assert!(err.contains("--tokenizer"), "{err}");
    let err = fails(&[
        "quantize",
        arg(&fp32),
        "-o",
        arg(&out),
        "--text",
        arg(&text),
        "--tokenizer",
        arg(&tokenizer),
        "--calibration",
        arg(dir.path()),
    ]);
    assert!(err.contains("--calibration"), "{err}");
    assert!(!out.exists(), "no artifact after an error");
}

/// YOLOX's `preproc`, as its repository writes it: scale to fit `size` x `size` keeping the
/// aspect ratio (bilinear, sizes truncated), at the top left of a canvas of 114, BGR, 0-255
/// floats, NCHW with a batch of one.
fn yolox_preproc(path: &Path, size: u32) -> ndarray::Array4<f32> {
    let img = image::open(path).expect("an image").to_rgb8();
    let (w, h) = img.dimensions();
    let r = (size as f32 / w as f32).min(size as f32 / h as f32);
    let (nw, nh) = (
        ((w as f32 * r) as u32).clamp(1, size),
        ((h as f32 * r) as u32).clamp(1, size),
    );
    let img = image::imageops::resize(&img, nw, nh, image::imageops::FilterType::Triangle);
    let s = size as usize;
    let mut out = ndarray::Array4::<f32>::from_elem((1, 3, s, s), 114.0);
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            out[[0, 2 - c, y as usize, x as usize]] = f32::from(p[c]);
        }
    }
    out
}

/// YOLOX-Nano from COCO photographs in two commands, `--images` with YOLOX's letterbox
/// (`bgr,416x416,letterbox=114:topleft`), against the `.npy` path on the same photographs
/// (YOLOX's own preprocessing above): the same fidelity within noise, in the build and in
/// `validate`. The speed check is off so that the INT8 model ships on any machine.
#[test]
fn yolox_from_images_matches_the_npy_path() {
    const YOLOX: &str = "bgr,nchw,416x416,letterbox=114:topleft";
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/yolox_nano.onnx");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = kenosis_eval::coco_files(&shared);
    let (calib_files, eval_files) = (&files[..20], &files[files.len() - 12..]);
    let folders = |name: &str, images: &[PathBuf]| -> (PathBuf, PathBuf) {
        let (jpegs, npy) = (
            dir.path().join(name),
            dir.path().join(format!("{name}-npy")),
        );
        image_folder(&jpegs, images);
        std::fs::create_dir_all(&npy).expect("mkdir");
        for (i, image) in images.iter().enumerate() {
            ndarray_npy::write_npy(npy.join(format!("{i:03}.npy")), &yolox_preproc(image, 416))
                .expect("write npy");
        }
        (jpegs, npy)
    };
    let (calib_images, calib_npy) = folders("calib", calib_files);
    let (eval_images, eval_npy) = folders("eval", eval_files);

    let quantize = |out: &Path, data: &[&str]| -> Value {
        let mut args = vec![
            "quantize",
            arg(&fp32),
            "-o",
            arg(out),
            "speed_check=false",
            "--format",
            "json",
        ];
        args.extend_from_slice(data);
        json(&args)
    };
    let from_images = dir.path().join("images.int8.onnx");
    let from_npy = dir.path().join("npy.int8.onnx");
    let qi = quantize(
        &from_images,
        &["--images", arg(&calib_images), "--preprocess", YOLOX],
    );
    let qn = quantize(&from_npy, &["--calibration", arg(&calib_npy)]);
    let build_cosine = |q: &Value| f64_at(q, "/report/fidelity/measured/mean_cosine");
    eprintln!(
        "build fidelity: images {:.6}, npy {:.6}",
        build_cosine(&qi),
        build_cosine(&qn)
    );
    assert!(
        (build_cosine(&qi) - build_cosine(&qn)).abs() < 3e-3,
        "{qi:#}\n{qn:#}"
    );

    let validate = |artifact: &Path, data: &[&str]| -> Value {
        let mut args = vec![
            "validate",
            arg(&fp32),
            arg(artifact),
            "--timed",
            "1",
            "--format",
            "json",
        ];
        args.extend_from_slice(data);
        json(&args)
    };
    let by_images = validate(
        &from_images,
        &["--images", arg(&eval_images), "--preprocess", YOLOX],
    );
    let by_npy = validate(&from_npy, &["--data", arg(&eval_npy)]);
    assert_eq!(u64_at(&by_images, "/fidelity/samples"), 12);
    let (ci, cn) = (
        f64_at(&by_images, "/fidelity/measured/mean_cosine"),
        f64_at(&by_npy, "/fidelity/measured/mean_cosine"),
    );
    eprintln!("validate: images cosine {ci:.6}; npy cosine {cn:.6}");
    assert!(ci > 0.98 && cn > 0.98, "{by_images:#}\n{by_npy:#}");
    assert!((ci - cn).abs() < 3e-3, "{by_images:#}\n{by_npy:#}");
}

/// `y = MatMul(x, w) + b` with `w` all zeros: `y` is `b` whatever `x` is, the way a Softmax
/// saturated by inputs of the wrong range answers the same on every sample.
fn deaf_model(b: &[f32; 4]) -> ModelProto {
    use kenosis_quantize::onnx::{self, tensor, DataType};

    let node = |op: &str, inputs: &[&str], output: &str| {
        let inputs = inputs.iter().map(|&i| i.to_owned()).collect();
        onnx::make_node(op, output.into(), inputs, vec![output.into()], vec![])
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![onnx::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(onnx::GraphProto {
            name: Some("deaf".into()),
            node: vec![
                node("MatMul", &["x", "w"], "h"),
                node("Add", &["h", "b"], "y"),
            ],
            initializer: vec![
                tensor::from_f32("w", &[64, 4], &[0.0; 256]),
                tensor::from_f32("b", &[4], b),
            ],
            input: vec![onnx::tensor_info("x", DataType::Float, Some(&[1, 64]))],
            output: vec![onnx::tensor_info("y", DataType::Float, Some(&[1, 4]))],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An output that does not depend on the samples makes any model agree with it: `validate`
/// says "not informative" instead of a cosine of 1.0, in text and JSON.
#[test]
fn validate_calls_an_output_deaf_to_its_samples_not_informative() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, b, why) in [
        (
            "same.onnx",
            [1.0, -2.0, 3.0, 0.5],
            "is the same on every sample",
        ),
        ("constant.onnx", [0.0; 4], "holds one value repeated"),
    ] {
        let model = dir.path().join(name);
        std::fs::write(&model, deaf_model(&b).encode_to_vec()).expect("write");
        let text = ok(&["validate", arg(&model), arg(&model), "--timed", "1"]);
        assert!(
            text.contains("not informative") && text.contains(why) && text.contains("`y`"),
            "{text}"
        );
        assert!(!text.contains("cosine mean"), "{text}");
        let shown = json(&[
            "validate",
            arg(&model),
            arg(&model),
            "--timed",
            "1",
            "--format",
            "json",
        ]);
        assert_eq!(shown["fidelity"]["informative"], false, "{shown:#}");
        assert!(
            shown["fidelity"]["not_informative"]
                .as_str()
                .is_some_and(|s| s.contains(why)),
            "{shown:#}"
        );
    }
}
