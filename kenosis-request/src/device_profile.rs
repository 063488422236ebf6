//! A device profile: the kernel costs a placement prices with, measured on the device an
//! artifact will run on by `kenosis probe` (see `kenosis_quantize::kernel_bench::probe`), so
//! that a build on another machine (a cross build for an ARM board) prices with the device's
//! own costs instead of its CPU class's table row (see [`crate::kernel_costs`]).
//!
//! The file is JSON; [`FORMAT`] names its layout. A build names it with the option
//! `device_profile = "path"` or the environment variable [`ENV`]; the cache key holds the
//! BLAKE3 of its bytes (see [`DeviceProfile::read`]).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernel_costs::{KernelCosts, PROTOCOL};

/// The version of the profile's layout this crate reads and `kenosis probe` writes. Format
/// 2 added the transformer kernels' costs ([`KernelCosts::int8_dynamic_dense`],
/// [`KernelCosts::int4_dense`]): a profile of format 1 is refused with the advice to probe
/// again.
pub const FORMAT: u32 = 2;

/// The environment variable naming a device profile for every model of a cross build (one
/// whose target is not the build machine); a call site's `device_profile` takes precedence.
pub const ENV: &str = "KENOSIS_DEVICE_PROFILE";

/// Kernel costs measured on one device, with what names the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// [`FORMAT`] when written.
    pub format: u32,
    /// The device's CPU as people name it (`crate::kernels::cpu_name` on the device).
    pub cpu: String,
    /// The device's CPU class (`TargetCpu::canonical`: `x86`, `x86_vnni` or `aarch64`); a
    /// build for another class refuses the profile.
    pub cpu_class: String,
    /// `/proc/cpuinfo`'s model and feature flags on the device
    /// (`crate::kernels::cpu_identity`).
    pub cpu_flags: String,
    /// ONNX Runtime's build the costs were measured with (`ort::info()`).
    pub onnxruntime: String,
    /// The version of the micro-benchmarks ([`PROTOCOL`]); a build with another version
    /// refuses the profile.
    pub protocol: u32,
    /// Costs at one intra-op thread.
    pub one_thread: KernelCosts,
    /// The thread count a Kenosis program runs on by default on the device
    /// (`kenosis_manifest::default_intra_threads` of its logical CPUs); `None`: ONNX
    /// Runtime's own choice.
    pub default_threads: Option<usize>,
    /// Costs at [`default_threads`](Self::default_threads).
    pub at_default_threads: KernelCosts,
    /// The costs whose measurement was implausible and kept the table's value.
    pub kept_from_table: Vec<String>,
}

impl DeviceProfile {
    /// Reads the profile at `path`, with the first 16 hex digits of the BLAKE3 of its bytes
    /// (what the cache key names it by).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::DeviceProfile`] naming it when it
    /// is not a profile, or one of another [`FORMAT`].
    pub fn read(path: &Path) -> Result<(Self, String)> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let bad = |reason: String| Error::DeviceProfile {
            path: path.to_owned(),
            reason,
        };
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            bad(format!(
                "not JSON ({e}); `kenosis probe` writes the profile"
            ))
        })?;
        let format = value.get("format").and_then(serde_json::Value::as_u64);
        if format != Some(u64::from(FORMAT)) {
            return Err(bad(match format {
                Some(f) => format!(
                    "format {f}, but this Kenosis reads format {FORMAT}: run this version's \
                     `kenosis probe` on the device again"
                ),
                None => "no `format` field: not a profile `kenosis probe` wrote".to_owned(),
            }));
        }
        let profile: Self =
            serde_json::from_value(value).map_err(|e| bad(format!("malformed: {e}")))?;
        if profile.protocol != PROTOCOL {
            return Err(bad(format!(
                "measured with version {} of the micro-benchmarks, but this Kenosis prices with \
                 version {PROTOCOL}: run this version's `kenosis probe` on the device again",
                profile.protocol
            )));
        }
        let costs = [&profile.one_thread, &profile.at_default_threads];
        if let Some(c) = costs.iter().find(|c| !c.all_positive()) {
            return Err(bad(format!("a cost is not a positive number: {c:?}")));
        }
        let hash = blake3::hash(&bytes).to_hex()[..16].to_owned();
        Ok((profile, hash))
    }

    /// The costs at the thread count a program runs the model on: one thread for
    /// `intra_threads = 1`; the device's default count otherwise (the nearest measured one
    /// for another count).
    pub fn costs_for(&self, intra_threads: Option<usize>) -> KernelCosts {
        match intra_threads {
            Some(1) => self.one_thread,
            Some(_) | None => self.at_default_threads,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use kenosis_options::Options;

    use super::*;
    use crate::kernels::TargetCpu;
    use crate::options::QuantizeOptions;
    use crate::request::through_a_request;

    fn profile() -> DeviceProfile {
        let one_thread = KernelCosts {
            int8_dense: 0.4,
            ..KernelCosts::of(TargetCpu::Aarch64)
        };
        DeviceProfile {
            format: FORMAT,
            cpu: "Cortex-A76".into(),
            cpu_class: "aarch64".into(),
            cpu_flags: "aarch64 | | | Features: fp asimd asimddp".into(),
            onnxruntime: "ort 1.31.1".into(),
            protocol: PROTOCOL,
            one_thread,
            default_threads: Some(4),
            at_default_threads: KernelCosts {
                conversion: 20.0,
                ..one_thread
            },
            kept_from_table: vec![],
        }
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("writes");
        path
    }

    #[test]
    fn a_profile_prices_the_build_as_the_quantizer_reads_it_and_keys_its_bytes() {
        let dir = tempfile::tempdir().expect("a folder");
        let json = serde_json::to_vec_pretty(&profile()).expect("serializes");
        let path = write(dir.path(), "device.json", &json);
        let (read, hash) = DeviceProfile::read(&path).expect("reads");
        assert_eq!(read, profile());
        assert_eq!(hash, &blake3::hash(&json).to_hex()[..16]);
        let target = "aarch64-unknown-linux-gnu";
        for (layers, costs) in [
            ("", profile().at_default_threads),
            ("intra_threads = 1", profile().one_thread),
        ] {
            let layers = Options::parse_str(layers).expect("parses");
            let plain = QuantizeOptions::for_target(&layers, target, "");
            let front_end = (plain.clone())
                .with_device_profile(&read, &hash, &path)
                .expect("same class");
            assert_eq!(front_end.measured_costs, Some(costs));
            let line = format!("kernel_costs = measured on device profile {hash}\n");
            assert!(front_end.canonical().ends_with(&line));
            assert_ne!(front_end.canonical(), plain.canonical());
            assert_eq!(
                front_end.pricing().describe(),
                "kernel costs measured on Cortex-A76"
            );
            let quantizer = through_a_request(&front_end, target, Some(path.clone()));
            assert_eq!(quantizer, front_end);
        }
    }

    #[test]
    fn a_profile_that_cannot_serve_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().expect("a folder");
        let mut later = serde_json::to_value(profile()).expect("serializes");
        later["format"] = (FORMAT + 1).into();
        // Format 1: no transformer kernels.
        let mut earlier = serde_json::to_value(profile()).expect("serializes");
        earlier["format"] = 1.into();
        for costs in ["one_thread", "at_default_threads"] {
            for name in ["int8_dynamic_dense", "int4_dense"] {
                earlier[costs].as_object_mut().expect("costs").remove(name);
            }
        }
        let (later_says, older_says) = (
            format!("format {}", FORMAT + 1),
            format!("version {} of the micro-benchmarks", PROTOCOL + 1),
        );
        let mut negative = profile();
        negative.one_thread.layout = -1.0;
        let mut older = profile();
        older.protocol = PROTOCOL + 1;
        let cases = [
            ("text.json", b"not json".to_vec(), "not JSON"),
            ("later.json", later.to_string().into_bytes(), &later_says),
            (
                "earlier.json",
                earlier.to_string().into_bytes(),
                "run this version's `kenosis probe`",
            ),
            ("empty.json", b"{}".to_vec(), "no `format` field"),
            (
                "older.json",
                serde_json::to_vec(&older).expect("serializes"),
                &older_says,
            ),
            (
                "negative.json",
                serde_json::to_vec(&negative).expect("serializes"),
                "not a positive number",
            ),
        ];
        for (name, bytes, says) in cases {
            let path = write(dir.path(), name, &bytes);
            let e = DeviceProfile::read(&path).expect_err(name).to_string();
            assert!(
                e.starts_with(&format!("{}: device profile: ", path.display())) && e.contains(says),
                "{e}"
            );
        }
        // Measured on an aarch64 device, offered to an x86-64 build.
        let path = write(
            dir.path(),
            "arm.json",
            &serde_json::to_vec(&profile()).expect("serializes"),
        );
        let (read, hash) = DeviceProfile::read(&path).expect("reads");
        let x86 = QuantizeOptions::for_target(&Options::default(), "x86_64-unknown-linux-gnu", "");
        let e = x86
            .with_device_profile(&read, &hash, &path)
            .expect_err("another class")
            .to_string();
        assert!(e.contains("measured on Cortex-A76 (class aarch64)"), "{e}");
    }
}
