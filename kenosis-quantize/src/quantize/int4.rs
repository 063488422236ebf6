//! Block-wise 4-bit weights for MatMul (`weights = "int4"`), run by ONNX Runtime's
//! `com.microsoft.MatMulNBits` contrib op (`onnxruntime/core/graph/contrib_ops/
//! contrib_defs.cc`, the form `matmul_4bits_quantizer` writes).
//!
//! A weight `W [K, N]` is cut, column by column, into blocks of `block_size` consecutive rows
//! (the last block zero-padded). Each block gets one scale, `max |w| / 7`, and codes
//! `q = clamp(round(w / scale), -8, 7) + 8` in `[0, 15]`: symmetric round-to-nearest with
//! ORT's default zero point 8, so no zero-point input is written. `MatMulNBits` computes
//! `Y = A · dequantize(B)` with:
//! - `B`: uint8 `[N, K / block_size, block_size / 2]`, two codes per byte, the first of each
//!   pair in the low nibble;
//! - `scales`: float `[N · K / block_size]`, column-major over blocks;
//! - attributes `K`, `N`, `bits = 4` and `block_size`; `accuracy_level` is left at ORT's
//!   default 0 (`A` stays float and the weight is dequantized for the product): on x86 with
//!   VNNI, level 4 (`A` quantized to int8 per block at run time) was slower on a
//!   sentence encoder's 64-row inputs (`docs/benchmarks.md`).
//!
//! Activations stay float: this is weight-only quantization, for models whose size decides
//! whether they fit on the device. Embedding tables are int8 as in the dynamic form (see
//! [`super::dynamic`]).

use std::collections::{HashMap, HashSet};

use super::dynamic::{DynamicPlan, DynamicSummary};
use crate::error::BadTensor;
use crate::graph::{GraphIndex, NameGen};
use crate::onnx::{attr, make_node, tensor, GraphProto, NodeProto};

/// The ONNX Runtime contrib-op domain of `MatMulNBits`.
pub const DOMAIN: &str = "com.microsoft";

/// The 4-bit form of one `[K, N]` weight: packed codes and block scales, as `MatMulNBits`
/// reads them (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    /// uint8 `[N, blocks, block_size / 2]`.
    pub codes: Vec<u8>,
    /// `[N · blocks]`, block-major within each column.
    pub scales: Vec<f32>,
    /// Blocks per column: `ceil(K / block_size)`.
    pub blocks: usize,
}

/// Quantizes row-major `w [k, n]` to 4 bits in blocks of `block_size` rows (even).
pub fn pack(w: &[f32], k: usize, n: usize, block_size: usize) -> Packed {
    let blocks = k.div_ceil(block_size);
    let blob = block_size / 2;
    let mut codes = vec![0u8; n * blocks * blob];
    let mut scales = vec![0f32; n * blocks];
    for col in 0..n {
        for b in 0..blocks {
            let rows = b * block_size..((b + 1) * block_size).min(k);
            let max = rows
                .clone()
                .map(|r| w[r * n + col].abs())
                .fold(0f32, f32::max);
            let scale = if max > 0.0 { max / 7.0 } else { 1.0 };
            scales[col * blocks + b] = scale;
            let out = &mut codes[(col * blocks + b) * blob..][..blob];
            for i in 0..block_size {
                let r = b * block_size + i;
                let q = if r < k {
                    ((w[r * n + col] / scale).round().clamp(-8.0, 7.0) as i32 + 8) as u8
                } else {
                    8
                };
                out[i / 2] |= if i % 2 == 0 { q } else { q << 4 };
            }
        }
    }
    Packed {
        codes,
        scales,
        blocks,
    }
}

/// The weight `packed` stands for, row-major `[k, n]` (the reference arithmetic of
/// `MatMulNBits`' dequantization).
pub fn unpack(packed: &Packed, k: usize, n: usize, block_size: usize) -> Vec<f32> {
    let blob = block_size / 2;
    let mut w = vec![0f32; k * n];
    for col in 0..n {
        for r in 0..k {
            let (b, i) = (r / block_size, r % block_size);
            let byte = packed.codes[(col * packed.blocks + b) * blob + i / 2];
            let q = if i % 2 == 0 { byte & 0xF } else { byte >> 4 };
            w[r * n + col] = (f32::from(q) - 8.0) * packed.scales[col * packed.blocks + b];
        }
    }
    w
}

/// Rewrites the MatMuls `plan.matmuls` names (computed on this `graph`) into `MatMulNBits`
/// with block size `block_size`, and stores `plan.tables` as int8 (see
/// [`super::dynamic::rewrite`]); returns the number of `MatMulNBits` written and what the
/// dynamic rewrite did. Gemm nodes of the plan, and MatMuls named in `int8` (the per-layer
/// fallback a fidelity target asks for), take the dynamic int8 form instead. The caller
/// imports the [`DOMAIN`] opset. A weight several MatMuls read (an ALBERT-style model's
/// layers) is packed once, into one codes and one scales initializer.
///
/// # Errors
/// [`BadTensor`] when a weight or table payload cannot be read.
pub fn rewrite(
    graph: &mut GraphProto,
    plan: &DynamicPlan,
    block_size: usize,
    reduce_range: bool,
    int8: &HashSet<String>,
) -> Result<(usize, DynamicSummary), BadTensor> {
    let index = GraphIndex::new(graph);
    let mut names = NameGen::new(graph);
    let (matmuls, int8_ops): (Vec<_>, Vec<_>) = (plan.matmuls.iter().cloned()).partition(|m| {
        let node = &graph.node[m.node];
        node.op_type() == "MatMul" && !int8.contains(node.name())
    });
    let mut nodes: Vec<NodeProto> = Vec::new();
    let mut removed: HashSet<usize> = HashSet::new();
    // One packed copy per weight, shared by the MatMuls reading it: (codes, scales).
    let mut packed_weights: HashMap<String, (String, String)> = HashMap::new();
    for m in &matmuls {
        let node = &graph.node[m.node];
        let w_name = &node.input[1];
        let (codes, scales) = match packed_weights.get(w_name) {
            Some(done) => done.clone(),
            None => {
                let w = tensor::to_f32(&graph.initializer[index.initializer[w_name]])?;
                let packed = pack(&w, m.k, m.n, block_size);
                let made = (
                    names.fresh(&format!("{w_name}_int4")),
                    names.fresh(&format!("{w_name}_int4_scales")),
                );
                let dims = [m.n as i64, packed.blocks as i64, (block_size / 2) as i64];
                graph
                    .initializer
                    .push(tensor::from_u8(&made.0, &dims, &packed.codes));
                graph.initializer.push(tensor::from_f32(
                    &made.1,
                    &[packed.scales.len() as i64],
                    &packed.scales,
                ));
                packed_weights.insert(w_name.clone(), made.clone());
                made
            }
        };
        let mut nbits = make_node(
            "MatMulNBits",
            names.fresh(&format!("{}_MatMulNBits", node.name())),
            vec![node.input[0].clone(), codes, scales],
            node.output.clone(),
            vec![
                attr::make_int("K", m.k as i64),
                attr::make_int("N", m.n as i64),
                attr::make_int("bits", 4),
                attr::make_int("block_size", block_size as i64),
            ],
        );
        nbits.domain = Some(DOMAIN.into());
        nodes.push(nbits);
        removed.insert(m.node);
    }
    // The remaining plan (Gemms, tables) on the graph without the replaced MatMuls: node
    // indices shift, so it is re-addressed by name.
    let names_of = |list: &mut dyn Iterator<Item = usize>| -> Vec<String> {
        list.map(|i| graph.node[i].name().to_owned()).collect()
    };
    let int8_names = names_of(&mut int8_ops.iter().map(|m| m.node));
    let table_names = names_of(&mut plan.tables.iter().copied());
    crate::graph::replace_nodes(graph, &removed, nodes);
    let position = |name: &String| graph.node.iter().position(|n| n.name() == name);
    let rest = DynamicPlan {
        matmuls: (int8_ops.iter().zip(&int8_names))
            .filter_map(|(m, name)| {
                Some(super::dynamic::DynamicMatMul {
                    node: position(name)?,
                    ..m.clone()
                })
            })
            .collect(),
        tables: table_names.iter().filter_map(position).collect(),
        ..DynamicPlan::default()
    };
    let summary = super::dynamic::rewrite(graph, &rest, reduce_range, &Default::default())?;
    Ok((matmuls.len(), summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_within_half_a_block_step() {
        let (k, n, block) = (70usize, 3usize, 32usize);
        let w: Vec<f32> = (0..k * n)
            .map(|e| ((e * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let packed = pack(&w, k, n, block);
        assert_eq!(
            packed.blocks, 3,
            "70 rows: two full blocks and a padded one"
        );
        assert_eq!(packed.codes.len(), n * 3 * 16);
        let back = unpack(&packed, k, n, block);
        for col in 0..n {
            for r in 0..k {
                let scale = packed.scales[col * 3 + r / block];
                let err = (back[r * n + col] - w[r * n + col]).abs();
                assert!(
                    err <= scale / 2.0 + 1e-6,
                    "row {r} col {col}: {err} > {scale}/2"
                );
            }
        }
        // Each block's largest magnitude is code ±7 exactly.
        let block0: Vec<f32> = (0..block).map(|r| w[r * n]).collect();
        let max = block0.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!((packed.scales[0] - max / 7.0).abs() < 1e-7);
    }

    #[test]
    fn the_first_of_two_codes_is_the_low_nibble() {
        // Column of 32 rows: row 0 is -7 steps, row 1 is +7 steps.
        let mut w = vec![0.0f32; 32];
        w[0] = -0.7;
        w[1] = 0.7;
        let packed = pack(&w, 32, 1, 32);
        assert_eq!(packed.codes[0], (8 - 7) | ((8 + 7) << 4));
        assert_eq!(packed.codes[1], 8 | (8 << 4), "zeros are code 8");
    }
}
