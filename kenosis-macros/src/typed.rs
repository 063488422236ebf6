//! The typed `run` of the generated wrapper: one `ArrayView` per input (a generated struct for
//! several), one `Array` per output (a struct for several), element types and ranks from the
//! manifest, so that a wrong type or rank does not compile.

use kenosis_manifest::{ElementType, ModelEntry, TensorInfo};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Ident, LitStr};

use crate::docs;

/// Generated typed-run pieces.
pub(crate) struct Typed {
    /// Inputs/outputs structs.
    pub items: TokenStream,
    /// The `run` method (empty if a type is not supported).
    pub run: TokenStream,
    /// Markdown describing the signature.
    pub doc: String,
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
pub(crate) fn typed_run(vis: &syn::Visibility, name: &Ident, entry: &ModelEntry) -> Typed {
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
