//! Arbitrary text as the arguments of an `include_quantized!` call (see
//! `kenosis_options::Invocation`): parsing must never panic, and options that parse must
//! keep the contract of `Options::canonical`: valid option syntax that parses back to the
//! same options and the same canonical text. Run with `cargo xtask fuzz`.
#![no_main]

use kenosis_options::Invocation;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(invocation) = syn::parse_str::<Invocation>(text) else {
        return;
    };
    let canonical = invocation.options.canonical();
    let again = format!("\"m.onnx\", {canonical}");
    let reparsed = syn::parse_str::<Invocation>(&again)
        .unwrap_or_else(|e| panic!("canonical options `{canonical}` do not parse: {e}"));
    assert_eq!(reparsed.options, invocation.options, "`{canonical}`");
    assert_eq!(reparsed.options.canonical(), canonical);
});
