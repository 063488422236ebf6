//! Calibration samples: loaded from `.npy` files or generated synthetically.

use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};

use super::npy;
use crate::error::{BadSample, Error, Result};
use crate::onnx::{DataType, ElemType, GraphProto, NodeProto};

/// One graph input: name, element type and shape (`None` for a symbolic dimension).
#[derive(Debug, Clone, PartialEq)]
pub struct InputSpec {
    /// Graph input name.
    pub name: String,
    /// Its declared element type (`UNDEFINED` when not declared).
    pub elem_type: ElemType,
    /// Declared dims; `None` where symbolic or missing.
    pub dims: Vec<Option<i64>>,
    /// The `dim_param` of each dim (`None` for fixed or unnamed dims): symbolic dims with
    /// the same name must get the same concrete size.
    pub dim_names: Vec<Option<String>>,
    /// For an integer input that a Gather reads as indices into a constant table (directly
    /// or through Casts to int32 or int64), or that a one-hot encodes: the fewest rows
    /// (along the Gather's axis, or the one-hot's depth) of those, so that synthetic ids stay
    /// valid indices (see `table_rows`). `None` otherwise.
    pub token_rows: Option<usize>,
}

/// The real (non-initializer) inputs of `graph`, in declaration order.
pub fn input_specs(graph: &GraphProto) -> Vec<InputSpec> {
    real_inputs(graph)
        .map(|i| {
            let (elem_type, dims) =
                crate::onnx::declared_tensor(i).unwrap_or((DataType::Undefined.into(), None));
            let dims = dims.unwrap_or_default();
            let mut dim_names = crate::onnx::declared_dim_names(i);
            dim_names.resize(dims.len(), None);
            InputSpec {
                name: i.name().to_owned(),
                elem_type,
                dims,
                dim_names,
                token_rows: table_rows(graph, i.name()),
            }
        })
        .collect()
}

/// The fewest rows of the constant tables Gathers index with `input`, or of the one-hot
/// encodings it feeds (see [`InputSpec::token_rows`]). `input` reaches them directly,
/// through Casts to int32 or int64 (Gather indices are int32 or int64, so an int8, int16 or
/// uint8 input reaches a Gather through a Cast), or, for a one-hot, through ops that only
/// reshape it. A one-hot is an `Equal` against a constant integer tensor (jax2tf's and
/// tf2onnx's spelling: ids broadcast against `0..depth`), with `max + 1` rows, or a `OneHot`
/// with a constant depth.
fn table_rows(graph: &GraphProto, input: &str) -> Option<usize> {
    let initializer = |name: &str| graph.initializer.iter().find(|t| t.name() == name);
    let mut indices: std::collections::HashSet<&str> = std::collections::HashSet::from([input]);
    loop {
        let before = indices.len();
        for n in &graph.node {
            let to = crate::onnx::attr::int(n, "to", 0);
            let to = i32::try_from(to).map(ElemType::from_code);
            let passes = match n.op_type() {
                "Cast" => to.is_ok_and(|t| t == DataType::Int32 || t == DataType::Int64),
                "Reshape" | "Expand" | "Unsqueeze" | "Squeeze" | "Flatten" => true,
                _ => false,
            };
            if passes
                && crate::onnx::is_default_domain(n.domain())
                && n.input
                    .first()
                    .is_some_and(|i| indices.contains(i.as_str()))
            {
                indices.extend(n.output.iter().map(String::as_str));
            }
        }
        if indices.len() == before {
            break;
        }
    }
    let reads =
        |n: &NodeProto, k: usize| n.input.get(k).is_some_and(|i| indices.contains(i.as_str()));
    let gathers = (graph.node.iter())
        .filter(|n| n.op_type() == "Gather" && reads(n, 1))
        .filter_map(|n| {
            let table = initializer(&n.input[0])?;
            let axis = crate::onnx::attr::int(n, "axis", 0);
            let axis = if axis < 0 {
                axis + table.dims.len() as i64
            } else {
                axis
            };
            let axis = usize::try_from(axis).ok()?;
            usize::try_from(*table.dims.get(axis)?).ok()
        });
    let one_hots = graph.node.iter().filter_map(|n| {
        let constant = match n.op_type() {
            "Equal" if reads(n, 0) => initializer(n.input.get(1)?)?,
            "Equal" if reads(n, 1) => initializer(&n.input[0])?,
            "OneHot" if reads(n, 0) => initializer(n.input.get(1)?)?,
            _ => return None,
        };
        let values = crate::onnx::tensor::to_i64(constant).ok()?;
        let rows = match n.op_type() {
            "OneHot" => *values.first()?,
            _ => values.into_iter().max()?.checked_add(1)?,
        };
        usize::try_from(rows).ok()
    });
    gathers.chain(one_hots).min()
}

/// One input value of one calibration sample.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleValue {
    /// A float32 tensor.
    F32(ArrayD<f32>),
    /// An int64 tensor (token ids, masks, indices).
    I64(ArrayD<i64>),
    /// An int32 tensor (token or byte ids, masks).
    I32(ArrayD<i32>),
    /// An int16 tensor.
    I16(ArrayD<i16>),
    /// An int8 tensor.
    I8(ArrayD<i8>),
    /// A uint8 tensor (bytes, raw pixels).
    U8(ArrayD<u8>),
    /// A bool tensor (masks, flags).
    Bool(ArrayD<bool>),
}

/// Evaluates `$body` with `$a` bound to the array inside `$value` (a `SampleValue` or a
/// reference to one), whatever its element type.
macro_rules! with_array {
    ($value:expr, |$a:ident| $body:expr) => {
        match $value {
            $crate::calibrate::data::SampleValue::F32($a) => $body,
            $crate::calibrate::data::SampleValue::I64($a) => $body,
            $crate::calibrate::data::SampleValue::I32($a) => $body,
            $crate::calibrate::data::SampleValue::I16($a) => $body,
            $crate::calibrate::data::SampleValue::I8($a) => $body,
            $crate::calibrate::data::SampleValue::U8($a) => $body,
            $crate::calibrate::data::SampleValue::Bool($a) => $body,
        }
    };
}
pub(crate) use with_array;

impl SampleValue {
    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        with_array!(self, |a| a.shape())
    }

    /// The tensor's ONNX element type.
    pub fn elem_type(&self) -> DataType {
        match self {
            SampleValue::F32(_) => DataType::Float,
            SampleValue::I64(_) => DataType::Int64,
            SampleValue::I32(_) => DataType::Int32,
            SampleValue::I16(_) => DataType::Int16,
            SampleValue::I8(_) => DataType::Int8,
            SampleValue::U8(_) => DataType::Uint8,
            SampleValue::Bool(_) => DataType::Bool,
        }
    }
}

/// Calibration samples, each holding one value per model input (in input order).
#[derive(Debug, Clone, Default)]
pub struct CalibrationData {
    /// `samples[s][i]` is input `i` of sample `s`.
    pub samples: Vec<Vec<SampleValue>>,
    /// Files the samples came from (empty for synthetic data), for hashing and rerun-if-changed.
    pub files: Vec<PathBuf>,
    /// True when the samples were generated, not loaded.
    pub synthetic: bool,
}

/// The graph inputs that are not initializers (older IR versions list initializers as
/// inputs too), in declaration order: the inputs calibration data is given for (see
/// `npy_files`). The front end reads the same from the file (`Outline::input_names`).
pub fn real_inputs(
    graph: &crate::onnx::GraphProto,
) -> impl Iterator<Item = &crate::onnx::ValueInfoProto> {
    let inits: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name()).collect();
    graph
        .input
        .iter()
        .filter(move |i| !inits.contains(i.name()))
}

pub use crate::model_files::npy_files;

/// Loads the files [`npy_files`] lists for `inputs`, one sample per file, pairing files of
/// different inputs by sorted name. A file may omit the batch dimension; it is then added.
///
/// # Errors
/// As [`npy_files`]; [`Error::Calibration`] naming the file when counts differ between
/// inputs, or a file's dtype or shape does not fit its input; [`Error::Io`] when a file
/// cannot be read.
pub fn load_npy_dir(dir: &Path, inputs: &[InputSpec]) -> Result<CalibrationData> {
    let bad = |path: &Path, reason: String| Error::Calibration {
        path: path.to_owned(),
        reason,
    };
    let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    let per_input = npy_files(dir, &names)?;
    let count = per_input[0].len();
    if let Some((k, files)) = per_input.iter().enumerate().find(|(_, f)| f.len() != count) {
        return Err(bad(
            dir,
            format!(
                "input `{}` has {} samples but `{}` has {count}",
                inputs[k].name,
                files.len(),
                inputs[0].name
            ),
        ));
    }
    let mut data = CalibrationData::default();
    for s in 0..count {
        let mut sample = Vec::with_capacity(inputs.len());
        for (spec, files) in inputs.iter().zip(&per_input) {
            let path = &files[s];
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            sample.push(read_sample(&bytes, spec).map_err(|reason| bad(path, reason.to_string()))?);
            data.files.push(path.clone());
        }
        data.samples.push(sample);
    }
    Ok(data)
}

/// One calibration sample for input `spec` from the bytes of an `.npy` file whose dtype is
/// the input's element type (float32 `<f4`, int64 `<i8`, int32 `<i4`, int16 `<i2`, int8
/// `|i1`, uint8 `|u1` or bool `|b1`; the multi-byte ones big-endian too, `>f4`...), C or
/// Fortran order, checked against the input's declared dims (a missing leading batch
/// dimension is added). The file is read by [`npy::read`].
///
/// # Errors
/// [`BadSample`] (without the file name, which the caller adds) when the bytes are not an
/// `.npy` file of the input's dtype (see [`npy::read`]: among others, its header declares
/// another amount of data than it holds), or its shape does not fit the input.
pub fn read_sample(bytes: &[u8], spec: &InputSpec) -> std::result::Result<SampleValue, BadSample> {
    fn read<T: npy::Element>(
        bytes: &[u8],
        spec: &InputSpec,
        npy: &'static str,
    ) -> std::result::Result<ArrayD<T>, BadSample> {
        npy::read(bytes).map_err(|source| BadSample::Data {
            input: spec.name.clone(),
            npy,
            source,
        })
    }
    let value = match spec.elem_type.known() {
        Some(DataType::Float) => SampleValue::F32(read(bytes, spec, "float32 (<f4)")?),
        Some(DataType::Int64) => SampleValue::I64(read(bytes, spec, "int64 (<i8)")?),
        Some(DataType::Int32) => SampleValue::I32(read(bytes, spec, "int32 (<i4)")?),
        Some(DataType::Int16) => SampleValue::I16(read(bytes, spec, "int16 (<i2)")?),
        Some(DataType::Int8) => SampleValue::I8(read(bytes, spec, "int8 (|i1)")?),
        Some(DataType::Uint8) => SampleValue::U8(read(bytes, spec, "uint8 (|u1)")?),
        Some(DataType::Bool) => SampleValue::Bool(read(bytes, spec, "bool (|b1)")?),
        _ => {
            return Err(BadSample::ElementType {
                input: spec.name.clone(),
                elem_type: spec.elem_type,
            })
        }
    };
    fit_shape(value, spec)
}

/// Checks a sample's shape against the declared dims, adding a leading batch axis of 1 when
/// the sample has one dimension fewer than the input.
fn fit_shape(value: SampleValue, spec: &InputSpec) -> std::result::Result<SampleValue, BadSample> {
    let shape = value.shape().to_vec();
    let rank = spec.dims.len();
    let full: Vec<usize> = if !spec.dims.is_empty() && shape.len() + 1 == rank {
        std::iter::once(1).chain(shape.iter().copied()).collect()
    } else {
        shape.clone()
    };
    if !spec.dims.is_empty() {
        let fits = full.len() == rank
            && full
                .iter()
                .zip(&spec.dims)
                .all(|(&a, d)| d.is_none_or(|d| d as usize == a));
        if !fits {
            return Err(BadSample::Shape {
                input: spec.name.clone(),
                expected: spec.dims.clone(),
                found: shape,
            });
        }
    }
    // A Fortran-order file (`np.asfortranarray`, `np.save(path, x.T)`) is read with its
    // column-major strides; the row-major reshape needs the elements in row-major order.
    fn reshaped<T: Clone>(
        a: ArrayD<T>,
        full: &[usize],
    ) -> std::result::Result<ArrayD<T>, BadSample> {
        let a = if a.is_standard_layout() {
            a
        } else {
            a.as_standard_layout().into_owned()
        };
        let shape = a.shape().to_vec();
        a.into_shape_with_order(IxDyn(full))
            .map_err(|source| BadSample::Reshape {
                shape,
                full: full.to_vec(),
                source,
            })
    }
    Ok(match value {
        SampleValue::F32(a) => SampleValue::F32(reshaped(a, &full)?),
        SampleValue::I64(a) => SampleValue::I64(reshaped(a, &full)?),
        SampleValue::I32(a) => SampleValue::I32(reshaped(a, &full)?),
        SampleValue::I16(a) => SampleValue::I16(reshaped(a, &full)?),
        SampleValue::I8(a) => SampleValue::I8(reshaped(a, &full)?),
        SampleValue::U8(a) => SampleValue::U8(reshaped(a, &full)?),
        SampleValue::Bool(a) => SampleValue::Bool(reshaped(a, &full)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{input_spec as spec, npy};

    #[test]
    fn every_integer_and_bool_type_is_read_from_npy_and_checked_against_its_input() {
        let shape = IxDyn(&[1, 4]);
        let cases = [
            (
                DataType::Int32,
                npy(ArrayD::from_shape_vec(shape.clone(), vec![1i32, -2, 70000, 4]).unwrap()),
            ),
            (
                DataType::Int16,
                npy(ArrayD::from_shape_vec(shape.clone(), vec![1i16, -2, 300, 4]).unwrap()),
            ),
            (
                DataType::Int8,
                npy(ArrayD::from_shape_vec(shape.clone(), vec![1i8, -2, 100, 4]).unwrap()),
            ),
            (
                DataType::Uint8,
                npy(ArrayD::from_shape_vec(shape.clone(), vec![1u8, 2, 255, 4]).unwrap()),
            ),
            (
                DataType::Bool,
                npy(ArrayD::from_shape_vec(shape.clone(), vec![true, false, true, true]).unwrap()),
            ),
        ];
        for (elem_type, bytes) in &cases {
            let input = spec(*elem_type, "ids", &[1, 4], None);
            let value = read_sample(bytes, &input).unwrap_or_else(|e| panic!("{elem_type:?}: {e}"));
            assert_eq!(value.elem_type(), *elem_type);
            assert_eq!(value.shape(), &[1, 4]);
            // The batch dimension may be left out, as for float inputs.
            let rank3 = spec(*elem_type, "ids", &[1, 1, 4], None);
            assert_eq!(
                read_sample(bytes, &rank3).expect("batch added").shape(),
                &[1, 1, 4]
            );
            // Every other type's file is refused, naming the type expected.
            for (other, other_bytes) in &cases {
                if other != elem_type {
                    let err = read_sample(other_bytes, &input).unwrap_err().to_string();
                    assert!(err.contains("input `ids` expects"), "{err}");
                }
            }
        }
        let int32 = read_sample(&cases[0].1, &spec(DataType::Int32, "ids", &[1, 4], None));
        assert_eq!(
            int32.ok(),
            Some(SampleValue::I32(
                ArrayD::from_shape_vec(shape, vec![1, -2, 70000, 4]).unwrap()
            ))
        );
        let err =
            read_sample(&cases[1].1, &spec(DataType::Int32, "ids", &[1, 4], None)).unwrap_err();
        assert!(
            err.to_string().contains("expects int32 (<i4) data"),
            "{err}"
        );
        let err =
            read_sample(&cases[0].1, &spec(DataType::Double, "x", &[1, 4], None)).unwrap_err();
        assert!(
            err.to_string().contains("has element type DOUBLE (11)"),
            "{err}"
        );
        let mut unknown = spec(DataType::Float, "x", &[1, 4], None);
        unknown.elem_type = ElemType::from_code(99);
        let err = read_sample(&cases[0].1, &unknown).unwrap_err();
        assert!(
            err.to_string().contains("has element type unknown (99)"),
            "{err}"
        );
    }

    #[test]
    fn table_rows_are_found_through_casts_to_an_index_type() {
        use crate::onnx::{make_node, tensor, tensor_info, AttributeProto, GraphProto};
        let cast = |input: &str, output: &str, to: DataType| {
            let mut n = make_node(
                "Cast",
                output.into(),
                vec![input.into()],
                vec![output.into()],
                vec![],
            );
            n.attribute.push(AttributeProto {
                name: Some("to".into()),
                r#type: Some(crate::onnx::attribute_proto::AttributeType::Int as i32),
                i: Some((to as i32).into()),
                ..Default::default()
            });
            n
        };
        let gather = |name: &str, table: &str, ids: &str| {
            make_node(
                "Gather",
                name.into(),
                vec![table.into(), ids.into()],
                vec![format!("{name}_out")],
                vec![],
            )
        };
        let graph = GraphProto {
            node: vec![
                cast("bytes", "bytes_i32", DataType::Int32),
                cast("bytes_i32", "bytes_i64", DataType::Int64),
                gather("embed", "table", "bytes_i64"),
                cast("flags", "flags_f", DataType::Float),
                gather("lookup", "table", "flags_f"),
            ],
            initializer: vec![tensor::from_f32("table", &[200, 2], &[0.0; 400])],
            input: vec![
                tensor_info("bytes", DataType::Uint8, Some(&[1, 8])),
                tensor_info("flags", DataType::Int8, Some(&[1, 8])),
            ],
            ..Default::default()
        };
        let specs = input_specs(&graph);
        assert_eq!(specs[0].token_rows, Some(200));
        // A Cast to float is not an index.
        assert_eq!(specs[1].token_rows, None);
    }

    #[test]
    fn a_one_hot_comparison_bounds_the_ids_like_a_table() {
        use crate::onnx::{make_node, tensor, tensor_info, GraphProto};
        // jax2tf's one-hot of bytes (Google's Magika): reshape to [N, L, 1], compare with
        // 0..257 broadcast to [1, 1, 257].
        let node = |op: &str, inputs: &[&str], output: &str| {
            let inputs = inputs.iter().map(|s| s.to_string()).collect();
            make_node(op, output.into(), inputs, vec![output.into()], vec![])
        };
        let depth: Vec<i32> = (0..257).collect();
        let graph = GraphProto {
            node: vec![
                node("Reshape", &["bytes", "shape"], "column"),
                node("Equal", &["column", "depth"], "hot"),
                node("Cast", &["hot"], "hot_f"),
            ],
            initializer: vec![
                tensor::from_i64("shape", &[3], &[-1, 8, 1]),
                tensor::from_i32("depth", &[1, 1, 257], &depth),
            ],
            input: vec![tensor_info("bytes", DataType::Int32, Some(&[1, 8]))],
            ..Default::default()
        };
        assert_eq!(input_specs(&graph)[0].token_rows, Some(257));
    }
}
