//! Error-compensating weight rounding (GPTQ: Frantar et al. 2022, "GPTQ: Accurate
//! Post-Training Quantization for Generative Pre-trained Transformers", Algorithm 1, built on
//! Optimal Brain Quantization).
//!
//! Rounding each weight to its nearest grid point ignores that the layer's inputs are
//! correlated. GPTQ rounds one input column at a time and moves the rounding error onto the
//! columns not yet rounded, weighted by the inverse of the input second-moment matrix
//! `H = Σ x·xᵀ`, so that the layer's *output* error `‖(W − Ŵ)·x‖²` shrinks rather than the
//! weight error. The scales stay those of nearest rounding (per channel or per tensor);
//! only the codes change.

use crate::params;

/// Dampening added to `H`'s diagonal, as a fraction of its mean (GPTQ's `percdamp`): keeps
/// the factorization stable when some inputs are (nearly) collinear.
const DAMPENING: f64 = 0.01;

/// What GPTQ's column loop reads from one input second-moment matrix `H`: the upper
/// Cholesky factor of the dampened `H⁻¹`. One factor serves every rounding of weights that
/// read the same inputs (e.g. 7-bit and 8-bit candidates of one Conv).
#[derive(Debug, Clone)]
pub struct Factor {
    len: usize,
    /// Row-major `len × len` upper factor `U`, `H⁻¹ = Uᵀ·U`.
    u: Vec<f64>,
}

/// The [`Factor`] of the row-major `len × len` input second-moment matrix `h`.
///
/// Returns `None` when `h` has the wrong size or is not positive definite after dampening
/// (the caller then keeps nearest rounding).
pub fn factor(h: &[f64], len: usize) -> Option<Factor> {
    if h.len() != len * len {
        return None;
    }
    let mut h = h.to_vec();
    let mean_diag = (0..len).map(|i| h[i * len + i]).sum::<f64>() / len as f64;
    if !(mean_diag > 0.0 && mean_diag.is_finite()) {
        return None;
    }
    for i in 0..len {
        // An input that was always 0 carries no error information: nearest rounding.
        if h[i * len + i] == 0.0 {
            h[i * len + i] = mean_diag;
        }
        h[i * len + i] += DAMPENING * mean_diag;
    }
    let u = upper_cholesky_of_inverse(&h, len)?;
    Some(Factor { len, u })
}

/// GPTQ codes for a weight of `rows` output channels × `factor`'s `len` inputs (row-major,
/// each row one output channel's inputs in the order of the `H` behind `factor`), with
/// per-row `scales` (or a single scale).
///
/// Returns `None` when the sizes disagree.
pub fn round(
    weight: &[f32],
    rows: usize,
    factor: &Factor,
    scales: &[f32],
    reduce_range: bool,
) -> Option<Vec<i8>> {
    let Factor { len, ref u } = *factor;
    if weight.len() != rows * len || !(scales.len() == rows || scales.len() == 1) {
        return None;
    }
    let mut w: Vec<f64> = weight.iter().map(|&v| f64::from(v)).collect();
    let mut codes = vec![0i8; rows * len];
    for r in 0..rows {
        let scale = scales[if scales.len() == 1 { 0 } else { r }];
        let row = &mut w[r * len..(r + 1) * len];
        for j in 0..len {
            let q = params::quantize_weight(row[j] as f32, scale, reduce_range);
            codes[r * len + j] = q;
            let err = (row[j] - f64::from(q) * f64::from(scale)) / u[j * len + j];
            for t in j + 1..len {
                row[t] -= err * u[j * len + t];
            }
        }
    }
    Some(codes)
}

/// Lower Cholesky factor `L` (`a = L·Lᵀ`) of a row-major symmetric `n × n` matrix.
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let dot: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
            let v = a[i * n + j] - dot;
            if i == j {
                if v.is_nan() || v <= 0.0 {
                    return None;
                }
                l[i * n + i] = v.sqrt();
            } else {
                l[i * n + j] = v / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// The upper factor `U` with `H⁻¹ = Uᵀ·U` (what GPTQ's column loop reads), via
/// `H = L·Lᵀ`, `H⁻¹ = L⁻ᵀ·L⁻¹`, and a second Cholesky of `H⁻¹`.
fn upper_cholesky_of_inverse(h: &[f64], n: usize) -> Option<Vec<f64>> {
    let l = cholesky(h, n)?;
    // L⁻¹ by forward substitution, column by column (lower triangular).
    let mut inv_l = vec![0.0; n * n];
    for c in 0..n {
        inv_l[c * n + c] = 1.0 / l[c * n + c];
        for i in c + 1..n {
            let s: f64 = (c..i).map(|k| l[i * n + k] * inv_l[k * n + c]).sum();
            inv_l[i * n + c] = -s / l[i * n + i];
        }
    }
    // H⁻¹ = L⁻ᵀ·L⁻¹: entry (i, j) = Σ_{k ≥ max(i, j)} L⁻¹[k, i] · L⁻¹[k, j].
    let mut inv = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let v: f64 = (i..n).map(|k| inv_l[k * n + i] * inv_l[k * n + j]).sum();
            inv[i * n + j] = v;
            inv[j * n + i] = v;
        }
    }
    let lower = cholesky(&inv, n)?;
    let mut u = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            u[j * n + i] = lower[i * n + j];
        }
    }
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    /// `Σ_x ‖(W − Ŵ)·x‖²` for row-major `rows × len` matrices over the columns of `xs`.
    fn output_error(w: &[f32], codes: &[i8], scale: f32, xs: &[Vec<f64>], len: usize) -> f64 {
        let rows = w.len() / len;
        xs.iter()
            .map(|x| {
                (0..rows)
                    .map(|r| {
                        let e: f64 = (0..len)
                            .map(|j| {
                                let k = r * len + j;
                                (f64::from(w[k]) - f64::from(codes[k]) * f64::from(scale)) * x[j]
                            })
                            .sum();
                        e * e
                    })
                    .sum::<f64>()
            })
            .sum()
    }

    #[test]
    fn correlated_inputs_get_a_smaller_output_error_than_nearest_rounding() {
        // Inputs share a common factor (as neighbouring pixels of a patch do).
        let (rows, len) = (8, 24);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let xs: Vec<Vec<f64>> = (0..2000)
            .map(|_| {
                let common: f64 = rng.sample(StandardNormal);
                (0..len)
                    .map(|_| common + 0.3 * rng.sample::<f64, _>(StandardNormal))
                    .collect()
            })
            .collect();
        let mut h = vec![0.0; len * len];
        for x in &xs {
            for i in 0..len {
                for j in 0..len {
                    h[i * len + j] += x[i] * x[j];
                }
            }
        }
        let w: Vec<f32> = (0..rows * len).map(|_| rng.random::<f32>() - 0.5).collect();
        let scale = 0.5 / 64.0;
        let nearest: Vec<i8> = w
            .iter()
            .map(|&v| params::quantize_weight(v, scale, true))
            .collect();
        let gptq = round(&w, rows, &factor(&h, len).unwrap(), &[scale], true).unwrap();
        let (e_nearest, e_gptq) = (
            output_error(&w, &nearest, scale, &xs, len),
            output_error(&w, &gptq, scale, &xs, len),
        );
        assert!(
            e_gptq < 0.5 * e_nearest,
            "GPTQ {e_gptq:.4} vs nearest {e_nearest:.4}"
        );
        // Codes stay on the reduce-range grid.
        assert!(gptq.iter().all(|&c| (-64..=64).contains(&c)));
    }

    #[test]
    fn inverse_factor_reproduces_the_inverse() {
        let h = [4.0, 2.0, 0.6, 2.0, 5.0, 1.0, 0.6, 1.0, 3.0];
        let u = upper_cholesky_of_inverse(&h, 3).unwrap();
        // (Uᵀ·U)·H = I
        for i in 0..3 {
            for j in 0..3 {
                let v: f64 = (0..3)
                    .map(|k| {
                        (0..3).map(|m| u[m * 3 + i] * u[m * 3 + k]).sum::<f64>() * h[k * 3 + j]
                    })
                    .sum();
                assert!(
                    (v - f64::from(u8::from(i == j))).abs() < 1e-9,
                    "({i},{j}) = {v}"
                );
            }
        }
    }

    #[test]
    fn wrong_sizes_and_indefinite_matrices_fall_back() {
        assert!(factor(&[1.0; 3], 2).is_none());
        assert!(factor(&[-1.0, 0.0, 0.0, -1.0], 2).is_none());
        let f = factor(&[2.0, 0.5, 0.5, 1.0], 2).unwrap();
        assert!(round(&[0.1; 4], 2, &f, &[0.01], true).is_some());
        assert_eq!(round(&[0.1; 6], 2, &f, &[0.01], true), None);
        assert_eq!(round(&[0.1; 4], 2, &f, &[0.01; 3], true), None);
    }
}
