//! The front end's outline of a model (`kenosis_request::onnx::outline`) against the full
//! decode of the same bytes.
use prost::Message;

use kenosis_request::onnx::outline::*;

use crate::onnx::{self, DataType};

const PATH: &str = "model.onnx";

fn external(name: &str) -> onnx::TensorProto {
    onnx::TensorProto {
        name: Some(name.into()),
        data_location: Some(onnx::tensor_proto::DataLocation::External as i32),
        external_data: vec![onnx::StringStringEntryProto {
            key: Some("location".into()),
            value: Some(format!("{name}.bin")),
        }],
        ..Default::default()
    }
}

fn sparse(values: &str, indices: &str) -> onnx::SparseTensorProto {
    onnx::SparseTensorProto {
        values: Some(external(values)),
        indices: Some(external(indices)),
        ..Default::default()
    }
}

/// A graph holding one external tensor in each place a graph can, named `<prefix>...`,
/// with a subgraph (`If` branch) holding more when `depth` > 0.
fn graph(prefix: &str, depth: usize) -> onnx::GraphProto {
    let mut attribute = onnx::AttributeProto {
        name: Some("value".into()),
        t: Some(external(&format!("{prefix}t"))),
        tensors: vec![external(&format!("{prefix}tensors"))],
        sparse_tensor: Some(sparse(&format!("{prefix}sv"), &format!("{prefix}si"))),
        sparse_tensors: vec![sparse(&format!("{prefix}ssv"), &format!("{prefix}ssi"))],
        ..Default::default()
    };
    if depth > 0 {
        attribute.g = Some(graph(&format!("{prefix}g."), depth - 1));
        attribute.graphs = vec![graph(&format!("{prefix}gs."), depth - 1)];
    }
    onnx::GraphProto {
        node: vec![onnx::NodeProto {
            attribute: vec![attribute],
            ..Default::default()
        }],
        initializer: vec![
            external(&format!("{prefix}init")),
            // Inline data: not listed.
            onnx::tensor::from_f32(&format!("{prefix}inline"), &[1], &[0.5]),
        ],
        sparse_initializer: vec![sparse(&format!("{prefix}spv"), &format!("{prefix}spi"))],
        ..Default::default()
    }
}

#[test]
fn external_tensors_are_found_wherever_onnx_proto_can_hold_one() {
    let mut model = onnx::ModelProto {
        ir_version: Some(8),
        graph: Some(graph("", 1)),
        training_info: vec![onnx::TrainingInfoProto {
            initialization: Some(graph("init.", 0)),
            algorithm: Some(graph("algo.", 0)),
            ..Default::default()
        }],
        functions: vec![onnx::FunctionProto {
            node: vec![onnx::NodeProto {
                attribute: vec![onnx::AttributeProto {
                    t: Some(external("fn.node")),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            attribute_proto: vec![onnx::AttributeProto {
                t: Some(external("fn.default")),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    // `external_data` entries alone make a tensor external too.
    model
        .graph
        .as_mut()
        .expect("graph")
        .initializer
        .push(onnx::TensorProto {
            data_location: None,
            ..external("entries_only")
        });
    let outline = read(PATH.as_ref(), &model.encode_to_vec()).expect("reads");
    let mut found: Vec<&str> = outline.external.iter().map(|t| t.name.as_str()).collect();
    found.sort_unstable();
    // The decoded model's walk (which `inline` uses) visits the same tensors.
    let mut walked = onnx::external::external_names(&model);
    walked.sort_unstable();
    assert_eq!(found, walked);
    // 9 per graph (6 in the attribute, 1 initializer, 2 in the sparse initializer): the
    // main graph and its two subgraphs, the two of training; 2 in the function, 1 more
    // initializer.
    assert_eq!(found.len(), 9 * 5 + 2 + 1, "{found:?}");
    assert!(found.contains(&"g.sv") && found.contains(&"fn.default"));
    let entries = &outline.external[0].entries;
    assert_eq!(
        entries,
        &[(
            "location".to_owned(),
            format!("{}.bin", outline.external[0].name)
        )]
    );
}

#[test]
fn inputs_and_outputs_are_those_the_decoded_model_declares() {
    let mut sequence = onnx::tensor_info("seq", DataType::Float, None);
    sequence.r#type = Some(onnx::TypeProto {
        value: Some(onnx::type_proto::Value::SequenceType(Box::default())),
        ..Default::default()
    });
    let mut named_dim = onnx::tensor_info("ids", DataType::Int64, Some(&[1, 8]));
    if let Some(onnx::type_proto::Value::TensorType(t)) =
        named_dim.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape.as_mut().expect("shape").dim[0].value = Some(
            onnx::tensor_shape_proto::dimension::Value::DimParam("batch".into()),
        );
    }
    let model = onnx::ModelProto {
        ir_version: Some(7),
        graph: Some(onnx::GraphProto {
            input: vec![
                named_dim,
                onnx::tensor_info("w", DataType::Float, Some(&[2])),
                onnx::tensor_info("flags", DataType::Bool, None),
                sequence,
                onnx::ValueInfoProto {
                    name: Some("untyped".into()),
                    ..Default::default()
                },
            ],
            initializer: vec![onnx::tensor::from_f32("w", &[2], &[0.0, 1.0])],
            output: vec![
                onnx::tensor_info("half", DataType::Float16, Some(&[0, 3])),
                onnx::tensor_info("brain", DataType::Bfloat16, None),
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let outline = read(PATH.as_ref(), &model.encode_to_vec()).expect("reads");
    assert_eq!(outline.ir_version, 7);
    assert_eq!(outline.input_names(), ["ids", "flags", "seq", "untyped"]);
    // The manifest's records of the decoded model's inputs but `w`, its initializer, and of
    // its outputs.
    let graph = model.graph.as_ref().expect("graph");
    let decoded = (
        (graph.input.iter())
            .filter(|i| i.name() != "w")
            .map(onnx::manifest::manifest_info)
            .collect(),
        (graph.output.iter())
            .map(onnx::manifest::manifest_info)
            .collect(),
    );
    assert_eq!(outline.declared_io(), decoded);
    assert_eq!(
        outline.inputs[0].tensor.as_ref().map(|t| t.dims.clone()),
        Some(Some(vec![None, Some(8)]))
    );
    assert!(outline.external.is_empty());
}

#[test]
fn bytes_that_are_not_a_model_are_errors_naming_the_file() {
    let model = onnx::ModelProto {
        ir_version: Some(8),
        graph: Some(graph("", 1)),
        ..Default::default()
    }
    .encode_to_vec();
    let error = |bytes: &[u8]| read(PATH.as_ref(), bytes).err().map(|e| e.to_string());
    // Every truncation is refused: the last field is then cut short, or the graph or IR
    // version is missing.
    for end in 0..model.len() {
        let e = error(&model[..end]).unwrap_or_else(|| panic!("cut at {end} read"));
        assert!(e.starts_with("model.onnx: not a valid ONNX model: "), "{e}");
    }
    assert_eq!(
        error(b"\x08\x07").as_deref(),
        Some(
            "model.onnx: not a valid ONNX model: no graph or IR version: this protobuf is \
             not an ONNX ModelProto"
        )
    );
    assert!(error(b"\x0b\x0c").is_some_and(|e| e.contains("group")));
    assert!(error(b"\x3a\x02\x2a\x80").is_some_and(|e| e.contains("truncated")));
    // A name of invalid UTF-8, and a graph given as a varint.
    let bad_name = [0x08, 0x07, 0x3a, 0x05, 0x5a, 0x03, 0x0a, 0x01, 0xff];
    assert!(error(&bad_name).is_some_and(|e| e.contains("UTF-8")));
    assert!(error(b"\x08\x07\x38\x01").is_some_and(|e| e.contains("not length-delimited")));
    // Wire types 6 and 7 do not exist.
    assert_eq!(
        error(b"\x08\x07\x3e").as_deref(),
        Some(
            "model.onnx: not a valid ONNX model: protobuf decoding failed: field 7 has \
             invalid wire type 6"
        )
    );
    // A varint of 11 bytes.
    let long = [&[0x08][..], &[0xff; 10], &[0x01]].concat();
    assert!(error(&long).is_some_and(|e| e.contains("field 1 is a varint longer than 10")));
    // Fixed-width fields nobody reads are skipped, but must be whole.
    let fixed = b"\x08\x07\x3a\x00\x19\x01\x02\x03\x04\x05\x06\x07\x08\x25\x01\x02\x03\x04";
    assert_eq!(read(PATH.as_ref(), fixed).map(|o| o.ir_version), Ok(7));
    assert_eq!(
        error(&fixed[..fixed.len() - 1]).as_deref(),
        Some(
            "model.onnx: not a valid ONNX model: protobuf decoding failed: field 4 is \
             truncated: it runs past the end of its message"
        )
    );
}

/// Lengths and keys are 64-bit varints whose high bits count: `quick-protobuf`'s 32-bit
/// readers of them would drop those bits, and read what `prost` refuses.
#[test]
fn lengths_and_field_numbers_past_32_bits_are_refused_as_prost_refuses_them() {
    // The graph's length is 2^32 + 2, followed by 2 bytes that would be a graph.
    let length = b"\x08\x07\x3a\x82\x80\x80\x80\x10\x10\x01";
    assert!(onnx::ModelProto::decode(&length[..]).is_err());
    let e = read(PATH.as_ref(), length).expect_err("a length past the end");
    assert_eq!(
        e.reason,
        "protobuf decoding failed: field 7 is truncated: it runs past the end of its message"
    );
    // A key of field number 2^32.
    let key = b"\x08\x07\x3a\x00\x80\x80\x80\x80\x80\x01\x01";
    assert!(onnx::ModelProto::decode(&key[..]).is_err());
    let e = read(PATH.as_ref(), key).expect_err("a field number past 32 bits");
    assert_eq!(
        e.reason,
        "protobuf decoding failed: invalid field number 4294967296"
    );
}

/// A graph holding `levels` graphs, each in an attribute of a node of the one above.
fn nested(levels: usize) -> onnx::GraphProto {
    (0..levels).fold(onnx::GraphProto::default(), |inner, _| onnx::GraphProto {
        node: vec![onnx::NodeProto {
            attribute: vec![onnx::AttributeProto {
                g: Some(inner),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

#[test]
fn nesting_deeper_than_prost_allows_is_refused() {
    let model = |g: onnx::GraphProto| onnx::ModelProto {
        ir_version: Some(8),
        graph: Some(g),
        ..Default::default()
    };
    let bytes = model(nested(60)).encode_to_vec();
    assert!(
        onnx::ModelProto::decode(&*bytes).is_err(),
        "prost refuses it too"
    );
    let e = read(PATH.as_ref(), &bytes).expect_err("too deep");
    assert!(e.reason.contains("nest deeper than 100"), "{e}");
    // Shallower nesting reads.
    assert!(read(PATH.as_ref(), &model(nested(20)).encode_to_vec()).is_ok());
}
