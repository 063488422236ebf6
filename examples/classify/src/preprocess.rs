//! Image → model input for EfficientNet-Lite0, in one place for `build.rs` (calibration
//! tensors) and `main.rs` (inference), so both see exactly the same numbers.

use image::imageops::FilterType;
use ndarray::Array3;

/// The network's input resolution (square).
pub const SIZE: u32 = 224;

/// Decodes a JPEG and turns it into the network's input: RGB, scaled so that its shorter side
/// is [`SIZE`] and centre-cropped to `SIZE`×`SIZE` (a no-op for 224×224 images), normalized as
/// `(x - 127) / 128`, laid out as `[3, SIZE, SIZE]` (CHW) in standard order.
pub fn preprocess(jpeg: &[u8]) -> Result<Array3<f32>, image::ImageError> {
    let mut image = image::load_from_memory(jpeg)?;
    if (image.width(), image.height()) != (SIZE, SIZE) {
        image = image.resize_to_fill(SIZE, SIZE, FilterType::Triangle);
    }
    let rgb = image.to_rgb8();
    let size = SIZE as usize;
    Ok(Array3::from_shape_fn((3, size, size), |(c, y, x)| {
        let value = rgb.get_pixel(x as u32, y as u32)[c];
        (f32::from(value) - 127.0) / 128.0
    }))
}
