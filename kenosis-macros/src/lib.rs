//! The `include_quantized!` macro of Kenosis; use it through `kenosis_runtime::include_quantized!`.
//!
//! The macro does no ONNX work itself: it reads the small JSON manifest `kenosis-build` wrote
//! into `OUT_DIR` and emits a `static` that `include_bytes!`s the quantized artifact.

use std::env;
use std::path::{Path, PathBuf};

use kenosis_manifest::{ElementType, Manifest, ManifestError, ModelEntry, TensorInfo};
use proc_macro2::{Literal, Span, TokenStream};
use quote::quote;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Token};

/// Environment variable that, when set at compile time, replaces `CARGO_MANIFEST_DIR` as the
/// directory relative model paths are resolved against (for test harnesses like `trybuild`).
const BASE_DIR_OVERRIDE: &str = "KENOSIS_MANIFEST_DIR";

/// Embeds an ONNX model that this crate's `build.rs` quantized to INT8 with `kenosis-build`,
/// and evaluates to a `&'static kenosis_runtime::EmbeddedModel`.
///
/// ```ignore
/// let model: &'static kenosis_runtime::EmbeddedModel =
///     kenosis_runtime::include_quantized!("models/net.onnx");
/// let outputs = model.run([input.view()])?;
/// ```
///
/// The argument is a string literal: the path of the FP32 ONNX model exactly as registered with
/// `kenosis_build::Config::model` in `build.rs`, relative to the crate root
/// (`CARGO_MANIFEST_DIR`) or absolute. Both sides canonicalize the path, so `"models/net.onnx"`
/// and `"./models/net.onnx"` name the same model.
///
/// The macro finds the model in the manifest `kenosis-build` wrote to `OUT_DIR`
/// (`kenosis-manifest.json`) and expands to a block holding a `static EmbeddedModel` with the
/// INT8 QDQ artifact's bytes (`include_bytes!`) and the model's input and output names, element
/// types and shapes as compile-time data. The manifest is `include_bytes!`'d too, so the crate
/// is recompiled whenever the build script rewrites it.
///
/// # Compile errors
/// - the argument is not a string literal, or is followed by anything but a comma (no
///   `key = value` options exist yet; any option is an error);
/// - the model file does not exist (the error shows the resolved path);
/// - the model was not quantized by this crate's build script (no build script, or the model is
///   not registered in it): the error shows the `Cargo.toml` and `build.rs` lines to add;
/// - the manifest is unreadable or from another Kenosis version.
///
/// # Paths in test harnesses
/// If the environment variable `KENOSIS_MANIFEST_DIR` is set when the macro runs, relative
/// paths are resolved against it instead of `CARGO_MANIFEST_DIR`. Tools like `trybuild` compile
/// a crate's test sources inside a generated package, whose `CARGO_MANIFEST_DIR` is not the
/// crate the sources (and their models) belong to; the override lets such tests use the same
/// relative paths as the crate. Normal builds should not set it.
#[proc_macro]
pub fn include_quantized(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let args = syn::parse_macro_input!(input as Args);
    expand(&args)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// `"path/to/model.onnx"` followed by an optional comma.
struct Args {
    path: LitStr,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        const USAGE: &str =
            "include_quantized! expects a string literal with the path of an FP32 ONNX model \
             registered in build.rs, e.g. `include_quantized!(\"models/net.onnx\")`";
        if input.is_empty() {
            return Err(input.error(USAGE));
        }
        if !input.peek(LitStr) {
            let span = input
                .cursor()
                .token_tree()
                .map_or_else(Span::call_site, |(tt, _)| tt.span());
            return Err(syn::Error::new(span, USAGE));
        }
        let path: LitStr = input.parse()?;
        if input.is_empty() {
            return Ok(Self { path });
        }
        input.parse::<Token![,]>()?;
        if input.is_empty() {
            return Ok(Self { path });
        }
        // Reserved for future `key = value` options; none exist yet.
        let key = input.call(Ident::parse_any)?;
        Err(syn::Error::new(
            key.span(),
            format!("unknown include_quantized! option `{key}` (no options are supported yet)"),
        ))
    }
}

fn expand(args: &Args) -> syn::Result<TokenStream> {
    let lit = &args.path;
    let error = |message: String| syn::Error::new(lit.span(), message);
    let written = lit.value();

    let (base, base_var) = base_dir().map_err(error)?;
    let resolved = base.join(&written);
    let source_path = match resolved.canonicalize() {
        Ok(path) if path.is_file() => path,
        Ok(path) => {
            return Err(error(format!(
                "kenosis: model path `{written}` resolves to {}, which is not a file",
                path.display()
            )))
        }
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist".to_owned()
            } else {
                format!("cannot be read: {e}")
            };
            let against = if base_var == BASE_DIR_OVERRIDE {
                format!("{BASE_DIR_OVERRIDE}, which is set in the environment")
            } else {
                "the crate root, CARGO_MANIFEST_DIR".to_owned()
            };
            return Err(error(format!(
                "kenosis: model file `{written}` not found: {} {why}\n\
                 (relative paths are resolved against {against})",
                resolved.display()
            )));
        }
    };

    let Some(out_dir) = env::var_os("OUT_DIR") else {
        return Err(error(not_quantized(
            &written,
            "OUT_DIR is not set, so this crate has no build script",
        )));
    };
    let manifest_path = Manifest::path_in(Path::new(&out_dir));
    let manifest = match Manifest::read(&manifest_path) {
        Ok(manifest) => manifest,
        Err(ManifestError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(error(not_quantized(
                &written,
                &format!(
                    "the build script wrote no kenosis manifest ({} does not exist)",
                    manifest_path.display()
                ),
            )));
        }
        Err(e) => return Err(error(format!("kenosis: {e}"))),
    };
    let Some(entry) = manifest.find(&source_path) else {
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
        return Err(error(not_quantized(
            &written,
            &format!(
                "its build script quantized {registered}, not {}",
                source_path.display()
            ),
        )));
    };
    if !entry.artifact_path.is_file() {
        return Err(error(format!(
            "kenosis: the manifest lists `{written}` but its quantized artifact {} is missing; \
             rebuild the crate so its build script runs again",
            entry.artifact_path.display()
        )));
    }

    generate(lit, entry, &manifest_path).map_err(error)
}

/// The directory relative model paths are resolved against, and the variable it came from.
fn base_dir() -> Result<(PathBuf, &'static str), String> {
    [BASE_DIR_OVERRIDE, "CARGO_MANIFEST_DIR"]
        .into_iter()
        .find_map(|var| env::var_os(var).map(|dir| (PathBuf::from(dir), var)))
        .ok_or_else(|| {
            "kenosis: CARGO_MANIFEST_DIR is not set; include_quantized! must be compiled by Cargo"
                .to_owned()
        })
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
         and register the model in build.rs:\n\
         \n\
         // build.rs\n\
         fn main() {{\n\
         \x20   kenosis_build::Config::new()\n\
         \x20       .model({written:?})\n\
         \x20       .compile()\n\
         \x20       .expect(\"kenosis: quantization failed\");\n\
         }}"
    )
}

fn generate(lit: &LitStr, entry: &ModelEntry, manifest_path: &Path) -> Result<TokenStream, String> {
    let manifest = path_literal(manifest_path)?;
    let artifact = path_literal(&entry.artifact_path)?;
    let inputs = entry.inputs.iter().map(tensor_info);
    let outputs = entry.outputs.iter().map(tensor_info);
    Ok(quote! {
        {
            // Recompile when kenosis-build rewrites its manifest.
            const _: &[u8] = ::core::include_bytes!(#manifest);
            const INPUTS: &[::kenosis_runtime::TensorInfo] = &[#(#inputs),*];
            const OUTPUTS: &[::kenosis_runtime::TensorInfo] = &[#(#outputs),*];
            static MODEL: ::kenosis_runtime::EmbeddedModel = ::kenosis_runtime::EmbeddedModel::__from_macro(
                #lit,
                ::core::include_bytes!(#artifact),
                INPUTS,
                OUTPUTS,
            );
            &MODEL
        }
    })
}

fn path_literal(path: &Path) -> Result<LitStr, String> {
    let text = path
        .to_str()
        .ok_or_else(|| format!("kenosis: path {} is not valid UTF-8", path.display()))?;
    Ok(LitStr::new(text, Span::call_site()))
}

fn tensor_info(info: &TensorInfo) -> TokenStream {
    let name = LitStr::new(&info.name, Span::call_site());
    let dtype = element_type(info.dtype);
    let dims = info.shape.iter().map(|dim| match dim {
        Some(d) => {
            let d = Literal::i64_unsuffixed(*d);
            quote!(::core::option::Option::Some(#d))
        }
        None => quote!(::core::option::Option::None),
    });
    quote! {
        ::kenosis_runtime::TensorInfo::from_static(#name, #dtype, &[#(#dims),*])
    }
}

fn element_type(dtype: ElementType) -> TokenStream {
    let variant = match dtype {
        ElementType::F32 => "F32",
        ElementType::U8 => "U8",
        ElementType::I8 => "I8",
        ElementType::U16 => "U16",
        ElementType::I16 => "I16",
        ElementType::I32 => "I32",
        ElementType::I64 => "I64",
        ElementType::String => "String",
        ElementType::Bool => "Bool",
        ElementType::F16 => "F16",
        ElementType::F64 => "F64",
        ElementType::U32 => "U32",
        ElementType::U64 => "U64",
    };
    let variant = Ident::new(variant, Span::call_site());
    quote!(::kenosis_runtime::ElementType::#variant)
}
