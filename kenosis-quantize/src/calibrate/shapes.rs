//! Concrete input shapes for synthetic calibration when the model declares symbolic dims.
//!
//! A model exported with dynamic axes says nothing about which sizes it actually accepts:
//! PP-OCRv4's recognizer only runs with height 48 (a Reshape hard-codes the pooled height),
//! Silero VAD needs audio chunks of at least 64 samples. So the sizes are *probed*: candidate
//! assignments of the symbolic dims are tried in order of preference, each with one FP32
//! inference in ONNX Runtime, and the first that runs is used. The artifact keeps the dims
//! symbolic; only the calibration samples are concrete.

use std::collections::HashMap;
use std::path::Path;

use ort::session::builder::GraphOptimizationLevel;
use prost::Message;

use super::data::InputSpec;
use super::session;
use super::synthetic::{synthetic_with_dims, ImageRange};
use crate::error::{Error, Result};
use crate::onnx::ModelProto;

/// Sizes tried for the spatial (H, W) dims of a rank-4, image-like input, most likely first:
/// ImageNet classifiers, text-line recognizers (48 or 32 high), detectors.
const SPATIAL: [(usize, usize); 8] = [
    (224, 224),
    (48, 320),
    (32, 320),
    (640, 640),
    (416, 416),
    (320, 320),
    (64, 256),
    (128, 128),
];

/// The same sizes for a dense-prediction model (see [`predicts_densely`]), detector sizes
/// first. Activation ranges depend on the size: a feature pyramid reaches larger values on
/// larger inputs (PP-OCRv4 det's at 640x640 far beyond those at 224x224), so calibrating a
/// detector at a classifier's size clips what it sees at the size it is used at.
const DENSE_SPATIAL: [(usize, usize); 8] = [
    (640, 640),
    (416, 416),
    (320, 320),
    (224, 224),
    (48, 320),
    (32, 320),
    (64, 256),
    (128, 128),
];

/// Lengths tried for other symbolic dims (token sequences, audio chunks, state batch).
const OTHER: [usize; 6] = [16, 1, 512, 64, 128, 256];

/// Most candidate assignments probed before giving up.
const MAX_PROBES: usize = 48;

/// One dim of one input: fixed, or a symbolic variable shared by all dims with the same
/// `dim_param` name (unnamed symbolic dims are each their own variable).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Dim {
    Fixed(usize),
    Var(usize),
}

/// What a symbolic variable stands for, which decides its candidate sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    /// The leading dim of some input: always 1.
    Batch,
    /// H of a rank-4 input (paired with the following W).
    Height,
    /// W of a rank-4 input (its size comes with the paired H).
    Width,
    Other,
}

/// The symbolic structure of all inputs.
struct Symbolic {
    dims: Vec<Vec<Dim>>,
    roles: Vec<Role>,
    /// [`SPATIAL`] or [`DENSE_SPATIAL`].
    spatial: &'static [(usize, usize)],
}

impl Symbolic {
    fn new(specs: &[InputSpec], spatial: &'static [(usize, usize)]) -> Self {
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        let mut roles: Vec<Role> = Vec::new();
        let dims = specs
            .iter()
            .map(|spec| {
                let rank = spec.dims.len();
                spec.dims
                    .iter()
                    .zip(&spec.dim_names)
                    .enumerate()
                    .map(|(k, (d, name))| {
                        if let Some(v) = d {
                            return Dim::Fixed(*v as usize);
                        }
                        let role = match k {
                            0 => Role::Batch,
                            2 if rank == 4 => Role::Height,
                            3 if rank == 4 => Role::Width,
                            _ => Role::Other,
                        };
                        let named = name.as_deref().filter(|n| !n.is_empty());
                        if let Some(&var) = named.and_then(|n| by_name.get(n)) {
                            return Dim::Var(var);
                        }
                        roles.push(role);
                        if let Some(n) = named {
                            by_name.insert(n, roles.len() - 1);
                        }
                        Dim::Var(roles.len() - 1)
                    })
                    .collect()
            })
            .collect();
        Self {
            dims,
            roles,
            spatial,
        }
    }

    /// The number of choices for each variable (Batch, Width: one, decided elsewhere).
    fn choices(&self) -> Vec<usize> {
        self.roles
            .iter()
            .map(|r| match r {
                Role::Batch | Role::Width => 1,
                Role::Height => self.spatial.len(),
                Role::Other => OTHER.len(),
            })
            .collect()
    }

    /// The width for a symbolic W after a fixed H: the width paired with that height in
    /// [`Self::spatial`] (a text-line recognizer fixed at 48 high reads 320 wide), or the
    /// first preferred width when no candidate has that height.
    fn width_for_fixed_height(&self, height: usize) -> usize {
        self.spatial
            .iter()
            .find(|(h, _)| *h == height)
            .unwrap_or(&self.spatial[0])
            .1
    }

    /// Concrete dims of every input for one choice per variable. A Width takes the size
    /// paired with the Height just before it in the same input (see
    /// [`Self::width_for_fixed_height`] when H is fixed).
    fn concrete(&self, choice: &[usize]) -> Vec<Vec<usize>> {
        self.dims
            .iter()
            .map(|dims| {
                dims.iter()
                    .enumerate()
                    .map(|(k, d)| match *d {
                        Dim::Fixed(v) => v,
                        Dim::Var(var) => match self.roles[var] {
                            Role::Batch => 1,
                            Role::Height => self.spatial[choice[var]].0,
                            Role::Width => match k.checked_sub(1).map(|h| dims[h]) {
                                Some(Dim::Var(h)) if self.roles[h] == Role::Height => {
                                    self.spatial[choice[h]].1
                                }
                                Some(Dim::Fixed(h)) => self.width_for_fixed_height(h),
                                _ => self.spatial[0].1,
                            },
                            Role::Other => OTHER[choice[var]],
                        },
                    })
                    .collect()
            })
            .collect()
    }
}

/// Choice vectors in order of preference: by the sum of choice indices, then
/// lexicographically, so that one variable moving away from its favourite comes before two.
fn assignments(choices: &[usize]) -> Vec<Vec<usize>> {
    let mut all: Vec<Vec<usize>> = vec![vec![]];
    for &n in choices {
        let mut next = Vec::with_capacity(all.len() * n);
        for prefix in &all {
            for c in 0..n {
                let mut v = prefix.clone();
                v.push(c);
                next.push(v);
            }
            // Bounded: more than this many variables is never probed exhaustively anyway.
            if next.len() > 4096 {
                break;
            }
        }
        all = next;
    }
    all.sort_by_key(|v| (v.iter().sum::<usize>(), v.clone()));
    all
}

/// True when a graph output is a rank-4 map whose H and W are symbolic: a detector or
/// segmenter, whose output grows with its input, rather than a classifier.
pub fn predicts_densely(model: &ModelProto) -> bool {
    model.graph.iter().flat_map(|g| &g.output).any(|o| {
        matches!(
            crate::onnx::declared_tensor(o),
            Some((_, Some(dims))) if dims.len() == 4 && dims[2].is_none() && dims[3].is_none()
        )
    })
}

/// Concrete dims for every input of `model` (normalized) so that synthetic samples run.
///
/// Inputs without symbolic dims are returned as declared without running anything. Symbolic
/// H and W take classifier sizes first (`SPATIAL`), or detector sizes for a model that
/// [`predicts_densely`] (`DENSE_SPATIAL`). When the preferred sizes fail, candidate sizes
/// are probed with one FP32 inference each (at most `MAX_PROBES`).
///
/// # Errors
/// [`Error::Calibration`] naming `path` when no candidate runs, with ONNX Runtime's message
/// for the preferred sizes and a hint to give calibration data; [`Error::Runtime`] when
/// the model cannot be loaded at all.
#[allow(
    clippy::expect_used,
    reason = "the candidate list is never empty, so a failed probe left an error"
)]
pub fn resolve(model: &ModelProto, specs: &[InputSpec], path: &Path) -> Result<Vec<Vec<usize>>> {
    let spatial: &[(usize, usize)] = if predicts_densely(model) {
        &DENSE_SPATIAL
    } else {
        &SPATIAL
    };
    let symbolic = Symbolic::new(specs, spatial);
    if symbolic.roles.iter().all(|r| *r == Role::Batch) {
        return Ok(symbolic.concrete(&vec![0; symbolic.roles.len()]));
    }
    let mut session = session::session(
        path,
        model.encode_to_vec(),
        GraphOptimizationLevel::Disable,
        1,
    )?;
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let mut first_error: Option<Error> = None;
    let ranges = vec![ImageRange::Normalized; specs.len()];
    for choice in assignments(&symbolic.choices())
        .into_iter()
        .take(MAX_PROBES)
    {
        let dims = symbolic.concrete(&choice);
        // The probe only needs the shapes to run; the value range does not matter.
        let data = match synthetic_with_dims(specs, &dims, &ranges, 1, path) {
            Ok(data) => data,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let inputs = session::sample_inputs(&names, &data.samples[0], path)?;
        match session.run(session::borrowed(&inputs)) {
            Ok(_) => return Ok(dims),
            Err(e) => {
                first_error.get_or_insert_with(|| Error::Calibration {
                    path: path.to_owned(),
                    reason: format!(
                        "the model declares symbolic input dims and no synthetic shape among \
                         {MAX_PROBES} candidates runs (with {dims:?}: {e}); give calibration data \
                         of the right shape"
                    ),
                });
            }
        }
    }
    Err(first_error.expect("at least one candidate is probed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, dims: &[Option<i64>], names: &[Option<&str>]) -> InputSpec {
        InputSpec {
            name: name.into(),
            elem_type: crate::onnx::DataType::Float.into(),
            dims: dims.to_vec(),
            dim_names: names.iter().map(|n| n.map(str::to_owned)).collect(),
            token_rows: None,
        }
    }

    #[test]
    fn named_dims_are_shared_and_image_dims_paired() {
        let specs = [
            spec("ids", &[None, None], &[Some("batch"), Some("sequence")]),
            spec("mask", &[None, None], &[Some("batch"), Some("sequence")]),
            spec(
                "image",
                &[None, Some(3), None, None],
                &[Some("n"), None, Some("h"), Some("w")],
            ),
        ];
        let s = Symbolic::new(&specs, &SPATIAL);
        // batch, sequence, n, h, w
        assert_eq!(s.roles.len(), 5);
        let choice = [0, 2, 0, 1, 0];
        assert_eq!(
            s.concrete(&choice),
            vec![vec![1, 512], vec![1, 512], vec![1, 3, 48, 320]]
        );
    }

    #[test]
    fn unnamed_dims_are_independent() {
        let specs = [
            spec("audio", &[None, None], &[None, None]),
            spec("state", &[Some(2), None, Some(128)], &[None, None, None]),
        ];
        let s = Symbolic::new(&specs, &SPATIAL);
        assert_eq!(s.roles, vec![Role::Batch, Role::Other, Role::Other]);
        assert_eq!(s.concrete(&[0, 2, 1]), vec![vec![1, 512], vec![2, 1, 128]]);
    }

    /// A model whose one output declares `dims` (`None`: symbolic).
    fn model_with_output(dims: &[Option<i64>]) -> ModelProto {
        use crate::onnx::tensor_shape_proto::{dimension::Value, Dimension};
        use crate::onnx::{type_proto, TensorShapeProto};
        let mut m = crate::test_support::model(vec![], &["y"], vec![]);
        let out = &mut m.graph.as_mut().unwrap().output[0];
        let Some(type_proto::Value::TensorType(t)) = out.r#type.as_mut().unwrap().value.as_mut()
        else {
            unreachable!("float_value declares a tensor")
        };
        t.shape = Some(TensorShapeProto {
            dim: dims
                .iter()
                .map(|d| Dimension {
                    value: Some(d.map_or(Value::DimParam("n".into()), Value::DimValue)),
                    ..Default::default()
                })
                .collect(),
        });
        m
    }

    #[test]
    fn maps_with_symbolic_height_and_width_are_dense_predictions() {
        assert!(predicts_densely(&model_with_output(&[
            None,
            Some(1),
            None,
            None
        ])));
        // Classifier logits, sequence outputs and fixed-size maps are not.
        assert!(!predicts_densely(&model_with_output(&[None, Some(1000)])));
        assert!(!predicts_densely(&model_with_output(&[
            None,
            None,
            Some(6625)
        ])));
        assert!(!predicts_densely(&model_with_output(&[
            Some(1),
            Some(85),
            Some(52),
            Some(52)
        ])));
        let image = [spec("x", &[None, Some(3), None, None], &[None; 4])];
        let first = |spatial| Symbolic::new(&image, spatial).concrete(&[0, 0]);
        assert_eq!(first(&SPATIAL), vec![vec![1, 3, 224, 224]]);
        assert_eq!(first(&DENSE_SPATIAL), vec![vec![1, 3, 640, 640]]);
    }

    #[test]
    fn a_symbolic_width_after_a_fixed_height_takes_the_paired_width() {
        let line = |h| [spec("x", &[None, Some(3), Some(h), None], &[None; 4])];
        let width = |h, spatial| Symbolic::new(&line(h), spatial).concrete(&[0, 0])[0][3];
        assert_eq!(width(48, &SPATIAL), 320);
        assert_eq!(width(640, &DENSE_SPATIAL), 640);
        // No candidate with that height: the first preferred width of the model's kind.
        assert_eq!(width(100, &SPATIAL), 224);
        assert_eq!(width(100, &DENSE_SPATIAL), 640);
    }

    #[test]
    fn assignments_prefer_few_departures() {
        let a = assignments(&[1, 3, 3]);
        assert_eq!(a.len(), 9);
        assert_eq!(a[0], vec![0, 0, 0]);
        assert_eq!(a[1..3], [vec![0, 0, 1], vec![0, 1, 0]]);
        assert_eq!(a[8], vec![0, 2, 2]);
    }
}
