//! Finding a call site's model in the manifest `kenosis-build` wrote into `OUT_DIR`, and
//! checking its artifact before it is embedded.

use std::env;
use std::path::{Path, PathBuf};

use kenosis_manifest::{Manifest, ManifestError, ModelEntry};

/// What a call site embeds: its manifest entry, the verified artifact and the manifest file.
pub(crate) struct Found {
    /// The model's manifest entry.
    pub entry: ModelEntry,
    /// The artifact, resolved and verified (see [`verified_artifact`]).
    pub artifact: PathBuf,
    /// The manifest it came from (embedded too, so the crate recompiles when it changes).
    pub manifest_path: PathBuf,
}

/// The manifest entry built from `source_path` with the call site's canonical `options`.
///
/// # Errors
/// A message for the call site: no build script or manifest (with the lines to add), the model
/// quantized with other options or not at all, an unreadable manifest, or an artifact that is
/// missing or fails [`verified_artifact`].
pub(crate) fn find(written: &str, source_path: &Path, options: &str) -> Result<Found, String> {
    let Some(out_dir) = env::var_os("OUT_DIR") else {
        return Err(not_quantized(
            written,
            "OUT_DIR is not set, so this crate has no build script",
        ));
    };
    let manifest_path = Manifest::path_in(Path::new(&out_dir));
    let manifest = match Manifest::read(&manifest_path) {
        Ok(manifest) => manifest,
        Err(ManifestError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_quantized(
                written,
                &format!(
                    "the build script wrote no kenosis manifest ({} does not exist)",
                    manifest_path.display()
                ),
            ));
        }
        Err(e) => return Err(format!("kenosis: {e}")),
    };
    let Some(entry) = manifest.find_with_options(source_path, options) else {
        if let Some(other) = manifest.find(source_path) {
            let show = |o: &str| {
                if o.is_empty() {
                    "no options".to_owned()
                } else {
                    format!("`{o}`")
                }
            };
            return Err(format!(
                "kenosis: the build script quantized `{written}` with {}, but this call asks \
                 for {}; the embedded artifact must be built with the call site's options. \
                 Use `kenosis_build::discover()` in build.rs so that it reads the options from \
                 the call sites, or make both the same",
                show(&other.options),
                show(options)
            ));
        }
        let registered = if manifest.models.is_empty() {
            "no models".to_owned()
        } else {
            let names: Vec<String> = manifest
                .models
                .iter()
                .map(|m| format!("`{}`", m.source))
                .collect();
            format!("only {}", names.join(", "))
        };
        return Err(not_quantized(
            written,
            &format!(
                "its build script quantized {registered}, not {}",
                source_path.display()
            ),
        ));
    };
    if !entry.artifact_path.is_file() {
        return Err(format!(
            "kenosis: the manifest lists `{written}` but its quantized artifact {} is missing; \
             rebuild the crate so its build script runs again",
            entry.artifact_path.display()
        ));
    }
    let artifact = verified_artifact(entry, Path::new(&out_dir))
        .map_err(|why| format!("kenosis: refusing to embed `{written}`: {why}"))?;
    Ok(Found {
        entry: entry.clone(),
        artifact,
        manifest_path,
    })
}

/// The artifact `entry` names, checked before it is embedded: its resolved path (symlinks
/// followed) must lie inside `out_dir` (resolved too), it must be a regular file of at most
/// protobuf's 2 GiB limit, and its BLAKE3 must equal the manifest's `artifact_blake3`.
/// Returns the resolved path, which is what gets `include_bytes!`'d. The manifest is written
/// by the build script into `OUT_DIR`; these checks keep a manifest edited or planted by
/// anyone else from embedding a file Kenosis did not write there.
fn verified_artifact(entry: &ModelEntry, out_dir: &Path) -> Result<PathBuf, String> {
    use std::io::Read;
    let shown = entry.artifact_path.display();
    let out = out_dir
        .canonicalize()
        .map_err(|e| format!("OUT_DIR {} cannot be resolved: {e}", out_dir.display()))?;
    let path = entry
        .artifact_path
        .canonicalize()
        .map_err(|e| format!("its artifact {shown} cannot be resolved: {e}"))?;
    if !path.starts_with(&out) {
        return Err(format!(
            "its artifact {shown} resolves to {}, outside OUT_DIR {}",
            path.display(),
            out.display()
        ));
    }
    let file = std::fs::File::open(&path).map_err(|e| format!("{shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    const LIMIT: u64 = i32::MAX as u64;
    if !meta.is_file() || meta.len() > LIMIT {
        return Err(format!(
            "its artifact {shown} is not a regular file of at most {LIMIT} bytes"
        ));
    }
    let mut hasher = blake3::Hasher::new();
    std::io::copy(&mut file.take(LIMIT + 1), &mut hasher).map_err(|e| format!("{shown}: {e}"))?;
    let found = hasher.finalize();
    if found.to_hex().as_str() != entry.artifact_blake3 {
        return Err(format!(
            "its artifact {shown} has BLAKE3 {found}, but the manifest records {:?}; \
             rebuild the crate so its build script writes it again",
            entry.artifact_blake3
        ));
    }
    Ok(path)
}

/// The "register it in build.rs" help, for a model found on disk but not in the manifest.
fn not_quantized(written: &str, reason: &str) -> String {
    let version = format!(
        "{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    format!(
        "kenosis: model `{written}` was not quantized by this crate's build script: {reason}.\n\
         include_quantized! embeds models that build.rs quantized with kenosis-build; add to Cargo.toml:\n\
         \n\
         [build-dependencies]\n\
         kenosis-build = \"{version}\"\n\
         \n\
         and let build.rs find every include_quantized! call of the crate:\n\
         \n\
         // build.rs\n\
         fn main() {{\n\
         \x20   kenosis_build::discover().expect(\"kenosis: quantization failed\");\n\
         }}\n\
         \n\
         (or register it explicitly: kenosis_build::Config::new().model({written:?}).compile())"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Planted {
        _dir: tempfile::TempDir,
        out: PathBuf,
        outside: PathBuf,
    }

    fn planted() -> Planted {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        std::fs::create_dir_all(out.join("kenosis")).expect("mkdir");
        let outside = dir.path().join("elsewhere.onnx");
        std::fs::write(&outside, b"bytes kenosis did not write").expect("write");
        Planted {
            _dir: dir,
            out,
            outside,
        }
    }

    fn entry(artifact_path: PathBuf, bytes: &[u8]) -> ModelEntry {
        ModelEntry {
            source: "m.onnx".into(),
            source_path: "/m.onnx".into(),
            artifact_path,
            hash: "00".into(),
            artifact_blake3: blake3::hash(bytes).to_hex().to_string(),
            report_path: "/m.report.json".into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            options: String::new(),
            intra_threads: None,
        }
    }

    #[test]
    fn an_artifact_inside_out_dir_with_the_recorded_hash_is_embedded() {
        let p = planted();
        let artifact = p.out.join("kenosis/m.int8.onnx");
        std::fs::write(&artifact, b"int8 model").expect("write");
        let path =
            verified_artifact(&entry(artifact.clone(), b"int8 model"), &p.out).expect("verified");
        assert_eq!(path, artifact.canonicalize().expect("canonical"));
    }

    #[test]
    fn an_artifact_outside_out_dir_is_refused_even_with_the_right_hash() {
        let p = planted();
        let bytes = std::fs::read(&p.outside).expect("read");
        let err = verified_artifact(&entry(p.outside.clone(), &bytes), &p.out).unwrap_err();
        assert!(err.contains("outside OUT_DIR"), "{err}");
        // Through `..` or a symlink inside OUT_DIR: the resolved path counts.
        let dotted = p.out.join("kenosis/../../elsewhere.onnx");
        let err = verified_artifact(&entry(dotted, &bytes), &p.out).unwrap_err();
        assert!(err.contains("outside OUT_DIR"), "{err}");
        #[cfg(unix)]
        {
            let link = p.out.join("kenosis/m.int8.onnx");
            std::os::unix::fs::symlink(&p.outside, &link).expect("symlink");
            let err = verified_artifact(&entry(link, &bytes), &p.out).unwrap_err();
            assert!(err.contains("outside OUT_DIR"), "{err}");
        }
    }

    #[test]
    fn an_artifact_whose_hash_differs_from_the_manifest_is_refused() {
        let p = planted();
        let artifact = p.out.join("kenosis/m.int8.onnx");
        std::fs::write(&artifact, b"replaced after the build").expect("write");
        let err = verified_artifact(&entry(artifact, b"int8 model"), &p.out).unwrap_err();
        assert!(
            err.contains("has BLAKE3") && err.contains("manifest records"),
            "{err}"
        );
    }
}
