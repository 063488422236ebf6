// Non-test code states why each unwrap, expect or panic cannot fire, where it stands.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
//! The `include_quantized!` macro of Kenosis; use it through `kenosis_runtime::include_quantized!`.
//!
//! The macro does no ONNX work itself: it reads the small JSON manifest `kenosis-build` wrote
//! into `OUT_DIR` and emits a `static` that `include_bytes!`s the quantized artifact.
//!
//! One module per concern, in the order a call is handled: `model_path` resolves the model
//! the call names, `lookup` finds it in the manifest and verifies its artifact, `codegen`
//! writes the wrapper, `typed` its typed `run`, `docs` the wrapper's rustdoc. The call's
//! grammar is `kenosis-options`' (shared with `kenosis-build`'s discovery).

mod codegen;
mod docs;
mod lookup;
mod model_path;
mod typed;

use kenosis_options::Invocation;
use proc_macro2::TokenStream;

/// Embeds an ONNX model quantized to INT8 at build time by `kenosis-build`, with a typed `run`.
///
/// ```ignore
/// // build.rs: `fn main() { kenosis_build::discover().expect("kenosis"); }`
/// let net = kenosis_runtime::include_quantized!("models/net.onnx", per_channel = false);
/// let logits: ndarray::Array2<f32> = net.run(image.view())?;     // typed, checked at compile time
/// let outputs = net.untyped().run([image.view()])?;              // untyped EmbeddedModel::run
///
/// // Item form: nameable types (needed to build the inputs struct of a multi-input model).
/// kenosis_runtime::include_quantized!(pub struct Pair = "models/pair.onnx");
/// let out = Pair.run(PairInputs { a: a.view(), b: b.view() })?;  // out: PairOutputs
/// ```
///
/// # Arguments
/// A string literal, the path of the FP32 ONNX model relative to the crate root
/// (`CARGO_MANIFEST_DIR`) or absolute, then optional `key = value` options: every option of
/// `kenosis_build::Config` (`calibration`, `method`, `per_channel`, `keep_float`, ...), listed
/// with its syntax and default on `kenosis_options::Options`. `kenosis_build::discover()` in `build.rs` finds every call and quantizes
/// each model with its call site's options; the macro embeds the artifact built with exactly
/// those options. The item form `vis struct Name = "path", options...` declares the wrapper
/// type `Name` (plus `NameInputs<'a>` for several inputs and `NameOutputs` for several
/// outputs) in the surrounding module instead of returning a value.
///
/// # What it expands to
/// The expression form evaluates to a `&'static` reference to a generated zero-sized wrapper
/// that derefs to [`EmbeddedModel`] (so `bytes()`, `inputs()`, ... work, and
/// `let m: &'static EmbeddedModel = include_quantized!(...)` still compiles) and has:
/// - `const fn untyped(&self) -> &'static EmbeddedModel`;
/// - `fn run(&self, ...)`, typed from the build-time manifest: one input is taken as
///   `ArrayView<'a, T, IxN>` of the input's element type and rank, several as a
///   generated struct with one `ArrayView` field per input (named after the ONNX input,
///   sanitized to an identifier); one output is returned as `Array<T, IxN>`, several as a
///   struct with one field per output. A wrong element type or rank does not compile; a wrong
///   static dimension is `Error::InputShape` naming the input, expected and actual shape.
///   Models with an input or output type other than `f32`, `i64`, `i32`, `u8`, `i8`, `bool`
///   get no typed `run` (use `untyped().run`).
///
/// The generated wrapper's rustdoc shows its `run` signature for the model at hand.
///
/// The artifact and the manifest are `include_bytes!`'d, so the crate is recompiled whenever
/// the build script rewrites them.
///
/// # Compile errors
/// - the argument is not a string literal, an option is unknown, repeated or has a bad value
///   (spanned at the option);
/// - the model file does not exist (the error shows the resolved path);
/// - the model was not quantized by this crate's build script (no build script, or one that
///   neither discovers call sites nor registers the model): the error shows what to add;
/// - the build script quantized the model with other options than this call site's;
/// - the manifest is unreadable or from another Kenosis version.
///
/// # Paths in test harnesses
/// If the environment variable `KENOSIS_MANIFEST_DIR` is set when the macro runs, relative
/// paths are resolved against it instead of `CARGO_MANIFEST_DIR`. Tools like `trybuild` compile
/// a crate's test sources inside a generated package, whose `CARGO_MANIFEST_DIR` is not the
/// crate the sources (and their models) belong to; the override lets such tests use the same
/// relative paths as the crate. Normal builds should not set it.
///
/// [`EmbeddedModel`]: https://docs.rs/kenosis-runtime/latest/kenosis_runtime/struct.EmbeddedModel.html
#[proc_macro]
pub fn include_quantized(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let args = syn::parse_macro_input!(input as Invocation);
    expand(&args)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(args: &Invocation) -> syn::Result<TokenStream> {
    let lit = &args.path;
    let error = |message: String| syn::Error::new(lit.span(), message);
    let written = lit.value();
    let source_path = model_path::resolve(&written).map_err(error)?;
    let found = lookup::find(&written, &source_path, &args.options.canonical()).map_err(error)?;
    codegen::generate(args, &found.entry, &found.artifact, &found.manifest_path).map_err(error)
}
