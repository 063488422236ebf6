//! The kernel costs of [`KernelCosts`], measured on the build machine with micro-benchmarks
//! in ONNX Runtime, for builds whose target is the build machine's own CPU class.
//!
//! Every figure is a slope: the median time of a chain of `LONG` layers minus a chain of
//! one, over `LONG - 1`, so that the model's own input and output costs cancel. Each session
//! runs on one intra-op thread with all graph optimizations (ONNX Runtime fuses the QDQ
//! chains into its integer kernels, as it does for an artifact). The chains of one figure
//! run interleaved, one run of each per round, so that a change of machine load touches
//! them alike, each time is the median of its rounds, and each cost the median of
//! `REPEATS` whole measurements. Units: one FP32 multiply-add of a
//! dense Conv on the same machine, as in the table.
//! - `int8_dense`: QDQ 1×1 and 3×3 Convs (fused into QLinearConv) against FP32 ones.
//! - `fp32_depthwise` / `int8_depthwise`: 3×3 depthwise Convs, FP32 and QDQ.
//! - `conversion`: INT8 1×1 Convs with a float HardSwish between them (one
//!   DequantizeLinear and one QuantizeLinear per layer), minus the same chain with Relu
//!   (absorbed by the integer kernel), minus HardSwish's own FP32 time, over 2.
//! - `layout`: INT8 1×1 Convs with an FP32 depthwise Conv between them, against all INT8,
//!   minus the two conversions and the difference of the depthwise kernels, over 2.
//! - `int8_dynamic_dense` / `int4_dense`: `[64, d]` × `[d, d]` MatMuls (a 64-token
//!   encoder's projections, `d` 384 and 768) rewritten as a build rewrites them
//!   ([`crate::quantize::dynamic::rewrite`], [`crate::quantize::int4::rewrite`], block 32)
//!   against FP32 ones; the dynamic form less its input's quantization, priced as
//!   `quantize::dynamic` prices it (`3·d` conversions a row).
//!
//! A timing is noise, not a price, when it leaves [`PLAUSIBLE`] times the class's table
//! value (e.g. a background job stalled one chain): that cost keeps the table's value, and
//! [`Measured::kept_from_table`] names it. `cargo xtask bench --kernel-costs-only` prints
//! them beside the table (the `kernel-costs` section of `docs/benchmarks.md`); the table's
//! x86-with-VNNI row was measured with the same chains.

use std::path::Path;
use std::time::Instant;

use ort::session::builder::GraphOptimizationLevel;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::calibrate::session::{borrowed, sample_inputs, session, session_threads};
use crate::calibrate::SampleValue;
use crate::error::{Error, Result};
use crate::kernel_costs::KernelCosts;
use crate::onnx::{
    attr, make_node, tensor, tensor_info, DataType, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto,
};
use crate::quantize::{dynamic, int4};

/// Layers of the long chain of each slope.
const LONG: usize = 4;
/// Rows of the MatMul chains' input: the tokens of a short sentence-encoder window.
const MATMUL_ROWS: usize = 64;
/// Block size of the 4-bit MatMul chains: `weights = "int4"`'s default.
const INT4_BLOCK: usize = 32;
/// How much timing a measurement takes: whole measurements (each cost is the median of
/// them), and timed rounds per set of interleaved chains after untimed warm-up ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effort {
    /// Whole measurements.
    pub repeats: usize,
    /// Timed rounds.
    pub rounds: usize,
    /// Untimed rounds first (ONNX Runtime packs weights on the first).
    pub warmup: usize,
}

impl Effort {
    /// What a build's costs and a device profile take: three measurements of 20 rounds each,
    /// after 3 warm-up rounds.
    pub const FULL: Self = Self {
        repeats: REPEATS,
        rounds: ROUNDS,
        warmup: WARMUP,
    };
    /// One measurement of three rounds: noisy figures in a twentieth of the time, for
    /// checking the flow where timings mean nothing (an emulator).
    pub const QUICK: Self = Self {
        repeats: 1,
        rounds: 3,
        warmup: 1,
    };
}

/// Timed rounds per set of interleaved chains, after [`WARMUP`] untimed ones.
const ROUNDS: usize = 20;
/// Whole measurements taken; each cost is the median of its [`REPEATS`] values, since
/// `conversion` and `layout` are differences of differences, which one stalled chain swings.
const REPEATS: usize = 3;
/// Untimed runs of each chain first (ONNX Runtime packs weights on the first).
const WARMUP: usize = 3;
/// A measured cost within `[table / PLAUSIBLE, table · PLAUSIBLE]` is taken; outside, the
/// table's value is kept.
pub const PLAUSIBLE: f64 = 4.0;
pub use crate::kernel_costs::PROTOCOL;

/// Costs measured on this machine, with the costs that fell back to the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The costs the placement uses.
    pub costs: KernelCosts,
    /// Names of the costs whose measurement was implausible (see [`PLAUSIBLE`]).
    pub kept_from_table: Vec<String>,
}

/// Runs the micro-benchmarks (`REPEATS` times, a few seconds on one thread) and prices
/// them against `table`, the build target class's row.
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime fails to build or run a chain; `path` names the
/// model whose build asked for the measurement.
pub fn measure(table: &KernelCosts, path: &Path) -> Result<Measured> {
    measure_at(table, path, Some(1), Effort::FULL)
}

/// [`measure`] with sessions made as `kenosis-runtime` makes them at `threads` intra-op
/// threads (`None`: ONNX Runtime's own choice), for a device profile's costs at the thread
/// count programs run, taking `effort`.
///
/// # Errors
/// As [`measure`].
pub fn measure_at(
    table: &KernelCosts,
    path: &Path,
    threads: Option<usize>,
    effort: Effort,
) -> Result<Measured> {
    let bench = Bench {
        path,
        threads,
        effort,
    };
    let mut repeats = Vec::with_capacity(effort.repeats);
    for _ in 0..effort.repeats.max(1) {
        repeats.push(bench.costs()?);
    }
    let medians: [f64; 7] = std::array::from_fn(|k| {
        let mut values: Vec<f64> = repeats.iter().map(|r| r[k]).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    });
    let mut kept_from_table = Vec::new();
    let table_values = table.values();
    let costs: [f64; 7] = std::array::from_fn(|k| {
        if plausible(medians[k], table_values[k]) {
            medians[k]
        } else {
            kept_from_table.push(KernelCosts::NAMES[k].to_owned());
            table_values[k]
        }
    });
    Ok(Measured {
        costs: KernelCosts::from_values(costs),
        kept_from_table,
    })
}

/// The device profile of this machine (what `kenosis probe` writes): [`measure_at`] one
/// thread and at the thread count a Kenosis program runs on by default here
/// ([`crate::speed::thread_counts`]), priced against this machine's CPU class's table row,
/// with what names the CPU and ONNX Runtime, taking `effort` ([`Effort::FULL`] for a profile
/// to build with). `progress` is called before each of the (one or two) measurements with its
/// thread count. `path` names the caller in errors.
///
/// # Errors
/// [`Error::Runtime`] when ONNX Runtime fails to build or run a chain.
pub fn probe(
    path: &Path,
    effort: Effort,
    progress: &mut dyn FnMut(Option<usize>),
) -> Result<crate::device_profile::DeviceProfile> {
    crate::calibrate::session::environment(path)?;
    let class = crate::kernels::TargetCpu::of_target("", "");
    let table = KernelCosts::of(class);
    let counts = crate::speed::thread_counts(None);
    let deployed = counts.last().copied().flatten();
    progress(Some(1));
    let one = measure_at(&table, path, Some(1), effort)?;
    let many = if counts.len() > 1 {
        progress(deployed);
        measure_at(&table, path, deployed, effort)?
    } else {
        one.clone()
    };
    let mut kept_from_table = one.kept_from_table;
    for name in many.kept_from_table {
        if !kept_from_table.contains(&name) {
            kept_from_table.push(name);
        }
    }
    Ok(crate::device_profile::DeviceProfile {
        format: crate::device_profile::FORMAT,
        cpu: crate::kernels::cpu_name(),
        cpu_class: class.canonical().to_owned(),
        cpu_flags: crate::kernels::cpu_identity(),
        onnxruntime: ort::info().to_owned(),
        protocol: PROTOCOL,
        one_thread: one.costs,
        default_threads: deployed,
        at_default_threads: many.costs,
        kept_from_table,
    })
}

/// Whether a measured cost `value` is within [`PLAUSIBLE`] times the table's `table`.
fn plausible(value: f64, table: f64) -> bool {
    value.is_finite() && value >= table / PLAUSIBLE && value <= table * PLAUSIBLE
}

/// Whether every cost of `c` is [`plausible`] against `table`.
fn all_plausible(c: &KernelCosts, table: &KernelCosts) -> bool {
    (c.values().into_iter())
        .zip(table.values())
        .all(|(v, t)| plausible(v, t))
}

/// Folder of [`cached`]'s files inside the Kenosis cache folder.
pub const CACHE_SUBDIR: &str = "kernel-costs";

/// [`measure`], once per machine: the costs are kept in `cache_dir`/[`CACHE_SUBDIR`] under a
/// key of this CPU (its model name and feature flags), the ONNX Runtime build, this crate's
/// version, [`PROTOCOL`] and `table` (the target class's row, which the plausibility rule
/// reads). A later build on the same machine reads them back (a file of a few hundred
/// bytes); a file that does not parse, or holds a cost outside [`PLAUSIBLE`] times the
/// table's, is measured again and replaced: the file steers only speed, and no value in it
/// can take the placement outside what measurement could give.
///
/// # Errors
/// As [`measure`]; [`Error::Io`] when the cache file cannot be written.
pub fn cached(cache_dir: &Path, table: &KernelCosts, path: &Path) -> Result<Measured> {
    crate::calibrate::session::environment(path)?;
    let mut key = blake3::Hasher::new();
    for part in [
        &format!("protocol {PROTOCOL}"),
        concat!("kenosis-build ", env!("CARGO_PKG_VERSION")),
        ort::info(),
        &crate::kernels::cpu_identity(),
        &format!("{table:?}"),
    ] {
        key.update(part.as_bytes()).update(b"\n");
    }
    let file = (cache_dir.join(CACHE_SUBDIR)).join(format!("{}.json", key.finalize().to_hex()));
    let known = std::fs::read(&file)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Measured>(&bytes).ok())
        .filter(|m| all_plausible(&m.costs, table));
    if let Some(known) = known {
        return Ok(known);
    }
    let measured = measure(table, path)?;
    let dir = cache_dir.join(CACHE_SUBDIR);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    #[allow(
        clippy::expect_used,
        reason = "a struct of floats and strings serializes"
    )]
    let json = serde_json::to_vec_pretty(&measured).expect("serializable");
    crate::cache::write_atomic(&file, &json)?;
    // What later builds will read back (JSON may move a float by one unit in the last
    // place): this build prices with the same values.
    #[allow(
        clippy::expect_used,
        reason = "the JSON was just written from a `Measured`"
    )]
    Ok(serde_json::from_slice(&json).expect("round trip"))
}

fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = (values.into_iter()).fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    sum / n.max(1) as f64
}

/// Adds one layer to a chain, reading tensor `x`; returns the layer's output.
type Layer = Box<dyn Fn(&mut Chain, String) -> String>;

/// A dense (`depthwise = false`) or depthwise `k`×`k` Conv with a Relu, between a
/// QuantizeLinear/DequantizeLinear pair on each side when `quantized`.
fn conv_layer(k: usize, depthwise: bool, quantized: bool) -> Layer {
    Box::new(move |ch, x| {
        let x = if quantized { ch.qdq(x) } else { x };
        let y = ch.conv(x, k, depthwise, quantized);
        let y = ch.act(y, "Relu");
        if quantized {
            ch.qdq(y)
        } else {
            y
        }
    })
}

/// What sits after the 1×1 Conv of an [`island_layer`].
#[derive(Clone, Copy)]
enum Island {
    Relu,
    HardSwish,
    /// A 3×3 depthwise Conv and a Relu, in INT8 or FP32.
    Depthwise {
        quantized: bool,
    },
}

/// A 1×1 Conv (between QDQ pairs when `quantized`), then `after` in float (or, for an INT8
/// depthwise Conv, between its own QDQ pair).
fn island_layer(after: Island, quantized: bool) -> Layer {
    Box::new(move |ch, x| {
        let x = if quantized { ch.qdq(x) } else { x };
        let y = ch.conv(x, 1, false, quantized);
        let y = if quantized { ch.qdq(y) } else { y };
        match after {
            Island::Relu => ch.act(y, "Relu"),
            Island::HardSwish => ch.act(y, "HardSwish"),
            Island::Depthwise { quantized: q } => {
                let y = if q { ch.qdq(y) } else { y };
                let z = ch.conv(y, 3, true, q);
                ch.act(z, "Relu")
            }
        }
    })
}

/// The form a chain's FP32 MatMuls are rewritten into, as a build rewrites them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MatMulForm {
    Fp32,
    /// int8 weights, the input quantized at run time ([`dynamic::rewrite`]).
    Dynamic,
    /// 4-bit weights in blocks of [`INT4_BLOCK`] ([`int4::rewrite`]).
    Int4,
}

/// A `[rows, channels]` × `[channels, channels]` FP32 MatMul, which the chain's model
/// rewrites into `form`.
fn matmul_layer(form: MatMulForm) -> Layer {
    Box::new(move |ch, x| {
        ch.matmul_form = form;
        let c = ch.channels;
        let w = ch.name("w");
        let values = ch.weights(c * c);
        (ch.initializers).push(tensor::from_f32(&w, &[c as i64, c as i64], &values));
        ch.node("MatMul", vec![x, w], vec![])
    })
}

/// A chain of layers on `[1, channels, hw, hw]` tensors (Convs) or `[rows, channels]` ones
/// (MatMuls), built node by node.
struct Chain {
    channels: usize,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    names: usize,
    /// xorshift64 state for the weights (their values do not change a kernel's time).
    seed: u64,
    /// What [`Chain::model`] rewrites the MatMuls into.
    matmul_form: MatMulForm,
}

impl Chain {
    fn new(channels: usize) -> Self {
        Self {
            channels,
            nodes: Vec::new(),
            initializers: Vec::new(),
            names: 0,
            seed: 0x9e37_79b9_7f4a_7c15,
            matmul_form: MatMulForm::Fp32,
        }
    }

    fn name(&mut self, base: &str) -> String {
        self.names += 1;
        format!("{base}{}", self.names)
    }

    fn node(
        &mut self,
        op: &str,
        inputs: Vec<String>,
        attributes: Vec<crate::onnx::AttributeProto>,
    ) -> String {
        let out = self.name(op);
        let node = make_node(op, out.clone(), inputs, vec![out.clone()], attributes);
        self.nodes.push(node);
        out
    }

    /// Uniform weights in `[-0.2, 0.2)`.
    fn weights(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                ((self.seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
            })
            .collect()
    }

    /// A QuantizeLinear to uint8 and its DequantizeLinear.
    fn qdq(&mut self, x: String) -> String {
        let (s, z) = (self.name("scale"), self.name("zero_point"));
        self.initializers.push(tensor::from_f32(&s, &[], &[0.05]));
        self.initializers.push(tensor::from_u8(&z, &[], &[0]));
        let q = self.node("QuantizeLinear", vec![x, s.clone(), z.clone()], vec![]);
        self.node("DequantizeLinear", vec![q, s, z], vec![])
    }

    fn conv(&mut self, x: String, k: usize, depthwise: bool, quantized: bool) -> String {
        let c = self.channels;
        let dims = [
            c as i64,
            if depthwise { 1 } else { c as i64 },
            k as i64,
            k as i64,
        ];
        let values = self.weights(dims.iter().product::<i64>() as usize);
        let w = self.name("w");
        if quantized {
            let codes: Vec<i8> = values.iter().map(|v| (v / 0.002).round() as i8).collect();
            let (q, s, z) = (format!("{w}_q"), format!("{w}_s"), format!("{w}_z"));
            self.initializers.push(tensor::from_i8(&q, &dims, &codes));
            self.initializers
                .push(tensor::from_f32(&s, &[c as i64], &vec![0.002; c]));
            self.initializers
                .push(tensor::from_i8(&z, &[c as i64], &vec![0; c]));
            let node = make_node(
                "DequantizeLinear",
                w.clone(),
                vec![q, s, z],
                vec![w.clone()],
                vec![attr::make_int("axis", 0)],
            );
            self.nodes.push(node);
        } else {
            self.initializers.push(tensor::from_f32(&w, &dims, &values));
        }
        let pad = (k / 2) as i64;
        let group = if depthwise { c as i64 } else { 1 };
        self.node(
            "Conv",
            vec![x, w],
            vec![
                attr::make_ints("pads", &[pad; 4]),
                attr::make_int("group", group),
            ],
        )
    }

    fn act(&mut self, x: String, op: &str) -> String {
        self.node(op, vec![x], vec![])
    }

    /// The model of the chain, input `x` and output `y` of shape `dims`, at opset 14 (and
    /// the `com.microsoft` domain of `MatMulNBits`), its MatMuls rewritten into the chain's
    /// [`MatMulForm`]; `path` names the build in errors.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when a rewrite refuses the chain (a bug).
    fn model(mut self, last: String, dims: &[i64], path: &Path) -> Result<Vec<u8>> {
        self.nodes.push(make_node(
            "Identity",
            "y".into(),
            vec![last],
            vec!["y".into()],
            vec![],
        ));
        let mut graph = GraphProto {
            name: Some("kernel_bench".into()),
            node: self.nodes,
            input: vec![tensor_info("x", DataType::Float, Some(dims))],
            output: vec![tensor_info("y", DataType::Float, Some(dims))],
            initializer: self.initializers,
            ..Default::default()
        };
        if self.matmul_form != MatMulForm::Fp32 {
            let chain_error =
                |reason: crate::error::Unsupported| crate::error::unsupported(path, reason);
            let types = crate::types::infer_elem_types(&graph);
            let plan = dynamic::plan(&graph, &types, &Default::default(), None);
            let rewritten = match self.matmul_form {
                MatMulForm::Int4 => {
                    int4::rewrite(&mut graph, &plan, INT4_BLOCK, false, &Default::default())
                        .map(|_| ())
                }
                _ => dynamic::rewrite(&mut graph, &plan, false, &Default::default()).map(|_| ()),
            };
            rewritten.map_err(|e| chain_error(e.into()))?;
            crate::graph::sort_topologically(&mut graph).map_err(|e| chain_error(e.into()))?;
        }
        let model = ModelProto {
            ir_version: Some(8),
            opset_import: vec![
                OperatorSetIdProto {
                    domain: None,
                    version: Some(14),
                },
                OperatorSetIdProto {
                    domain: Some(int4::DOMAIN.into()),
                    version: Some(1),
                },
            ],
            graph: Some(graph),
            ..Default::default()
        };
        Ok(model.encode_to_vec())
    }
}

/// Runs chains for one build (`path` names it in errors).
struct Bench<'a> {
    path: &'a Path,
    /// Intra-op threads of every session: one for a build's own costs (see the module
    /// documentation), the program's count for a device profile.
    threads: Option<usize>,
    effort: Effort,
}

impl Bench<'_> {
    /// One measurement of each cost, in the order of [`KernelCosts::NAMES`].
    fn costs(&self) -> Result<[f64; 7]> {
        let mut dense = Vec::new();
        for (c, hw, k) in [(64, 56, 1), (128, 28, 1), (32, 56, 3)] {
            let [f, q] = self.per_layer(
                &[1, c, hw, hw],
                [conv_layer(k, false, false), conv_layer(k, false, true)],
            )?;
            let macs = (c * c * hw * hw * k * k) as f64;
            dense.push((f / macs, q / macs));
        }
        let fp32_mac = mean(dense.iter().map(|&(f, _)| f));
        let int8_dense = mean(dense.iter().map(|&(f, q)| q / f));
        let (mut fp32_dw, mut int8_dw, mut conversion, mut layout) =
            (vec![], vec![], vec![], vec![]);
        for (c, hw) in [(64, 56), (128, 28), (256, 14)] {
            let [f, q] = self.per_layer(
                &[1, c, hw, hw],
                [conv_layer(3, true, false), conv_layer(3, true, true)],
            )?;
            let macs = (c * hw * hw * 9) as f64;
            fp32_dw.push(f / macs / fp32_mac);
            int8_dw.push(q / macs / fp32_mac);
            let [q_relu, q_hswish, f_relu, f_hswish] = self.per_layer(
                &[1, c, hw, hw],
                [
                    island_layer(Island::Relu, true),
                    island_layer(Island::HardSwish, true),
                    island_layer(Island::Relu, false),
                    island_layer(Island::HardSwish, false),
                ],
            )?;
            let elements = (c * hw * hw) as f64;
            let hswish_own = f_hswish - f_relu;
            let one_conversion = (q_hswish - q_relu - hswish_own) / 2.0 / elements / fp32_mac;
            conversion.push(one_conversion);
            let [all, fp32_between] = self.per_layer(
                &[1, c, hw, hw],
                [
                    island_layer(Island::Depthwise { quantized: true }, true),
                    island_layer(Island::Depthwise { quantized: false }, true),
                ],
            )?;
            let island = (fp32_between - all) - (f - q);
            layout.push(island / 2.0 / elements / fp32_mac - one_conversion);
        }
        let conversion = mean(conversion);
        let (mut int8_dynamic, mut int4) = (vec![], vec![]);
        for d in [384, 768] {
            let [f, q, n] = self.per_layer(
                &[MATMUL_ROWS, d],
                [
                    matmul_layer(MatMulForm::Fp32),
                    matmul_layer(MatMulForm::Dynamic),
                    matmul_layer(MatMulForm::Int4),
                ],
            )?;
            // As `quantize::dynamic` prices the input's quantization: two passes over each
            // row and the scaling of each output.
            let quantizing = conversion * fp32_mac * (MATMUL_ROWS * 3 * d) as f64;
            int8_dynamic.push((q - quantizing) / f);
            int4.push(n / f);
        }
        Ok([
            int8_dense,
            mean(fp32_dw),
            mean(int8_dw),
            conversion,
            mean(layout),
            mean(int8_dynamic),
            mean(int4),
        ])
    }

    /// Nanoseconds per layer of each of `layers` on an input of shape `dims` (`[1, c, h,
    /// w]` or `[rows, c]`): the [`LONG`]-layer chain's median time minus the one-layer
    /// chain's, over `LONG - 1`; all `2·N` chains interleaved.
    fn per_layer<const N: usize>(&self, dims: &[usize], layers: [Layer; N]) -> Result<[f64; N]> {
        let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let models = [1, LONG]
            .iter()
            .flat_map(|&n| {
                let shape = &shape;
                layers.iter().map(move |layer| {
                    let mut chain = Chain::new(dims[1]);
                    let mut x = "x".to_owned();
                    for _ in 0..n {
                        x = layer(&mut chain, x);
                    }
                    chain.model(x, shape, self.path)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let times = self.medians(models, dims)?;
        Ok(std::array::from_fn(|i| {
            (times[N + i] - times[i]) / (LONG - 1) as f64
        }))
    }

    /// Median nanoseconds per run of each model, interleaved round by round.
    fn medians(&self, models: Vec<Vec<u8>>, dims: &[usize]) -> Result<Vec<f64>> {
        let mut sessions = (models.into_iter())
            .map(|m| match self.threads {
                Some(1) => session(self.path, m, GraphOptimizationLevel::Level3, 1),
                threads => session_threads(self.path, m, GraphOptimizationLevel::Level3, threads),
            })
            .collect::<Result<Vec<_>>>()?;
        let x = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(dims), |i| {
            let at: usize = (0..dims.len()).map(|k| i[k] * [1, 31, 7, 1][k]).sum();
            (at % 17) as f32 / 8.0 - 1.0
        });
        let inputs = sample_inputs(&["x".to_owned()], &[SampleValue::F32(x)], self.path)?;
        let Effort { rounds, warmup, .. } = self.effort;
        let mut times = vec![Vec::with_capacity(rounds); sessions.len()];
        for round in 0..warmup + rounds.max(1) {
            for (s, t) in sessions.iter_mut().zip(&mut times) {
                let started = Instant::now();
                s.run(borrowed(&inputs))
                    .map_err(|e| crate::error::runtime(self.path, e))?;
                if round >= warmup {
                    t.push(started.elapsed().as_secs_f64() * 1e9);
                }
            }
        }
        Ok(times
            .into_iter()
            .map(|mut t| {
                t.sort_by(f64::total_cmp);
                t[t.len() / 2]
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::TargetCpu;

    /// The micro-benchmarks run in ONNX Runtime, the MatMuls as a build rewrites them, and
    /// price every cost positive; on an unloaded machine, INT8 dense Convs and dynamic
    /// MatMuls are cheaper than FP32 ones on every CPU class ONNX Runtime has integer
    /// kernels for.
    #[test]
    fn measures_plausible_costs_on_this_machine() {
        let table = KernelCosts::of(TargetCpu::of_target("", ""));
        let m = measure(&table, Path::new("kernel_bench")).unwrap();
        eprintln!("{m:?}");
        assert!(m.costs.all_positive(), "{m:?}");
        assert!(m.costs.int8_dense < 1.0, "{m:?}");
        assert!(m.costs.int8_dynamic_dense < 1.0, "{m:?}");
    }

    /// The second build on a machine reads the first one's costs; a damaged file is
    /// measured again and replaced.
    #[test]
    fn costs_are_kept_per_machine_and_a_damaged_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let table = KernelCosts::of(TargetCpu::of_target("", ""));
        let path = Path::new("kernel_bench");
        let first = cached(dir.path(), &table, path).unwrap();
        let files: Vec<_> = std::fs::read_dir(dir.path().join(CACHE_SUBDIR))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        // A costs file written by hand is what a later build uses.
        let planted = Measured {
            costs: KernelCosts {
                int8_dense: table.int8_dense * 1.5,
                ..first.costs
            },
            kept_from_table: vec![],
        };
        std::fs::write(&files[0], serde_json::to_vec(&planted).unwrap()).unwrap();
        assert_eq!(cached(dir.path(), &table, path).unwrap(), planted);
        // Another target class's table is another key.
        let other = KernelCosts {
            layout: table.layout * 2.0,
            ..table
        };
        cached(dir.path(), &other, path).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path().join(CACHE_SUBDIR))
                .unwrap()
                .count(),
            2
        );
        // A cost no measurement would keep is measured again.
        let absurd = Measured {
            costs: KernelCosts {
                conversion: -1.0,
                ..first.costs
            },
            kept_from_table: vec![],
        };
        std::fs::write(&files[0], serde_json::to_vec(&absurd).unwrap()).unwrap();
        assert!(cached(dir.path(), &table, path).unwrap().costs.conversion > 0.0);
        std::fs::write(&files[0], b"{ not json").unwrap();
        let again = cached(dir.path(), &table, path).unwrap();
        assert_ne!(again, planted);
        let reread: Measured = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
        assert_eq!(reread, again);
    }
}
