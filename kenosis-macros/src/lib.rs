//! The `include_quantized!` macro of Kenosis; use it through `kenosis_runtime::include_quantized!`.
//!
//! The macro does no ONNX work itself: it reads the small JSON manifest `kenosis-build` wrote
//! into `OUT_DIR` and emits a `static` that `include_bytes!`s the quantized artifact.

use std::env;
use std::path::{Path, PathBuf};

use kenosis_manifest::{ElementType, Manifest, ManifestError, ModelEntry, TensorInfo};
use kenosis_options::Invocation;
use proc_macro2::{Literal, Span, TokenStream};
use quote::quote;
use syn::{Ident, LitStr};

/// Environment variable that, when set at compile time, replaces `CARGO_MANIFEST_DIR` as the
/// directory relative model paths are resolved against (for test harnesses like `trybuild`).
const BASE_DIR_OVERRIDE: &str = "KENOSIS_MANIFEST_DIR";

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
/// (`CARGO_MANIFEST_DIR`) or absolute, then optional `key = value` options (`calibration`,
/// `method`, `per_channel`, `reduce_range`, `bias_correction`, `gptq_rounding`,
/// `min_cosine`, `min_top1_agreement`, `synthetic_samples`; see the `kenosis-options` crate
/// for the grammar). `kenosis_build::discover()` in `build.rs` finds every call and quantizes
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
    let options = args.options.canonical();
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
    let Some(entry) = manifest.find_with_options(&source_path, &options) else {
        if let Some(other) = manifest.find(&source_path) {
            let show = |o: &str| {
                if o.is_empty() {
                    "no options".to_owned()
                } else {
                    format!("`{o}`")
                }
            };
            return Err(error(format!(
                "kenosis: the build script quantized `{written}` with {}, but this call asks \
                 for {}; the embedded artifact must be built with the call site's options. \
                 Use `kenosis_build::discover()` in build.rs so that it reads the options from \
                 the call sites, or make both the same",
                show(&other.options),
                show(&options)
            )));
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
    let artifact = verified_artifact(entry, Path::new(&out_dir))
        .map_err(|why| error(format!("kenosis: refusing to embed `{written}`: {why}")))?;

    generate(args, entry, &artifact, &manifest_path).map_err(error)
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

/// The wrapper type, its `untyped()` model, the typed `run` and the docs showing it.
fn generate(
    args: &Invocation,
    entry: &ModelEntry,
    artifact_path: &Path,
    manifest_path: &Path,
) -> Result<TokenStream, String> {
    let lit = &args.path;
    let manifest = path_literal(manifest_path)?;
    let artifact = path_literal(artifact_path)?;
    let inputs = entry.inputs.iter().map(tensor_info);
    let outputs = entry.outputs.iter().map(tensor_info);
    let (vis, name) = match &args.item {
        Some(item) => (item.vis.clone(), item.ident.clone()),
        None => (
            syn::Visibility::Inherited,
            Ident::new("__KenosisModel", Span::call_site()),
        ),
    };
    let typed = typed_run(&vis, &name, entry);
    let options = if entry.options.is_empty() {
        "none".to_owned()
    } else {
        format!("`{}`", entry.options)
    };
    let doc = format!(
        " INT8 model quantized at build time by kenosis-build from `{}` (call-site options: \
         {options}).\n\n Derefs to the untyped `kenosis_runtime::EmbeddedModel` (also returned \
         by `untyped()`).\n\n{}",
        entry.source, typed.doc
    );
    let extra_items = &typed.items;
    let run = &typed.run;
    let items = quote! {
        // Recompile when kenosis-build rewrites its manifest.
        const _: &[u8] = ::core::include_bytes!(#manifest);

        #[doc = #doc]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;

        #extra_items

        impl #name {
            /// The untyped model: bytes, input/output metadata, session control and
            /// `EmbeddedModel::run` with dynamically typed inputs.
            #vis const fn untyped(&self) -> &'static ::kenosis_runtime::EmbeddedModel {
                const INPUTS: &[::kenosis_runtime::TensorInfo] = &[#(#inputs),*];
                const OUTPUTS: &[::kenosis_runtime::TensorInfo] = &[#(#outputs),*];
                static MODEL: ::kenosis_runtime::EmbeddedModel =
                    ::kenosis_runtime::EmbeddedModel::__from_macro(
                        #lit,
                        ::core::include_bytes!(#artifact),
                        INPUTS,
                        OUTPUTS,
                    );
                &MODEL
            }

            #run
        }

        impl ::core::ops::Deref for #name {
            type Target = ::kenosis_runtime::EmbeddedModel;
            fn deref(&self) -> &::kenosis_runtime::EmbeddedModel {
                self.untyped()
            }
        }
    };
    Ok(if args.item.is_some() {
        items
    } else {
        quote! {{
            #items
            &#name
        }}
    })
}

/// Generated typed-run pieces.
struct Typed {
    /// Inputs/outputs structs.
    items: TokenStream,
    /// The `run` method (empty if a type is not supported).
    run: TokenStream,
    /// Markdown describing the signature.
    doc: String,
}

/// Rust element type for an ONNX element type `run` can pass or return.
fn typed_element(dtype: ElementType) -> Option<TokenStream> {
    Some(match dtype {
        ElementType::F32 => quote!(f32),
        ElementType::I64 => quote!(i64),
        ElementType::I32 => quote!(i32),
        ElementType::U8 => quote!(u8),
        ElementType::I8 => quote!(i8),
        ElementType::Bool => quote!(bool),
        _ => return None,
    })
}

/// `ndarray` dimension type for a rank, and its short name for docs.
fn dimension(rank: usize) -> (TokenStream, String) {
    if rank <= 6 {
        let ix = Ident::new(&format!("Ix{rank}"), Span::call_site());
        (quote!(::kenosis_runtime::ndarray::#ix), format!("Ix{rank}"))
    } else {
        (
            quote!(::kenosis_runtime::ndarray::IxDyn),
            "IxDyn".to_owned(),
        )
    }
}

/// ONNX value names as Rust field identifiers: other characters become `_`, a leading digit
/// gets a `_` prefix, keywords become raw identifiers (`self`-like ones get a `_` suffix), and
/// duplicates get `_2`, `_3`, ....
fn field_names(infos: &[TensorInfo]) -> Vec<Ident> {
    let mut used: Vec<String> = Vec::new();
    infos
        .iter()
        .map(|info| {
            let mut name: String = info
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                name.insert(0, '_');
            }
            if name == "_" || matches!(name.as_str(), "self" | "Self" | "super" | "crate") {
                name.push('_');
            }
            let base = name.clone();
            let mut n = 2;
            while used.contains(&name) {
                name = format!("{base}_{n}");
                n += 1;
            }
            used.push(name.clone());
            match syn::parse_str::<Ident>(&name) {
                Ok(ident) => ident,
                Err(_) => Ident::new_raw(&name, Span::call_site()),
            }
        })
        .collect()
}

/// `f32[1, 3, ?, ?]`.
fn shape_text(info: &TensorInfo) -> String {
    let dims: Vec<String> = info
        .shape
        .iter()
        .map(|d| d.map_or("?".to_owned(), |d| d.to_string()))
        .collect();
    format!("{}[{}]", info.dtype.rust_name(), dims.join(", "))
}

/// The typed `run`, its inputs/outputs structs and the signature as documentation.
fn typed_run(vis: &syn::Visibility, name: &Ident, entry: &ModelEntry) -> Typed {
    let all_supported = entry
        .inputs
        .iter()
        .chain(&entry.outputs)
        .all(|t| typed_element(t.dtype).is_some());
    if !all_supported || entry.inputs.is_empty() || entry.outputs.is_empty() {
        return Typed {
            items: TokenStream::new(),
            run: TokenStream::new(),
            doc: " This model has an input or output type the typed `run` does not support; \
                  use `untyped().run([...])`."
                .to_owned(),
        };
    }
    let nd = quote!(::kenosis_runtime::ndarray);
    let source = LitStr::new(&entry.source, Span::call_site());
    let in_fields = field_names(&entry.inputs);
    let out_fields = field_names(&entry.outputs);
    let elem = |info: &TensorInfo| typed_element(info.dtype).expect("checked above");
    let view_ty = |info: &TensorInfo| {
        let (t, (d, _)) = (elem(info), dimension(info.shape.len()));
        quote!(#nd::ArrayView<'a, #t, #d>)
    };
    let array_ty = |info: &TensorInfo| {
        let (t, (d, _)) = (elem(info), dimension(info.shape.len()));
        quote!(#nd::Array<#t, #d>)
    };
    let take = |info: &TensorInfo| {
        let (t, (d, _)) = (elem(info), dimension(info.shape.len()));
        let oname = LitStr::new(&info.name, Span::call_site());
        quote!(::kenosis_runtime::__private::output::<#t, #d>(#source, &mut outputs, #oname))
    };
    let doc_ty = |info: &TensorInfo, view: bool| {
        let (_, d) = dimension(info.shape.len());
        let t = info.dtype.rust_name();
        if view {
            format!("ArrayView<'a, {t}, {d}>")
        } else {
            format!("Array<{t}, {d}>")
        }
    };
    let inputs_name = Ident::new(&format!("{name}Inputs"), name.span());
    let outputs_name = Ident::new(&format!("{name}Outputs"), name.span());
    let mut items = TokenStream::new();

    let (param, param_doc, input_values) = if entry.inputs.len() == 1 {
        let info = &entry.inputs[0];
        let field = &in_fields[0];
        let ty = view_ty(info);
        (
            quote!(#field: #ty),
            (
                format!("{field}: {}", doc_ty(info, true)),
                vec![format!(
                    "{field}: input `{}`, {}",
                    info.name,
                    shape_text(info)
                )],
            ),
            quote!([::kenosis_runtime::Input::from(#field)]),
        )
    } else {
        let tys = entry.inputs.iter().map(view_ty);
        let field_docs = entry.inputs.iter().map(|i| {
            format!(
                " Input `{}`: {} (static dimensions are checked by `run`).",
                i.name,
                shape_text(i)
            )
        });
        let struct_doc = format!(" The inputs of `{name}::run`, one field per ONNX input.");
        items.extend(quote! {
            #[doc = #struct_doc]
            #[allow(non_snake_case)]
            #[derive(Clone, Debug)]
            #vis struct #inputs_name<'a> {
                #(#[doc = #field_docs] #vis #in_fields: #tys,)*
            }
        });
        let notes = in_fields
            .iter()
            .zip(&entry.inputs)
            .map(|(f, i)| {
                format!(
                    "inputs.{f}: {}: input `{}`, {}",
                    doc_ty(i, true),
                    i.name,
                    shape_text(i)
                )
            })
            .collect();
        (
            quote!(inputs: #inputs_name<'a>),
            (format!("inputs: {inputs_name}<'a>"), notes),
            quote!([#(::kenosis_runtime::Input::from(inputs.#in_fields)),*]),
        )
    };

    let (ret, ret_doc, ret_value) = if entry.outputs.len() == 1 {
        let info = &entry.outputs[0];
        (
            array_ty(info),
            (
                doc_ty(info, false),
                vec![format!(
                    "returns output `{}`, {}",
                    info.name,
                    shape_text(info)
                )],
            ),
            take(info),
        )
    } else {
        let tys = entry.outputs.iter().map(array_ty);
        let field_docs = entry
            .outputs
            .iter()
            .map(|o| format!(" Output `{}`: {}.", o.name, shape_text(o)));
        let struct_doc = format!(" The outputs of `{name}::run`, one field per ONNX output.");
        items.extend(quote! {
            #[doc = #struct_doc]
            #[allow(non_snake_case)]
            #[derive(Clone, Debug, PartialEq)]
            #vis struct #outputs_name {
                #(#[doc = #field_docs] #vis #out_fields: #tys,)*
            }
        });
        let takes = entry.outputs.iter().map(take);
        let notes = out_fields
            .iter()
            .zip(&entry.outputs)
            .map(|(f, o)| {
                format!(
                    "returns .{f}: {}: output `{}`, {}",
                    doc_ty(o, false),
                    o.name,
                    shape_text(o)
                )
            })
            .collect();
        (
            quote!(#outputs_name),
            (outputs_name.to_string(), notes),
            quote!(::core::result::Result::Ok(#outputs_name { #(#out_fields: #takes?),* })),
        )
    };
    let ((param_sig, param_notes), (ret_sig, ret_notes)): ((String, Vec<String>), _) =
        (param_doc, ret_doc);
    let mut doc = format!(
        "```text\nfn run<'a>(&self, {param_sig})\n    -> Result<{ret_sig}, kenosis_runtime::Error>\n"
    );
    for note in param_notes.iter().chain(&ret_notes) {
        doc.push_str(&format!("// {note}\n"));
    }
    doc.push_str("```");
    let run_doc = format!(
        " Runs the model. Element types and ranks are checked at compile time, static \
         dimensions at run time (`kenosis_runtime::Error::InputShape`).\n\n{doc}"
    );
    let run = quote! {
        #[doc = #run_doc]
        #vis fn run<'a>(&self, #param) -> ::core::result::Result<#ret, ::kenosis_runtime::Error> {
            let outputs = self.untyped().run(#input_values)?;
            let mut outputs = outputs.into_iter();
            #ret_value
        }
    };
    Typed { items, run, doc }
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

#[cfg(test)]
mod tests {
    use super::*;

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
