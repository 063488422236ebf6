//! The hostile-input corpus, `tests/hostile/<case>/`: crafted build inputs, each with the
//! exact outcome it must give. A case folder holds `model.onnx`, optionally `calib/` (a
//! calibration folder) and the model's external data files, and `expected.txt`: either
//! `ok` (the input is handled, the build succeeds) or the build's whole error message, with
//! the case's folder written as `{dir}`.
//!
//! The files are written by `write_hostile_corpus` (ignored; run it with `--ignored` to
//! regenerate them), so that each crafted file's construction is on record; `expected.txt`
//! is written by hand.

use std::path::{Path, PathBuf};

use kenosis_build::Config;
use kenosis_quantize::onnx::{self, ModelProto};
use prost::Message;

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;
use support::{
    externalize, f32_bytes, npy_fortran, npy_with as npy, sample_values as sample, tiny, TINY,
};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

/// Copies `from` into `to`, recursively; links are copied as links.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("case folder").flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_symlink() {
            let target = std::fs::read_link(&path).expect("link");
            std::os::unix::fs::symlink(target, &dest).expect("symlink");
        } else if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).expect("copy");
        }
    }
}

#[test]
fn every_hostile_input_gives_its_expected_outcome() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/hostile")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "the corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let sandbox = tempfile::tempdir().expect("tempdir");
        let dir = sandbox.path().join(&name);
        copy_dir(case, &dir);
        let expected = std::fs::read_to_string(dir.join("expected.txt"))
            .expect("expected.txt")
            .trim_end()
            .replace("{dir}", &dir.display().to_string());
        let mut config = Config::new()
            .manifest_dir(&dir)
            .out_dir(sandbox.path().join("out"))
            .cache_dir(sandbox.path().join("cache"))
            .target("x86_64-unknown-linux-gnu")
            .model("model.onnx");
        if dir.join("calib").is_dir() {
            config = config.calibration_npy_dir("calib");
        }
        let outcome = match config.compile() {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.to_string(),
        };
        if outcome != expected {
            failures.push(format!(
                "{name}:\n  expected: {expected}\n  got:      {outcome}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What `Config::compile().expect("kenosis: quantization failed")`, the usual last line of a
/// build script, prints when it fails: the panic message, `Debug` of the error after the
/// text given to `expect`.
fn expect_message(config: Config) -> String {
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        config.compile().expect("kenosis: quantization failed");
    }))
    .expect_err("the build fails");
    match panic.downcast::<String>() {
        Ok(text) => *text,
        Err(_) => panic!("expect panics with a String"),
    }
}

#[test]
fn a_failed_build_script_prints_one_sentence_naming_the_file_once() {
    let sandbox = tempfile::tempdir().expect("tempdir");
    let config = |dir: &Path| {
        Config::new()
            .manifest_dir(dir)
            .out_dir(sandbox.path().join("out"))
            .cache_dir(sandbox.path().join("cache"))
            .target("x86_64-unknown-linux-gnu")
            .model("model.onnx")
    };
    let empty = sandbox.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    std::fs::write(empty.join("model.onnx"), b"").expect("write");
    assert_eq!(
        expect_message(config(&empty)),
        format!(
            "kenosis: quantization failed: {}/model.onnx: not a valid ONNX model: the file is \
             empty",
            empty.display()
        )
    );
    let missing = sandbox.path().join("missing");
    std::fs::create_dir_all(&missing).expect("mkdir");
    assert_eq!(
        expect_message(config(&missing)),
        format!(
            "kenosis: quantization failed: {}/model.onnx: No such file or directory (os error 2)",
            missing.display()
        )
    );
    // Corpus cases: the panic is the build's error message, once, after `expect`'s text.
    for name in [
        "conv_bias_short_before_batchnorm",
        "npy_not_npy",
        "external_in_function",
    ] {
        let dir = sandbox.path().join(name);
        copy_dir(&corpus_dir().join(name), &dir);
        let expected = std::fs::read_to_string(dir.join("expected.txt"))
            .expect("expected.txt")
            .trim_end()
            .replace("{dir}", &dir.display().to_string());
        let mut config = config(&dir);
        if dir.join("calib").is_dir() {
            config = config.calibration_npy_dir("calib");
        }
        let printed = expect_message(config);
        assert_eq!(printed, format!("kenosis: quantization failed: {expected}"));
        assert_eq!(
            printed.matches(&format!("{}/", dir.display())).count(),
            1,
            "{printed}"
        );
    }
}

// ---- How the corpus was made. ----------------------------------------------------------

/// [`tiny`] with a second input of `x`'s type named `name`, added to `x` before the first
/// Conv: a two-input model, whose calibration folder has one subfolder per input name.
fn two_inputs(name: &str) -> ModelProto {
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    let mut second = g.input[0].clone();
    second.name = Some(name.into());
    g.input.push(second);
    g.node[0].input[0] = "sum".into();
    g.node.insert(
        0,
        onnx::make_node(
            "Add",
            "add".into(),
            vec!["x".into(), name.into()],
            vec!["sum".into()],
            vec![],
        ),
    );
    m
}

/// A float tensor of `len` values kept in `location` (whole file).
fn external_tensor(name: &str, len: usize, location: &str) -> onnx::TensorProto {
    onnx::TensorProto {
        name: Some(name.into()),
        data_type: Some(onnx::DataType::Float as i32),
        dims: vec![len as i64],
        data_location: Some(onnx::tensor_proto::DataLocation::External as i32),
        external_data: vec![onnx::StringStringEntryProto {
            key: Some("location".into()),
            value: Some(location.into()),
        }],
        ..Default::default()
    }
}

/// A sparse tensor of dense shape `[4]` whose two values are kept in `location`.
fn external_sparse(name: &str, location: &str) -> onnx::SparseTensorProto {
    onnx::SparseTensorProto {
        values: Some(external_tensor(name, 2, location)),
        indices: Some(onnx::TensorProto {
            name: Some(format!("{name}_indices")),
            data_type: Some(onnx::DataType::Int64 as i32),
            dims: vec![2],
            int64_data: vec![0, 3],
            ..Default::default()
        }),
        dims: vec![4],
    }
}

/// Writes every case's crafted files (not `expected.txt`).
#[test]
#[ignore = "regenerates tests/hostile; run with --ignored after changing a case"]
fn write_hostile_corpus() {
    let root = corpus_dir();
    let write = |case: &str, file: &str, bytes: &[u8]| {
        let path = root.join(case).join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    };
    let tiny_bytes = std::fs::read(TINY).expect("fixture");

    // A Fortran-order sample is read in its logical order (handled, not refused).
    write("fortran_order_npy", "model.onnx", &tiny_bytes);
    write(
        "fortran_order_npy",
        "calib/a.npy",
        &npy_fortran(&sample(3 * 8 * 8), &[3, 8, 8]),
    );

    // Conv bias of 1 value for 4 output channels, then BatchNormalization.
    let m = support::tiny_with_batchnorm(&[0.25]);
    write(
        "conv_bias_short_before_batchnorm",
        "model.onnx",
        &m.encode_to_vec(),
    );

    // No input left (it is an initializer), and a calibration folder.
    let m = support::tiny_without_inputs();
    write(
        "no_inputs_with_calibration",
        "model.onnx",
        &m.encode_to_vec(),
    );
    write(
        "no_inputs_with_calibration",
        "calib/a.npy",
        &npy(&f32_bytes(sample(192)), "<f4", "(3, 8, 8)", false, 1),
    );

    // A Conv weight declaring 2^40 output channels over 108 values, no bias, then a Mul by
    // a scalar that the affine fold would absorb.
    let m = support::tiny_with_weight_dims_beyond_payload_before_mul();
    write(
        "weight_dims_beyond_payload_before_mul",
        "model.onnx",
        &m.encode_to_vec(),
    );

    // `.npy` headers declaring more than the file holds.
    write("npy_shape_beyond_data", "model.onnx", &tiny_bytes);
    write(
        "npy_shape_beyond_data",
        "calib/a.npy",
        &npy(&[0; 12], "<f4", "(1099511627776, 3)", false, 1),
    );
    let mut long_header = npy(&[0; 12], "<f4", "(3,)", false, 2);
    long_header[8..12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    write("npy_header_beyond_file", "model.onnx", &tiny_bytes);
    write("npy_header_beyond_file", "calib/a.npy", &long_header);
    write("npy_data_short", "model.onnx", &tiny_bytes);
    write(
        "npy_data_short",
        "calib/a.npy",
        &npy(&[0; 100], "<f4", "(3, 8, 8)", false, 1),
    );
    // Not an .npy at all, and a big-endian one of the right size (handled).
    write("npy_not_npy", "model.onnx", &tiny_bytes);
    write(
        "npy_not_npy",
        "calib/a.npy",
        b"PK\x03\x04 a zip file, perhaps an .npz",
    );
    write("npy_big_endian", "model.onnx", &tiny_bytes);
    let big_endian: Vec<u8> = sample(192).iter().flat_map(|v| v.to_be_bytes()).collect();
    write(
        "npy_big_endian",
        "calib/a.npy",
        &npy(&big_endian, ">f4", "(1, 3, 8, 8)", false, 1),
    );

    // External tensors that all read from offset 0 of a file holding the largest one.
    let mut m = tiny();
    let data = externalize(&mut m, "weights.bin", true);
    write(
        "external_tensors_share_bytes",
        "model.onnx",
        &m.encode_to_vec(),
    );
    write("external_tensors_share_bytes", "weights.bin", &data);

    // A Clip with max < min after the first Conv (handled: stays FP32, no zero scale).
    let m = support::tiny_with_clip_max_below_min();
    write("clip_max_below_min", "model.onnx", &m.encode_to_vec());

    // An external-data file name that would print a cargo directive of its own in the
    // build's `rerun-if-changed` line (and one with a carriage return).
    for (case, location) in [
        (
            "external_location_newline",
            "w.bin\ncargo:rustc-link-arg=-Wl,--injected",
        ),
        (
            "external_location_carriage_return",
            "w.bin\rcargo:warning=x",
        ),
    ] {
        let mut m = tiny();
        externalize(&mut m, location, false);
        write(case, "model.onnx", &m.encode_to_vec());
    }

    // A two-input model whose second input, `../x`, names a folder beside the calibration
    // folder, which holds samples: they must not be read.
    let m = two_inputs("../x");
    write(
        "calibration_input_leaves_folder",
        "model.onnx",
        &m.encode_to_vec(),
    );
    let sample_file = npy(&f32_bytes(sample(192)), "<f4", "(1, 3, 8, 8)", false, 1);
    write(
        "calibration_input_leaves_folder",
        "calib/x/a.npy",
        &sample_file,
    );
    write("calibration_input_leaves_folder", "x/a.npy", &sample_file);
    // An absolute input name.
    let m = two_inputs("/tmp");
    write(
        "calibration_input_absolute",
        "model.onnx",
        &m.encode_to_vec(),
    );
    write("calibration_input_absolute", "calib/x/a.npy", &sample_file);

    // A calibration sample that is a link to a file outside the calibration folder.
    let case = "calibration_link_leaves_folder";
    write(case, "model.onnx", &tiny_bytes);
    write(case, "outside.npy", &sample_file);
    std::fs::create_dir_all(root.join(case).join("calib")).expect("mkdir");
    let link = root.join(case).join("calib/a.npy");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("../outside.npy", &link).expect("symlink");

    // External tensors where only initializers used to be looked for: a sparse initializer
    // reading a file outside the model's folder, a sparse-tensor attribute whose file name
    // holds a line break, a tensor attribute inside a model-local function reading
    // `/etc/passwd`.
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    g.sparse_initializer
        .push(external_sparse("sparse", "../secret.bin"));
    write(
        "external_sparse_initializer",
        "model.onnx",
        &m.encode_to_vec(),
    );
    let mut m = tiny();
    let g = m.graph.as_mut().expect("graph");
    let mut constant = onnx::make_node(
        "Constant",
        "sparse_constant".into(),
        vec![],
        vec!["unused".into()],
        vec![],
    );
    constant.attribute.push(onnx::AttributeProto {
        name: Some("sparse_value".into()),
        r#type: Some(onnx::attribute_proto::AttributeType::SparseTensor as i32),
        sparse_tensor: Some(external_sparse("sparse_attr", "s.bin\ncargo:warning=x")),
        ..Default::default()
    });
    g.node.push(constant);
    write(
        "external_sparse_attribute",
        "model.onnx",
        &m.encode_to_vec(),
    );
    let mut m = tiny();
    let mut constant = onnx::make_node(
        "Constant",
        "function_constant".into(),
        vec![],
        vec!["c".into()],
        vec![],
    );
    constant.attribute.push(onnx::AttributeProto {
        name: Some("value".into()),
        r#type: Some(onnx::attribute_proto::AttributeType::Tensor as i32),
        t: Some(external_tensor("function_tensor", 4, "/etc/passwd")),
        ..Default::default()
    });
    m.functions.push(onnx::FunctionProto {
        name: Some("make_c".into()),
        domain: Some("local".into()),
        output: vec!["c".into()],
        node: vec![constant],
        opset_import: m.opset_import.clone(),
        ..Default::default()
    });
    write("external_in_function", "model.onnx", &m.encode_to_vec());

    // An IR version newer than ONNX Runtime 1.31 loads.
    let mut m = tiny();
    m.ir_version = Some(14);
    write(
        "ir_version_beyond_runtime",
        "model.onnx",
        &m.encode_to_vec(),
    );
}
