//! Calibration data named at the call site as people have it, with no `build.rs` code:
//! `calibration_images` with a `preprocess` spec, and `calibration_text` with the model's
//! `tokenizer`. The fixture crate of `discover_e2e` gains calls on EfficientNet-Lite0 (a
//! folder of JPEGs) and paraphrase-MiniLM-L3 (licence prose), each beside a call on the same
//! model whose `calibration` folder holds the same samples as `.npy` files, made here by the
//! library's own readers (`kenosis_request::images::preprocess_image`,
//! `kenosis_quantize::calibrate::text::samples`). Built with cargo as a user builds it, each
//! pair gives byte-identical artifacts (speed check off: its timing is the one input that
//! depends on the machine's load), and an image changed in the folder makes the next build
//! quantize that model again. A call site that names two sources, or a spec without its
//! folder, fails naming the call.

use std::path::{Path, PathBuf};

use kenosis_eval::{imagenet_files, shared_dir};
use kenosis_manifest::{Manifest, ModelEntry};
use kenosis_options::preprocess::{ImagePreprocess, Size};
use kenosis_quantize::calibrate::SampleValue;

mod fixture;

use fixture::fixture_crate;

/// EfficientNet-Lite0's preprocessing as its card states it: RGB, `(x - 127) / 128`.
const EFFICIENTNET: &str = "rgb,nchw,224x224,crop=0.875,mean=127,std=128";
/// Calibration images: 12, so that a fifth is held out for the fidelity check.
const IMAGES: usize = 12;

/// The nested builds' target folder.
fn target_dir() -> PathBuf {
    kenosis_eval::target_dir().join("call-site-data")
}

/// `cargo build` of the crate in `dir`; whether it succeeded, and its output.
fn build(dir: &Path, cache: &Path) -> (bool, String) {
    fixture::outcome(&mut fixture::cargo(dir, &["build"], &target_dir(), cache))
}

/// The manifest the fixture's build script wrote last.
fn manifest() -> Manifest {
    let newest = kenosis_tests::newest_build_output(
        &target_dir().join("debug/build"),
        "discover-fixture",
        "kenosis-manifest.json",
    )
    .expect("a manifest was written");
    Manifest::read(&newest).expect("the manifest reads")
}

/// The artifact of the manifest entry of `source` whose options contain `option`.
fn artifact(m: &Manifest, source: &str, option: &str) -> Vec<u8> {
    let entry: &ModelEntry = (m.models.iter())
        .find(|e| e.source == source && e.options.contains(option))
        .unwrap_or_else(|| panic!("no entry for {source} with {option}: {:?}", m.models));
    std::fs::read(&entry.artifact_path).expect("the artifact")
}

/// Appends `code` to the fixture's `src/nested.rs`.
fn append(krate: &Path, code: &str) {
    let nested = krate.join("src/nested.rs");
    let mut text = std::fs::read_to_string(&nested).expect("nested.rs");
    text.push_str(code);
    std::fs::write(&nested, text).expect("nested.rs written");
}

/// Writes `x` as `.npy` file `path`, with the shape the library's readers give it.
fn write_npy(path: &Path, x: &SampleValue) {
    match x {
        SampleValue::F32(a) => ndarray_npy::write_npy(path, a),
        SampleValue::I64(a) => ndarray_npy::write_npy(path, a),
        other => panic!("unexpected sample type {other:?}"),
    }
    .expect("npy written");
}

#[test]
fn images_named_at_the_call_site_calibrate_as_their_npy_files_do() {
    let Some(shared) = shared_dir() else { return };
    let krate = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let krate = krate.path();
    fixture_crate(krate);
    let model = shared.join("models/efficientnet_lite0.onnx");
    std::fs::copy(&model, krate.join("models/efficientnet_lite0.onnx")).expect("model");

    // The JPEGs, and the same images as `.npy` samples through the same reader.
    let spec: ImagePreprocess = EFFICIENTNET.parse().expect("a spec");
    let size = Size {
        width: 224,
        height: 224,
    };
    let (images, npy) = (krate.join("calib-images"), krate.join("calib-npy"));
    std::fs::create_dir_all(&images).expect("mkdir");
    std::fs::create_dir_all(&npy).expect("mkdir");
    for file in imagenet_files(&shared).iter().step_by(50).take(IMAGES) {
        let name = file.file_name().expect("a file name").to_string_lossy();
        std::fs::copy(file, images.join(&*name)).expect("image copied");
        let bytes = std::fs::read(file).expect("image");
        let x = kenosis_request::images::preprocess_image(&bytes, &spec, size)
            .expect("decodes")
            .insert_axis(ndarray::Axis(0))
            .into_dyn();
        write_npy(&npy.join(format!("{name}.npy")), &SampleValue::F32(x));
    }
    append(
        krate,
        &format!(
            "\npub fn from_images() -> &'static kenosis_runtime::EmbeddedModel {{\n    \
             kenosis_runtime::include_quantized!(\"models/efficientnet_lite0.onnx\", \
             calibration_images = \"calib-images\", preprocess = \"{EFFICIENTNET}\", \
             speed_check = false)\n}}\n\
             pub fn from_npy() -> &'static kenosis_runtime::EmbeddedModel {{\n    \
             kenosis_runtime::include_quantized!(\"models/efficientnet_lite0.onnx\", \
             calibration = \"calib-npy\", speed_check = false)\n}}\n"
        ),
    );
    let (ok, first) = build(krate, cache.path());
    assert!(ok, "{first}");
    let m = manifest();
    let source = "models/efficientnet_lite0.onnx";
    let from_images = artifact(&m, source, "calibration_images");
    assert_eq!(
        from_images,
        artifact(&m, source, "calibration = \"calib-npy\""),
        "the images calibrate as their .npy samples do"
    );
    // Every image is a sample: ranges fitted on four fifths, the rest held out.
    let report: serde_json::Value = (m.models.iter())
        .find(|e| e.source == source && e.options.contains("calibration_images"))
        .map(|e| serde_json::from_slice(&std::fs::read(&e.report_path).expect("report")))
        .expect("an entry")
        .expect("JSON");
    let fitted = report["calibration_samples"]
        .as_u64()
        .expect("calibration_samples");
    let held_out = report["fidelity"]["samples"]
        .as_u64()
        .expect("fidelity.samples");
    assert_eq!(fitted + held_out, IMAGES as u64, "{report}");
    assert_eq!(report["fidelity"]["held_out"], true, "{report}");

    // Nothing changed: the build script does not run again (cargo replays its warnings).
    // One image changed: it runs, and quantizes that model alone again.
    let (ok, unchanged) = build(krate, cache.path());
    assert!(ok, "{unchanged}");
    assert!(
        !unchanged.contains("Compiling discover-fixture"),
        "{unchanged}"
    );
    let first_image =
        kenosis_request::model_files::image_files(&images).expect("images")[0].clone();
    let second_image =
        kenosis_request::model_files::image_files(&images).expect("images")[1].clone();
    std::fs::copy(&second_image, &first_image).expect("image replaced");
    let (ok, changed) = build(krate, cache.path());
    assert!(ok, "{changed}");
    assert_eq!(
        kenosis_tests::summary_lines(&changed, source),
        1,
        "{changed}"
    );
    assert_eq!(kenosis_tests::any_summary_lines(&changed), 1, "{changed}");
    assert_ne!(
        artifact(&manifest(), source, "calibration_images"),
        from_images
    );

    // Two sources at one call site, or a spec without its folder: the build names the call.
    for bad in [
        "calibration = \"calib-npy\", calibration_images = \"calib-images\", preprocess = \"rgb\"",
        "preprocess = \"rgb\"",
    ] {
        let nested = krate.join("src/nested.rs");
        let kept = std::fs::read_to_string(&nested).expect("nested.rs");
        append(
            krate,
            &format!(
                "\npub fn bad() -> &'static kenosis_runtime::EmbeddedModel {{\n    \
                 kenosis_runtime::include_quantized!(\"models/tiny_conv.onnx\", {bad})\n}}\n"
            ),
        );
        let (ok, said) = build(krate, cache.path());
        assert!(!ok, "{bad}: {said}");
        assert!(said.contains("src/nested.rs"), "{bad}: {said}");
        assert!(
            said.contains("give one of `calibration`")
                || said.contains("needs `calibration_images`"),
            "{bad}: {said}"
        );
        std::fs::write(&nested, kept).expect("nested.rs restored");
    }
}

#[test]
fn text_named_at_the_call_site_calibrates_as_its_token_windows_do() {
    let Some(fp32) = kenosis_eval::fetched_model("paraphrase-MiniLM-L3-v2.onnx") else {
        return;
    };
    let Some(texts) = kenosis_eval::prose::licence_files(&["Apache-2.0"]) else {
        return;
    };
    let tokenizer = kenosis_eval::prose::minilm_tokenizer_path();
    let krate = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    let krate = krate.path();
    fixture_crate(krate);
    std::fs::copy(&fp32, krate.join("models/minilm.onnx")).expect("model");
    std::fs::create_dir_all(krate.join("prose")).expect("mkdir");
    std::fs::copy(&texts[0], krate.join("prose/apache.txt")).expect("text");
    std::fs::copy(&tokenizer, krate.join("tokenizer.json")).expect("tokenizer");

    // The same windows as `.npy` samples, one folder per input.
    let decoded = <kenosis_quantize::onnx::ModelProto as prost::Message>::decode(
        std::fs::read(&fp32).expect("model").as_slice(),
    )
    .expect("decodes");
    let specs =
        kenosis_quantize::calibrate::data::input_specs(decoded.graph.as_ref().expect("graph"));
    let (data, len) = kenosis_quantize::calibrate::text::samples(
        &krate.join("prose/apache.txt"),
        &krate.join("tokenizer.json"),
        Some(64),
        &fp32,
        &specs,
    )
    .expect("windows");
    assert_eq!(len, 64);
    for (i, sample) in data.samples.iter().enumerate() {
        for (spec, value) in specs.iter().zip(sample) {
            let folder = krate.join("windows").join(&spec.name);
            std::fs::create_dir_all(&folder).expect("mkdir");
            write_npy(&folder.join(format!("{i:03}.npy")), value);
        }
    }
    append(
        krate,
        "\npub fn from_text() -> &'static kenosis_runtime::EmbeddedModel {\n    \
         kenosis_runtime::include_quantized!(\"models/minilm.onnx\", calibration_text = \
         \"prose\", tokenizer = \"tokenizer.json\", max_len = 64, speed_check = false)\n}\n\
         pub fn from_windows() -> &'static kenosis_runtime::EmbeddedModel {\n    \
         kenosis_runtime::include_quantized!(\"models/minilm.onnx\", calibration = \
         \"windows\", speed_check = false)\n}\n",
    );
    let (ok, said) = build(krate, cache.path());
    assert!(ok, "{said}");
    let m = manifest();
    assert_eq!(
        artifact(&m, "models/minilm.onnx", "calibration_text"),
        artifact(&m, "models/minilm.onnx", "calibration = \"windows\""),
        "the text calibrates as its token windows do"
    );
}
