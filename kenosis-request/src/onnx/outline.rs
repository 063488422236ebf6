//! What the build script's front end reads of a model file, read straight from the protobuf
//! wire format: the IR version, the main graph's declared inputs and outputs, and every tensor
//! kept in external data with its `external_data` entries.
//!
//! The quantizer decodes the whole `ModelProto` with the generated types of [`super`]
//! (`prost`); the front end needs these few fields on every build, cache hits included, and
//! reads them here so that a downstream build compiles neither the generated types nor
//! `prost`'s derive macros (see docs/design.md, "Build cost"). The wire format itself (keys,
//! varints, fixed-width and length-delimited values) is decoded by `quick-protobuf`'s
//! [`BytesReader`], a dependency-light decoder (only `byteorder`); this module walks the
//! messages, knowing `onnx.proto`'s field numbers (the file beside this one).
//!
//! Tensors are looked for in the places [`super::external`] lists, the same places its
//! walk over a decoded model visits. Fields this reader does not need are skipped, checked
//! only for their framing; the quantizer's full decode checks the rest.

use kenosis_manifest::TensorInfo;
use quick_protobuf::BytesReader;

/// How deeply messages may nest (graphs in attributes of nodes in graphs...): `prost`'s
/// default recursion limit, so that both readers refuse the same hostile nesting.
const MAX_DEPTH: u32 = 100;

/// `TensorProto.DataLocation.EXTERNAL`.
const EXTERNAL: u64 = 1;

/// The fields of a model the front end reads (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outline {
    /// `ModelProto.ir_version`.
    pub ir_version: i64,
    /// The main graph's inputs that are not initializers (older IR versions list initializers
    /// as inputs too), in declaration order.
    pub inputs: Vec<Declared>,
    /// The main graph's outputs, in declaration order.
    pub outputs: Vec<Declared>,
    /// Every tensor of the model whose bytes live in an external file, in file order.
    pub external: Vec<ExternalTensor>,
}

/// A graph input or output as a `ValueInfoProto` declares it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    /// `ValueInfoProto.name`.
    pub name: String,
    /// The tensor type, `None` for another type (sequence, map, ...) or none.
    pub tensor: Option<DeclaredTensor>,
}

/// A `TypeProto.Tensor`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeclaredTensor {
    /// `elem_type`, a `TensorProto.DataType` code (0, `UNDEFINED`, when unset).
    pub elem_type: i32,
    /// The dims, `None` when no shape is declared; a dim is `None` when symbolic, unset or not
    /// positive.
    pub dims: Option<Vec<Option<i64>>>,
}

/// A tensor whose `data_location` is `EXTERNAL` or that has `external_data` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalTensor {
    /// `TensorProto.name`.
    pub name: String,
    /// The `external_data` entries (key, value), in order.
    pub entries: Vec<(String, String)>,
}

impl Outline {
    /// The names of [`Outline::inputs`].
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|i| i.name.as_str()).collect()
    }

    /// The inputs and outputs as the manifest records them (see [`super::manifest`]).
    pub fn declared_io(&self) -> (Vec<TensorInfo>, Vec<TensorInfo>) {
        let info = |d: &Declared| {
            let (elem, dims) = d
                .tensor
                .as_ref()
                .map_or((0, None), |t| (t.elem_type, t.dims.clone()));
            super::manifest::tensor_info(&d.name, elem, dims)
        };
        (
            self.inputs.iter().map(info).collect(),
            self.outputs.iter().map(info).collect(),
        )
    }
}

/// Reads the [`Outline`] of the model file `bytes`, naming `path` in errors.
///
/// # Errors
/// [`super::InvalidModel`] for an empty file, bytes that are not protobuf along the fields
/// read (a truncated field, a length past the end, a wire type `onnx.proto` does not give that
/// field, a group, invalid UTF-8 in a name or entry, nesting deeper than `prost` allows), or a
/// message without a graph or IR version, with the same texts as the quantizer's
/// `onnx::decode` where it has one.
pub fn read(path: &std::path::Path, bytes: &[u8]) -> Result<Outline, super::InvalidModel> {
    let invalid = |reason: String| super::InvalidModel {
        path: path.to_owned(),
        reason,
    };
    if bytes.is_empty() {
        return Err(invalid("the file is empty".into()));
    }
    let mut reader = Reader::default();
    reader
        .model(bytes)
        .map_err(|e| invalid(format!("protobuf decoding failed: {e}")))?;
    let (Some(ir_version), true) = (reader.ir_version, reader.has_graph) else {
        return Err(invalid(
            "no graph or IR version: this protobuf is not an ONNX ModelProto".into(),
        ));
    };
    let initializers: std::collections::HashSet<String> = reader.initializers.into_iter().collect();
    Ok(Outline {
        ir_version,
        inputs: (reader.inputs.into_iter())
            .filter(|i| !initializers.contains(&i.name))
            .collect(),
        outputs: reader.outputs,
        external: reader.external,
    })
}

/// Why bytes are not protobuf along the fields the outline reads: the reason of
/// [`super::InvalidModel`] (its text, after `protobuf decoding failed: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A key or a value ends past the end of its message (or of the file).
    #[error("{} is truncated: it runs past the end of its message", .0.map_or("a field key".to_owned(), |f| format!("field {f}")))]
    Truncated(Option<u32>),
    /// A varint runs over more than 10 bytes, the most a 64-bit value takes.
    #[error("{} is a varint longer than 10 bytes", .0.map_or("a field key".to_owned(), |f| format!("field {f}")))]
    LongVarint(Option<u32>),
    /// A key's field number is 0 or does not fit in 32 bits.
    #[error("invalid field number {0}")]
    FieldNumber(u64),
    /// A group (wire types 3 and 4), which proto3 dropped and ONNX does not use.
    #[error("field {0} is a group, which ONNX does not use")]
    Group(u32),
    /// A wire type the encoding does not define (6 or 7).
    #[error("field {field} has invalid wire type {wire_type}")]
    WireType {
        /// The field number.
        field: u32,
        /// The key's low three bits.
        wire_type: u8,
    },
    /// A field `onnx.proto` declares as a string or a message comes as another wire type.
    #[error("field {0} is not length-delimited")]
    NotLengthDelimited(u32),
    /// A field `onnx.proto` declares as an integer comes as another wire type.
    #[error("field {0} is not a varint")]
    NotVarint(u32),
    /// A string field holds bytes that are not UTF-8.
    #[error("field {0} is a string of invalid UTF-8")]
    Utf8(u32),
    /// Messages nest deeper than `prost`'s recursion limit.
    #[error("messages nest deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

impl WireError {
    /// `quick-protobuf`'s error while reading the key (`field` `None`) or a value of `field`.
    /// [`BytesReader`] on a slice fails only by running out of bytes or on an overlong
    /// varint; anything else it could report is taken as truncation too.
    fn decoding(field: Option<u32>, e: &quick_protobuf::Error) -> Self {
        match e {
            quick_protobuf::Error::Varint => WireError::LongVarint(field),
            _ => WireError::Truncated(field),
        }
    }
}

/// One field's value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value, which no field read here has.
    Fixed,
}

impl<'a> Value<'a> {
    fn bytes(self, field: u32) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(WireError::NotLengthDelimited(field)),
        }
    }

    fn varint(self, field: u32) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(WireError::NotVarint(field)),
        }
    }

    fn string(self, field: u32) -> Result<String, WireError> {
        let bytes = self.bytes(field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Utf8(field))
    }
}

/// Calls `f` with each field of the message `bytes`, in order, as [`BytesReader`] decodes
/// them.
fn fields<'a>(
    bytes: &'a [u8],
    mut f: impl FnMut(u32, Value<'a>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let mut reader = BytesReader::from_bytes(bytes);
    while !reader.is_eof() {
        // The key as a 64-bit varint: `next_tag` would drop bits past 32 (prost refuses them).
        let key = (reader.read_varint64(bytes)).map_err(|e| WireError::decoding(None, &e))?;
        let field = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n > 0)
            .ok_or(WireError::FieldNumber(key >> 3))?;
        let decoding = |e| WireError::decoding(Some(field), &e);
        let value = match key & 7 {
            0 => Value::Varint(reader.read_varint64(bytes).map_err(decoding)?),
            1 => reader
                .read_fixed64(bytes)
                .map(|_| Value::Fixed)
                .map_err(decoding)?,
            2 => {
                // `read_bytes` takes the length as a 32-bit varint, dropping higher bits: a
                // longer length is refused first, as one past the end.
                let mut peek = reader.clone();
                let len = peek.read_varint64(bytes).map_err(decoding)?;
                if usize::try_from(len).map_or(true, |len| len > peek.len()) {
                    return Err(WireError::Truncated(Some(field)));
                }
                Value::Bytes(reader.read_bytes(bytes).map_err(decoding)?)
            }
            5 => reader
                .read_fixed32(bytes)
                .map(|_| Value::Fixed)
                .map_err(decoding)?,
            3 | 4 => return Err(WireError::Group(field)),
            t => {
                return Err(WireError::WireType {
                    field,
                    wire_type: t as u8,
                })
            }
        };
        f(field, value)?;
    }
    Ok(())
}

/// The walk's state: what has been read so far.
#[derive(Default)]
struct Reader {
    ir_version: Option<i64>,
    has_graph: bool,
    inputs: Vec<Declared>,
    outputs: Vec<Declared>,
    initializers: Vec<String>,
    external: Vec<ExternalTensor>,
}

/// Which graph is read: the main one records its inputs, outputs and initializer names.
#[derive(Clone, Copy, PartialEq)]
enum Graph {
    Main,
    Sub,
}

impl Reader {
    /// `ModelProto`: `ir_version` 1, `graph` 7, `training_info` 20, `functions` 25.
    fn model(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        fields(bytes, |field, value| match field {
            // int64 from a varint: two's complement, as prost reads it.
            1 => {
                self.ir_version = Some(value.varint(field)? as i64);
                Ok(())
            }
            7 => {
                self.has_graph = true;
                self.graph(value.bytes(field)?, Graph::Main, 1)
            }
            20 => self.training_info(value.bytes(field)?, 1),
            25 => self.function(value.bytes(field)?, 1),
            _ => Ok(()),
        })
    }

    /// `TrainingInfoProto`: `initialization` 1, `algorithm` 2.
    fn training_info(&mut self, bytes: &[u8], depth: u32) -> Result<(), WireError> {
        let depth = deeper(depth)?;
        fields(bytes, |field, value| match field {
            1 | 2 => self.graph(value.bytes(field)?, Graph::Sub, depth),
            _ => Ok(()),
        })
    }

    /// `FunctionProto`: `node` 7, `attribute_proto` 11.
    fn function(&mut self, bytes: &[u8], depth: u32) -> Result<(), WireError> {
        let depth = deeper(depth)?;
        fields(bytes, |field, value| match field {
            7 => self.node(value.bytes(field)?, depth),
            11 => self.attribute(value.bytes(field)?, depth),
            _ => Ok(()),
        })
    }

    /// `GraphProto`: `node` 1, `initializer` 5, `input` 11, `output` 12,
    /// `sparse_initializer` 15.
    fn graph(&mut self, bytes: &[u8], which: Graph, depth: u32) -> Result<(), WireError> {
        let depth = deeper(depth)?;
        fields(bytes, |field, value| match field {
            1 => self.node(value.bytes(field)?, depth),
            5 => {
                let name = self.tensor(value.bytes(field)?, depth)?;
                if which == Graph::Main {
                    self.initializers.push(name);
                }
                Ok(())
            }
            11 | 12 if which == Graph::Main => {
                let declared = value_info(value.bytes(field)?, depth)?;
                let list = if field == 11 {
                    &mut self.inputs
                } else {
                    &mut self.outputs
                };
                list.push(declared);
                Ok(())
            }
            15 => self.sparse(value.bytes(field)?, depth),
            _ => Ok(()),
        })
    }

    /// `NodeProto`: `attribute` 5.
    fn node(&mut self, bytes: &[u8], depth: u32) -> Result<(), WireError> {
        let depth = deeper(depth)?;
        fields(bytes, |field, value| match field {
            5 => self.attribute(value.bytes(field)?, depth),
            _ => Ok(()),
        })
    }

    /// `AttributeProto`: `t` 5 and `tensors` 10, `g` 6 and `graphs` 11, `sparse_tensor` 22
    /// and `sparse_tensors` 23.
    fn attribute(&mut self, bytes: &[u8], depth: u32) -> Result<(), WireError> {
        let depth = deeper(depth)?;
        fields(bytes, |field, value| match field {
            5 | 10 => self.tensor(value.bytes(field)?, depth).map(drop),
            6 | 11 => self.graph(value.bytes(field)?, Graph::Sub, depth),
            22 | 23 => self.sparse(value.bytes(field)?, depth),
            _ => Ok(()),
        })
    }

    /// `SparseTensorProto`: `values` 1, `indices` 2.
    fn sparse(&mut self, bytes: &[u8], depth: u32) -> Result<(), WireError> {
        let depth = deeper(depth)?;
        fields(bytes, |field, value| match field {
            1 | 2 => self.tensor(value.bytes(field)?, depth).map(drop),
            _ => Ok(()),
        })
    }

    /// `TensorProto`: `name` 8, `external_data` 13 (`StringStringEntryProto`: `key` 1,
    /// `value` 2), `data_location` 14. Records the tensor when it is external; returns its
    /// name.
    fn tensor(&mut self, bytes: &[u8], depth: u32) -> Result<String, WireError> {
        let depth = deeper(depth)?;
        let mut tensor = ExternalTensor::default();
        let mut location = 0;
        fields(bytes, |field, value| {
            match field {
                8 => tensor.name = value.string(field)?,
                13 => tensor.entries.push(entry(value.bytes(field)?, depth)?),
                14 => location = value.varint(field)?,
                _ => {}
            }
            Ok(())
        })?;
        let name = tensor.name.clone();
        if location == EXTERNAL || !tensor.entries.is_empty() {
            self.external.push(tensor);
        }
        Ok(name)
    }
}

/// One more level of nesting than `depth`.
///
/// # Errors
/// Past [`MAX_DEPTH`].
fn deeper(depth: u32) -> Result<u32, WireError> {
    (depth < MAX_DEPTH)
        .then_some(depth + 1)
        .ok_or(WireError::TooDeep)
}

/// `StringStringEntryProto`: `key` 1, `value` 2.
fn entry(bytes: &[u8], depth: u32) -> Result<(String, String), WireError> {
    deeper(depth)?;
    let (mut key, mut val) = (String::new(), String::new());
    fields(bytes, |field, value| {
        match field {
            1 => key = value.string(field)?,
            2 => val = value.string(field)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok((key, val))
}

/// `ValueInfoProto`: `name` 1, `type` 2.
fn value_info(bytes: &[u8], depth: u32) -> Result<Declared, WireError> {
    let depth = deeper(depth)?;
    let mut declared = Declared::default();
    fields(bytes, |field, value| {
        match field {
            1 => declared.name = value.string(field)?,
            2 => type_proto(value.bytes(field)?, depth, &mut declared.tensor)?,
            _ => {}
        }
        Ok(())
    })
    .map(|()| declared)
}

/// `TypeProto` into `tensor`: `tensor_type` 1; `sequence_type` 4, `map_type` 5,
/// `sparse_tensor_type` 8 and `optional_type` 9 are other types of the same `oneof`, the last
/// one written wins.
fn type_proto(
    bytes: &[u8],
    depth: u32,
    tensor: &mut Option<DeclaredTensor>,
) -> Result<(), WireError> {
    let depth = deeper(depth)?;
    fields(bytes, |field, value| {
        match field {
            1 => *tensor = Some(tensor_type(value.bytes(field)?, depth)?),
            4 | 5 | 8 | 9 => *tensor = None,
            _ => {}
        }
        Ok(())
    })
}

/// `TypeProto.Tensor`: `elem_type` 1, `shape` 2.
fn tensor_type(bytes: &[u8], depth: u32) -> Result<DeclaredTensor, WireError> {
    let depth = deeper(depth)?;
    let mut tensor = DeclaredTensor::default();
    fields(bytes, |field, value| {
        match field {
            // int32 from a varint: the low 32 bits, as prost reads it.
            1 => tensor.elem_type = value.varint(field)? as i32,
            2 => shape(
                value.bytes(field)?,
                depth,
                tensor.dims.get_or_insert_with(Vec::new),
            )?,
            _ => {}
        }
        Ok(())
    })
    .map(|()| tensor)
}

/// `TensorShapeProto`: `dim` 1, each appended to `dims`.
fn shape(bytes: &[u8], depth: u32, dims: &mut Vec<Option<i64>>) -> Result<(), WireError> {
    let depth = deeper(depth)?;
    fields(bytes, |field, value| {
        if field == 1 {
            dims.push(dimension(value.bytes(field)?, depth)?);
        }
        Ok(())
    })
}

/// `TensorShapeProto.Dimension`, the `oneof` `dim_value` 1 or `dim_param` 2: the value when
/// it is positive, `None` when symbolic, unset or not positive.
fn dimension(bytes: &[u8], depth: u32) -> Result<Option<i64>, WireError> {
    deeper(depth)?;
    let mut dim = None;
    fields(bytes, |field, value| {
        match field {
            1 => dim = Some(value.varint(field)? as i64).filter(|&d| d > 0),
            2 => {
                value.string(field)?;
                dim = None;
            }
            _ => {}
        }
        Ok(())
    })
    .map(|()| dim)
}
