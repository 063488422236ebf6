//! Bias correction (Nagel et al. 2019, "Data-Free Quantization Through Weight Equalization
//! and Bias Correction", §4.2): weight quantization shifts each output channel's expected
//! value by `E[(W_q − W)·x] = (W_q − W)·E[x]`; subtracting that shift from the bias removes
//! the systematic part of the error. `E[x]` is the per-channel mean of the op's input
//! measured during calibration (the paper's empirical variant), instead of the
//! BatchNorm-derived estimate the data-free variant uses.

use crate::onnx::{attr, NodeProto};

/// The expected output shift per output channel caused by replacing `weight` with
/// `dequantized` (same row-major layout, dims `dims`), given the input's per-channel means.
/// `None` when the op or layout is not covered (then no correction is applied).
pub fn output_shift(
    node: &NodeProto,
    dims: &[i64],
    weight: &[f32],
    dequantized: &[f32],
    means: &[f64],
) -> Option<Vec<f64>> {
    let d: Vec<usize> = dims.iter().map(|&x| x as usize).collect();
    let delta = |k: usize| f64::from(dequantized[k]) - f64::from(weight[k]);
    match node.op_type() {
        "Conv" if d.len() >= 3 => {
            let (out_c, in_per_group) = (d[0], d[1]);
            let group = attr::int(node, "group", 1) as usize;
            let kernel: usize = d[2..].iter().product();
            if group == 0 || out_c % group != 0 || means.len() != in_per_group * group {
                return None;
            }
            let out_per_group = out_c / group;
            Some(
                (0..out_c)
                    .map(|o| {
                        let first_in = (o / out_per_group) * in_per_group;
                        (0..in_per_group)
                            .map(|i| {
                                let base = (o * in_per_group + i) * kernel;
                                (0..kernel).map(|k| delta(base + k)).sum::<f64>()
                                    * means[first_in + i]
                            })
                            .sum()
                    })
                    .collect(),
            )
        }
        "Gemm" | "MatMul" if d.len() == 2 => {
            let trans_b = node.op_type() == "Gemm" && attr::int(node, "transB", 0) == 1;
            let (k_dim, n_dim) = if trans_b { (d[1], d[0]) } else { (d[0], d[1]) };
            if means.len() != k_dim {
                return None;
            }
            let index = |k: usize, n: usize| {
                if trans_b {
                    n * k_dim + k
                } else {
                    k * n_dim + n
                }
            };
            Some(
                (0..n_dim)
                    .map(|n| (0..k_dim).map(|k| delta(index(k, n)) * means[k]).sum())
                    .collect(),
            )
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::make_node;

    #[test]
    fn conv_shift_is_weight_error_times_input_mean() {
        // Conv 2 in → 1 out, 1x1 kernel: shift = Δw0·m0 + Δw1·m1.
        let node = make_node("Conv", "c".into(), vec![], vec![], vec![]);
        let shift =
            output_shift(&node, &[1, 2, 1, 1], &[1.0, 2.0], &[1.5, 1.0], &[2.0, 3.0]).unwrap();
        assert_eq!(shift, vec![0.5 * 2.0 - 1.0 * 3.0]);
    }

    #[test]
    fn depthwise_conv_uses_its_own_channel() {
        let node = make_node(
            "Conv",
            "dw".into(),
            vec![],
            vec![],
            vec![attr::make_int("group", 2)],
        );
        // Weight [2, 1, 1, 1]: each output channel reads only its input channel.
        let shift = output_shift(
            &node,
            &[2, 1, 1, 1],
            &[1.0, 1.0],
            &[1.25, 0.5],
            &[4.0, 10.0],
        )
        .unwrap();
        assert_eq!(shift, vec![1.0, -5.0]);
    }

    #[test]
    fn gemm_trans_b_layout() {
        let node = make_node(
            "Gemm",
            "g".into(),
            vec![],
            vec![],
            vec![attr::make_int("transB", 1)],
        );
        // B [N=2, K=2]
        let shift = output_shift(
            &node,
            &[2, 2],
            &[0.0; 4],
            &[1.0, 0.0, 0.0, 2.0],
            &[3.0, 5.0],
        )
        .unwrap();
        assert_eq!(shift, vec![3.0, 10.0]);
    }
}
