//! The rustdoc the generated wrapper carries: the model it embeds and its `run` signature.

use kenosis_manifest::{ModelEntry, TensorInfo};

use crate::typed::dimension;

/// `f32[1, 3, ?, ?]`.
pub(crate) fn shape_text(info: &TensorInfo) -> String {
    let dims: Vec<String> = info
        .shape
        .iter()
        .map(|d| d.map_or("?".to_owned(), |d| d.to_string()))
        .collect();
    format!("{}[{}]", info.dtype.rust_name(), dims.join(", "))
}

/// How a value's type reads in the signature: `ArrayView<'a, f32, Ix4>` or `Array<f32, Ix2>`.
pub(crate) fn doc_type(info: &TensorInfo, view: bool) -> String {
    let (_, d) = dimension(info.shape.len());
    let t = info.dtype.rust_name();
    if view {
        format!("ArrayView<'a, {t}, {d}>")
    } else {
        format!("Array<{t}, {d}>")
    }
}

/// The `run` signature as a text block: `fn run<'a>(&self, param) -> Result<ret, ...>` and
/// one comment line per note.
pub(crate) fn signature(param: &str, ret: &str, notes: &[String]) -> String {
    let mut doc = format!(
        "```text\nfn run<'a>(&self, {param})\n    -> Result<{ret}, kenosis_runtime::Error>\n"
    );
    for note in notes {
        doc.push_str(&format!("// {note}\n"));
    }
    doc.push_str("```");
    doc
}

/// The doc of the typed `run`.
pub(crate) fn run_doc(signature: &str) -> String {
    format!(
        " Runs the model. Element types and ranks are checked at compile time, static \
         dimensions at run time (`kenosis_runtime::Error::InputShape`).\n\n{signature}"
    )
}

/// The doc of the wrapper type: its source model, options, and the `run` docs (`typed_doc`).
pub(crate) fn wrapper_doc(entry: &ModelEntry, typed_doc: &str) -> String {
    let options = if entry.options.is_empty() {
        "none".to_owned()
    } else {
        format!("`{}`", entry.options)
    };
    format!(
        " INT8 model quantized at build time by kenosis-build from `{}` (call-site options: \
         {options}).\n\n Derefs to the untyped `kenosis_runtime::EmbeddedModel` (also returned \
         by `untyped()`).\n\n{typed_doc}",
        entry.source
    )
}

/// Why a model gets no typed `run`.
pub(crate) const UNSUPPORTED: &str = " This model has an input or output type the typed `run` \
    does not support; use `untyped().run([...])`.";
