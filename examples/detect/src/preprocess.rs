//! Image → YOLOX input, in one place for `build.rs` (calibration) and `main.rs` (inference).

use image::imageops::FilterType;
use image::DynamicImage;
use ndarray::Array3;

/// The network's input resolution (square).
pub const SIZE: u32 = 416;

/// The grey YOLOX pads with.
const PAD: f32 = 114.0;

/// YOLOX's letterbox: `image` scaled by [`scale`] (aspect ratio kept) into the top-left corner
/// of a `SIZE`×`SIZE` canvas of grey 114, as BGR pixel values in `[0, 255]`, laid out as
/// `[3, SIZE, SIZE]` (CHW).
pub fn letterbox(image: &DynamicImage) -> Array3<f32> {
    let s = scale(image.width(), image.height());
    let (w, h) = (
        ((image.width() as f32 * s).round() as u32).clamp(1, SIZE),
        ((image.height() as f32 * s).round() as u32).clamp(1, SIZE),
    );
    let rgb = image.resize_exact(w, h, FilterType::Triangle).to_rgb8();
    let size = SIZE as usize;
    Array3::from_shape_fn((3, size, size), |(c, y, x)| {
        if x < w as usize && y < h as usize {
            // Channel 0 is blue: YOLOX was trained on OpenCV's BGR images.
            f32::from(rgb.get_pixel(x as u32, y as u32)[2 - c])
        } else {
            PAD
        }
    })
}

/// The factor [`letterbox`] scales a `width`×`height` image by: the largest that fits.
pub fn scale(width: u32, height: u32) -> f32 {
    (SIZE as f32 / width as f32).min(SIZE as f32 / height as f32)
}

/// Decodes an image file's bytes (JPEG) and [`letterbox`]es it.
#[allow(
    dead_code,
    reason = "build.rs's entry point; main.rs decodes once and calls letterbox itself"
)]
pub fn preprocess(bytes: &[u8]) -> Result<Array3<f32>, image::ImageError> {
    Ok(letterbox(&image::load_from_memory(bytes)?))
}
