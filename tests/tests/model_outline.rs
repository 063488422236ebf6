//! The build script's front end reads a model's IR version, inputs, outputs and external
//! tensors straight from the protobuf bytes (`kenosis_quantize::onnx::outline`), without the
//! generated types: on every shared model, and with its largest initializer moved to external
//! data, it reads what the quantizer's full decode holds.

use kenosis_eval::shared_dir;
use kenosis_quantize::calibrate::data::real_inputs;
use kenosis_quantize::onnx::manifest::manifest_info;
use kenosis_quantize::onnx::{self, outline};
use prost::Message;

#[test]
fn the_outline_of_each_shared_model_is_what_the_full_decode_holds() {
    let Some(shared) = shared_dir() else { return };
    let mut models: Vec<_> = std::fs::read_dir(shared.join("models"))
        .expect("shared models")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    models.sort();
    assert!(models.len() >= 4, "{models:?}");
    for path in &models {
        let bytes = std::fs::read(path).expect("model");
        let mut model = onnx::decode(path, &bytes).expect("decodes");
        let outline = outline::read(path, &bytes).expect("reads");
        // What the quantizer records from the decoded model: its real inputs, its outputs.
        let graph = model.graph.as_ref().expect("graph");
        let inputs: Vec<_> = real_inputs(graph).map(manifest_info).collect();
        let outputs: Vec<_> = graph.output.iter().map(manifest_info).collect();
        assert_eq!(
            Some(outline.ir_version),
            model.ir_version,
            "{}",
            path.display()
        );
        let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(outline.input_names(), names, "{}", path.display());
        assert_eq!(
            outline.declared_io(),
            (inputs, outputs),
            "{}",
            path.display()
        );
        assert!(outline.external.is_empty(), "{}", path.display());

        // The largest initializer moved to a data file is found, with its entries.
        let graph = model.graph.as_mut().expect("graph");
        let largest = (graph.initializer.iter_mut())
            .max_by_key(|t| t.raw_data.as_ref().map_or(0, Vec::len))
            .expect("initializers");
        largest.raw_data = None;
        largest.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
        largest.external_data = vec![onnx::StringStringEntryProto {
            key: Some("location".into()),
            value: Some("weights.bin".into()),
        }];
        let name = largest.name().to_owned();
        let outline = outline::read(path, &model.encode_to_vec()).expect("reads");
        let found: Vec<_> = outline.external.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(found, [name.as_str()], "{}", path.display());
        assert_eq!(
            outline.external[0].entries,
            [("location".to_owned(), "weights.bin".to_owned())]
        );
    }
}
