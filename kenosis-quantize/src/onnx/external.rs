//! Inlining a decoded model's external tensors (see `kenosis_request::onnx::external`, which
//! parses their locations and checks their files for the front end too).

use std::path::Path;

pub use kenosis_request::onnx::external::*;

use super::{
    tensor_proto::DataLocation, AttributeProto, GraphProto, ModelProto, SparseTensorProto,
    TensorProto,
};

/// The location of the external tensor `t` of a decoded model.
fn location_of(t: &TensorProto) -> Result<Location, ExternalDataError> {
    Location::parse(
        t.name(),
        (t.external_data.iter()).map(|entry| (entry.key(), entry.value())),
    )
}

/// [`inline`] reads at most this many times protobuf's 2 GiB limit in total: past it, even
/// a model with every FP32 weight in INT8 (a quarter of the size) could not be written as
/// one ONNX file. (It also reads no more than the data files hold, so that N tensors naming
/// one byte range cannot cost N times its length.)
pub const MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT: u64 = 4;

/// Reads every external tensor of `model` into its `raw_data`, so that the model is
/// self-contained. Returns the number of tensors read.
///
/// # Errors
/// [`ExternalDataError::Invalid`] for a bad location (see [`files`]), an `offset`/`length`
/// outside the file, tensors naming more bytes in total than their data files hold (shared
/// or overlapping ranges) or more than [`MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT`] × 2 GiB,
/// all checked before any tensor is read; [`ExternalDataError::Io`] when a data file cannot
/// be read.
pub fn inline(model: &mut ModelProto, model_dir: &Path) -> Result<usize, ExternalDataError> {
    check_total(model, model_dir)?;
    let mut count = 0;
    visit_model_mut(model, &mut |t| {
        if is_external(t) {
            let bytes = location_of(t)?.read(model_dir)?;
            t.raw_data = Some(bytes);
            t.external_data.clear();
            t.data_location = None;
            count += 1;
        }
        Ok(())
    })?;
    // Every place a tensor can be was visited above; this holds the walk to that promise,
    // since a reference left behind would be resolved by ONNX Runtime against whatever folder
    // the model is loaded from.
    let mut left = 0;
    visit_model(model, &mut |t| {
        left += usize::from(is_external(t));
        Ok(())
    })?;
    if left > 0 {
        return Err(ExternalDataError::Invalid(format!(
            "{left} external tensor reference(s) remain after inlining"
        )));
    }
    Ok(count)
}

/// Checks, before any tensor is read, that the bytes the external tensors of `model` would
/// inline in total are no more than their data files hold (distinct files counted once)
/// and at most [`MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT`] × 2 GiB.
fn check_total(model: &ModelProto, model_dir: &Path) -> Result<(), ExternalDataError> {
    let mut sizes = std::collections::BTreeMap::new();
    let mut total = 0u64;
    visit_model(model, &mut |t| {
        if is_external(t) {
            let location = location_of(t)?;
            let file = location.file(model_dir)?;
            let size = match sizes.get(&file) {
                Some(&size) => size,
                None => {
                    let (_, size) = location.checked_file(model_dir)?;
                    sizes.insert(file, size);
                    size
                }
            };
            let length = location
                .length
                .unwrap_or(size.saturating_sub(location.offset));
            total = total.saturating_add(length);
        }
        Ok(())
    })?;
    let present: u64 = sizes.values().sum();
    if total > present {
        return Err(ExternalDataError::Invalid(format!(
            "external tensors name {total} bytes in total but their data files hold {present}: \
             tensors share or overlap byte ranges, which is refused so that a small file \
             cannot expand into a large model"
        )));
    }
    let limit = MAX_INLINED_FACTOR_OF_PROTOBUF_LIMIT * i32::MAX as u64;
    if total > limit {
        return Err(ExternalDataError::Invalid(format!(
            "external tensors hold {total} bytes, over {limit}: even with every weight in \
             INT8 the model would exceed protobuf's 2 GB limit for one ONNX file"
        )));
    }
    Ok(())
}

/// True when `t` keeps its bytes in an external file.
pub fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(DataLocation::External as i32) || !t.external_data.is_empty()
}

type Visit<'a> = dyn FnMut(&TensorProto) -> Result<(), ExternalDataError> + 'a;
type VisitMut<'a> = dyn FnMut(&mut TensorProto) -> Result<(), ExternalDataError> + 'a;

/// Defines the walks over every tensor of a model (see the module documentation), once for
/// shared and once for mutable access: the same code with and without `mut`.
macro_rules! tensor_walks {
    ($model:ident, $graph:ident, $attrs:ident, $sparse:ident, $visit:ident $(, $m:tt)?) => {
        /// Every tensor of `model`, in a fixed order.
        fn $model(model: &$($m)? ModelProto, f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            if let Some(g) = &$($m)? model.graph {
                $graph(g, f)?;
            }
            for func in &$($m)? model.functions {
                $attrs(&$($m)? func.attribute_proto, f)?;
                for n in &$($m)? func.node {
                    $attrs(&$($m)? n.attribute, f)?;
                }
            }
            for info in &$($m)? model.training_info {
                for g in (&$($m)? info.initialization).into_iter().chain(&$($m)? info.algorithm) {
                    $graph(g, f)?;
                }
            }
            Ok(())
        }

        /// Every tensor of `g` and its subgraphs.
        fn $graph(g: &$($m)? GraphProto, f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            for t in &$($m)? g.initializer {
                f(t)?;
            }
            for s in &$($m)? g.sparse_initializer {
                $sparse(s, f)?;
            }
            for n in &$($m)? g.node {
                $attrs(&$($m)? n.attribute, f)?;
            }
            Ok(())
        }

        /// Every tensor of `attrs`: tensor and sparse-tensor values, and their subgraphs.
        fn $attrs(attrs: &$($m)? [AttributeProto], f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            for a in attrs {
                for t in (&$($m)? a.t).into_iter().chain(&$($m)? a.tensors) {
                    f(t)?;
                }
                for s in (&$($m)? a.sparse_tensor).into_iter().chain(&$($m)? a.sparse_tensors) {
                    $sparse(s, f)?;
                }
                for sub in (&$($m)? a.g).into_iter().chain(&$($m)? a.graphs) {
                    $graph(sub, f)?;
                }
            }
            Ok(())
        }

        /// The `values` and `indices` tensors of a sparse tensor.
        fn $sparse(s: &$($m)? SparseTensorProto, f: &mut $visit<'_>) -> Result<(), ExternalDataError> {
            for t in (&$($m)? s.values).into_iter().chain(&$($m)? s.indices) {
                f(t)?;
            }
            Ok(())
        }
    };
}

/// The names of the external tensors of `model`, in walk order: what the front end's reader
/// ([`super::outline`]) must find too.
#[cfg(test)]
pub(crate) fn external_names(model: &ModelProto) -> Vec<String> {
    let mut names = Vec::new();
    let walked = visit_model(model, &mut |t| {
        if is_external(t) {
            names.push(t.name().to_owned());
        }
        Ok(())
    });
    assert!(walked.is_ok(), "the walk itself never fails");
    names
}

tensor_walks!(visit_model, visit_graph, visit_attrs, visit_sparse, Visit);
tensor_walks!(
    visit_model_mut,
    visit_graph_mut,
    visit_attrs_mut,
    visit_sparse_mut,
    VisitMut,
    mut
);
