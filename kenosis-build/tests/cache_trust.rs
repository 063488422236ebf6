//! What a cache folder may make a build embed: with a cache key (MAC secret) set, only
//! entries this build's secret authenticates; concurrent builds of one model quantize once.

use std::path::{Path, PathBuf};

use kenosis_build::Config;
use kenosis_manifest::{Manifest, ModelEntry};
use kenosis_quantize::report::Report;

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;
use support::TINY;

const SECRET: &str = "ci-secret-0123456789abcdef";

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(TINY, dir.path().join("m.onnx")).expect("copy");
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self, out: &str) -> Config {
        Config::new()
            .manifest_dir(self.dir.path())
            .out_dir(self.path(out))
            .cache_dir(self.path("cache"))
            .target("x86_64-unknown-linux-gnu")
            .model("m.onnx")
    }

    /// Builds into `out` and returns the manifest entry and the embedded artifact's bytes.
    fn build(&self, config: Config, out: &str) -> (ModelEntry, Vec<u8>) {
        config.compile().expect("builds");
        let manifest = Manifest::read(&Manifest::path_in(&self.path(out))).expect("manifest");
        let entry = manifest.models[0].clone();
        let bytes = std::fs::read(&entry.artifact_path).expect("artifact");
        (entry, bytes)
    }
}

fn report_of(entry: &ModelEntry) -> Report {
    serde_json::from_slice(&std::fs::read(&entry.report_path).expect("report")).expect("parses")
}

/// Plants, under `key`, what a job that can write the cache but not read the secret can
/// write: another model as the artifact, with a report whose BLAKE3 matches it.
fn forge(cache: &Path, key: &str, forged: &[u8]) {
    let report_path = cache.join(format!("{key}.json"));
    let mut report: Report =
        serde_json::from_slice(&std::fs::read(&report_path).expect("report")).expect("parses");
    report.artifact_blake3 = blake3::hash(forged).to_hex().to_string();
    std::fs::write(cache.join(format!("{key}.onnx")), forged).expect("plant artifact");
    std::fs::write(&report_path, serde_json::to_vec(&report).expect("json")).expect("plant");
}

#[test]
fn a_forged_entry_under_the_right_key_is_never_embedded_when_a_key_is_set() {
    let s = Sandbox::new();
    let (genuine, genuine_bytes) = s.build(s.config("out1").cache_key(SECRET), "out1");
    let cache = s.path("cache");
    assert!(
        cache.join(format!("{}.mac", genuine.hash)).is_file(),
        "an authenticated entry carries its MAC"
    );
    // The forged artifact: the FP32 model itself, a valid ONNX file Kenosis did not write.
    let forged = std::fs::read(TINY).expect("fixture");
    assert_ne!(forged, genuine_bytes);

    forge(&cache, &genuine.hash, &forged);
    let (entry, bytes) = s.build(s.config("out2").cache_key(SECRET), "out2");
    assert_eq!(entry.hash, genuine.hash, "the same key");
    assert_eq!(bytes, genuine_bytes, "rebuilt, not the forged bytes");
    assert_eq!(
        entry.artifact_blake3,
        blake3::hash(&genuine_bytes).to_hex().as_str()
    );
    // The rebuild replaced the forged entry with an authenticated one.
    assert_eq!(
        std::fs::read(cache.join(format!("{}.onnx", genuine.hash))).expect("entry"),
        genuine_bytes
    );

    // A forged MAC too (the job can write any file, but cannot compute the keyed hash):
    // still rebuilt. So is an entry read with another secret.
    forge(&cache, &genuine.hash, &forged);
    let fake_mac = blake3::hash(b"a guess").to_hex().to_string();
    std::fs::write(cache.join(format!("{}.mac", genuine.hash)), fake_mac).expect("mac");
    let (_, bytes) = s.build(s.config("out3").cache_key(SECRET), "out3");
    assert_eq!(bytes, genuine_bytes);
    let (_, bytes) = s.build(s.config("out4").cache_key("another secret"), "out4");
    assert_eq!(bytes, genuine_bytes);

    // Without a key the cache is trusted as it stands (docs/cache-trust.md): the same
    // forgery is then embedded. This is what the key protects against.
    forge(&cache, &genuine.hash, &forged);
    let (_, bytes) = s.build(s.config("out5"), "out5");
    assert_eq!(
        bytes, forged,
        "an unauthenticated cache serves what it holds"
    );
}

/// An empty secret is what an unavailable CI secret expands to: it must fail the build, not
/// turn authentication off. Nothing is written.
#[test]
fn an_empty_cache_key_is_an_error_not_an_unauthenticated_cache() {
    let s = Sandbox::new();
    let err = s
        .config("out")
        .cache_key("")
        .compile()
        .expect_err("an empty key is refused");
    assert!(
        matches!(&err, kenosis_build::Error::Config(m) if m.contains("cache key is empty")),
        "{err}"
    );
    assert!(!s.path("out").exists() && !s.path("cache").exists());
    // The secret stays out of `Debug` output (build logs).
    let shown = format!("{:?}", s.config("out").cache_key(SECRET));
    assert!(!shown.contains(SECRET), "{shown}");
}

#[test]
fn an_entry_written_without_a_key_is_rebuilt_once_a_key_is_set() {
    let s = Sandbox::new();
    let (plain, _) = s.build(s.config("out1"), "out1");
    let cache = s.path("cache");
    assert!(!cache.join(format!("{}.mac", plain.hash)).exists());
    let first = report_of(&plain).seconds;
    let (keyed, _) = s.build(s.config("out2").cache_key(SECRET), "out2");
    assert_eq!(keyed.hash, plain.hash);
    assert_ne!(
        report_of(&keyed).seconds,
        first,
        "quantized again, not served"
    );
    assert!(cache.join(format!("{}.mac", plain.hash)).is_file());
    // And served from the cache after that.
    let (again, _) = s.build(s.config("out3").cache_key(SECRET), "out3");
    assert_eq!(report_of(&again).seconds, report_of(&keyed).seconds);
}

/// Two builds of one model started together: the second waits on the first's lock and
/// takes its entry, so both embed one quantization (the report, with its timing, is the
/// cached one). Without the lock both miss the cache and each quantizes.
#[test]
fn two_concurrent_builds_of_one_model_quantize_once() {
    for round in 0..3 {
        let s = Sandbox::new();
        let barrier = std::sync::Barrier::new(2);
        let entries: Vec<ModelEntry> = std::thread::scope(|scope| {
            let builds: Vec<_> = ["a", "b"]
                .into_iter()
                .map(|out| {
                    let (s, barrier) = (&s, &barrier);
                    scope.spawn(move || {
                        let config = s.config(out).cache_key(SECRET);
                        barrier.wait();
                        s.build(config, out).0
                    })
                })
                .collect();
            builds
                .into_iter()
                .map(|b| b.join().expect("build"))
                .collect()
        });
        let (a, b) = (report_of(&entries[0]), report_of(&entries[1]));
        assert_eq!(entries[0].hash, entries[1].hash);
        assert_eq!(
            a.seconds, b.seconds,
            "round {round}: both builds quantized ({} s and {} s)",
            a.seconds, b.seconds
        );
    }
}
