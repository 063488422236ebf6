//! The `kenosis` command driven as a user drives it, on the shared SqueezeNet 1.0 and
//! EfficientNet-Lite0 and real ImageNet images: help, inspect, quantize with calibration
//! images, validate, diff, cast, and bad input.

use std::path::{Path, PathBuf};

use kenosis_eval::{imagenet_files, load_batch, shared_dir, Preprocess};
use kenosis_quantize::onnx::{self, tensor, tensor_proto::DataType, ModelProto, TensorProto};
use prost::Message;

mod support;

use support::*;

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
    npy_folder_as(dir, images, Preprocess::BgrMeanSubtracted);
}

/// `.npy` files of `images` in preprocessing `pre`, in `dir`.
fn npy_folder_as(dir: &Path, images: &[PathBuf], pre: Preprocess) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for (i, x) in load_batch(images, pre).iter().enumerate() {
        ndarray_npy::write_npy(dir.join(format!("{i:03}.npy")), x).expect("write npy");
    }
}

#[test]
fn help_lists_every_command() {
    let help = ok(&["--help"]);
    for command in [
        "quantize", "validate", "inspect", "diff", "report", "cast", "probe",
    ] {
        assert!(help.contains(command), "{help}");
    }
    // `cast --help` says what it is for and what each format gives up.
    let cast = ok(&["cast", "--help"]);
    for said in [
        "any CPU",
        "constant-folds",
        "65504",
        "refused",
        "8 bits of mantissa",
    ] {
        assert!(cast.contains(said), "`{said}` in:\n{cast}");
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
    // The ops losing the most fidelity: nodes of the FP32 graph with their op type, as
    // Kenosis names them (an unnamed node `<OpType>_<index>`, as the artifact keeps them),
    // most loss first.
    let lost = op_losses(&checked);
    assert!(!lost.is_empty() && lost.len() <= 5, "{checked}");
    assert!(
        checked.contains("on the first 8 of 16 samples"),
        "{checked}"
    );
    for (node, op, _) in &lost {
        let index: usize = (node.strip_prefix(&format!("{op}_")))
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("`{node}` is not named `{op}_<index>`:\n{checked}"));
        assert_eq!(graph.node[index].op_type(), op, "{checked}");
        let kept = (artifact.graph.iter().flat_map(|g| &g.node)).find(|n| n.name() == node);
        assert_eq!(kept.map(|n| n.op_type()), Some(op.as_str()), "{checked}");
    }
    assert!(
        lost.windows(2).all(|w| w[0].2 >= w[1].2 && w[1].2 > 0.0),
        "{checked}"
    );

    // diff: the same interface, Q/DQ pairs added.
    let diff = ok(&["diff", fp32_arg, int8_arg]);
    assert!(diff.contains("inputs: the same"), "{diff}");
    assert!(
        diff.contains(&format!("QuantizeLinear: 0 → {qdq}")),
        "{diff}"
    );
}

#[test]
fn probe_writes_this_machines_profile_that_a_build_for_it_reads() {
    use kenosis_request::device_profile::DeviceProfile;
    use kenosis_request::kernels::{cpu_name, TargetCpu};
    use kenosis_request::options::QuantizeOptions;

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("device.json");
    let out = ok(&[
        "probe",
        "-o",
        path.to_str().expect("UTF-8"),
        "--format",
        "json",
    ]);
    let printed: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(printed["output"], path.to_str().expect("UTF-8"));
    let (profile, hash) = DeviceProfile::read(&path).expect("the file is a profile");
    assert_eq!(
        printed["profile"],
        serde_json::to_value(&profile).expect("JSON")
    );
    assert_eq!(profile.cpu, cpu_name());
    let class = TargetCpu::of_target("", "");
    assert_eq!(profile.cpu_class, class.canonical());
    // Each cost was measured, or kept from this class's table where the timing was noise.
    assert!(profile.one_thread.all_positive() && profile.at_default_threads.all_positive());
    // A build for this machine prices with it.
    let options = QuantizeOptions::default()
        .with_device_profile(&profile, &hash, &path)
        .expect("this machine's class");
    assert_eq!(
        options.pricing().describe(),
        format!("kernel costs measured on {}", cpu_name())
    );
    // Text names the CPU and the file.
    let text = ok(&["probe", "-o", path.to_str().expect("UTF-8")]);
    assert!(
        text.contains(&format!("kernel costs measured on {}", cpu_name())),
        "{text}"
    );
    assert!(text.contains("device_profile"), "{text}");
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
    let reported = Reported::build(dir.path());
    let out = reported.report(&[], &reported.target);
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
    let artifact = std::fs::read_dir(reported.out_dir.join("kenosis"))
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
    let out = reported.report(&[], &dir.path().join("empty"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `cargo build` first"));
}

/// Initializers of `model` by name.
fn initializers(model: &ModelProto) -> Vec<&TensorProto> {
    model.graph.iter().flat_map(|g| &g.initializer).collect()
}

fn decode(path: &Path) -> ModelProto {
    ModelProto::decode(std::fs::read(path).expect("model").as_slice()).expect("decodes")
}

/// EfficientNet-Lite0 cast to fp16 and bf16: about half the file, every large weight in 16
/// bits behind one Cast, and on real images (its preprocessing, RGB (x - 127) / 128) the
/// same top-1 class as FP32 with output cosines the formats' precision allows, run by
/// ONNX Runtime through `kenosis validate`.
#[test]
fn cast_efficientnet_to_fp16_and_bf16() {
    let Some(shared) = shared_dir() else { return };
    let fp32 = shared.join("models/efficientnet_lite0.onnx");
    let fp32_arg = fp32.to_str().expect("UTF-8 path");
    let dir = tempfile::tempdir().expect("tempdir");
    let files = imagenet_files(&shared);
    let eval = dir.path().join("eval");
    let spaced: Vec<PathBuf> = files
        .iter()
        .step_by(files.len() / 32)
        .take(32)
        .cloned()
        .collect();
    npy_folder_as(&eval, &spaced, Preprocess::RgbCentered);
    let size_fp32 = std::fs::metadata(&fp32).expect("model").len() as f64;
    let float_weights = (initializers(&decode(&fp32)).iter())
        .filter(|t| t.data_type() == DataType::Float as i32)
        .filter(|t| t.dims.iter().product::<i64>() >= 64)
        .count();

    // Measured on these 32 images (ONNX Runtime 1.31.1, CPU): fp16 (11 bits of precision)
    // cosine mean 0.999992, worst 0.999982; bf16 (8 bits) mean 0.99947, worst 0.99737; top-1
    // 32/32 for both. The bounds leave 4 to 10 times the measured 1 - cosine.
    for (precision, stored, min_mean, min_worst) in [
        ("fp16", DataType::Float16, 0.9999, 0.9998),
        ("bf16", DataType::Bfloat16, 0.998, 0.99),
    ] {
        let out = dir
            .path()
            .join(format!("efficientnet_lite0.{precision}.onnx"));
        let out_arg = out.to_str().expect("UTF-8 path");
        let said = ok(&["cast", fp32_arg, "--precision", precision, "-o", out_arg]);
        assert!(
            said.contains(&format!("kenosis: cast {float_weights} weight")),
            "{said}"
        );
        let ratio = std::fs::metadata(&out).expect("cast model").len() as f64 / size_fp32;
        eprintln!("{precision}: {:.1}% of the FP32 file", 100.0 * ratio);
        assert!(ratio < 0.55, "{precision}: {ratio}");

        let cast = decode(&out);
        let graph = cast.graph.as_ref().expect("graph");
        let halves = (initializers(&cast).iter())
            .filter(|t| t.data_type() == stored as i32)
            .count();
        let casts = graph.node.iter().filter(|n| n.op_type() == "Cast").count();
        assert_eq!(
            (halves, casts),
            (float_weights, float_weights),
            "{precision}"
        );

        let checked = ok(&[
            "validate",
            fp32_arg,
            out_arg,
            "--data",
            eval.to_str().expect("UTF-8"),
            "--timed",
            "1",
        ]);
        eprintln!("{precision}: {checked}");
        assert!(checked.contains("on 32 the samples in"), "{checked}");
        let (mean, worst) = (
            number_after(&checked, "cosine mean"),
            number_after(&checked, "worst"),
        );
        assert!(
            mean >= min_mean && worst >= min_worst,
            "{precision}: {checked}"
        );
        assert_eq!(
            number_after(&checked, "top-1 agreement"),
            100.0,
            "{checked}"
        );
    }
}

/// An IR 8, opset 13 model around `graph`.
fn opset13(graph: onnx::GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![onnx::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// A tiny `y = MatMul(x, w)` model, `x` [1, 64], `w` [64, 4] holding `w`.
fn matmul_model(w: &[f32]) -> ModelProto {
    opset13(onnx::GraphProto {
        name: Some("matmul".into()),
        node: vec![onnx::make_node(
            "MatMul",
            "mm".into(),
            vec!["x".into(), "w".into()],
            vec!["y".into()],
            vec![],
        )],
        initializer: vec![tensor::from_f32("w", &[64, 4], w)],
        input: vec![onnx::tensor_info("x", DataType::Float, Some(&[1, 64]))],
        output: vec![onnx::tensor_info("y", DataType::Float, Some(&[1, 4]))],
        ..Default::default()
    })
}

/// A weight beyond FP16's 65504 would become infinite: fp16 refuses the model naming the
/// file and the tensor and writes nothing; bf16, with FP32's range, casts it.
#[test]
fn cast_refuses_a_weight_beyond_fp16s_range_naming_the_tensor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w: Vec<f32> = (0..256).map(|i| i as f32 / 256.0).collect();
    w[17] = 1.0e5;
    let model = dir.path().join("big_weight.onnx");
    std::fs::write(&model, matmul_model(&w).encode_to_vec()).expect("write");
    let model_arg = model.to_str().expect("UTF-8");
    let out = dir.path().join("out.onnx");
    let out_arg = out.to_str().expect("UTF-8");
    let err = fails(&["cast", model_arg, "--precision", "fp16", "-o", out_arg]);
    assert!(
        err.contains("big_weight.onnx") && err.contains("tensor `w`") && err.contains("65504"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written after an error");
    ok(&["cast", model_arg, "--precision", "bf16", "-o", out_arg]);
    let cast = decode(&out);
    let stored = initializers(&cast)
        .into_iter()
        .find(|t| t.data_type() == DataType::Bfloat16 as i32)
        .expect("a BFLOAT16 weight");
    let bits = u16::from_le_bytes([stored.raw_data()[34], stored.raw_data()[35]]);
    assert_eq!(
        f32::from_bits(u32::from(bits) << 16),
        99840.0,
        "1e5 to nearest bf16"
    );
}

/// Weights kept in an external data file are read in: the cast model is one file.
#[test]
fn cast_reads_external_data_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let w: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 64.0).collect();
    let mut model = matmul_model(&w);
    let graph = model.graph.as_mut().expect("graph");
    let t = &mut graph.initializer[0];
    std::fs::write(dir.path().join("weights.bin"), t.raw_data()).expect("write");
    t.raw_data = None;
    t.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
    t.external_data = vec![onnx::StringStringEntryProto {
        key: Some("location".into()),
        value: Some("weights.bin".into()),
    }];
    let path = dir.path().join("external.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("write");
    let out = dir.path().join("cast").join("out.onnx");
    std::fs::create_dir_all(out.parent().expect("folder")).expect("mkdir");
    ok(&[
        "cast",
        path.to_str().expect("UTF-8"),
        "--precision",
        "fp16",
        "-o",
        out.to_str().expect("UTF-8"),
    ]);
    let cast = decode(&out);
    let stored = initializers(&cast)
        .into_iter()
        .find(|t| t.data_type() == DataType::Float16 as i32)
        .expect("a FLOAT16 weight");
    assert!(stored.external_data.is_empty() && stored.raw_data().len() == 512);
}

/// An INT8 model cast to fp16: its integer weights and FP32 quantization scales stay as
/// they are (the tiny model's FP32 head is under 64 weights and stays too; large FP32
/// weights beside Q/DQ are cast, see `kenosis_quantize::cast`'s tests), and it still runs and
/// agrees with the FP32 original.
#[test]
fn cast_keeps_an_int8_models_integer_weights_and_scales() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/tiny/tiny_conv.onnx"
    );
    let int8 = dir.path().join("tiny.int8.onnx");
    let int8_arg = int8.to_str().expect("UTF-8");
    ok(&["quantize", tiny, "-o", int8_arg, "fp32_where_faster=false"]);
    let cast_path = dir.path().join("tiny.int8.fp16.onnx");
    let cast_arg = cast_path.to_str().expect("UTF-8");
    let said = ok(&["cast", int8_arg, "--precision", "fp16", "-o", cast_arg]);
    assert!(
        said.contains("quantization parameters") && !said.contains(" 0 quantization"),
        "{said}"
    );
    let (before, after) = (decode(&int8), decode(&cast_path));
    for t in initializers(&before) {
        let is_float = t.data_type() == DataType::Float as i32;
        let kept = initializers(&after)
            .into_iter()
            .find(|a| a.name() == t.name());
        if !is_float {
            assert_eq!(kept, Some(t), "`{}` is kept as it is", t.name());
        }
    }
    let scales = (before.graph.iter().flat_map(|g| &g.node))
        .filter(|n| n.op_type() == "DequantizeLinear")
        .filter_map(|n| n.input.get(1))
        .collect::<Vec<_>>();
    assert!(!scales.is_empty());
    for scale in scales {
        let kept = initializers(&after).into_iter().find(|t| t.name() == scale);
        assert!(
            kept.is_some_and(|t| t.data_type() == DataType::Float as i32),
            "scale `{scale}` stays FP32"
        );
    }
    for (model, arg) in [(&int8, int8_arg), (&cast_path, cast_arg)] {
        let checked = ok(&["validate", tiny, arg, "--timed", "1"]);
        assert!(
            number_after(&checked, "worst") > 0.9,
            "{}: {checked}",
            model.display()
        );
    }
}

/// The op-loss lines of `kenosis validate`'s output: node name, op type and loss each.
fn op_losses(out: &str) -> Vec<(String, String, f64)> {
    (out.lines())
        .skip_while(|l| !l.starts_with("ops losing the most fidelity"))
        .skip(1)
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let op = words[1].trim_start_matches('(').trim_end_matches(')');
            let loss = number_after(line, "loss");
            (words[0].to_owned(), op.to_owned(), loss)
        })
        .collect()
}

/// A tiny `x → m1:MatMul → Relu → m2:MatMul → Relu → m3:MatMul → y` model, every tensor
/// [1, 64], with weights `w[0]`, `w[1]`, `w[2]` (64 × 64 each).
fn mlp_model(w: [&[f32]; 3]) -> ModelProto {
    let node = |op: &str, name: &str, inputs: &[&str], output: &str| {
        let inputs = inputs.iter().map(|&i| i.to_owned()).collect();
        onnx::make_node(op, name.into(), inputs, vec![output.into()], vec![])
    };
    opset13(onnx::GraphProto {
        name: Some("mlp".into()),
        node: vec![
            node("MatMul", "m1", &["x", "w1"], "h1"),
            node("Relu", "r1", &["h1"], "a1"),
            node("MatMul", "m2", &["a1", "w2"], "h2"),
            node("Relu", "r2", &["h2"], "a2"),
            node("MatMul", "m3", &["a2", "w3"], "y"),
        ],
        initializer: vec![
            tensor::from_f32("w1", &[64, 64], w[0]),
            tensor::from_f32("w2", &[64, 64], w[1]),
            tensor::from_f32("w3", &[64, 64], w[2]),
        ],
        input: vec![onnx::tensor_info("x", DataType::Float, Some(&[1, 64]))],
        output: vec![onnx::tensor_info("y", DataType::Float, Some(&[1, 64]))],
        ..Default::default()
    })
}

/// Deterministic values in [-1, 1) (a linear congruential generator seeded with `seed`).
fn pseudo_random(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `validate` charges each op with the fidelity it loses itself, not with what it receives:
/// with the first MatMul's weights perturbed much and the last's a little, the first ranks
/// first although the last ends further from FP32, and the ops computing the same in both
/// models from what they are given are not charged with the first's loss.
#[test]
fn validate_ranks_ops_by_the_fidelity_each_loses_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let w: Vec<Vec<f32>> = (1..=3).map(|seed| pseudo_random(seed, 64 * 64)).collect();
    let perturb = |w: &[f32], by: f32, seed: u64| -> Vec<f32> {
        (w.iter().zip(pseudo_random(seed, w.len())))
            .map(|(w, n)| w + by * n)
            .collect()
    };
    let (w1, w3) = (perturb(&w[0], 1.0, 4), perturb(&w[2], 0.7, 5));
    let fp32 = dir.path().join("mlp.onnx");
    let other = dir.path().join("mlp_perturbed.onnx");
    std::fs::write(&fp32, mlp_model([&w[0], &w[1], &w[2]]).encode_to_vec()).expect("write");
    std::fs::write(&other, mlp_model([&w1, &w[1], &w3]).encode_to_vec()).expect("write");
    let out = ok(&[
        "validate",
        fp32.to_str().expect("UTF-8"),
        other.to_str().expect("UTF-8"),
        "--timed",
        "1",
    ]);
    let lost = op_losses(&out);
    let ranked: Vec<&str> = lost.iter().map(|(node, _, _)| node.as_str()).collect();
    assert_eq!(ranked.first(), Some(&"m1"), "{out}");
    assert_eq!(lost[0].1, "MatMul", "{out}");
    assert!(ranked.contains(&"m3"), "{out}");
    let output_cosine = |node: &str| {
        let line = (out.lines())
            .find(|l| l.trim_start().starts_with(&format!("{node} ")))
            .unwrap_or_else(|| panic!("a line for {node}:\n{out}"));
        number_after(line, "output")
    };
    assert!(output_cosine("m3") < output_cosine("m1"), "{out}");
}

/// The header of `kenosis validate FP32 OTHER`'s table: its two column labels.
fn validate_columns(fp32: &str, other: &str) -> Vec<String> {
    let out = ok(&["validate", fp32, other, "--timed", "1"]);
    let header = out.lines().next().unwrap_or_default();
    header.split_whitespace().map(str::to_owned).collect()
}

/// `validate` labels the second model by what the file holds, not as INT8 whatever it is:
/// FP16 and BF16 for `kenosis cast` models, INT8 for a quantized one, else its file name.
#[test]
fn validate_labels_the_second_model_by_what_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let w: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 64.0).collect();
    let fp32 = dir.path().join("matmul.onnx");
    std::fs::write(&fp32, matmul_model(&w).encode_to_vec()).expect("write");
    let fp32_arg = fp32.to_str().expect("UTF-8");
    for (precision, label) in [("fp16", "FP16"), ("bf16", "BF16")] {
        let cast = dir.path().join(format!("matmul.{precision}.onnx"));
        let cast_arg = cast.to_str().expect("UTF-8");
        ok(&["cast", fp32_arg, "--precision", precision, "-o", cast_arg]);
        assert_eq!(validate_columns(fp32_arg, cast_arg), ["FP32", label]);
    }

    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/tiny/tiny_conv.onnx"
    );
    let int8 = dir.path().join("tiny.quantized.onnx");
    let int8_arg = int8.to_str().expect("UTF-8");
    ok(&["quantize", tiny, "-o", int8_arg, "fp32_where_faster=false"]);
    assert_eq!(validate_columns(tiny, int8_arg), ["FP32", "INT8"]);

    // Nothing to tell it by (another FP32 file): its name.
    let copy = dir.path().join("another.onnx");
    std::fs::copy(&fp32, &copy).expect("copy");
    assert_eq!(
        validate_columns(fp32_arg, copy.to_str().expect("UTF-8")),
        ["FP32", "another.onnx"]
    );
}
