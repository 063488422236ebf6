//! Reading and writing `TensorProto` payloads (initializers, Constant values).
//!
//! ONNX stores a tensor either in `raw_data` (little-endian bytes) or in a typed repeated
//! field (`float_data`, `int32_data` for 8/16-bit and bool types, `int64_data`, `double_data`);
//! both are accepted on read, `raw_data` is always written.

use super::{DataType, ElemType, TensorProto};

/// A tensor whose payload does not hold what its type and dims declare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadTensor {
    /// `raw_data` does not split into whole elements.
    #[error("tensor `{tensor}`: raw_data length {len} is not a multiple of {elem_size}")]
    RawLength {
        /// The tensor.
        tensor: String,
        /// Bytes in `raw_data`.
        len: usize,
        /// Bytes per element.
        elem_size: usize,
    },
    /// Negative or overflowing dims.
    #[error("tensor `{tensor}` has invalid dims {dims:?}")]
    Dims {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
    },
    /// The payload holds another number of values than the dims declare.
    #[error("tensor `{tensor}` has dims {dims:?} ({expected} elements) but holds {held} values")]
    Count {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
        /// Elements the dims declare.
        expected: usize,
        /// Values the payload holds.
        held: usize,
    },
    /// The data type is not the one the reader expects.
    #[error("tensor `{tensor}` has data type {}, expected {expected}", .found.code())]
    DataType {
        /// The tensor.
        tensor: String,
        /// Its element type.
        found: ElemType,
        /// What the reader takes, e.g. `float`.
        expected: &'static str,
    },
    /// The data lives in an external file the reader was not given.
    #[error("tensor `{tensor}` keeps its data in an external file; save the model with its weights inside the .onnx file")]
    External {
        /// The tensor.
        tensor: String,
    },
}

/// Number of elements implied by `dims`, or `None` on a negative dim or overflow.
pub fn element_count(dims: &[i64]) -> Option<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}

/// Elements per step along `axis` of a row-major tensor with `dims` (the product of the
/// dims after it), so that element `e` lies at index `(e / inner) % dims[axis]` on that axis.
/// 1 for dims no payload can match (negative or overflowing) or an axis past the end.
pub fn inner_size(dims: &[i64], axis: usize) -> usize {
    dims.get(axis + 1..)
        .and_then(element_count)
        .unwrap_or(1)
        .max(1)
}

/// Whether the float tensor `t` (FLOAT or DOUBLE, inline) holds exactly the number of
/// values its `dims` declare, judged from the payload's length alone (nothing is decoded or
/// allocated). Code that sizes buffers from `dims` checks this first, so that declared dims
/// cannot ask for more memory than the payload's bytes.
pub fn float_payload_matches_dims(t: &TensorProto) -> bool {
    let values = match t.elem_type().known() {
        Some(DataType::Float) if t.raw_data.is_some() => t.raw_data().len() / 4,
        Some(DataType::Float) => t.float_data.len(),
        Some(DataType::Double) if t.raw_data.is_some() => t.raw_data().len() / 8,
        Some(DataType::Double) => t.double_data.len(),
        _ => return false,
    };
    !super::external::is_external(t) && element_count(&t.dims) == Some(values)
}

/// Checks that the inline tensor `t` holds exactly the values its `dims` declare, judged
/// from the payload's length (nothing is decoded). Tensors kept in external data, and data
/// types whose storage is not checked here (strings, complex, 4-bit and 8-bit floats), pass.
///
/// # Errors
/// [`BadTensor`] naming the tensor, its declared dims and the values it holds.
pub fn check_payload(t: &TensorProto) -> Result<(), BadTensor> {
    if super::external::is_external(t) {
        return Ok(());
    }
    // Bytes per element in `raw_data`, and the typed field that holds it otherwise.
    let Some(data_type) = t.elem_type().known() else {
        return Ok(());
    };
    let (size, typed) = match data_type {
        DataType::Float => (4, t.float_data.len()),
        DataType::Double => (8, t.double_data.len()),
        DataType::Int64 => (8, t.int64_data.len()),
        DataType::Int32 => (4, t.int32_data.len()),
        // Stored one per int32 when typed.
        DataType::Int16 | DataType::Uint16 | DataType::Float16 | DataType::Bfloat16 => {
            (2, t.int32_data.len())
        }
        DataType::Int8 | DataType::Uint8 | DataType::Bool => (1, t.int32_data.len()),
        DataType::Uint32 => (4, t.uint64_data.len()),
        DataType::Uint64 => (8, t.uint64_data.len()),
        DataType::Undefined
        | DataType::String
        | DataType::Complex64
        | DataType::Complex128
        | DataType::Float8e4m3fn
        | DataType::Float8e4m3fnuz
        | DataType::Float8e5m2
        | DataType::Float8e5m2fnuz
        | DataType::Uint4
        | DataType::Int4
        | DataType::Float4e2m1
        | DataType::Float8e8m0
        | DataType::Uint2
        | DataType::Int2
        | DataType::Float6e2m3
        | DataType::Float6e3m2 => return Ok(()),
    };
    let held = match &t.raw_data {
        Some(raw) => {
            if raw.len() % size != 0 {
                return Err(BadTensor::RawLength {
                    tensor: t.name().to_owned(),
                    len: raw.len(),
                    elem_size: size,
                });
            }
            raw.len() / size
        }
        None => typed,
    };
    check_len(t, held)
}

fn check_inline(t: &TensorProto) -> Result<(), BadTensor> {
    if super::external::is_external(t) {
        return Err(BadTensor::External {
            tensor: t.name().to_owned(),
        });
    }
    Ok(())
}

fn check_len(t: &TensorProto, held: usize) -> Result<(), BadTensor> {
    let expected = element_count(&t.dims).ok_or_else(|| BadTensor::Dims {
        tensor: t.name().to_owned(),
        dims: t.dims.clone(),
    })?;
    if expected != held {
        return Err(BadTensor::Count {
            tensor: t.name().to_owned(),
            dims: t.dims.clone(),
            expected,
            held,
        });
    }
    Ok(())
}

#[allow(
    clippy::expect_used,
    reason = "chunks_exact(N) yields slices of exactly N bytes"
)]
fn from_raw<const N: usize, T>(
    t: &TensorProto,
    decode: fn([u8; N]) -> T,
) -> Result<Vec<T>, BadTensor> {
    check_raw_len(t, N)?;
    Ok(t.raw_data()
        .chunks_exact(N)
        .map(|c| decode(c.try_into().expect("chunk of N bytes")))
        .collect())
}

/// Checks that `t`'s `raw_data` holds whole elements of `elem_size` bytes.
fn check_raw_len(t: &TensorProto, elem_size: usize) -> Result<(), BadTensor> {
    if t.raw_data().len().is_multiple_of(elem_size) {
        Ok(())
    } else {
        Err(BadTensor::RawLength {
            tensor: t.name().to_owned(),
            len: t.raw_data().len(),
            elem_size,
        })
    }
}

/// The values of a float tensor (FLOAT or DOUBLE) as `f32`, row-major. Only the quantizer
/// reads tensor values (the front end hashes bytes), so FLOAT's raw bytes are decoded by
/// `kenosis-numerics`, optimized where this crate is not (see `quantizer`).
///
/// # Errors
/// [`BadTensor`] naming the tensor when it is not float, external, or its size mismatches
/// `dims`.
pub fn to_f32(t: &TensorProto) -> Result<Vec<f32>, BadTensor> {
    check_inline(t)?;
    let values = match t.elem_type().known() {
        Some(DataType::Float) if t.raw_data.is_some() => {
            check_raw_len(t, 4)?;
            kenosis_numerics::bytes::f32_from_le(t.raw_data())
        }
        Some(DataType::Float) => t.float_data.clone(),
        Some(DataType::Double) if t.raw_data.is_some() => from_raw(t, f64::from_le_bytes)?
            .into_iter()
            .map(|v| v as f32)
            .collect(),
        Some(DataType::Double) => t.double_data.iter().map(|&v| v as f32).collect(),
        _ => {
            return Err(BadTensor::DataType {
                tensor: t.name().to_owned(),
                found: t.elem_type(),
                expected: "float",
            })
        }
    };
    check_len(t, values.len())?;
    Ok(values)
}

/// The values of an integer tensor (INT64, INT32, INT8, UINT8) as `i64`, row-major.
///
/// # Errors
/// [`BadTensor`] naming the tensor when it is not an integer tensor, external, or mis-sized.
pub fn to_i64(t: &TensorProto) -> Result<Vec<i64>, BadTensor> {
    check_inline(t)?;
    let raw = t.raw_data.is_some();
    let values = match t.elem_type().known() {
        Some(DataType::Int64) if raw => from_raw(t, i64::from_le_bytes)?,
        Some(DataType::Int64) => t.int64_data.clone(),
        Some(DataType::Int32) if raw => from_raw(t, i32::from_le_bytes)?
            .into_iter()
            .map(i64::from)
            .collect(),
        Some(DataType::Int8) if raw => t.raw_data().iter().map(|&b| i64::from(b as i8)).collect(),
        Some(DataType::Uint8) if raw => t.raw_data().iter().map(|&b| i64::from(b)).collect(),
        Some(DataType::Int32 | DataType::Int8 | DataType::Uint8) => {
            t.int32_data.iter().map(|&v| i64::from(v)).collect()
        }
        _ => {
            return Err(BadTensor::DataType {
                tensor: t.name().to_owned(),
                found: t.elem_type(),
                expected: "an integer type",
            })
        }
    };
    check_len(t, values.len())?;
    Ok(values)
}

fn make(name: &str, dims: &[i64], data_type: DataType, raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.to_owned()),
        dims: dims.to_vec(),
        data_type: Some(data_type as i32),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// A FLOAT tensor named `name` with `dims` holding `values` (row-major).
pub fn from_f32(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    make(
        name,
        dims,
        DataType::Float,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// An INT8 tensor.
pub fn from_i8(name: &str, dims: &[i64], values: &[i8]) -> TensorProto {
    make(
        name,
        dims,
        DataType::Int8,
        values.iter().map(|&v| v as u8).collect(),
    )
}

/// A UINT8 tensor.
pub fn from_u8(name: &str, dims: &[i64], values: &[u8]) -> TensorProto {
    make(name, dims, DataType::Uint8, values.to_vec())
}

/// An INT32 tensor.
pub fn from_i32(name: &str, dims: &[i64], values: &[i32]) -> TensorProto {
    make(
        name,
        dims,
        DataType::Int32,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// An INT64 tensor.
pub fn from_i64(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    make(
        name,
        dims,
        DataType::Int64,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// Byte size of a tensor's payload as stored (raw or typed fields), for size reports.
pub fn payload_bytes(t: &TensorProto) -> usize {
    t.raw_data().len()
        + t.float_data.len() * 4
        + t.int32_data.len() * 4
        + t.int64_data.len() * 8
        + t.double_data.len() * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_round_trip_through_raw_data() {
        let t = from_f32("w", &[2, 2], &[1.0, -2.5, 0.0, 3.25]);
        assert_eq!(to_f32(&t).unwrap(), vec![1.0, -2.5, 0.0, 3.25]);
    }

    #[test]
    fn typed_fields_are_read() {
        let t = TensorProto {
            name: Some("a".into()),
            dims: vec![3],
            data_type: Some(DataType::Int64 as i32),
            int64_data: vec![4, -5, 6],
            ..Default::default()
        };
        assert_eq!(to_i64(&t).unwrap(), vec![4, -5, 6]);
    }

    #[test]
    fn size_mismatch_is_reported() {
        let mut t = from_f32("w", &[3], &[1.0, 2.0, 3.0]);
        t.dims = vec![4];
        let err = to_f32(&t).unwrap_err();
        let count = BadTensor::Count {
            tensor: "w".into(),
            dims: vec![4],
            expected: 4,
            held: 3,
        };
        assert_eq!(err, count);
        assert_eq!(
            err.to_string(),
            "tensor `w` has dims [4] (4 elements) but holds 3 values"
        );
    }
}
