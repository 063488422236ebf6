//! `kenosis_build::discover()` end to end on the fixture crate `tests/fixtures/discover`,
//! built with cargo the way a user builds it: calls in the lib, a file module, an inline
//! module nested in it, a bin and an example are all quantized with no model named in
//! build.rs; a call added to a source file is quantized on the next build, a removed one
//! leaves no error; call-site options give another artifact and cache key. A second test
//! measures discovery on a crate of 100 source files when nothing relevant changed.
//!
//! The crate is copied to a temporary folder (path dependencies made absolute, the tiny
//! models copied under `models/`) and built with its own target folder, `discover-e2e` in the
//! workspace's target folder (kept between runs, so dependencies build once), and a fresh
//! `KENOSIS_CACHE_DIR`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kenosis_manifest::Manifest;
use kenosis_quantize::onnx::{tensor_proto::DataLocation, ModelProto, StringStringEntryProto};

mod fixture;

use fixture::{fixture_crate, workspace};

fn cargo(dir: &Path, args: &[&str], cache: &Path) -> String {
    let (ok, text) = cargo_with(dir, args, cache, &[]);
    assert!(ok, "cargo {args:?} failed:\n{text}");
    text
}

/// Runs cargo with `args` and the extra environment `vars`; whether it succeeded, and its
/// output.
fn cargo_with(dir: &Path, args: &[&str], cache: &Path, vars: &[(&str, &str)]) -> (bool, String) {
    fixture::outcome(fixture::cargo(dir, args, &target_dir(), cache).envs(vars.iter().copied()))
}

/// The nested builds' target folder: `discover-e2e` in the workspace's.
fn target_dir() -> PathBuf {
    kenosis_eval::target_dir().join("discover-e2e")
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

fn entries(m: &Manifest) -> Vec<(String, String)> {
    let mut v: Vec<_> = m
        .models
        .iter()
        .map(|e| (e.source.clone(), e.options.clone()))
        .collect();
    v.sort();
    v
}

#[test]
fn discovery_finds_adds_and_drops_calls_across_targets() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let krate = dir.path().join("discover-fixture");
    fixture_crate(&krate);

    let first = cargo(&krate, &["build", "--all-targets"], cache.path());
    let m = manifest();
    assert_eq!(
        entries(&m),
        [
            ("models/example.onnx".into(), "method = \"minmax\"".into()),
            ("models/tiny_conv.onnx".into(), String::new()),
            ("models/tiny_conv.onnx".into(), "per_channel = false".into()),
            ("models/tiny_io.onnx".into(), String::new()),
        ]
    );
    for model in ["models/example.onnx", "models/tiny_io.onnx"] {
        assert_eq!(kenosis_tests::summary_lines(&first, model), 1, "{first}");
    }
    // A shared cache folder without a key is trusted as it stands: the build says so.
    assert!(
        first.contains("KENOSIS_CACHE_DIR is set but no cache key"),
        "{first}"
    );
    // Same model, per-tensor weights at the call site: another cache key and artifact.
    assert_eq!(
        kenosis_tests::summary_lines(&first, "models/tiny_conv.onnx"),
        2,
        "{first}"
    );
    let conv: Vec<_> = m
        .models
        .iter()
        .filter(|e| e.source == "models/tiny_conv.onnx")
        .collect();
    assert_ne!(conv[0].hash, conv[1].hash);
    assert_ne!(
        std::fs::read(&conv[0].artifact_path).unwrap(),
        std::fs::read(&conv[1].artifact_path).unwrap()
    );
    let report =
        |e: &kenosis_manifest::ModelEntry| std::fs::read_to_string(&e.report_path).unwrap();
    assert!(conv
        .iter()
        .any(|e| e.options.is_empty() && report(e).contains("per_channel = true")));
    assert!(conv
        .iter()
        .any(|e| !e.options.is_empty() && report(e).contains("per_channel = false")));

    // The bin runs the typed two-input model and the lib's models.
    let run = cargo(&krate, &["run", "-q", "--bin", "tool"], cache.path());
    assert!(run.contains("twice = [4, 4, 4, 4, 4, 4]"), "{run}");
    assert!(run.contains("outputs = 1 1"), "{run}");

    // A call added to an existing file: quantized on the next build, nothing else is.
    // (`added.onnx` has tiny_conv's bytes; its options give it a key of its own.)
    let nested = krate.join("src/nested.rs");
    let original = std::fs::read_to_string(&nested).unwrap();
    std::fs::write(
        &nested,
        format!(
            "{original}\n/// Added by the test.\npub fn added() -> &'static kenosis_runtime::EmbeddedModel {{\n    kenosis_runtime::include_quantized!(\"models/added.onnx\", synthetic_samples = 7, synthetic_image_range = \"[0, 1]\")\n}}\n"
        ),
    )
    .unwrap();
    let second = cargo(&krate, &["build", "--all-targets"], cache.path());
    assert_eq!(
        kenosis_tests::any_summary_lines(&second),
        1,
        "only the new model is quantized:\n{second}"
    );
    assert!(
        kenosis_tests::summary_lines(&second, "models/added.onnx") == 1,
        "{second}"
    );
    assert!(entries(&manifest()).contains(&(
        "models/added.onnx".into(),
        "synthetic_samples = 7, synthetic_image_range = \"[0.0, 1.0]\"".into()
    )));

    // An unavailable CI secret expands to an empty string: the build fails rather than
    // trust the shared folder without saying so.
    let (ok, empty_key) = cargo_with(
        &krate,
        &["build", "--all-targets"],
        cache.path(),
        &[("KENOSIS_CACHE_KEY", "")],
    );
    assert!(
        !ok && empty_key.contains("the cache key is empty"),
        "{empty_key}"
    );

    // A downloaded model whose external-data file name holds a line break followed by a
    // cargo directive: the build fails naming it, and cargo never sees the directive.
    let tiny = std::fs::read(workspace().join("tests/fixtures/tiny/tiny_conv.onnx")).unwrap();
    let mut hostile = <ModelProto as prost::Message>::decode(tiny.as_slice()).unwrap();
    let weight = &mut hostile.graph.as_mut().unwrap().initializer[0];
    weight.data_location = Some(DataLocation::External as i32);
    weight.external_data = vec![StringStringEntryProto {
        key: Some("location".into()),
        value: Some("w.bin\ncargo:warning=INJECTED-BY-MODEL".into()),
    }];
    std::fs::write(
        krate.join("models/hostile.onnx"),
        prost::Message::encode_to_vec(&hostile),
    )
    .unwrap();
    std::fs::write(
        &nested,
        format!("{original}\npub fn hostile() -> &'static kenosis_runtime::EmbeddedModel {{\n    kenosis_runtime::include_quantized!(\"models/hostile.onnx\")\n}}\n"),
    )
    .unwrap();
    let (ok, injected) = cargo_with(&krate, &["build", "--all-targets"], cache.path(), &[]);
    assert!(
        !ok && injected.contains("a file name holding a line break")
            && injected.contains("models/hostile.onnx"),
        "{injected}"
    );
    assert!(
        !injected.contains("\ncargo:warning=INJECTED")
            && !injected
                .lines()
                .any(|l| l.starts_with("warning:") && l.contains("INJECTED-BY-MODEL")),
        "the file name reached cargo:\n{injected}"
    );

    // Removed again: the build succeeds and the manifest no longer lists it.
    std::fs::write(&nested, &original).unwrap();
    let third = cargo(&krate, &["build", "--all-targets"], cache.path());
    assert_eq!(kenosis_tests::any_summary_lines(&third), 0, "{third}");
    assert_eq!(entries(&manifest()).len(), 4);
}

#[test]
fn unchanged_rediscovery_of_100_files_is_cheap() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"hundred\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("src/m")).unwrap();
    std::fs::create_dir_all(root.join("models")).unwrap();
    std::fs::copy(
        workspace().join("tests/fixtures/tiny/tiny_conv.onnx"),
        root.join("models/tiny_conv.onnx"),
    )
    .unwrap();
    let mut lib = String::from("mod m;\n");
    let mut m = String::new();
    for i in 0..99 {
        m.push_str(&format!("pub mod f{i};\n"));
        let mut body = format!("//! Module {i}.\nuse std::collections::HashMap;\n");
        for j in 0..20 {
            body.push_str(&format!(
                "pub fn f{j}(x: &HashMap<String, Vec<u32>>) -> usize {{\n    x.values().map(|v| v.iter().filter(|&&n| n % {} == 0).count()).sum::<usize>() + {j}\n}}\n",
                j + 2
            ));
        }
        if i % 10 == 0 {
            body.push_str(&format!(
                "pub fn model() -> &'static kenosis_runtime::EmbeddedModel {{ kenosis_runtime::include_quantized!(\"models/tiny_conv.onnx\", synthetic_samples = {}, fp32_where_faster = false) }}\n",
                8 + i / 10
            ));
        }
        std::fs::write(root.join(format!("src/m/f{i}.rs")), body).unwrap();
    }
    lib.push_str("pub fn lib() {}\n");
    std::fs::write(root.join("src/lib.rs"), lib).unwrap();
    std::fs::write(root.join("src/m.rs"), m).unwrap();
    let out = root.join("out");
    std::fs::create_dir_all(&out).unwrap();

    let build = || {
        kenosis_build::Config::new()
            .discover()
            .manifest_dir(root)
            .out_dir(&out)
            .cache_dir(cache.path())
            .compile()
            .unwrap()
    };
    build(); // cold: cargo metadata, every file parsed, 10 models quantized
    assert_eq!(
        Manifest::read(&Manifest::path_in(&out))
            .unwrap()
            .models
            .len(),
        10
    );

    // An unrelated file changes, as when cargo re-runs the build script after an edit.
    let edited = root.join("src/m/f55.rs");
    let text = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(&edited, format!("{text}\npub fn edited() {{}}\n")).unwrap();

    let cache_file = out.join("kenosis-discovery.json");
    let started = Instant::now();
    let found = kenosis_build::discover::discover_calls(root, Some(&cache_file)).unwrap();
    let discovery = started.elapsed();
    assert_eq!(found.files.len(), 101);
    assert_eq!(found.calls.len(), 10);
    assert_eq!(found.parsed, 1, "only the edited file is parsed again");
    assert!(found.targets_cached, "no cargo metadata run");

    let started = Instant::now();
    build(); // the whole build-script body: discovery + 10 cache hits + manifest
    let whole = started.elapsed();
    eprintln!(
        "unchanged rebuild, 101 files: discovery {:.1} ms, whole discover().compile() {:.1} ms",
        discovery.as_secs_f64() * 1e3,
        whole.as_secs_f64() * 1e3
    );
    assert!(
        discovery.as_millis() < 50,
        "discovery took {discovery:?} on 101 files"
    );
}
