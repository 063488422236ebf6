//! The tokens `include_quantized!` expands to: the wrapper type, its `static`
//! `EmbeddedModel` over the embedded bytes, and the typed `run` from the manifest's inputs and
//! outputs.

use std::path::Path;

use kenosis_manifest::{ElementType, ModelEntry, TensorInfo};
use kenosis_options::Invocation;
use proc_macro2::{Literal, Span, TokenStream};
use quote::quote;
use syn::{Ident, LitStr};

use crate::docs;

/// The wrapper type, its `untyped()` model, the typed `run` and the docs showing it.
pub(crate) fn generate(
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
    let doc = docs::wrapper_doc(entry, &typed.doc);
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
pub(crate) fn dimension(rank: usize) -> (TokenStream, String) {
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
            doc: docs::UNSUPPORTED.to_owned(),
        };
    }
    let nd = quote!(::kenosis_runtime::ndarray);
    let source = LitStr::new(&entry.source, Span::call_site());
    let in_fields = field_names(&entry.inputs);
    let out_fields = field_names(&entry.outputs);
    #[allow(
        clippy::expect_used,
        reason = "typed_run returned early unless every input and output has a typed element"
    )]
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
                format!("{field}: {}", docs::doc_type(info, true)),
                vec![format!(
                    "{field}: input `{}`, {}",
                    info.name,
                    docs::shape_text(info)
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
                docs::shape_text(i)
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
                    docs::doc_type(i, true),
                    i.name,
                    docs::shape_text(i)
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
                docs::doc_type(info, false),
                vec![format!(
                    "returns output `{}`, {}",
                    info.name,
                    docs::shape_text(info)
                )],
            ),
            take(info),
        )
    } else {
        let tys = entry.outputs.iter().map(array_ty);
        let field_docs = entry
            .outputs
            .iter()
            .map(|o| format!(" Output `{}`: {}.", o.name, docs::shape_text(o)));
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
                    docs::doc_type(o, false),
                    o.name,
                    docs::shape_text(o)
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
    let notes: Vec<String> = param_notes.into_iter().chain(ret_notes).collect();
    let doc = docs::signature(&param_sig, &ret_sig, &notes);
    let run_doc = docs::run_doc(&doc);
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
