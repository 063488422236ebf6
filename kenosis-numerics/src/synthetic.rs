//! Synthetic calibration images, for models given no calibration data.
//!
//! Non-generic over the random number generator (a generic function would be compiled in
//! the calling crate; see the crate docs).

use ndarray::Array4;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

/// A batch of image-like samples of `dims` `[N, C, H, W]` in `[low, high]`: a sum of
/// bilinearly upsampled Gaussian noise fields over octaves (1/32 of the size down to single
/// pixels), amplitude growing with the octave's size, mostly shared across channels
/// (luminance), scaled to standard deviation 0.5 in `[-1, 1]` and mapped linearly onto
/// `[low, high]`. Each channel adds its own noise to the shared field; everything is drawn
/// from `rng` in a fixed order, so a seed gives the same samples.
///
/// Natural images have a roughly 1/f amplitude spectrum (Field 1987, "Relations between the
/// statistics of natural images..."), so a network's activations on such fields are much
/// closer to those on photographs than on white noise.
pub fn image_like(dims: [usize; 4], (low, high): (f32, f32), rng: &mut ChaCha8Rng) -> Array4<f32> {
    let (middle, half_width) = ((low + high) * 0.5, (high - low) * 0.5);
    let [n, c, h, w] = dims;
    // The channels share the luminance field.
    let mut out = Array4::<f32>::zeros((n, c, h, w));
    for mut image in out.outer_iter_mut() {
        for octave in [32usize, 16, 8, 4, 2, 1] {
            let (gh, gw) = (h / octave + 2, w / octave + 2);
            let amplitude = (octave as f32).powf(0.8);
            let luminance: Vec<f32> = (0..gh * gw).map(|_| rng.sample(StandardNormal)).collect();
            for mut channel in image.outer_iter_mut() {
                let grid: Vec<f32> = luminance
                    .iter()
                    .map(|l| amplitude * (l + 0.5 * rng.sample::<f32, _>(StandardNormal)))
                    .collect();
                for ((y, x), v) in channel.indexed_iter_mut() {
                    let (fy, fx) = (y as f32 / octave as f32, x as f32 / octave as f32);
                    let (y0, x0) = (fy as usize, fx as usize);
                    let (dy, dx) = (fy - y0 as f32, fx - x0 as f32);
                    let at = |yy: usize, xx: usize| grid[yy * gw + xx];
                    *v += (1.0 - dy) * ((1.0 - dx) * at(y0, x0) + dx * at(y0, x0 + 1))
                        + dy * ((1.0 - dx) * at(y0 + 1, x0) + dx * at(y0 + 1, x0 + 1));
                }
            }
        }
        let len = image.len() as f32;
        let mean = image.sum() / len;
        let std = (image.mapv(|v| (v - mean) * (v - mean)).sum() / len)
            .sqrt()
            .max(1e-6);
        image.mapv_inplace(|v| {
            let unit = ((v - mean) / std * 0.5).clamp(-1.0, 1.0);
            middle + unit * half_width
        });
    }
    out
}
