//! Test-only crate; see tests/. What several of its tests read the same way.

/// How many times a build's output `build` holds the build script's summary line for
/// `model`: `kenosis: quantized MODEL to INT8`, or `kenosis: kept MODEL in FP32` when nothing
/// of it runs in INT8 (no op quantized, or the speed check found the INT8 model slower on
/// this machine and shipped FP32, a close call for some models, e.g. YOLOX-Nano).
pub fn summary_lines(build: &str, model: &str) -> usize {
    build
        .matches(&format!("kenosis: quantized {model} to INT8"))
        .count()
        + build
            .matches(&format!("kenosis: kept {model} in FP32"))
            .count()
}

/// How many summary lines (see [`summary_lines`]) a build's output `build` holds, whatever
/// the model.
pub fn any_summary_lines(build: &str) -> usize {
    build.matches("kenosis: quantized ").count() + build.matches("kenosis: kept ").count()
}

/// The newest `out/<file>` that a build script of a package whose build folder name contains
/// `package` wrote under `build_dir` (`<target>/debug/build`), e.g. the fixture's
/// `kenosis-manifest.json`; `None` when there is none.
pub fn newest_build_output(
    build_dir: &std::path::Path,
    package: &str,
    file: &str,
) -> Option<std::path::PathBuf> {
    std::fs::read_dir(build_dir)
        .ok()?
        .filter_map(|e| {
            let path = e.ok()?.path().join("out").join(file);
            let modified = path.metadata().ok()?.modified().ok()?;
            path.to_string_lossy()
                .contains(package)
                .then_some((modified, path))
        })
        .max()
        .map(|(_, path)| path)
}
