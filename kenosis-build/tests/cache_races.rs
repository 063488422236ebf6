//! The artifact cache under concurrent builds and killed writers: a reader sees a complete,
//! hash-verified entry or none, never a torn one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kenosis_quantize::{quantize, Calibration, QuantizeOptions};
use kenosis_request::cache::Cache;

// The quantizer's test fixtures, shared with its own tests.
#[path = "../../kenosis-quantize/tests/support/mod.rs"]
mod support;

const KEY: &str = "0123456789abcdef";
const CHILD_DIR: &str = "KENOSIS_TEST_CACHE_WRITER_DIR";

/// An artifact and its report (JSON).
type Entry = (Vec<u8>, Vec<u8>);

/// A real report (from quantizing the tiny fixture) re-pointed at `bytes`.
fn entry(fill: u8, len: usize) -> Entry {
    let path = Path::new(support::TINY);
    let model = std::fs::read(path).expect("fixture");
    let q = quantize(
        path,
        &model,
        &Calibration::Synthetic,
        &QuantizeOptions::default(),
    )
    .expect("tiny model quantizes");
    // Varying content so that a mix of two writers' files would show.
    let bytes: Vec<u8> = (0..len).map(|i| fill ^ (i % 251) as u8).collect();
    let mut report = q.report;
    report.artifact_blake3 = blake3::hash(&bytes).to_hex().to_string();
    report.source = format!("writer {fill}");
    (
        bytes,
        serde_json::to_vec(&report).expect("report serializes"),
    )
}

/// The `source` a report (JSON) names.
fn source(report: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(report).expect("report parses");
    value["source"].as_str().expect("a source").to_owned()
}

/// Whatever `get` returns must be one of the entries written, whole.
fn check(cache: &Cache, written: &[Entry]) -> bool {
    match cache.get(KEY) {
        None => false,
        Some((bytes, report)) => {
            let origin = written
                .iter()
                .find(|(_, r)| source(r) == source(&report))
                .expect("a report some writer wrote");
            assert!(
                bytes == origin.0,
                "torn entry: bytes differ from {}",
                source(&report)
            );
            true
        }
    }
}

#[test]
fn concurrent_writers_never_expose_a_torn_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::open(dir.path().to_owned()).expect("cache");
    let written: Vec<Entry> = (1..=3)
        .map(|k| entry(k, 2_000_000 + usize::from(k)))
        .collect();
    let mut seen = 0;
    std::thread::scope(|s| {
        let writers: Vec<_> = written
            .iter()
            .map(|(bytes, report)| {
                let cache = cache.clone();
                s.spawn(move || {
                    for _ in 0..15 {
                        cache.put(KEY, bytes, report).expect("put");
                    }
                })
            })
            .collect();
        while writers.iter().any(|w| !w.is_finished()) {
            seen += usize::from(check(&cache, &written));
        }
    });
    assert!(seen > 0, "the reader never saw a complete entry");
    // One last put from a single build leaves an entry that verifies.
    cache.put(KEY, &written[0].0, &written[0].1).expect("put");
    assert!(check(&cache, &written));
}

/// Not a test on its own: the child process of `a_killed_writer_leaves_no_torn_entry`,
/// writing entries in a loop until killed.
#[test]
fn cache_writer_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let cache = Cache::open(PathBuf::from(dir)).expect("cache");
    let (bytes, report) = entry(9, 16_000_000);
    loop {
        cache.put(KEY, &bytes, &report).expect("put");
    }
}

#[test]
fn a_killed_writer_leaves_no_torn_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::open(dir.path().to_owned()).expect("cache");
    // A different, older entry is in place when the writer dies mid-write.
    let old = entry(1, 1_000_000);
    let written = [old.clone(), entry(9, 16_000_000)];
    for delay_ms in [30, 80, 150, 260, 400] {
        cache.put(KEY, &old.0, &old.1).expect("put");
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "cache_writer_child", "--nocapture"])
            .env(CHILD_DIR, dir.path())
            .spawn()
            .expect("child starts");
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().expect("kill");
        child.wait().expect("reaped");
        // Complete (old or new) or absent, never torn; absent means the next build rebuilds.
        check(&cache, &written);
        // The next build's put repairs whatever state the kill left.
        cache.put(KEY, &old.0, &old.1).expect("put after kill");
        assert!(
            check(&cache, &written),
            "entry unreadable after a fresh put"
        );
    }
}
