//! Image preprocessing written as a model card states it, e.g.
//! `"rgb,nchw,224x224,crop=0.875,mean=0.485:0.456:0.406,std=0.229:0.224:0.225"`: the one
//! parser of the `kenosis` command's `--preprocess` (and, later, a call site's option).
//!
//! # Grammar
//!
//! Comma-separated items in any order, each at most once; keywords are case-insensitive and
//! spaces around items are ignored:
//!
//! | item | meaning | default |
//! |---|---|---|
//! | `rgb` \| `bgr` | the order of the model's three channels | `rgb` |
//! | `nchw` \| `nhwc` | channels before (`[3, H, W]`) or after (`[H, W, 3]`) the pixels, batch first when the model has a batch dimension | `nchw` |
//! | `WxH` | the model's input width and height in pixels, e.g. `224x224` | the model's declared size |
//! | `stretch` | resize to `WxH`, ignoring the aspect ratio | yes |
//! | `crop` \| `crop=F` | resize keeping the aspect ratio so that `WxH` is fraction `F` (0 < F <= 1, default 1) of the shorter side's fit, then take the centre `WxH`: `crop=0.875` at 224x224 is torchvision's `Resize(256)` + `CenterCrop(224)` | |
//! | `letterbox` \| `letterbox=PAD` \| `letterbox=PAD:topleft` | resize keeping the aspect ratio to fit inside `WxH`, centred (or at the top left, as YOLOX does), the rest filled with pixel value `PAD` (0 to 255, default 114) | |
//! | `scale=S` | multiply each pixel value by `S` (a number or a fraction `1/255`) | see below |
//! | `mean=M` \| `mean=M1:M2:M3` | subtract, one value for all channels or one per channel in the model's channel order | 0 |
//! | `std=S` \| `std=S1:S2:S3` | divide, likewise | 1 |
//!
//! # What a pixel becomes
//!
//! The image is decoded to 8-bit RGB (values 0 to 255), resized as above (bilinear
//! filter), its channels put in the model's order, and each value `p` of channel `c`
//! becomes `(p * scale - mean[c]) / std[c]`, as f32.
//!
//! Without `scale=`, the scale is `1/255` when `mean` or `std` is given and every one of
//! their values is at most 1 (a card's `[0, 1]` convention, as torchvision's), and 1
//! otherwise (values in 0-255 units, as Caffe's `mean=104:117:123`). [`ImagePreprocess`]'s
//! `Display` writes the scale out, so the resolved reading can be shown.

use std::fmt;
use std::str::FromStr;

/// The order of an image model's three channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelOrder {
    /// Red, green, blue.
    #[default]
    Rgb,
    /// Blue, green, red (OpenCV, Caffe).
    Bgr,
}

/// Where the channel axis is in the model's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `[N, 3, H, W]` (or `[3, H, W]` without a batch dimension).
    #[default]
    Nchw,
    /// `[N, H, W, 3]` (or `[H, W, 3]`).
    Nhwc,
}

/// An input size in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Width (columns), at least 1.
    pub width: u32,
    /// Height (rows), at least 1.
    pub height: u32,
}

/// How an image is brought to the input size.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Resize {
    /// To the size exactly, the aspect ratio ignored.
    #[default]
    Stretch,
    /// Aspect ratio kept, scaled so that the size is `fraction` of the covering fit, the
    /// centre cut out.
    Crop {
        /// In (0, 1]: 1 cuts the largest centred region of the input's aspect ratio.
        fraction: f32,
    },
    /// Aspect ratio kept, scaled to fit inside the size, centred or at the top left, padded
    /// with `pad`.
    Letterbox {
        /// The pixel value (0-255, all channels) of the padding, before scale, mean and
        /// std.
        pad: u8,
        /// The image at the top left, the padding right and below (YOLOX); else centred
        /// (the Ultralytics YOLO models).
        top_left: bool,
    },
}

/// The pad value of `letterbox` without one: the gray of the YOLO family's letterboxes.
pub const DEFAULT_LETTERBOX_PAD: u8 = 114;

/// An image preprocessing spec (see the [module docs](self) for the grammar and the
/// arithmetic). Parse with [`str::parse`]; `Display` writes it back with every item
/// explicit (the size only when given).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImagePreprocess {
    /// The model's channel order.
    pub channels: ChannelOrder,
    /// The model's layout.
    pub layout: Layout,
    /// The input size; `None`: the model's declared height and width.
    pub size: Option<Size>,
    /// How images are resized to it.
    pub resize: Resize,
    /// `scale=` as given; see [`ImagePreprocess::scale`] for the value used.
    pub scale: Option<f32>,
    /// Values subtracted after scaling: empty (0), one for every channel, or three in the
    /// model's channel order.
    pub mean: Vec<f32>,
    /// Divisors after the mean: empty (1), one for every channel, or three in the model's
    /// channel order; never 0.
    pub std: Vec<f32>,
}

impl ImagePreprocess {
    /// The factor pixel values (0-255) are multiplied by: `scale=` when given, else `1/255`
    /// when `mean` or `std` is given with every value at most 1, else 1.
    pub fn scale(&self) -> f32 {
        if let Some(s) = self.scale {
            return s;
        }
        let given = !self.mean.is_empty() || !self.std.is_empty();
        let unit = self.mean.iter().chain(&self.std).all(|v| v.abs() <= 1.0);
        if given && unit {
            1.0 / 255.0
        } else {
            1.0
        }
    }

    /// The mean of channel `c` (0, 1 or 2, in the model's channel order).
    pub fn mean(&self, c: usize) -> f32 {
        per_channel(&self.mean, c, 0.0)
    }

    /// The std of channel `c` (0, 1 or 2, in the model's channel order).
    pub fn std(&self, c: usize) -> f32 {
        per_channel(&self.std, c, 1.0)
    }

    /// The model input value of 8-bit pixel value `pixel` in channel `c` (model order):
    /// `(pixel * scale - mean[c]) / std[c]`.
    pub fn normalize(&self, c: usize, pixel: u8) -> f32 {
        (f32::from(pixel) * self.scale() - self.mean(c)) / self.std(c)
    }

    /// The index in RGB order of the model's channel `c`.
    pub fn rgb_index(&self, c: usize) -> usize {
        match self.channels {
            ChannelOrder::Rgb => c,
            ChannelOrder::Bgr => 2 - c,
        }
    }
}

fn per_channel(values: &[f32], c: usize, default: f32) -> f32 {
    match values {
        [] => default,
        [v] => *v,
        vs => vs.get(c).copied().unwrap_or(default),
    }
}

/// Why a preprocessing spec does not parse.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PreprocessError {
    /// An item is empty (`rgb,,nchw`) or the whole spec is.
    Empty,
    /// An item is none of the known ones.
    Unknown {
        /// The item as written.
        item: String,
    },
    /// Two items set the same thing (`rgb,bgr`, `crop,stretch`).
    Repeated {
        /// What they set: `channel order`, `layout`, `size`, `resize`, `scale`, `mean`,
        /// `std`.
        what: &'static str,
        /// The second item.
        item: String,
    },
    /// A value is not a finite number (or fraction, for `scale`).
    Number {
        /// The item's key.
        key: &'static str,
        /// The value as written.
        value: String,
    },
    /// A value is out of its range.
    Range {
        /// The item as written.
        item: String,
        /// The range it must be in.
        expected: &'static str,
    },
    /// `mean` or `std` has neither one nor three values.
    Channels {
        /// `mean` or `std`.
        key: &'static str,
        /// How many values were given.
        count: usize,
    },
}

impl fmt::Display for PreprocessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "an empty item in the preprocessing spec"),
            Self::Unknown { item } => write!(
                f,
                "unknown preprocessing item `{item}`; expected rgb|bgr, nchw|nhwc, WxH \
                 (e.g. 224x224), stretch|crop[=F]|letterbox[=PAD[:topleft]], scale=S, \
                 mean=M[:M:M], \
                 std=S[:S:S]"
            ),
            Self::Repeated { what, item } => {
                write!(f, "`{item}`: the {what} is already given")
            }
            Self::Number { key, value } => {
                write!(f, "`{key}={value}`: `{value}` is not a finite number")
            }
            Self::Range { item, expected } => write!(f, "`{item}`: expected {expected}"),
            Self::Channels { key, count } => write!(
                f,
                "`{key}` has {count} values; expected one for every channel or three, \
                 separated by `:`"
            ),
        }
    }
}

impl std::error::Error for PreprocessError {}

impl FromStr for ImagePreprocess {
    type Err = PreprocessError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut out = ImagePreprocess::default();
        let mut seen: Vec<&'static str> = Vec::new();
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(PreprocessError::Empty);
            }
            let lower = item.to_ascii_lowercase();
            let (key, value) = match lower.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (lower.as_str(), None),
            };
            let what = match (key, value) {
                ("rgb" | "bgr", None) => {
                    out.channels = if key == "rgb" {
                        ChannelOrder::Rgb
                    } else {
                        ChannelOrder::Bgr
                    };
                    "channel order"
                }
                ("nchw" | "nhwc", None) => {
                    out.layout = if key == "nchw" {
                        Layout::Nchw
                    } else {
                        Layout::Nhwc
                    };
                    "layout"
                }
                ("stretch", None) => {
                    out.resize = Resize::Stretch;
                    "resize"
                }
                ("crop", value) => {
                    let fraction = match value {
                        None => 1.0,
                        Some(v) => number("crop", v)?,
                    };
                    if !(fraction > 0.0 && fraction <= 1.0) {
                        return Err(range(item, "a crop fraction F with 0 < F <= 1"));
                    }
                    out.resize = Resize::Crop { fraction };
                    "resize"
                }
                ("letterbox", value) => {
                    let (mut pad, mut top_left) = (DEFAULT_LETTERBOX_PAD, false);
                    for part in value.iter().flat_map(|v| v.split(':')).map(str::trim) {
                        match part {
                            "topleft" => top_left = true,
                            "centre" | "center" => top_left = false,
                            _ => {
                                pad = part.parse::<u8>().map_err(|_| {
                                    range(
                                        item,
                                        "a pad value from 0 to 255, then optionally \
                                         `:topleft` or `:centre`",
                                    )
                                })?;
                            }
                        }
                    }
                    out.resize = Resize::Letterbox { pad, top_left };
                    "resize"
                }
                ("scale", Some(v)) => {
                    let s = match v.split_once('/') {
                        Some((a, b)) => number("scale", a)? / number("scale", b)?,
                        None => number("scale", v)?,
                    };
                    if !(s.is_finite() && s > 0.0) {
                        return Err(range(item, "a positive scale"));
                    }
                    out.scale = Some(s);
                    "scale"
                }
                ("mean", Some(v)) => {
                    out.mean = values("mean", v)?;
                    "mean"
                }
                ("std", Some(v)) => {
                    out.std = values("std", v)?;
                    if out.std.contains(&0.0) {
                        return Err(range(item, "std values other than 0"));
                    }
                    "std"
                }
                (size, None) if size.starts_with(|c: char| c.is_ascii_digit()) => {
                    out.size = Some(parse_size(item, size)?);
                    "size"
                }
                _ => {
                    return Err(PreprocessError::Unknown {
                        item: item.to_owned(),
                    })
                }
            };
            if seen.contains(&what) {
                return Err(PreprocessError::Repeated {
                    what,
                    item: item.to_owned(),
                });
            }
            seen.push(what);
        }
        Ok(out)
    }
}

fn range(item: &str, expected: &'static str) -> PreprocessError {
    PreprocessError::Range {
        item: item.to_owned(),
        expected,
    }
}

fn number(key: &'static str, value: &str) -> Result<f32, PreprocessError> {
    match value.trim().parse::<f32>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(PreprocessError::Number {
            key,
            value: value.to_owned(),
        }),
    }
}

fn values(key: &'static str, value: &str) -> Result<Vec<f32>, PreprocessError> {
    let vs = (value.split(':'))
        .map(|v| number(key, v))
        .collect::<Result<Vec<f32>, _>>()?;
    match vs.len() {
        1 | 3 => Ok(vs),
        count => Err(PreprocessError::Channels { key, count }),
    }
}

fn parse_size(item: &str, size: &str) -> Result<Size, PreprocessError> {
    let bad = || range(item, "a size WxH of two whole numbers from 1, e.g. 224x224");
    let (w, h) = size.split_once('x').ok_or_else(bad)?;
    let (width, height) = (
        w.trim().parse::<u32>().map_err(|_| bad())?,
        h.trim().parse::<u32>().map_err(|_| bad())?,
    );
    if width == 0 || height == 0 {
        return Err(bad());
    }
    Ok(Size { width, height })
}

impl fmt::Display for ImagePreprocess {
    /// Every item explicit, the scale resolved: `rgb,nchw,224x224,stretch,scale=1,mean=0,std=1`
    /// (the size only when given), which parses back to the same reading.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let channels = match self.channels {
            ChannelOrder::Rgb => "rgb",
            ChannelOrder::Bgr => "bgr",
        };
        let layout = match self.layout {
            Layout::Nchw => "nchw",
            Layout::Nhwc => "nhwc",
        };
        write!(f, "{channels},{layout},")?;
        if let Some(Size { width, height }) = self.size {
            write!(f, "{width}x{height},")?;
        }
        match self.resize {
            Resize::Stretch => write!(f, "stretch")?,
            Resize::Crop { fraction } => write!(f, "crop={fraction}")?,
            Resize::Letterbox {
                pad,
                top_left: false,
            } => write!(f, "letterbox={pad}")?,
            Resize::Letterbox {
                pad,
                top_left: true,
            } => write!(f, "letterbox={pad}:topleft")?,
        }
        let list = |vs: &[f32], default: f32| -> String {
            if vs.is_empty() {
                return default.to_string();
            }
            vs.iter().map(f32::to_string).collect::<Vec<_>>().join(":")
        };
        write!(
            f,
            ",scale={},mean={},std={}",
            self.scale(),
            list(&self.mean, 0.0),
            list(&self.std, 1.0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> ImagePreprocess {
        spec.parse().unwrap_or_else(|e| panic!("`{spec}`: {e}"))
    }

    #[test]
    fn a_torchvision_card_reads_in_zero_to_one_units() {
        let p = parse("rgb,nchw,224x224,crop=0.875,mean=0.485:0.456:0.406,std=0.229:0.224:0.225");
        assert_eq!(p.channels, ChannelOrder::Rgb);
        assert_eq!(p.layout, Layout::Nchw);
        assert_eq!(
            p.size,
            Some(Size {
                width: 224,
                height: 224
            })
        );
        assert_eq!(p.resize, Resize::Crop { fraction: 0.875 });
        assert_eq!(p.scale(), 1.0 / 255.0);
        // White in the red channel: (1 - 0.485) / 0.229.
        assert!((p.normalize(0, 255) - (1.0 - 0.485) / 0.229).abs() < 1e-6);
        assert!((p.normalize(2, 0) - (-0.406 / 0.225)).abs() < 1e-6);
    }

    #[test]
    fn caffe_and_tflite_cards_read_in_pixel_units() {
        // SqueezeNet 1.0 (Caffe): BGR, 0-255 minus the BGR means.
        let p = parse("BGR, NCHW, 224x224, mean=104:117:123");
        assert_eq!(p.scale(), 1.0);
        assert_eq!(p.rgb_index(0), 2);
        assert_eq!(p.normalize(0, 104), 0.0);
        assert_eq!(p.normalize(2, 200), 77.0);
        // EfficientNet-Lite0: (x - 127) / 128.
        let p = parse("rgb,mean=127,std=128");
        assert_eq!(p.scale(), 1.0);
        assert_eq!(p.normalize(1, 255), 1.0);
        assert_eq!(p.normalize(1, 127), 0.0);
        // An explicit scale wins, as a fraction or a number.
        assert_eq!(parse("scale=1/255").normalize(0, 255), 1.0);
        assert_eq!(parse("scale=2,mean=0.5").normalize(0, 1), 1.5);
    }

    #[test]
    fn defaults_and_resize_modes() {
        let p = parse("nhwc");
        assert_eq!(p.channels, ChannelOrder::Rgb);
        assert_eq!(p.resize, Resize::Stretch);
        assert_eq!(p.size, None);
        assert_eq!(p.normalize(0, 200), 200.0);
        assert_eq!(
            parse("letterbox").resize,
            Resize::Letterbox {
                pad: DEFAULT_LETTERBOX_PAD,
                top_left: false
            }
        );
        assert_eq!(
            parse("letterbox=0").resize,
            Resize::Letterbox {
                pad: 0,
                top_left: false
            }
        );
        assert_eq!(
            parse("letterbox=114:topleft").resize,
            Resize::Letterbox {
                pad: 114,
                top_left: true
            }
        );
        assert_eq!(parse("crop").resize, Resize::Crop { fraction: 1.0 });
        assert_eq!(
            parse("640x480").size,
            Some(Size {
                width: 640,
                height: 480
            })
        );
    }

    #[test]
    fn display_writes_every_item_and_parses_back() {
        for spec in [
            "rgb,nchw,224x224,crop=0.875,mean=0.485:0.456:0.406,std=0.229:0.224:0.225",
            "bgr,nhwc,letterbox=114,mean=104:117:123",
            "bgr,416x416,letterbox=114:topleft",
            "scale=1/255",
            "rgb",
        ] {
            let p = parse(spec);
            let written = p.to_string();
            let again = parse(&written);
            assert_eq!(again.to_string(), written, "{spec}");
            for c in 0..3 {
                for v in [0u8, 77, 255] {
                    assert_eq!(again.normalize(c, v), p.normalize(c, v), "{spec}");
                }
            }
        }
        assert_eq!(
            parse("mean=127,std=128").to_string(),
            "rgb,nchw,stretch,scale=1,mean=127,std=128"
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |spec: &str| spec.parse::<ImagePreprocess>().unwrap_err();
        assert_eq!(err(""), PreprocessError::Empty);
        assert_eq!(err("rgb,,nchw"), PreprocessError::Empty);
        assert!(matches!(err("rgba"), PreprocessError::Unknown { item } if item == "rgba"));
        assert!(matches!(
            err("rgb,bgr"),
            PreprocessError::Repeated {
                what: "channel order",
                ..
            }
        ));
        assert!(matches!(
            err("crop,stretch"),
            PreprocessError::Repeated { what: "resize", .. }
        ));
        assert!(matches!(
            err("mean=0.4:0.5"),
            PreprocessError::Channels {
                key: "mean",
                count: 2
            }
        ));
        assert!(matches!(
            err("mean=a"),
            PreprocessError::Number { key: "mean", .. }
        ));
        assert!(matches!(err("std=0"), PreprocessError::Range { .. }));
        assert!(matches!(err("crop=1.5"), PreprocessError::Range { .. }));
        assert!(matches!(
            err("letterbox=300"),
            PreprocessError::Range { .. }
        ));
        assert!(matches!(
            err("letterbox=114:left"),
            PreprocessError::Range { .. }
        ));
        assert!(matches!(err("0x224"), PreprocessError::Range { .. }));
        assert!(matches!(err("scale=1/0"), PreprocessError::Range { .. }));
        assert!(matches!(err("scale=-1"), PreprocessError::Range { .. }));
        assert!(matches!(err("mean=inf"), PreprocessError::Number { .. }));
        // Every message names the item.
        assert!(err("crop=2").to_string().contains("crop=2"));
        assert!(err("rgb,bgr").to_string().contains("bgr"));
    }
}
