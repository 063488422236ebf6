//! The tokens `include_quantized!` expands to: the wrapper type and its `static`
//! `EmbeddedModel` over the embedded bytes, with the typed `run` from `crate::typed`.

use std::path::Path;

use kenosis_manifest::{ElementType, ModelEntry, TensorInfo};
use kenosis_options::Invocation;
use proc_macro2::{Literal, Span, TokenStream};
use quote::quote;
use syn::{Ident, LitStr};

use crate::docs;
use crate::typed::typed_run;

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
    // 0: the runtime's default for the machine it runs on.
    let intra_threads = entry.intra_threads.unwrap_or(0);
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
                        #intra_threads,
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
