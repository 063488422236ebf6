//! Arbitrary text as the arguments of an `include_quantized!` call (see
//! `kenosis_options::Invocation`): parsing must never panic, and options that parse must
//! keep the contract of `Options::canonical`: valid option syntax that parses back to the
//! same options and the same canonical text. Run with `cargo xtask fuzz`.
#![no_main]

use kenosis_options::Invocation;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check(text);
    }
    // With `span-locations` (which kenosis-build enables), proc-macro2 keeps every parsed
    // text in a thread-local source map that nothing else frees: over millions of inputs
    // it would reach libFuzzer's RSS limit and be reported as a crash.
    proc_macro2::extra::invalidate_current_thread_spans();
});

fn check(text: &str) {
    let Ok(invocation) = syn::parse_str::<Invocation>(text) else {
        return;
    };
    let canonical = invocation.options.canonical();
    let again = format!("\"m.onnx\", {canonical}");
    let reparsed = syn::parse_str::<Invocation>(&again)
        .unwrap_or_else(|e| panic!("canonical options `{canonical}` do not parse: {e}"));
    assert_eq!(reparsed.options, invocation.options, "`{canonical}`");
    assert_eq!(reparsed.options.canonical(), canonical);
}
