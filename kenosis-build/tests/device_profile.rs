//! A build naming a device profile prices its placement with the device's kernel costs: the
//! report and its reasons name the device's CPU, the cache key changes with the profile's
//! bytes, and a profile that cannot serve the target fails the build naming the file.

use std::path::Path;

use kenosis_manifest::Manifest;
use kenosis_request::device_profile::{DeviceProfile, FORMAT};
use kenosis_request::kernel_costs::{KernelCosts, PROTOCOL};
use kenosis_request::kernels::TargetCpu;

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// A profile of CPU class `class`, measured on "Test Board", where an int8 dense multiply-add
/// and one element through a conversion or a layout change cost `int8` FP32 multiply-adds.
fn profile(class: &str, int8: f64) -> DeviceProfile {
    let costs = KernelCosts {
        int8_dense: int8,
        conversion: int8,
        layout: int8,
        ..KernelCosts::of(TargetCpu::of_target(TARGET, ""))
    };
    DeviceProfile {
        format: FORMAT,
        cpu: "Test Board".into(),
        cpu_class: class.into(),
        cpu_flags: String::new(),
        onnxruntime: String::new(),
        protocol: PROTOCOL,
        one_thread: costs,
        default_threads: Some(2),
        at_default_threads: costs,
        kept_from_table: vec![],
    }
}

/// Builds the tiny fixture into `out` (cache `cache`) with the profile at `profile`, if any;
/// returns its manifest entry's key and its report.
fn build(
    dir: &Path,
    out: &str,
    profile: Option<&Path>,
) -> kenosis_build::Result<(String, serde_json::Value)> {
    let out = dir.join(out);
    let mut config = kenosis_build::Config::new()
        .model(support::TINY)
        .manifest_dir(env!("CARGO_MANIFEST_DIR"))
        .out_dir(&out)
        .cache_dir(dir.join("cache"))
        .target(TARGET)
        // The placement as priced, not as this machine's timings revise it.
        .speed_check(false);
    if let Some(p) = profile {
        config = config.device_profile(p);
    }
    config.compile()?;
    let manifest = Manifest::read(&Manifest::path_in(&out)).expect("the manifest");
    let entry = &manifest.models[0];
    let report = std::fs::read(&entry.report_path).expect("the report");
    Ok((
        entry.hash.clone(),
        serde_json::from_slice(&report).expect("JSON"),
    ))
}

#[test]
fn a_profile_prices_the_placement_and_names_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let class = TargetCpu::of_target(TARGET, "").canonical();
    let path = dir.path().join("board.json");
    let write = |p: &DeviceProfile| {
        std::fs::write(&path, serde_json::to_vec(p).expect("serializes")).expect("writes")
    };

    let (plain_key, plain) = build(dir.path(), "plain", None).expect("builds");
    assert!(plain["kernel_costs"].get("device").is_none(), "{plain:#}");

    // Integer kernels and conversions nearly free on this board: the Conv runs in INT8.
    write(&profile(class, 0.01));
    let (cheap_key, cheap) = build(dir.path(), "cheap", Some(&path)).expect("builds");
    assert_eq!(cheap["kernel_costs"]["device"], "Test Board", "{cheap:#}");
    assert_eq!(cheap["kernel_costs"]["costs"]["int8_dense"], 0.01);
    assert_eq!(cheap["ops_quantized"]["Conv"], 1, "{cheap:#}");

    // 50 FP32 multiply-adds each: every Conv stays FP32, for the board's costs.
    write(&profile(class, 50.0));
    let (dear_key, dear) = build(dir.path(), "dear", Some(&path)).expect("builds");
    assert!(dear["ops_quantized"].get("Conv").is_none(), "{dear:#}");
    let reasons = dear["nodes_fp32"].to_string();
    assert!(
        reasons.contains(
            "estimated faster in FP32 on the target (kernel costs measured on Test Board)"
        ),
        "{reasons}"
    );
    // Each profile's bytes are in the key.
    assert!(plain_key != cheap_key && cheap_key != dear_key && dear_key != plain_key);
}

#[test]
fn a_profile_that_cannot_serve_the_target_fails_the_build_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("board.json");
    std::fs::write(
        &path,
        serde_json::to_vec(&profile("aarch64", 0.5)).expect("serializes"),
    )
    .expect("writes");
    let e = build(dir.path(), "out", Some(&path)).expect_err("another class");
    let text = format!("{e:?}");
    assert!(
        text.starts_with(&format!(
            "{}: device profile: measured on Test Board",
            path.display()
        )),
        "{text}"
    );
    std::fs::write(&path, format!("{{\"format\": {FORMAT}}}")).expect("writes");
    let text = format!(
        "{:?}",
        build(dir.path(), "out", Some(&path)).expect_err("broken")
    );
    assert!(text.contains("device profile: malformed"), "{text}");
    assert!(!dir.path().join("out/kenosis-manifest.json").exists());
}
