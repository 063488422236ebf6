//! One INT8 build of a calibrated model: plan the placement with what is kept float, choose
//! activation parameters from the calibrated ranges, rewrite the graph into QDQ form. A
//! fidelity target makes several builds from one calibration (see [`crate::fidelity`]).

use std::collections::{HashMap, HashSet};

use crate::calibrate::gram::PatchGram;
use crate::calibrate::stats::ChannelMoments;
use crate::error::Unsupported;
use crate::kernel_costs::Pricing;
use crate::onnx::{DataType, ModelProto};
use crate::quantize::domain;
use crate::quantize::dynamic;
use crate::quantize::plan::{self, Plan, PlanOptions};
use crate::quantize::reason::FloatReason;
use crate::quantize::rewrite::{self, Range, RewriteSummary, WeightCache, WeightOptions};
use crate::quantize::smooth;

/// What stays FP32 besides the plan's own choices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptFloat {
    /// Node names kept in FP32 whatever their rule: the user's `keep_float`, nodes
    /// calibration could not run, ops a fidelity target chose.
    pub ops: HashSet<String>,
    /// Activation tensors left unquantized (a fidelity target's choice): their writers and
    /// readers stay FP32.
    pub tensors: HashSet<String>,
}

/// A quantized model with the plan that made it.
pub struct Built {
    /// The INT8 QDQ model.
    pub model: ModelProto,
    /// Placement used.
    pub plan: Plan,
    /// What the rewrite did.
    pub rewrite: RewriteSummary,
}

impl Built {
    /// Whether no op was quantized (statically, dynamically or to 4 bits): the model is the
    /// FP32 graph.
    pub fn quantizes_nothing(&self) -> bool {
        let d = &self.rewrite.dynamic;
        self.plan.quantized_nodes.is_empty()
            && d.matmuls == 0
            && d.tables == 0
            && self.rewrite.int4_matmuls == 0
    }
}

/// How a build quantizes the activations of MatMul and Gemm with a constant weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActivationMode {
    /// Calibrated ranges, QDQ (the static placement decides).
    #[default]
    Static,
    /// At run time (see [`dynamic`]); embedding tables int8. Convs stay static.
    Dynamic,
}

impl ActivationMode {
    /// The other mode.
    pub fn other(self) -> Self {
        match self {
            Self::Static => Self::Dynamic,
            Self::Dynamic => Self::Static,
        }
    }
}

/// What calibration measured on the FP32 model, all a rewrite reads from it.
#[derive(Debug, Default)]
pub struct Statistics {
    /// Chosen range of each observed activation tensor.
    pub ranges: HashMap<String, Range>,
    /// Per-channel means of weighted ops' computed inputs, by tensor (bias correction).
    pub channel_means: HashMap<String, Vec<f64>>,
    /// Input patch statistics of Convs, by the Conv's first output (GPTQ rounding and the
    /// reduce-range saturation check).
    pub patch_grams: HashMap<String, PatchGram>,
    /// Activation tensors unfit for uint8, with the reason the report gives.
    pub unfit_tensors: HashMap<String, FloatReason>,
    /// Element count per sample of the tensors the time estimate reads (see
    /// [`domain::sized_tensors`]).
    pub elements: HashMap<String, usize>,
    /// Per-channel statistics of MatMul and Gemm inputs (last axis), for SmoothQuant's
    /// migration in builds with dynamic activations (see [`super::smooth`]).
    pub matmul_inputs: HashMap<String, ChannelMoments>,
}

/// Makes INT8 builds of one normalized FP32 model from its calibration statistics.
pub struct Builder<'m> {
    model: &'m ModelProto,
    types: &'m HashMap<String, DataType>,
    statistics: Statistics,
    /// Why nodes the caller keeps FP32 are kept (nodes ONNX Runtime cannot run).
    keep_float_reasons: HashMap<String, FloatReason>,
    weights: WeightOptions,
    /// The kernel costs that return slower regions to FP32; `None` keeps the plan as it is.
    pricing: Option<Pricing>,
    /// Set when several builds will be made (a fidelity target's trials); a single build
    /// would only hold a second copy of every weight's codes.
    weight_cache: Option<WeightCache>,
    /// How MatMul and Gemm activations are quantized.
    activations: ActivationMode,
    /// Block size of 4-bit MatMul weights (`weights = "int4"`), `None` for int8.
    int4_block: Option<usize>,
    /// With 4-bit weights, the nodes kept FP32 whatever a fidelity target asks (the user's
    /// `keep_float`, nodes ONNX Runtime cannot run): other MatMuls a target keeps fall back
    /// to int8 weights with dynamic activations instead of FP32.
    requested_float: HashSet<String>,
    /// MatMul and Gemm nodes (by name) whose activations take the other mode than
    /// [`activations`](Self::activations): a per-node choice (int8 weights only).
    flipped: HashSet<String>,
    /// SmoothQuant's choice per group of dynamic MatMuls, made once for all builds.
    smoothing: std::sync::Mutex<smooth::Memo>,
}

pub use super::reason::INT8_FALLBACK_REASON;

impl<'m> Builder<'m> {
    /// Builds of `model` (normalized, with element `types` from
    /// [`crate::types::infer_elem_types`]); `cache_weights` keeps weighted ops' codes
    /// between builds.
    pub fn new(
        model: &'m ModelProto,
        types: &'m HashMap<String, DataType>,
        statistics: Statistics,
        keep_float_reasons: HashMap<String, FloatReason>,
        weights: WeightOptions,
        pricing: Option<Pricing>,
        cache_weights: bool,
    ) -> Self {
        Self {
            model,
            types,
            statistics,
            keep_float_reasons,
            weights,
            pricing,
            weight_cache: cache_weights.then(WeightCache::default),
            activations: ActivationMode::Static,
            int4_block: None,
            requested_float: HashSet::new(),
            flipped: HashSet::new(),
            smoothing: Default::default(),
        }
    }

    /// Prices the following builds' placements with `pricing` (`None`: the plan as it is).
    pub fn set_pricing(&mut self, pricing: Option<Pricing>) {
        self.pricing = pricing;
    }

    /// The prices of the following builds' placements.
    pub fn pricing(&self) -> Option<Pricing> {
        self.pricing.clone()
    }

    /// Makes the following builds store MatMul weights as 4-bit blocks of `block_size` rows
    /// (see [`crate::quantize::int4`]), embedding tables as int8 and everything else as
    /// [`ActivationMode::Dynamic`] would; `None` returns to int8 weights.
    /// `requested_float` names the nodes that stay FP32 even then; a MatMul a fidelity
    /// target keeps besides them gets int8 weights (the per-layer fallback).
    pub fn set_int4(&mut self, block_size: Option<usize>, requested_float: HashSet<String>) {
        self.int4_block = block_size;
        self.requested_float = requested_float;
    }

    /// Makes the following builds quantize MatMul and Gemm activations as `mode` says.
    pub fn set_activations(&mut self, mode: ActivationMode) {
        self.activations = mode;
    }

    /// How the builds quantize MatMul and Gemm activations.
    pub fn activations(&self) -> ActivationMode {
        self.activations
    }

    /// Makes the following builds quantize the activations of the MatMul and Gemm nodes
    /// named in `flipped` in the other mode than [`activations`](Self::activations) (int8
    /// weights only; ignored with 4-bit ones). The embedding tables follow
    /// [`activations`](Self::activations).
    pub fn set_flipped(&mut self, flipped: HashSet<String>) {
        self.flipped = flipped;
    }

    /// The nodes [`set_flipped`](Self::set_flipped) named.
    pub fn flipped(&self) -> &HashSet<String> {
        &self.flipped
    }

    /// Plans and rewrites a fresh copy of the model, keeping `kept` nodes in FP32, `kept`
    /// activation tensors unquantized, and the nodes the target's kernel costs find faster in
    /// FP32 (see [`domain`]).
    ///
    /// # Errors
    /// [`Unsupported`] with the rewrite's or the topological sort's reason, for a graph they
    /// cannot handle.
    pub fn build(&self, kept: &KeptFloat) -> Result<Built, Unsupported> {
        let mut model = self.model.clone();
        let graph = model.graph.get_or_insert_default();
        // Keeping nodes in FP32 after calibration can ask for a tensor calibration did not
        // observe (a squeeze-and-excitation pool kept for a fidelity target leaves its Conv
        // reading the pool's own output): without a range it cannot be quantized, so the
        // nodes around it stay FP32 too, and the report says so.
        let mut float_tensors = self.statistics.unfit_tensors.clone();
        for t in &kept.tensors {
            float_tensors
                .entry(t.clone())
                .or_insert_with(|| FloatReason::TargetTensor { tensor: t.clone() });
        }
        let mut options = PlanOptions {
            keep_float: kept.ops.clone(),
            keep_float_reasons: self.keep_float_reasons.clone(),
            float_tensors,
        };
        // Dynamic nodes are kept out of the static placement, then rewritten after it (its
        // rewrite only appends nodes, so their indices hold).
        let int8_flips = self.int4_block.is_none() && !self.flipped.is_empty();
        let dynamic_plan = (self.activations == ActivationMode::Dynamic
            || self.int4_block.is_some()
            || int8_flips)
            .then(|| {
                let costs = self.pricing.as_ref().map(|p| p.costs);
                let float = match self.int4_block {
                    Some(_) => &self.requested_float,
                    None => &kept.ops,
                };
                let mut d = dynamic::plan(graph, self.types, float, costs.as_ref());
                if int8_flips {
                    let dynamic = |name: &str| {
                        (self.activations == ActivationMode::Dynamic) != self.flipped.contains(name)
                    };
                    let tables = self.activations == ActivationMode::Dynamic;
                    d.retain(graph, dynamic, tables);
                }
                d
            });
        // MatMuls a fidelity target keeps, which 4-bit weights give int8 ones instead.
        let int8_fallback: HashSet<String> = match self.int4_block {
            Some(_) => kept
                .ops
                .difference(&self.requested_float)
                .cloned()
                .collect(),
            None => HashSet::new(),
        };
        let mut dynamic_names: HashSet<String> = HashSet::new();
        if let Some(d) = &dynamic_plan {
            dynamic_names.extend(d.node_names(graph).map(str::to_owned));
            let float = (d.slower.iter().map(|&i| (i, FloatReason::DynamicSlower)))
                .chain(d.small_tables.iter().map(|&i| (i, FloatReason::SmallTable)));
            for (i, reason) in float {
                let name = graph.node[i].name().to_owned();
                (options.keep_float_reasons).insert(name.clone(), reason);
                options.keep_float.insert(name);
            }
            options.keep_float.extend(dynamic_names.iter().cloned());
        }
        let (plan, act) = loop {
            let plan = plan::plan(graph, self.types, &options);
            let act = rewrite::activation_params(&plan, graph, &self.statistics.ranges);
            let uncalibrated: Vec<&String> = plan
                .tensors
                .keys()
                .filter(|t| !act.contains_key(*t))
                .collect();
            if !uncalibrated.is_empty() {
                for t in uncalibrated {
                    let reason = FloatReason::UncalibratedTensor { tensor: t.clone() };
                    options.float_tensors.insert(t.clone(), reason);
                }
                continue;
            }
            let Some(pricing) = &self.pricing else {
                break (plan, act);
            };
            let slower =
                domain::slower_in_int8(graph, &plan, &self.statistics.elements, &pricing.costs);
            if slower.is_empty() {
                break (plan, act);
            }
            for i in slower {
                let name = graph.node[i].name().to_owned();
                options
                    .keep_float_reasons
                    .insert(name.clone(), domain::reason(pricing));
                options.keep_float.insert(name);
            }
        };
        let mut plan = plan;
        for f in plan
            .float_nodes
            .iter_mut()
            .filter(|f| int8_fallback.contains(&f.name) && dynamic_names.contains(&f.name))
        {
            f.reason = FloatReason::Int8Fallback;
        }
        let static_matmuls: Vec<String> = (plan.quantized_nodes.iter())
            .map(|&i| &graph.node[i])
            .filter(|n| matches!(n.op_type(), "MatMul" | "Gemm"))
            .map(|n| n.name().to_owned())
            .collect();
        let mut summary = rewrite::rewrite(
            graph,
            &plan,
            &act,
            &self.statistics.channel_means,
            &self.statistics.patch_grams,
            self.weights,
            self.weight_cache.as_ref(),
        )?;
        summary.static_matmuls = static_matmuls;
        if let Some(d) = &dynamic_plan {
            // They run quantized, not in FP32: the report lists them apart.
            // The int8 fallback of 4-bit weights stays listed: the fidelity search counts
            // what a choice changed by these entries (see `INT8_FALLBACK_REASON`).
            plan.float_nodes
                .retain(|f| !dynamic_names.contains(&f.name) || int8_fallback.contains(&f.name));
            summary.dynamic_nodes = (d.matmuls.iter())
                .map(|m| graph.node[m.node].name().to_owned())
                .collect();
            summary.dynamic = match self.int4_block {
                None => {
                    let reduce_range = self.weights.reduce_range;
                    let smoothing = {
                        let mut memo = (self.smoothing.lock())
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        let inputs = &self.statistics.matmul_inputs;
                        smooth::choose(graph, d, inputs, reduce_range, &mut memo)?
                    };
                    let smoothing = (smoothing.into_iter())
                        .map(|(input, s)| (input, s.scales))
                        .collect();
                    dynamic::rewrite(graph, d, reduce_range, &smoothing)?
                }
                Some(block) => {
                    let (nbits, dynamic) = crate::quantize::int4::rewrite(
                        graph,
                        d,
                        block,
                        self.weights.reduce_range,
                        &int8_fallback,
                    )?;
                    summary.int4_matmuls = nbits;
                    dynamic
                }
            };
        }
        crate::graph::sort_topologically(graph)?;
        if summary.int4_matmuls > 0
            && !(model.opset_import.iter()).any(|o| o.domain() == crate::quantize::int4::DOMAIN)
        {
            model.opset_import.push(crate::onnx::OperatorSetIdProto {
                domain: Some(crate::quantize::int4::DOMAIN.into()),
                version: Some(1),
            });
        }
        model.producer_name = Some("kenosis".into());
        model.producer_version = Some(env!("CARGO_PKG_VERSION").into());
        Ok(Built {
            model,
            plan,
            rewrite: summary,
        })
    }
}
