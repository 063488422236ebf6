//! The artifact's size invariant: an INT8 model is never heavier than its FP32 model.
//!
//! Quantization stores weights in a quarter of their FP32 bytes (int8) or less (4-bit
//! blocks), so an artifact larger than its FP32 model means a weight was stored several
//! times: once per reader, as an ALBERT-style transformer (every layer reading one set of
//! weights through `Identity` nodes) came out 161.6 MB from an 84.8 MB FP32 file before
//! shared weights were quantized once (issue 54). [`check`] runs on the encoded artifact
//! before it is written and turns such a build into [`Error::LargerThanFp32`] instead of a
//! silently bloated file.
//!
//! What is compared is the artifact's tensor values ([`tensor_bytes`]) against the FP32
//! model's whole size, not file against file: the Q/DQ graph adds bookkeeping that grows
//! with the number of nodes, not with the weights (node and tensor names, one scale and zero
//! point per quantized tensor), and on a model of a few kilobytes (the test fixtures: a
//! 940-byte Conv becomes a 1740-byte artifact holding 266 bytes of values) that alone
//! outweighs what int8 saves. A weight stored once per reader grows the values themselves.

use std::path::Path;

use crate::error::Error;
use crate::onnx::{self, GraphProto, ModelProto, TensorProto};

/// Bytes of the values the initializers of `model` hold, in its main graph and every
/// subgraph: `raw_data` plus the typed value fields at their element size (4 bytes for
/// `float_data` and `int32_data`, 8 for `int64_data`, `double_data` and `uint64_data`, each
/// string's length). Names, dims and the graph's nodes are not counted.
pub fn tensor_bytes(model: &ModelProto) -> usize {
    fn of_tensor(t: &TensorProto) -> usize {
        let strings: usize = t.string_data.iter().map(Vec::len).sum();
        t.raw_data.as_ref().map_or(0, Vec::len)
            + 4 * (t.float_data.len() + t.int32_data.len())
            + 8 * (t.int64_data.len() + t.double_data.len() + t.uint64_data.len())
            + strings
    }
    fn of_graph(g: &GraphProto) -> usize {
        let own: usize = g.initializer.iter().map(of_tensor).sum();
        let nested: usize = (g.node.iter())
            .flat_map(onnx::subgraphs)
            .map(of_graph)
            .sum();
        own + nested
    }
    model.graph.as_ref().map_or(0, of_graph)
}

/// Checks the INT8 model `artifact`, `size_int8` bytes encoded, against the FP32 model at
/// `path`, whose file is `size_fp32` bytes: the values of the artifact's initializers
/// ([`tensor_bytes`]) may take no more than the FP32 model (see the [module docs](self) for
/// why values and not the whole file). A model keeping tensors in external data files is
/// measured with them: only when the values exceed `size_fp32` is the file at `path` read
/// again for its external data (an unreadable file counts as having none).
///
/// # Errors
/// [`Error::LargerThanFp32`] naming `path`, the FP32 and INT8 sizes and the artifact's
/// tensor bytes, when the values exceed the FP32 model.
pub fn check(
    path: &Path,
    size_fp32: usize,
    artifact: &ModelProto,
    size_int8: usize,
) -> Result<(), Error> {
    let values = tensor_bytes(artifact);
    if values <= size_fp32 {
        return Ok(());
    }
    let size_fp32 = size_fp32.saturating_add(external_bytes(path));
    if values <= size_fp32 {
        return Ok(());
    }
    Err(Error::LargerThanFp32 {
        path: path.to_owned(),
        size_fp32,
        size_int8,
        tensor_bytes: values,
    })
}

/// Bytes of the external data files the model file at `path` names (each file counted
/// once), 0 when it names none or cannot be read.
fn external_bytes(path: &Path) -> usize {
    let Ok(bytes) = std::fs::read(path) else {
        return 0;
    };
    let Ok(outline) = onnx::outline::read(path, &bytes) else {
        return 0;
    };
    if outline.external.is_empty() {
        return 0;
    }
    let files = crate::model_files::external_files(path, &outline).unwrap_or_default();
    files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| usize::try_from(m.len()).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::tensor;
    use crate::test_support::{model, node};

    /// A model whose one initializer holds `values` float values (4 bytes each).
    fn with_values(values: usize) -> ModelProto {
        model(
            vec![node("Add", &["x", "w"], "y")],
            &["y"],
            vec![tensor::from_f32("w", &[values as i64], &vec![0.5; values])],
        )
    }

    #[test]
    fn tensor_bytes_count_values_in_every_graph_and_field() {
        let mut m = with_values(10);
        let mut typed = tensor::from_f32("t", &[3], &[]);
        typed.raw_data = None;
        typed.int64_data = vec![1, 2, 3];
        let branch = GraphProto {
            initializer: vec![tensor::from_i8("q", &[5], &[1; 5])],
            ..Default::default()
        };
        let graph = m.graph.as_mut().unwrap();
        graph.initializer.push(typed);
        let mut r#if = node("If", &["c"], "z");
        r#if.attribute.push(crate::onnx::AttributeProto {
            name: Some("then_branch".into()),
            g: Some(branch),
            ..Default::default()
        });
        graph.node.push(r#if);
        assert_eq!(tensor_bytes(&m), 40 + 24 + 5);
    }

    #[test]
    fn an_artifact_whose_values_outweigh_the_fp32_model_is_refused_with_both_sizes() {
        // 1000 float values (4000 bytes) against an FP32 model of 3999 bytes: refused.
        let artifact = with_values(1000);
        let size_int8 = 4100;
        let path = Path::new("no/such/dir/albert.onnx");
        assert!(check(path, 4000, &artifact, size_int8).is_ok());
        let err = check(path, 3999, &artifact, size_int8).unwrap_err();
        let Error::LargerThanFp32 {
            path: p,
            size_fp32,
            size_int8: s,
            tensor_bytes,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(
            (p.as_path(), *size_fp32, *s, *tensor_bytes),
            (path, 3999, 4100, 4000)
        );
        let text = err.to_string();
        for part in [
            "no/such/dir/albert.onnx",
            "3999 bytes",
            "4100 bytes",
            "4000",
        ] {
            assert!(text.contains(part), "{text}");
        }
    }

    #[test]
    fn external_data_files_count_towards_the_fp32_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = with_values(1000);
        let w = &mut m.graph.as_mut().unwrap().initializer[0];
        let payload = w.raw_data.take().unwrap();
        w.data_location = Some(onnx::tensor_proto::DataLocation::External as i32);
        w.external_data = vec![onnx::StringStringEntryProto {
            key: Some("location".into()),
            value: Some("weights.bin".into()),
        }];
        std::fs::write(dir.path().join("weights.bin"), &payload).unwrap();
        let file = prost::Message::encode_to_vec(&m);
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, &file).unwrap();
        // The artifact: the same model with its values inlined (4000 bytes of values).
        let artifact = with_values(1000);
        assert!(file.len() < 4000);
        check(&path, file.len(), &artifact, 4100).expect("the data file counts");
        let err = check(Path::new("elsewhere.onnx"), file.len(), &artifact, 4100);
        assert!(matches!(err, Err(Error::LargerThanFp32 { .. })), "{err:?}");
    }
}
