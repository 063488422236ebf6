//! Compile-fail tests for `include_quantized!`: each `ui/*.rs` case must fail to compile with
//! exactly the error in the `.stderr` file next to it. Regenerate those files after an
//! intended message change with `TRYBUILD=overwrite cargo test -p kenosis-tests --test ui`.

#[test]
fn include_quantized_errors() {
    // trybuild compiles every case as a binary of a package it generates under
    // `<target>/tests/trybuild/`, which has no build script. Two environment variables, which
    // cargo passes on to rustc and so to the proc macro, make the cases see what code in this
    // crate sees:
    //
    // * `OUT_DIR`: the macro reads the manifest `kenosis-build` writes to `$OUT_DIR`. Cargo sets
    //   `OUT_DIR` only for packages with a build script, so the generated package has none of
    //   its own; forward this crate's, where `tests/build.rs` registered
    //   `fixtures/tiny/tiny_conv.onnx` (and deliberately not
    //   `../kenosis-runtime/testdata/tiny_conv.onnx`).
    // * `KENOSIS_MANIFEST_DIR`: the macro resolves relative model paths against
    //   `CARGO_MANIFEST_DIR`, which for the cases is the generated package's directory, not
    //   `tests/`. This documented override of `include_quantized!` points them back at this
    //   crate, so the cases use the same relative paths as `tests/build.rs`, independent of
    //   where the workspace or target directory is (trybuild prints this crate's directory as
    //   `$DIR` in the expected output).
    //
    // The test binary runs this single test, so no other thread reads the environment while
    // it is being changed.
    std::env::set_var("OUT_DIR", env!("OUT_DIR"));
    std::env::set_var("KENOSIS_MANIFEST_DIR", env!("CARGO_MANIFEST_DIR"));

    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/*.rs");
}
