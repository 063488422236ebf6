//! Reading and writing `TensorProto` payloads (initializers, Constant values).
//!
//! ONNX stores a tensor either in `raw_data` (little-endian bytes) or in a typed repeated
//! field (`float_data`, `int32_data` for 8/16-bit and bool types, `int64_data`, `double_data`);
//! both are accepted on read, `raw_data` is always written.

use super::{dtype, TensorProto};

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
    #[error("tensor `{tensor}` has data type {found}, expected {expected}")]
    DataType {
        /// The tensor.
        tensor: String,
        /// Its `TensorProto.DataType` code.
        found: i32,
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
    let values = match t.data_type() {
        dtype::FLOAT if t.raw_data.is_some() => t.raw_data().len() / 4,
        dtype::FLOAT => t.float_data.len(),
        dtype::DOUBLE if t.raw_data.is_some() => t.raw_data().len() / 8,
        dtype::DOUBLE => t.double_data.len(),
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
    let (size, typed) = match t.data_type() {
        dtype::FLOAT => (4, t.float_data.len()),
        dtype::DOUBLE => (8, t.double_data.len()),
        dtype::INT64 => (8, t.int64_data.len()),
        dtype::INT32 => (4, t.int32_data.len()),
        // INT16, UINT16, FLOAT16, BFLOAT16: stored one per int32 when typed.
        4 | 5 | dtype::FLOAT16 | 16 => (2, t.int32_data.len()),
        dtype::INT8 | dtype::UINT8 | dtype::BOOL => (1, t.int32_data.len()),
        // UINT32, UINT64.
        12 => (4, t.uint64_data.len()),
        13 => (8, t.uint64_data.len()),
        _ => return Ok(()),
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
    if !t.raw_data().len().is_multiple_of(N) {
        return Err(BadTensor::RawLength {
            tensor: t.name().to_owned(),
            len: t.raw_data().len(),
            elem_size: N,
        });
    }
    Ok(t.raw_data()
        .chunks_exact(N)
        .map(|c| decode(c.try_into().expect("chunk of N bytes")))
        .collect())
}

/// The values of a float tensor (FLOAT or DOUBLE) as `f32`, row-major.
///
/// # Errors
/// [`BadTensor`] naming the tensor when it is not float, external, or its size mismatches
/// `dims`.
pub fn to_f32(t: &TensorProto) -> Result<Vec<f32>, BadTensor> {
    check_inline(t)?;
    let values = match t.data_type() {
        dtype::FLOAT if t.raw_data.is_some() => from_raw(t, f32::from_le_bytes)?,
        dtype::FLOAT => t.float_data.clone(),
        dtype::DOUBLE if t.raw_data.is_some() => from_raw(t, f64::from_le_bytes)?
            .into_iter()
            .map(|v| v as f32)
            .collect(),
        dtype::DOUBLE => t.double_data.iter().map(|&v| v as f32).collect(),
        found => {
            return Err(BadTensor::DataType {
                tensor: t.name().to_owned(),
                found,
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
    let values = match t.data_type() {
        dtype::INT64 if raw => from_raw(t, i64::from_le_bytes)?,
        dtype::INT64 => t.int64_data.clone(),
        dtype::INT32 if raw => from_raw(t, i32::from_le_bytes)?
            .into_iter()
            .map(i64::from)
            .collect(),
        dtype::INT8 if raw => t.raw_data().iter().map(|&b| i64::from(b as i8)).collect(),
        dtype::UINT8 if raw => t.raw_data().iter().map(|&b| i64::from(b)).collect(),
        dtype::INT32 | dtype::INT8 | dtype::UINT8 => {
            t.int32_data.iter().map(|&v| i64::from(v)).collect()
        }
        found => {
            return Err(BadTensor::DataType {
                tensor: t.name().to_owned(),
                found,
                expected: "an integer type",
            })
        }
    };
    check_len(t, values.len())?;
    Ok(values)
}

fn make(name: &str, dims: &[i64], data_type: i32, raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.to_owned()),
        dims: dims.to_vec(),
        data_type: Some(data_type),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// A FLOAT tensor named `name` with `dims` holding `values` (row-major).
pub fn from_f32(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    make(
        name,
        dims,
        dtype::FLOAT,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// An INT8 tensor.
pub fn from_i8(name: &str, dims: &[i64], values: &[i8]) -> TensorProto {
    make(
        name,
        dims,
        dtype::INT8,
        values.iter().map(|&v| v as u8).collect(),
    )
}

/// A UINT8 tensor.
pub fn from_u8(name: &str, dims: &[i64], values: &[u8]) -> TensorProto {
    make(name, dims, dtype::UINT8, values.to_vec())
}

/// An INT32 tensor.
pub fn from_i32(name: &str, dims: &[i64], values: &[i32]) -> TensorProto {
    make(
        name,
        dims,
        dtype::INT32,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// An INT64 tensor.
pub fn from_i64(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    make(
        name,
        dims,
        dtype::INT64,
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
            data_type: Some(dtype::INT64),
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
