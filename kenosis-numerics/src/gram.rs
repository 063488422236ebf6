//! Second moments of a Conv's input patches, `H = Σ x·xᵀ` over im2col columns `x`, streamed
//! during calibration for error-compensating weight rounding ([`crate::gptq`]).
//!
//! Memory is `K²` f64 per Conv (`K` = input channels × kernel area, capped at
//! [`MAX_PATCH_LEN`]), whatever the number of samples; each sample contributes a fixed number
//! of evenly spaced output positions. One column in sixteen is also kept as is (at most
//! [`KEPT_PATCHES`]), for simulating the integer kernel on real patches
//! (`kenosis-build`'s `quantize::saturation`). When only those are needed (GPTQ rounding off), the
//! sums are skipped and only the kept columns are gathered.

use ndarray::Array2;

/// Largest patch length `K` accumulated: `K²` f64 is 8 MiB there, and the rounding's
/// Cholesky factorizations grow as `K³`.
pub const MAX_PATCH_LEN: usize = 1024;

/// Patch columns gathered per Conv over the whole calibration set (spread evenly over the
/// samples): enough for a well-conditioned `H` at the patch lengths seen in CNNs.
pub const COLUMNS_PER_CONV: usize = 8192;

/// Patch columns kept verbatim per Conv: `K` f32 each, 2 MiB at [`MAX_PATCH_LEN`].
pub const KEPT_PATCHES: usize = 512;

/// One column in this many is kept verbatim, so that [`KEPT_PATCHES`] spread over the
/// whole calibration set.
const KEPT_PATCH_STRIDE: usize = COLUMNS_PER_CONV / KEPT_PATCHES;

/// The sliding-window geometry of a 2-D Conv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Strides along height and width.
    pub strides: [usize; 2],
    /// Padding `[top, left, bottom, right]` (ONNX `pads` order).
    pub pads: [usize; 4],
    /// Dilations along height and width.
    pub dilations: [usize; 2],
}

impl ConvGeometry {
    /// Output height and width for an input of `h × w`, `None` when the window does not fit.
    fn output_size(&self, h: usize, w: usize) -> Option<[usize; 2]> {
        let out = |len: usize, pad: usize, k: usize, d: usize, s: usize| {
            let span = d * (k - 1) + 1;
            (len + pad >= span).then(|| (len + pad - span) / s + 1)
        };
        Some([
            out(
                h,
                self.pads[0] + self.pads[2],
                self.kernel[0],
                self.dilations[0],
                self.strides[0],
            )?,
            out(
                w,
                self.pads[1] + self.pads[3],
                self.kernel[1],
                self.dilations[1],
                self.strides[1],
            )?,
        ])
    }
}

/// Streaming `Σ x·xᵀ` over a Conv's input patches (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct PatchGram {
    geometry: ConvGeometry,
    columns_per_sample: usize,
    /// Patch length `K` (0 before the first update).
    len: usize,
    /// Whether `sum` is accumulated (else only `kept` is gathered).
    second_moments: bool,
    /// Row-major `K × K` sums.
    sum: Vec<f64>,
    /// Number of columns folded in.
    pub columns: u64,
    /// Row-major `kept × K` patches, kept verbatim (see [`KEPT_PATCHES`]).
    kept: Vec<f32>,
}

impl PatchGram {
    /// An empty accumulator taking `columns_per_sample` patches from each sample;
    /// `second_moments: false` keeps only the verbatim patches (no `K × K` sums).
    pub fn new(geometry: ConvGeometry, columns_per_sample: usize, second_moments: bool) -> Self {
        Self {
            geometry,
            columns_per_sample: columns_per_sample.max(1),
            len: 0,
            second_moments,
            sum: Vec::new(),
            columns: 0,
            kept: Vec::new(),
        }
    }

    /// Folds in one input tensor `[N, C, H, W]` (row-major). Other ranks, a channel count
    /// that differs from earlier updates, or `K` above [`MAX_PATCH_LEN`] are ignored.
    pub fn update(&mut self, shape: &[i64], values: &[f32]) {
        let &[n, c, h, w] = shape else { return };
        let (n, c, h, w) = (n as usize, c as usize, h as usize, w as usize);
        let g = self.geometry;
        let len = c * g.kernel[0] * g.kernel[1];
        if len == 0 || len > MAX_PATCH_LEN || (self.len != 0 && self.len != len) {
            return;
        }
        let Some([oh, ow]) = g.output_size(h, w) else {
            return;
        };
        let positions = n * oh * ow;
        let take = self.columns_per_sample.min(positions);
        if take == 0 || values.len() != n * c * h * w {
            return;
        }
        // Without sums only the columns that may be kept are gathered.
        let rows: Vec<usize> = if self.second_moments {
            (0..take).collect()
        } else if self.kept.len() < KEPT_PATCHES * len {
            (0..take).step_by(KEPT_PATCH_STRIDE).collect()
        } else {
            Vec::new()
        };
        let mut patches = Array2::<f32>::zeros((rows.len(), len));
        for (&row, mut patch) in rows.iter().zip(patches.rows_mut()) {
            let p = row * positions / take;
            let (b, y0, x0) = (p / (oh * ow), (p / ow) % oh, p % ow);
            for ci in 0..c {
                for dy in 0..g.kernel[0] {
                    for dx in 0..g.kernel[1] {
                        let y = (y0 * g.strides[0] + dy * g.dilations[0]).checked_sub(g.pads[0]);
                        let x = (x0 * g.strides[1] + dx * g.dilations[1]).checked_sub(g.pads[1]);
                        let v = match (y, x) {
                            (Some(y), Some(x)) if y < h && x < w => {
                                values[((b * c + ci) * h + y) * w + x]
                            }
                            _ => 0.0,
                        };
                        patch[(ci * g.kernel[0] + dy) * g.kernel[1] + dx] =
                            if v.is_finite() { v } else { 0.0 };
                    }
                }
            }
        }
        self.len = len;
        let kept = rows.iter().zip(patches.rows());
        for (_, patch) in kept.filter(|&(&row, _)| row % KEPT_PATCH_STRIDE == 0) {
            if self.kept.len() >= KEPT_PATCHES * len {
                break;
            }
            self.kept.extend(patch.iter());
        }
        if self.second_moments {
            let gram = patches.t().dot(&patches);
            self.sum.resize(len * len, 0.0);
            for (s, &v) in self.sum.iter_mut().zip(gram.iter()) {
                *s += f64::from(v);
            }
        }
        self.columns += take as u64;
    }

    /// `(K, row-major K × K sums)`, or `None` before any update or without second moments.
    pub fn matrix(&self) -> Option<(usize, &[f64])> {
        (self.len > 0 && self.second_moments).then_some((self.len, self.sum.as_slice()))
    }

    /// `(K, row-major patches × K)`: the patches kept verbatim, each in the `H` order
    /// (input channel, kernel row, kernel column); `None` before any update.
    pub fn kept_patches(&self) -> Option<(usize, &[f32])> {
        (self.len > 0).then_some((self.len, self.kept.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_3x3_patches_match_a_direct_sum() {
        // One 1x2x3x3 input, 3x3 kernel, pad 1, stride 2: 2x2 output positions, K = 18.
        let g = ConvGeometry {
            kernel: [3, 3],
            strides: [2, 2],
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
        };
        let values: Vec<f32> = (0..18).map(|v| v as f32 - 4.0).collect();
        let mut gram = PatchGram::new(g, 100, true);
        gram.update(&[1, 2, 3, 3], &values);
        assert_eq!(gram.columns, 4);
        let (k, m) = gram.matrix().unwrap();
        assert_eq!(k, 18);
        // Direct: the patch at output (oy, ox) reads input (2·oy + dy − 1, 2·ox + dx − 1).
        let at = |c: usize, y: i64, x: i64| {
            if (0..3).contains(&y) && (0..3).contains(&x) {
                values[c * 9 + y as usize * 3 + x as usize] as f64
            } else {
                0.0
            }
        };
        let mut expected = vec![0.0; 18 * 18];
        for (oy, ox) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let patch: Vec<f64> = (0..18)
                .map(|k| {
                    at(
                        k / 9,
                        2 * oy + (k as i64 % 9) / 3 - 1,
                        2 * ox + k as i64 % 3 - 1,
                    )
                })
                .collect();
            for i in 0..18 {
                for j in 0..18 {
                    expected[i * 18 + j] += patch[i] * patch[j];
                }
            }
        }
        assert_eq!(m, expected.as_slice());
    }

    #[test]
    fn without_second_moments_the_same_patches_are_kept_and_no_sums() {
        // 1x1 Conv over 3 channels; 40 samples of 1x3x32x32, 200 columns each, so the kept
        // patches (one column in 16, 13 per sample) fill up before the last sample.
        let g = ConvGeometry {
            kernel: [1, 1],
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
        };
        let (mut full, mut kept_only) =
            (PatchGram::new(g, 200, true), PatchGram::new(g, 200, false));
        for sample in 0..40 {
            let values: Vec<f32> = (0..3072)
                .map(|v| (v * 7 + sample * 13) as f32 % 11.0)
                .collect();
            full.update(&[1, 3, 32, 32], &values);
            kept_only.update(&[1, 3, 32, 32], &values);
        }
        assert_eq!(full.kept_patches(), kept_only.kept_patches());
        assert_eq!(full.kept_patches().unwrap().1.len(), KEPT_PATCHES * 3);
        assert_eq!(full.columns, kept_only.columns);
        assert!(full.matrix().is_some());
        assert_eq!(kept_only.matrix(), None);
    }
}
