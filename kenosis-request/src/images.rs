//! Image files decoded and brought to a model's input by a preprocessing spec
//! (`kenosis_options::preprocess`): what `kenosis_build::image_preprocessor` hands a build
//! script, and what the quantizer reads a call site's `calibration_images` and the
//! `kenosis` command's `--images` with, so that all three read an image alike.

/// The decoding error of [`preprocess_image`] (the `image` crate's).
pub use image::ImageError;

/// One image file's bytes as a model input of `size`, preprocessed as `spec` says (see
/// `kenosis_options::preprocess` for the arithmetic): f32, shaped `[3, height, width]` for
/// `nchw` and `[height, width, 3]` for `nhwc`, without a batch dimension.
///
/// The image is decoded to 8-bit RGB (an alpha channel is dropped, gray is repeated in
/// the three channels), resized with a bilinear filter (not at all when it already has
/// the size it is resized to), cropped or letterboxed as `spec.resize` says, then each
/// value normalized in the model's channel order.
///
/// # Errors
/// [`image::ImageError`] when the bytes are not an image in a format this build decodes
/// (JPEG or PNG), or decoding fails.
pub fn preprocess_image(
    bytes: &[u8],
    spec: &kenosis_options::preprocess::ImagePreprocess,
    size: kenosis_options::preprocess::Size,
) -> std::result::Result<ndarray::Array3<f32>, image::ImageError> {
    use kenosis_options::preprocess::Layout;

    let rgb = image::load_from_memory(bytes)?.to_rgb8();
    let fitted = fit(&rgb, spec.resize, size);
    let (w, h) = (size.width as usize, size.height as usize);
    let shape = match spec.layout {
        Layout::Nchw => (3, h, w),
        Layout::Nhwc => (h, w, 3),
    };
    let mut out = ndarray::Array3::<f32>::zeros(shape);
    for (x, y, p) in fitted.enumerate_pixels() {
        let (x, y) = (x as usize, y as usize);
        for c in 0..3 {
            let v = spec.normalize(c, p[spec.rgb_index(c)]);
            match spec.layout {
                Layout::Nchw => out[[c, y, x]] = v,
                Layout::Nhwc => out[[y, x, c]] = v,
            }
        }
    }
    Ok(out)
}

/// `img` brought to `size` by `resize`.
fn fit(
    img: &image::RgbImage,
    resize: kenosis_options::preprocess::Resize,
    size: kenosis_options::preprocess::Size,
) -> image::RgbImage {
    use kenosis_options::preprocess::Resize;

    let (w0, h0) = (f64::from(img.width()), f64::from(img.height()));
    let (w, h) = (size.width, size.height);
    let scaled = |s: f64, of: f64, low: u32, high: u32| -> u32 {
        ((of * s).round() as u32).clamp(low, high)
    };
    match resize {
        Resize::Stretch => resized(img, w, h),
        Resize::Crop { fraction } => {
            // The centre region that scaling by `s` would bring to `w` x `h`, cut from the
            // image first and then resized (the same pixels as resizing then cutting, without
            // resizing a very long image whole).
            let s = (f64::from(w) / w0).max(f64::from(h) / h0) / f64::from(fraction);
            let (cw, ch) = (
                scaled(1.0 / s, f64::from(w), 1, img.width()),
                scaled(1.0 / s, f64::from(h), 1, img.height()),
            );
            let (x, y) = ((img.width() - cw) / 2, (img.height() - ch) / 2);
            resized(
                &image::imageops::crop_imm(img, x, y, cw, ch).to_image(),
                w,
                h,
            )
        }
        Resize::Letterbox { pad, top_left } => {
            let s = (f64::from(w) / w0).min(f64::from(h) / h0);
            let (rw, rh) = (scaled(s, w0, 1, w), scaled(s, h0, 1, h));
            let r = resized(img, rw, rh);
            let mut canvas = image::RgbImage::from_pixel(w, h, image::Rgb([pad; 3]));
            let (x, y) = if top_left {
                (0, 0)
            } else {
                ((w - rw) / 2, (h - rh) / 2)
            };
            image::imageops::overlay(&mut canvas, &r, i64::from(x), i64::from(y));
            canvas
        }
    }
}

/// `img` at `w` x `h` (bilinear), or a copy when it has that size.
fn resized(img: &image::RgbImage, w: u32, h: u32) -> image::RgbImage {
    if img.dimensions() == (w, h) {
        return img.clone();
    }
    image::imageops::resize(img, w, h, image::imageops::FilterType::Triangle)
}
