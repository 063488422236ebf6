//! Real model families beyond the ImageNet classifiers: each is quantized with default
//! options, loaded in ONNX Runtime and compared with its FP32 original on real inputs where
//! the shared data has them.
//!
//! The fetched models (PP-OCR, MiniLM, Silero VAD) come from `../shared/fetch-models.sh`;
//! `cargo xtask test` runs it into `target/kenosis-models` (or `$KENOSIS_MODELS`), where the
//! tests look for them (`kenosis_eval::fetched_models_dir`).
//! Without them a test skips with a note, except under `CI=true`, where it fails.
//!
//! Targets this code does not reach yet are kept as `#[ignore]`d tests with the measured
//! numbers in their reason, so that `cargo test -- --ignored` shows the gap.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use kenosis_eval::*;
use kenosis_quantize::calibrate::{CalibrationData, SampleValue};
use kenosis_quantize::{quantize, Calibration, FloatReason, QuantizeOptions, Quantized};
use ndarray::{Array4, ArrayD, IxDyn};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

/// How many Convs `graph` has.
fn convs_in(graph: &kenosis_quantize::onnx::GraphProto) -> usize {
    graph.node.iter().filter(|n| n.op_type() == "Conv").count()
}

/// Names of the nodes of type `op` the build's time estimate kept FP32 (see
/// `kenosis_quantize::quantize::domain`).
fn estimated_fp32<'q>(q: &'q Quantized, op: &str) -> HashSet<&'q str> {
    (q.report.nodes_fp32.iter())
        .filter(|f| f.op_type == op && f.reason.is_estimated_faster())
        .map(|f| f.name.as_str())
        .collect()
}

/// The default options without the speed check: these tests check placements and fidelity,
/// which the timing of a loaded machine must not decide (an INT8 model slower than FP32 on
/// the machine would ship as FP32). `kenosis-build/tests/speed_target.rs` and
/// `cargo xtask bench` check the timing.
fn untimed() -> QuantizeOptions {
    QuantizeOptions {
        speed_check: false,
        ..QuantizeOptions::default()
    }
}

fn quantize_with(path: &Path, calibration: Calibration) -> (Vec<u8>, Quantized) {
    let fp32 = std::fs::read(path).expect("model file");
    let q = quantize(path, &fp32, &calibration, &untimed())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (fp32, q)
}

/// A photograph resized to `h`x`w`, as `[1, 3, h, w]` with `f(channel index, value 0-255)`,
/// channels in BGR order when `bgr`.
fn photo(path: &Path, h: u32, w: u32, bgr: bool, f: impl Fn(usize, f32) -> f32) -> Array4<f32> {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    let img = image::imageops::resize(&img, w, h, image::imageops::FilterType::Triangle);
    let mut out = Array4::<f32>::zeros((1, 3, h as usize, w as usize));
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            let src = if bgr { 2 - c } else { c };
            out[[0, c, y as usize, x as usize]] = f(c, f32::from(p[src]));
        }
    }
    out
}

/// Mean cosine of output `k` of `int8` against `fp32` over `samples`.
fn mean_cosine(
    fp32: &[u8],
    int8: &[u8],
    names: &[String],
    samples: &[Vec<SampleValue>],
    k: usize,
) -> f64 {
    let mut a = session(fp32, GraphOptimizationLevel::All, None);
    let mut b = session(int8, GraphOptimizationLevel::All, None);
    let total: f64 = samples
        .iter()
        .map(|s| {
            cosine(
                &run_sample(&mut a, names, s)[k],
                &run_sample(&mut b, names, s)[k],
            )
        })
        .sum();
    total / samples.len() as f64
}

fn image_samples(images: Vec<Array4<f32>>) -> Vec<Vec<SampleValue>> {
    images
        .into_iter()
        .map(|x| vec![SampleValue::F32(x.into_dyn())])
        .collect()
}

/// (x / 255 - 0.5) / 0.5, PaddleOCR's rec and cls normalization (of BGR images).
fn paddle(_: usize, v: f32) -> f32 {
    (v / 255.0 - 0.5) / 0.5
}

/// PaddleOCR's det normalization: ImageNet's mean and standard deviation, listed in RGB
/// order but applied to the BGR channels OpenCV reads, as PaddleOCR's `NormalizeImage` does.
fn paddle_det(c: usize, v: f32) -> f32 {
    const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
    const STD: [f32; 3] = [0.229, 0.224, 0.225];
    (v / 255.0 - MEAN[c]) / STD[c]
}

/// PP-OCR on photographs cropped to text-line shape: synthetic calibration, then `eval`
/// real inputs of `h`x`w`. Returns the mean cosine of the main output.
fn ppocr(name: &str, h: u32, w: u32) -> Option<f64> {
    let shared = shared_dir()?;
    let path = fetched_model(name)?;
    let (fp32, q) = quantize_with(&path, Calibration::Synthetic);
    // Normalized photographs, not pixels: the stem Convs say so (see `image_range`).
    assert_eq!(
        q.report.synthetic_image_ranges["x"], "[-2.118, 2.64]",
        "{name}"
    );
    let files = coco_files(&shared);
    let eval = image_samples(
        files[files.len() - 20..]
            .iter()
            .map(|f| photo(f, h, w, true, paddle))
            .collect(),
    );
    let cos = mean_cosine(&fp32, &q.bytes, &["x".into()], &eval, 0);
    eprintln!(
        "{name}: mean cosine {cos:.4} on 20 photographs; {}",
        q.report.summary_line()
    );
    Some(cos)
}

#[test]
fn ppocr_rec_quantizes_with_probed_shape_and_stays_close() {
    // Declared [N, 3, ?, W]: only height 48 runs (a Reshape hard-codes the pooled height),
    // so synthetic calibration has to find it.
    let Some(cos) = ppocr("ppocr-v4-rec.onnx", 48, 320) else {
        return;
    };
    assert!(cos >= 0.98, "PP-OCRv4 rec: mean cosine {cos:.4}");
}

#[test]
fn ppocr_cls_stays_close_with_synthetic_calibration() {
    let Some(cos) = ppocr("ppocr-mobile-v2-cls.onnx", 48, 192) else {
        return;
    };
    assert!(cos >= 0.98, "PP-OCR cls: mean cosine {cos:.4}");
}

#[test]
fn ppocr_cls_runs_large_isolated_depthwise_convs_in_fp32_and_stays_close() {
    let Some(shared) = shared_dir() else { return };
    let Some(path) = fetched_model("ppocr-mobile-v2-cls.onnx") else {
        return;
    };
    let files = coco_files(&shared);
    let shots = |fs: &[PathBuf]| {
        image_samples(fs.iter().map(|f| photo(f, 48, 192, true, paddle)).collect())
    };
    let calib = CalibrationData {
        samples: shots(&files[..32]),
        files: Vec::new(),
        synthetic: false,
    };
    let (fp32, q) = quantize_with(&path, Calibration::Data(calib));

    // The 5x5 depthwise Convs sit between float HardSwishes, and the squeeze-and-excitation
    // branches run on pooled vectors: the plan keeps those FP32, and the 200x2 classifier
    // MatMul. The time estimate keeps the early, high-resolution Convs FP32 too (their
    // HardSwishes would each cost a DequantizeLinear and a QuantizeLinear); every other Conv
    // fuses to QLinearConv.
    let model = kenosis_quantize::onnx::decode(&path, &fp32).expect("decodes");
    let graph = model.graph.as_ref().expect("graph");
    let constant_dims: HashMap<&str, Vec<i64>> = graph
        .node
        .iter()
        .filter(|n| n.op_type() == "Constant")
        .filter_map(|n| {
            Some((
                n.output[0].as_str(),
                n.attribute.first()?.t.as_ref()?.dims.clone(),
            ))
        })
        .collect();
    let large_depthwise: HashSet<&str> = graph
        .node
        .iter()
        .filter(|n| n.op_type() == "Conv")
        .filter(|n| {
            let dims = &constant_dims[n.input[1].as_str()];
            dims[1] == 1 && dims[2] * dims[3] > 9
        })
        .map(|n| n.name())
        .collect();
    assert!(!large_depthwise.is_empty());
    let excitation = se_convs(graph);
    assert_eq!(excitation.len(), 18, "9 branches of 2 Convs each");
    let float_convs = |why: fn(&FloatReason) -> bool| -> HashSet<&str> {
        q.report
            .nodes_fp32
            .iter()
            .filter(|f| f.op_type == "Conv" && why(&f.reason))
            .map(|f| f.name.as_str())
            .collect()
    };
    assert_eq!(
        float_convs(|r| matches!(
            r,
            FloatReason::IsolatedDepthwise | FloatReason::UnresolvedChannels { .. }
        )),
        large_depthwise
    );
    assert_eq!(float_convs(|r| *r == FloatReason::SeBranch), excitation);
    let estimated = estimated_fp32(&q, "Conv");
    assert!(!estimated.is_empty(), "{:?}", q.report.nodes_fp32);
    // The first Conv reads the image at full resolution: it is among them.
    let first = graph
        .node
        .iter()
        .find(|n| n.op_type() == "Conv")
        .expect("a Conv");
    assert!(estimated.contains(first.name()), "{estimated:?}");
    let float_count = q
        .report
        .nodes_fp32
        .iter()
        .filter(|f| f.op_type == "Conv")
        .count();
    let others: Vec<String> = (q.report.nodes_fp32.iter())
        .filter(|f| f.op_type == "Conv")
        .filter(|f| {
            !large_depthwise.contains(f.name.as_str())
                && !excitation.contains(f.name.as_str())
                && !estimated.contains(f.name.as_str())
        })
        .map(|f| format!("{}: {}", f.name, f.reason))
        .collect();
    assert_eq!(
        float_count,
        large_depthwise.len() + excitation.len() + estimated.len(),
        "other FP32 Convs: {others:?}; {}",
        q.report.summary_line()
    );
    assert!(float_count < convs_in(graph), "some Convs stay INT8");
    let head = q.report.nodes_fp32.iter().find(|f| f.op_type == "MatMul");
    assert!(
        head.is_some_and(|f| f.reason == FloatReason::IsolatedTiny),
        "{head:?}"
    );
    let convs = model_op_types(&path, &fp32)
        .iter()
        .filter(|o| *o == "Conv")
        .count();
    let ops = optimized_op_types(&q.bytes);
    assert_eq!(
        conv_counts(&ops),
        (convs - float_count, float_count),
        "ops: {ops:?}"
    );

    // Every other photograph: the output is a two-class softmax, so a handful of photographs
    // near the decision boundary move a 20-photograph mean by 0.005 either way (measured:
    // 0.9936 on the last 20, 0.9907 on all 268 for the same artifact).
    let eval = shots(&files[32..]);
    let cos = mean_cosine(&fp32, &q.bytes, &["x".into()], &eval, 0);
    eprintln!(
        "PP-OCR cls, 32 photographs as calibration: mean cosine {cos:.4} on {}",
        eval.len()
    );
    assert!(cos >= 0.99, "PP-OCR cls: mean cosine {cos:.4}");
}

/// Names of the Convs between each GlobalAveragePool and the Mul that gates the pooled map
/// with the result (squeeze-and-excitation branches).
fn se_convs(graph: &kenosis_quantize::onnx::GraphProto) -> HashSet<&str> {
    let mut found = HashSet::new();
    for pool in graph
        .node
        .iter()
        .filter(|n| n.op_type() == "GlobalAveragePool")
    {
        let mut pending = vec![pool.output[0].as_str()];
        let mut branch = Vec::new();
        let mut gated = false;
        while let Some(t) = pending.pop() {
            for n in graph.node.iter().filter(|n| n.input.iter().any(|i| i == t)) {
                if n.op_type() == "Mul" && n.input.contains(&pool.input[0]) {
                    gated = true;
                } else {
                    branch.push(n);
                    pending.extend(n.output.iter().map(String::as_str));
                }
            }
        }
        if gated {
            found.extend(
                branch
                    .iter()
                    .filter(|n| n.op_type() == "Conv")
                    .map(|n| n.name()),
            );
        }
    }
    found
}

/// PP-OCRv4 det, synthetic calibration, on the last 20 COCO photographs in which the FP32
/// model finds text (sigmoid map above 0.5 somewhere), preprocessed as PaddleOCR does. On
/// the others the map is ~1e-10 everywhere and its cosine measures nothing: FP32 against
/// FP32 with ONNX Runtime's graph optimizations off gives 0.008-0.21 on three of the last 20
/// photographs.
///
/// Not reached: the map is a near-binary text mask, so small logit errors at text borders
/// decide it, and weight rounding alone (activations float) already stays below the
/// target. The figures are in `docs/benchmarks.md` ("PP-OCRv4 det").
#[test]
#[ignore = "target not reached; see the doc comment and docs/benchmarks.md"]
fn ppocr_det_stays_close_with_synthetic_calibration() {
    let (Some(shared), Some(path)) = (shared_dir(), fetched_model("ppocr-v4-det.onnx")) else {
        return;
    };
    let (fp32, q) = quantize_with(&path, Calibration::Synthetic);
    let names = ["x".to_owned()];
    let mut reference = session(&fp32, GraphOptimizationLevel::All, None);
    let eval: Vec<Vec<SampleValue>> = coco_files(&shared)
        .iter()
        .rev()
        .map(|f| image_samples(vec![photo(f, 640, 640, true, paddle_det)]).remove(0))
        .filter(|s| {
            run_sample(&mut reference, &names, s)[0]
                .iter()
                .any(|&p| p > 0.5)
        })
        .take(20)
        .collect();
    let cos = mean_cosine(&fp32, &q.bytes, &names, &eval, 0);
    eprintln!(
        "PP-OCRv4 det: mean cosine {cos:.4} on {} photographs with text; {}",
        eval.len(),
        q.report.summary_line()
    );
    assert!(cos >= 0.98, "PP-OCRv4 det: mean cosine {cos:.4}");
}

#[test]
fn ppocr_det_quantizes_constants_and_transposed_convs() {
    let Some(path) = fetched_model("ppocr-v4-det.onnx") else {
        return;
    };
    let (fp32, q) = quantize_with(&path, Calibration::Synthetic);
    // Weights live in Constant nodes in the export: they must have become quantizable
    // initializers, including the upsampling ConvTransposes'. Every Conv is quantized but
    // those of the squeeze-and-excitation branches and those the time estimate keeps FP32.
    assert!(
        q.report.normalize.constants_extracted > 0,
        "{:?}",
        q.report.normalize
    );
    let model = kenosis_quantize::onnx::decode(&path, &fp32).expect("decodes");
    let graph = model.graph.as_ref().expect("graph");
    let excitation = se_convs(graph);
    assert_eq!(excitation.len(), 20, "10 branches of 2 Convs each");
    let float_convs: HashSet<&str> = q
        .report
        .nodes_fp32
        .iter()
        .filter(|f| f.op_type == "Conv")
        .map(|f| f.name.as_str())
        .collect();
    let estimated = estimated_fp32(&q, "Conv");
    assert_eq!(
        float_convs,
        excitation.union(&estimated).copied().collect(),
        "{:?}",
        q.report.nodes_fp32
    );
    assert_eq!(
        q.report.ops_quantized.get("Conv").copied().unwrap_or(0),
        convs_in(graph) - float_convs.len(),
        "{:?}",
        q.report.ops_quantized
    );
    // Each ConvTranspose is quantizable: INT8, or FP32 by the time estimate or as the
    // writer of the output map (below), never for want of a constant weight.
    let transposed = graph
        .node
        .iter()
        .filter(|n| n.op_type() == "ConvTranspose")
        .count();
    let kept: Vec<_> = (q.report.nodes_fp32.iter())
        .filter(|n| n.op_type == "ConvTranspose")
        .collect();
    assert!(
        kept.iter()
            .all(|n| n.reason.is_estimated_faster() || n.reason == FloatReason::OutputConv),
        "{kept:?}"
    );
    assert_eq!(
        q.report
            .ops_quantized
            .get("ConvTranspose")
            .copied()
            .unwrap_or(0)
            + kept.len(),
        transposed
    );
    // Symbolic H and W stay symbolic in the artifact.
    let x = &q.report.inputs[0];
    assert_eq!(x.shape.len(), 4);
    assert!(x.shape[2].is_none() && x.shape[3].is_none(), "{x:?}");

    // Every per-channel Mul/Add after a convolution is folded into it: the learnable
    // affine blocks after each Conv and the upsampling ConvTransposes' bias Adds, and so the
    // BatchNormalization after the first ConvTranspose. Every HardSwish written out as
    // `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)` is one `HardSwish`.
    let fp32 = std::fs::read(&path).expect("model");
    let decoded = kenosis_quantize::onnx::decode(&path, &fp32).expect("decodes");
    let folded = kenosis_quantize::normalize::normalize(decoded).expect("normalizes");
    let (summary, graph) = (&folded.summary, folded.graph());
    let producer: HashMap<&str, &str> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n.op_type())))
        .collect();
    let constants: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let unfolded: Vec<&str> = graph
        .node
        .iter()
        .filter(|n| matches!(n.op_type(), "Mul" | "Add"))
        .filter(|n| n.input.iter().any(|i| constants.contains(i.as_str())))
        .filter(|n| {
            n.input.iter().any(|i| {
                matches!(
                    producer.get(i.as_str()),
                    Some(&"Conv") | Some(&"ConvTranspose")
                )
            })
        })
        .map(|n| n.name())
        .collect();
    assert!(unfolded.is_empty(), "not folded: {unfolded:?}");
    assert!(
        summary.scale_muls_folded > 0 && summary.bias_adds_folded > 0,
        "{summary:?}"
    );
    let count = |op: &str| graph.node.iter().filter(|n| n.op_type() == op).count();
    assert_eq!(count("HardSwish"), summary.hardswishes_fused, "{summary:?}");
    assert!(count("HardSwish") > 0 && count("Div") == 0 && count("Clip") == 0);
    assert_eq!(summary.opset_after, 14);
    let ops = model_op_types(&path, &q.bytes);
    assert!(!ops.iter().any(|o| o == "BatchNormalization"), "{ops:?}");
    // The last ConvTranspose computes the text logits, read only by the output Sigmoid:
    // its range is the prediction itself and stays FP32 (it was clipped at sigmoid 0.5).
    let logits = (graph.node.iter())
        .rev()
        .find(|n| n.op_type() == "ConvTranspose")
        .expect("a ConvTranspose");
    let last = (q.report.nodes_fp32.iter())
        .find(|n| n.name == logits.name())
        .expect("the logits ConvTranspose stays FP32");
    assert_eq!(last.reason, FloatReason::OutputConv, "{last:?}");

    // Folding and fusing change only float rounding: the normalized FP32 model gives the
    // same map on a photograph with text (PP-OCR det normalization, 640x640).
    let Some(shared) = shared_dir() else { return };
    let folded = prost::Message::encode_to_vec(folded.model());
    let text = shared.join("images/coco-300/000000000281.jpg");
    let sample = image_samples(vec![photo(&text, 640, 640, true, paddle_det)]);
    let cos = mean_cosine(&fp32, &folded, &["x".into()], &sample, 0);
    assert!(cos > 0.9999, "folded FP32 map cosine {cos:.6}");
}

/// MiniLM token ids of a few real English sentences (tests/data).
fn sentences() -> Vec<Vec<i64>> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/minilm_sentences.json"),
    )
    .expect("sentences file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["sentences"]
        .as_array()
        .expect("sentences")
        .iter()
        .map(|s| {
            s["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|i| i.as_i64().expect("id"))
                .collect()
        })
        .collect()
}

#[test]
fn minilm_sentence_embeddings_stay_close_and_embeddings_are_quantized() {
    let Some(path) = fetched_model("paraphrase-MiniLM-L3-v2.onnx") else {
        return;
    };
    // The static placement (the dynamic one has its test in transformer_prose.rs).
    let fp32 = std::fs::read(&path).expect("model file");
    let options = QuantizeOptions {
        activations: kenosis_build::Activations::Static,
        ..untimed()
    };
    let q = quantize(&path, &fp32, &Calibration::Synthetic, &options)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    eprintln!("{}", q.report.summary_line());
    // The 30522x384 word-embedding table is stored as uint8 (ORT gathers codes directly).
    assert!(
        q.report.ops_quantized.get("Gather").copied().unwrap_or(0) >= 1,
        "{:?}",
        q.report.ops_quantized
    );
    assert!(
        q.bytes.len() * 3 < fp32.len(),
        "INT8 {} bytes vs FP32 {}",
        q.bytes.len(),
        fp32.len()
    );
    // Layer 0's feed-forward output has [CLS]/[SEP] outliers ~1000x its bulk: kept FP32.
    let outliers: Vec<&str> = q
        .report
        .nodes_fp32
        .iter()
        .filter(|n| matches!(n.reason, FloatReason::OutlierDominated { .. }))
        .map(|n| n.name.as_str())
        .collect();
    assert!(
        outliers.iter().any(|n| n.contains("layer.0/output/dense")),
        "{outliers:?}"
    );
    // Every MatMul is named once: static in the rewrite summary, or FP32 with its reason.
    let rewrite = &q.report.rewrite;
    assert!(rewrite.dynamic_nodes.is_empty(), "{rewrite:?}");
    let fp32_matmuls = (q.report.nodes_fp32.iter()).filter(|n| n.op_type == "MatMul");
    let mut named: Vec<&str> = (rewrite.static_matmuls.iter().map(String::as_str))
        .chain(fp32_matmuls.map(|n| n.name.as_str()))
        .collect();
    let all = named.len();
    named.sort_unstable();
    named.dedup();
    assert_eq!(named.len(), all, "a MatMul named twice: {named:?}");
    assert!(rewrite.static_matmuls.len() >= 12, "{rewrite:?}");
    assert!(
        rewrite.static_matmuls.iter().any(|n| n.contains("query")),
        "{rewrite:?}"
    );

    // Its GELUs are written out (`x · ½ · (1 + erf(x/√2))`): fused, ORT runs them as BiasGelu
    // as it does in FP32, instead of QLinearAdd and QLinearMul steps around a float Erf.
    assert_eq!(q.report.normalize.gelus_fused, 3);
    let ops = optimized_op_types(&q.bytes);
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert_eq!((count("BiasGelu"), count("Erf")), (3, 0), "{ops:?}");

    // Output 3 (`461`) is the mean-pooled sentence embedding.
    let graph_outputs: Vec<&str> = q.report.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(graph_outputs[3], "461", "{graph_outputs:?}");
    let cos = minilm_embedding_cosine(&fp32, &q.bytes);
    eprintln!("MiniLM sentence embeddings: mean cosine {cos:.4}");
    assert!(cos >= 0.98, "MiniLM sentence embedding cosine {cos:.4}");
}

/// Mean cosine of MiniLM's sentence embedding (output 3) between two builds on the real
/// sentences.
fn minilm_embedding_cosine(fp32: &[u8], int8: &[u8]) -> f64 {
    let names: Vec<String> = vec!["input_ids".into(), "attention_mask".into()];
    let samples: Vec<Vec<SampleValue>> = sentences()
        .into_iter()
        .map(|ids| {
            let n = ids.len();
            let ids = ArrayD::from_shape_vec(IxDyn(&[1, n]), ids).expect("shape");
            vec![
                SampleValue::I64(ids),
                SampleValue::I64(ArrayD::from_elem(IxDyn(&[1, n]), 1)),
            ]
        })
        .collect();
    mean_cosine(fp32, int8, &names, &samples, 3)
}

/// `model` with every LayerNormalization written out as exporters before opset 17 do:
/// `d = x − ReduceMean(x)`, `d / Sqrt(ReduceMean(Pow(d, 2)) + ε) · γ + β`.
fn with_written_out_layer_norms(model: &[u8]) -> Vec<u8> {
    use kenosis_quantize::onnx::{attr, make_node, tensor, ModelProto};
    use prost::Message;
    let mut m = ModelProto::decode(model).expect("model decodes");
    let g = m.graph.as_mut().expect("graph");
    g.initializer.push(tensor::from_f32("ln_two", &[], &[2.0]));
    let mut nodes = Vec::new();
    for (k, n) in std::mem::take(&mut g.node).into_iter().enumerate() {
        if n.op_type() != "LayerNormalization" {
            nodes.push(n);
            continue;
        }
        assert_eq!(attr::int(&n, "axis", -1), -1, "{}", n.name());
        let eps = format!("ln{k}_eps");
        g.initializer.push(tensor::from_f32(
            &eps,
            &[],
            &[attr::float(&n, "epsilon", 1e-5)],
        ));
        let t = |s: &str| format!("ln{k}_{s}");
        let op = |op: &str, inputs: &[&str], out: &str| {
            let inputs = inputs.iter().map(|i| i.to_string()).collect();
            make_node(op, t(out), inputs, vec![t(out)], vec![])
        };
        let mean_of = |x: &str, out: &str| {
            let mut r = op("ReduceMean", &[x], out);
            r.attribute.push(attr::make_ints("axes", &[-1]));
            r
        };
        let (x, gamma, beta) = (&n.input[0], &n.input[1], &n.input[2]);
        nodes.extend([
            mean_of(x, "mean"),
            op("Sub", &[x, &t("mean")], "d"),
            op("Pow", &[&t("d"), "ln_two"], "sq"),
            mean_of(&t("sq"), "var"),
            op("Add", &[&t("var"), &eps], "ve"),
            op("Sqrt", &[&t("ve")], "std"),
            op("Div", &[&t("d"), &t("std")], "n"),
            op("Mul", &[&t("n"), gamma], "g"),
            make_node(
                "Add",
                t("out"),
                vec![t("g"), beta.clone()],
                n.output.clone(),
                vec![],
            ),
        ]);
    }
    g.node = nodes;
    m.encode_to_vec()
}

/// MiniLM rewritten by `rewrite` and quantized with default options: the rewritten FP32
/// model, its INT8 build, and the embedding cosine of the shipped model's own INT8 build (to
/// compare with). `None` when MiniLM was not fetched.
fn minilm_rewritten(rewrite: impl Fn(&[u8]) -> Vec<u8>) -> Option<(Vec<u8>, Quantized, f64)> {
    let path = fetched_model("paraphrase-MiniLM-L3-v2.onnx")?;
    let (fp32, q) = quantize_with(&path, Calibration::Synthetic);
    let rewritten = rewrite(&fp32);
    let qr = quantize(&path, &rewritten, &Calibration::Synthetic, &untimed())
        .unwrap_or_else(|e| panic!("{e}"));
    Some((rewritten, qr, minilm_embedding_cosine(&fp32, &q.bytes)))
}

#[test]
fn minilm_with_written_out_layer_norms_quantizes_as_well_as_with_the_fused_op() {
    let Some((written, qw, original)) = minilm_rewritten(with_written_out_layer_norms) else {
        return;
    };
    assert_eq!(qw.report.normalize.layernorms_fused, 7);

    // ONNX Runtime runs them as its LayerNormalization kernel, nothing written out is left.
    let ops = optimized_op_types(&qw.bytes);
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert_eq!((count("LayerNormalization"), count("ReduceMean")), (7, 0));

    // Quantized as written, the normalized values, their products with γ and the sums with
    // β were each rounded to uint8: cosine 0.9916 against 0.9963.
    let fused = minilm_embedding_cosine(&written, &qw.bytes);
    eprintln!("MiniLM embeddings: {fused:.4} written out and fused, {original:.4} as shipped");
    assert!(fused >= original - 0.001, "{fused:.4} vs {original:.4}");
}

/// `model` with every exact GELU (`Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), ½)`, as MiniLM
/// writes it) replaced by the tanh approximation as GPT-2-style exports write it:
/// `½ · (x · (1 + tanh(√(2/π) · (x + 0.044715 · x · x · x))))`.
fn with_tanh_gelus(model: &[u8]) -> Vec<u8> {
    use kenosis_quantize::onnx::{make_node, tensor, ModelProto};
    use prost::Message;
    let mut m = ModelProto::decode(model).expect("model decodes");
    let g = m.graph.as_mut().expect("graph");
    for (name, v) in [
        ("tanh_gelu_cubic", 0.044715f32),
        ("tanh_gelu_scale", (2.0 / std::f32::consts::PI).sqrt()),
        ("tanh_gelu_one", 1.0),
        ("tanh_gelu_half", 0.5),
    ] {
        g.initializer.push(tensor::from_f32(name, &[], &[v]));
    }
    let reader = |g: &kenosis_quantize::onnx::GraphProto, t: &str| {
        let readers: Vec<usize> = (0..g.node.len())
            .filter(|&i| g.node[i].input.iter().any(|x| x == t))
            .collect();
        assert_eq!(readers.len(), 1, "{t}");
        readers[0]
    };
    let erfs: Vec<usize> = (0..g.node.len())
        .filter(|&i| g.node[i].op_type() == "Erf")
        .collect();
    let mut replaced = std::collections::HashSet::new();
    let mut chains = Vec::new();
    for (k, &erf) in erfs.iter().enumerate() {
        let div = (0..g.node.len())
            .find(|&i| g.node[i].output.contains(&g.node[erf].input[0]))
            .expect("Div");
        let add = reader(g, &g.node[erf].output[0]);
        let mul = reader(g, &g.node[add].output[0]);
        let half = reader(g, &g.node[mul].output[0]);
        let x = g.node[div].input[0].clone();
        let y = g.node[half].output[0].clone();
        let t = |s: &str| format!("tanh_gelu{k}_{s}");
        let op = |op: &str, inputs: &[&str], out: &str| {
            let inputs = inputs.iter().map(|i| i.to_string()).collect();
            make_node(op, t(out), inputs, vec![t(out)], vec![])
        };
        let mut nodes = vec![
            op("Mul", &[&x, &x], "x2"),
            op("Mul", &[&t("x2"), &x], "x3"),
            op("Mul", &[&t("x3"), "tanh_gelu_cubic"], "c"),
            op("Add", &[&x, &t("c")], "s"),
            op("Mul", &[&t("s"), "tanh_gelu_scale"], "i"),
            op("Tanh", &[&t("i")], "th"),
            op("Add", &[&t("th"), "tanh_gelu_one"], "a"),
            op("Mul", &[&x, &t("a")], "m"),
        ];
        nodes.push(make_node(
            "Mul",
            t("y"),
            vec![t("m"), "tanh_gelu_half".into()],
            vec![y],
            vec![],
        ));
        replaced.extend([div, erf, add, mul, half]);
        chains.push((div, nodes));
    }
    let mut nodes = Vec::new();
    for (i, n) in std::mem::take(&mut g.node).into_iter().enumerate() {
        if let Some(k) = chains.iter().position(|(div, _)| *div == i) {
            nodes.append(&mut chains[k].1);
        }
        if !replaced.contains(&i) {
            nodes.push(n);
        }
    }
    g.node = nodes;
    m.encode_to_vec()
}

#[test]
fn minilm_with_tanh_gelus_runs_them_as_fast_gelu() {
    let Some((tanh, qt, original)) = minilm_rewritten(with_tanh_gelus) else {
        return;
    };
    assert_eq!(qt.report.normalize.gelus_fused, 3);

    // ONNX Runtime runs them as its FastGelu kernel: no Tanh, no cube left.
    let ops = optimized_op_types(&qt.bytes);
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert_eq!((count("FastGelu"), count("Tanh")), (3, 0), "{ops:?}");

    // Against its own FP32 model, as close as the shipped model is to its own.
    let fused = minilm_embedding_cosine(&tanh, &qt.bytes);
    eprintln!("MiniLM embeddings: {fused:.4} with tanh GELUs fused, {original:.4} as shipped");
    assert!(fused >= original - 0.001, "{fused:.4} vs {original:.4}");
}

#[test]
fn silero_vad_runs_and_matches_with_control_flow_left_fp32() {
    let Some(path) = fetched_model("silero_vad.onnx") else {
        return;
    };
    // Symbolic audio length probed (16 samples is too short for its STFT padding), and the
    // `sr` scalar synthesized as 16000.
    let (fp32, q) = quantize_with(&path, Calibration::Synthetic);
    let kept: Vec<(&str, &FloatReason)> = q
        .report
        .nodes_fp32
        .iter()
        .map(|n| (n.op_type.as_str(), &n.reason))
        .collect();
    assert!(
        kept.iter()
            .any(|(op, reason)| *op == "If" && **reason == FloatReason::ControlFlow),
        "{kept:?}"
    );
    let names: Vec<String> = vec!["input".into(), "state".into(), "sr".into()];
    let samples: Vec<Vec<SampleValue>> = (0..4)
        .map(|k| {
            let tone = ArrayD::from_shape_fn(IxDyn(&[1, 512]), |i| {
                let t = i[1] as f32 / 16000.0;
                0.3 * (2.0 * std::f32::consts::PI * (150.0 + 100.0 * k as f32) * t).sin()
            });
            vec![
                SampleValue::F32(tone),
                SampleValue::F32(ArrayD::zeros(IxDyn(&[2, 1, 128]))),
                SampleValue::I64(ArrayD::from_elem(IxDyn(&[]), 16000)),
            ]
        })
        .collect();
    let cos = mean_cosine(&fp32, &q.bytes, &names, &samples, 0);
    assert!(cos >= 0.98, "Silero VAD speech probability cosine {cos:.4}");
}

/// YOLOX-Nano with synthetic calibration, evaluated on 20 COCO photographs (BGR 0-255,
/// 416x416).
fn yolox() -> Option<(Vec<u8>, Quantized, Vec<Vec<SampleValue>>)> {
    let shared = shared_dir()?;
    let path = shared.join("models/yolox_nano.onnx");
    let files = coco_files(&shared);
    let (fp32, q) = quantize_with(&path, Calibration::Synthetic);
    let eval = image_samples(
        files[files.len() - 20..]
            .iter()
            .map(|f| photo(f, 416, 416, true, |_, v| v))
            .collect(),
    );
    Some((fp32, q, eval))
}

#[test]
fn yolox_keeps_its_stem_fp32_every_quantized_conv_fuses_and_the_output_stays_fp32() {
    let Some((fp32, q, _)) = yolox() else { return };
    let convs = model_op_types(Path::new("yolox"), &fp32)
        .iter()
        .filter(|o| *o == "Conv")
        .count();
    // The stem Conv and the depthwise Conv reading it stay FP32: a quarter of the stem's
    // channels vary by less than one uint8 step of the tensor between them. The other FP32
    // Convs are the time estimate's (their SiLUs would each cost a DequantizeLinear and a
    // QuantizeLinear).
    let estimated = estimated_fp32(&q, "Conv");
    let float_convs: Vec<(&str, &FloatReason)> = q
        .report
        .nodes_fp32
        .iter()
        .filter(|n| n.op_type == "Conv" && !estimated.contains(n.name.as_str()))
        .map(|n| (n.name.as_str(), &n.reason))
        .collect();
    assert_eq!(
        float_convs.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["Conv_41", "Conv_44"],
        "{float_convs:?}"
    );
    assert!(
        float_convs.iter().all(
            |(_, r)| matches!(r, FloatReason::UnresolvedChannels { conv, .. } if conv == "Conv_44")
        ),
        "{float_convs:?}"
    );
    let float = 2 + estimated.len();
    assert!(float < convs, "some Convs stay INT8: {estimated:?}");
    assert_eq!(q.report.ops_quantized.get("Conv"), Some(&(convs - float)));

    let ops = optimized_op_types(&q.bytes);
    assert_eq!(conv_counts(&ops), (convs - float, float), "ops: {ops:?}");

    // Each SiLU runs as one QuickGelu (between a DequantizeLinear and a QuantizeLinear in
    // INT8 regions), not as QLinearSigmoid + QLinearMul; the decode head's plain Sigmoids
    // stay float. In FP32 regions ONNX Runtime may fuse either into the Conv before it.
    let count = |ops: &[String], op: &str| ops.iter().filter(|o| *o == op).count();
    let silus = q.report.normalize.silus_fused;
    assert!(silus > 0, "no SiLU fused");
    let quick_gelus = count(&ops, "QuickGelu");
    assert!(quick_gelus > 0 && quick_gelus <= silus, "ops: {ops:?}");
    let sigmoids = count(&model_op_types(Path::new("yolox"), &fp32), "Sigmoid");
    assert!(count(&ops, "Sigmoid") <= sigmoids - silus, "ops: {ops:?}");
    assert_eq!(count(&ops, "QLinearMul") + count(&ops, "QLinearSigmoid"), 0);

    // The decode head's output is the graph output, untouched: same name, float.
    assert_eq!(q.report.outputs.len(), 1);
    assert_eq!(q.report.outputs[0].name, "output");
    assert_eq!(
        q.report.outputs[0].dtype,
        kenosis_manifest::ElementType::F32
    );
}

/// Each SiLU input's range is judged by the error after the SiLU (`calibrate::range`, MSE
/// after the reader), so the flat negative side, where SiLU(x) ≈ 0, gets the smaller share
/// of the 256 levels: the zero point (the number of levels below zero) averages 103 here.
/// Ranges sized for the raw tensors averaged 142, and with real calibration output cosine
/// was 0.9775 against 0.9835 now.
#[test]
fn yolox_silu_inputs_spend_their_levels_where_the_silu_has_slope() {
    let Some((_, q, _)) = yolox() else { return };
    let model = kenosis_quantize::onnx::decode(Path::new("yolox INT8"), &q.bytes).expect("decodes");
    let graph = model.graph.as_ref().expect("graph");
    let index = kenosis_quantize::graph::GraphIndex::new(graph);
    let zero_points: Vec<u8> = graph
        .node
        .iter()
        .filter(|n| n.op_type() == "QuickGelu")
        .filter_map(|n| index.producer.get(&n.input[0]).map(|&i| &graph.node[i]))
        .filter(|dq| dq.op_type() == "DequantizeLinear")
        .map(|dq| graph.initializer[index.initializer[&dq.input[2]]].raw_data()[0])
        .collect();
    // The SiLUs between INT8 Convs (the others run in FP32 regions, see the test above).
    assert!(!zero_points.is_empty());
    let mean = zero_points.iter().map(|&z| f64::from(z)).sum::<f64>() / zero_points.len() as f64;
    assert!(mean < 128.0, "mean zero point of SiLU inputs {mean:.1}");
}

#[test]
fn yolox_output_stays_close() {
    let Some((fp32, q, eval)) = yolox() else {
        return;
    };
    // YOLOX reads raw pixels; calibrating on [-1, 1] fields gave cosine 0.937.
    assert_eq!(q.report.synthetic_image_ranges["images"], "[0, 255]");
    let cos = mean_cosine(&fp32, &q.bytes, &["images".into()], &eval, 0);
    eprintln!("YOLOX-Nano output cosine {cos:.4}");
    assert!(cos >= 0.98, "YOLOX-Nano output cosine {cos:.4}");
}

#[test]
fn efficientnet_with_batchnorm_quantizes_like_the_folded_model() {
    let Some(shared) = shared_dir() else { return };
    let files = imagenet_files(&shared);
    let calib = load_batch(&files[..50], Preprocess::RgbCentered);
    let eval = load_batch(&files[files.len() - 50..], Preprocess::RgbCentered);
    let fidelity = |name: &str| {
        let path = shared.join("models").join(name);
        let (fp32, q) = quantize_with(&path, Calibration::Data(calibration(&calib)));
        let bn = model_op_types(&path, &q.bytes)
            .iter()
            .filter(|o| *o == "BatchNormalization")
            .count();
        let mut a = session(&fp32, GraphOptimizationLevel::All, None);
        let mut b = session(&q.bytes, GraphOptimizationLevel::All, None);
        (bn, compare(&mut a, &mut b, &eval))
    };
    let (bn, with_bn) = fidelity("efficientnet_lite0_bn.onnx");
    let (_, folded) = fidelity("efficientnet_lite0.onnx");
    eprintln!("with BN: {with_bn:?}; folded: {folded:?}");
    assert_eq!(bn, 0, "BatchNormalization left in the INT8 model");
    assert!(
        (with_bn.mean_cosine - folded.mean_cosine).abs() < 0.003,
        "BN {with_bn:?} vs folded {folded:?}"
    );
    assert!(with_bn.mean_cosine >= 0.98, "{with_bn:?}");
}

/// SqueezeNet 1.0 reads mean-subtracted BGR pixels (about `[-123, 151]`) and has no
/// BatchNorm, so the stem-Conv rule cannot tell its scale and would synthesize normalized
/// photographs (output cosine 0.01 on `[-1, 1]` fields). With the range given, synthetic
/// calibration works: 0.946 over the 900 held-out images of the bench.
#[test]
fn squeezenet_synthetic_calibration_uses_the_given_image_range() {
    let Some(shared) = shared_dir() else { return };
    let path = shared.join("models/squeezenet1.0.onnx");
    let fp32 = std::fs::read(&path).expect("model file");
    let options = QuantizeOptions {
        synthetic_image_range: Some([-123.0, 151.0]),
        ..untimed()
    };
    let q = quantize(&path, &fp32, &Calibration::Synthetic, &options).expect("quantize");
    assert_eq!(q.report.synthetic_image_ranges["data_0"], "[-123, 151]");
    assert!(
        q.report
            .summary_line()
            .contains("(input `data_0` in [-123, 151]; mse)"),
        "{}",
        q.report.summary_line()
    );
    let files = imagenet_files(&shared);
    let eval = load_batch(&files[files.len() - 20..], Preprocess::BgrMeanSubtracted);
    let mut a = session(&fp32, GraphOptimizationLevel::All, None);
    let mut b = session(&q.bytes, GraphOptimizationLevel::All, None);
    let fidelity = compare(&mut a, &mut b, &eval);
    eprintln!("SqueezeNet 1.0, synthetic fields in [-123, 151]: {fidelity:?}");
    assert!(fidelity.mean_cosine >= 0.9, "{fidelity:?}");
}

/// EfficientNet-Lite0 ending in `ArgMax` (class ids, int64): a model with no float output.
/// The build measures the logits the ArgMax reads instead of failing for want of a float
/// output, and the INT8 model's class ids agree with FP32's on held-out photographs.
#[test]
fn a_classifier_ending_in_argmax_is_measured_on_the_logits_it_reads() {
    use kenosis_quantize::onnx::{self, attr};
    use prost::Message;
    let Some(shared) = shared_dir() else { return };
    let path = shared.join("models/efficientnet_lite0.onnx");
    let mut model = kenosis_quantize::onnx::decode(&path, &std::fs::read(&path).expect("model"))
        .expect("decodes");
    let g = model.graph.as_mut().expect("graph");
    let logits = g.output[0].name().to_owned();
    g.node.push(onnx::make_node(
        "ArgMax",
        "class_id".into(),
        vec![logits.clone()],
        vec!["class".into()],
        vec![attr::make_int("axis", 1), attr::make_int("keepdims", 0)],
    ));
    g.output = vec![onnx::tensor_info("class", onnx::DataType::Int64, None)];
    let fp32 = model.encode_to_vec();

    let files = imagenet_files(&shared);
    let calib = load_batch(&files[..30], Preprocess::RgbCentered);
    let q = quantize(
        Path::new("efficientnet_lite0_argmax.onnx"),
        &fp32,
        &Calibration::Data(calibration(&calib)),
        &untimed(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let fidelity = q.report.fidelity.as_ref().expect("measured");
    assert_eq!(fidelity.compared_tensor.as_deref(), Some(logits.as_str()));
    assert!(fidelity.measured.mean_cosine >= 0.99, "{fidelity:?}");
    let summary = q.report.summary_line();
    assert!(
        summary.contains(&format!("samples: `{logits}` cosine")),
        "{summary}"
    );

    let eval = load_batch(&files[files.len() - 50..], Preprocess::RgbCentered);
    let class = |session: &mut Session, x: &Array4<f32>| {
        let input = ort::value::Tensor::from_array(x.clone()).expect("tensor");
        let out = session.run(ort::inputs![input]).expect("run");
        let (_, ids) = out["class"]
            .try_extract_tensor::<i64>()
            .expect("int64 class ids");
        ids.to_vec()
    };
    let mut a = session(&fp32, GraphOptimizationLevel::All, None);
    let mut b = session(&q.bytes, GraphOptimizationLevel::All, None);
    let agree = eval
        .iter()
        .filter(|x| class(&mut a, x) == class(&mut b, x))
        .count();
    eprintln!("EfficientNet-Lite0 + ArgMax: {fidelity:?}; class ids agree on {agree} of 50");
    assert!(agree >= 45, "class ids agree on {agree} of 50");
}
