//! A reader of NumPy `.npy` files for the element types calibration takes, after the format's
//! specification (`numpy.lib.format`; NEP 1, "A simple file format for NumPy arrays").
//!
//! A file is the magic string `\x93NUMPY`, a major and a minor version byte (1.0, 2.0 or
//! 3.0), the header length (little-endian `u16` in 1.0, `u32` in 2.0 and 3.0), the header,
//! then the data. The header is a Python dict literal (ASCII in 1.0 and 2.0, UTF-8 in 3.0)
//! with exactly the keys `'descr'` (the dtype string, e.g. `'<f4'`), `'fortran_order'`
//! (`True` or `False`) and `'shape'` (a tuple of non-negative integers: `()` for a scalar,
//! `(3,)` for one dimension), in any order, with optional spaces and a trailing comma, padded
//! with spaces and ended by a newline. The data is the elements in C order, or in Fortran
//! order when `fortran_order` is `True`, in the byte order the dtype names.
//!
//! This reader takes what numpy and ndarray-npy write for float32, int64, int32, int16, int8,
//! uint8 and bool, and refuses anything else with a [`BadNpy`] naming what is wrong, before
//! allocating more than the file holds: the header is parsed from the file's bytes and the
//! data it declares must be exactly the bytes after it.
//!
//! Why not `ndarray-npy` (or `npyz`, which parses headers with the same `py_literal`): both
//! cost the user something this reader does not. `ndarray-npy` 0.10 allocates the header
//! length and the data length a header declares before reading them, so a corrupt or hostile
//! file aborts the quantizer (`memory allocation of 13194139533312 bytes failed` on
//! `tests/hostile/npy_shape_beyond_data`) where this reader returns [`BadNpy::Size`]; and
//! its header parser (`py_literal`, `pest` and its derive, `num-bigint`, `stacker`...) adds
//! about 38 s to the release build of the `kenosis` quantizer that each user's machine makes
//! once per version (measured in December 2026: a crate of `ndarray` alone against one with
//! `ndarray-npy` too, `cargo build --release`, 2 cores). Loading is no faster with it: 100
//! float32 files of `[1, 3, 224, 224]` read in 13.5 ms here against 14.9 ms with it.

use ndarray::{ArrayD, IxDyn, ShapeBuilder};

use crate::error::BadNpy;

/// The magic string every `.npy` file starts with.
const MAGIC: &[u8] = b"\x93NUMPY";

/// At most this many characters of the header are quoted in an error.
const EXCERPT: usize = 24;

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The dtype string (`'descr'`), e.g. `<f4`; refused later unless it is one that
    /// [`Element::byte_order`] reads.
    pub descr: String,
    /// True when the data is in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The array's shape: empty for a scalar.
    pub shape: Vec<usize>,
}

/// An element type the reader decodes: float32, int64, int32, int16, int8, uint8 and bool.
pub trait Element: Sized + Clone {
    /// Bytes per element.
    const SIZE: usize;
    /// For a dtype string this type is read from, whether its data is big-endian; `None` for
    /// any other dtype. The strings are those numpy and ndarray-npy write (`<f4` and `>f4`
    /// for float32; `|u1` for uint8, `|b1` for bool), and the other spellings ndarray-npy
    /// reads for one-byte integers (`i1` and `b`, `u1` and `B`).
    fn byte_order(descr: &str) -> Option<bool>;
    /// The element `bytes` (exactly [`Self::SIZE`] of them) encode; `None` when they encode
    /// none (a bool byte other than 0 or 1).
    fn decode(bytes: &[u8], big_endian: bool) -> Option<Self>;
    /// All the elements of `data` (a whole number of them) at once, where this type has a
    /// bulk decoder for that byte order; `None` to decode them one by one with
    /// [`Self::decode`]. Calibration samples are mostly float32: theirs is
    /// `kenosis-numerics`', which the quantizer binary optimizes (this crate it does not).
    fn decode_bulk(_data: &[u8], _big_endian: bool) -> Option<Vec<Self>> {
        None
    }
}

macro_rules! multi_byte {
    ($t:ty, $little:literal, $big:literal $(, bulk little-endian: $bulk:path)?) => {
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn byte_order(descr: &str) -> Option<bool> {
                match descr {
                    $little => Some(false),
                    $big => Some(true),
                    _ => None,
                }
            }
            fn decode(bytes: &[u8], big_endian: bool) -> Option<Self> {
                let bytes = bytes.try_into().ok()?;
                Some(if big_endian {
                    <$t>::from_be_bytes(bytes)
                } else {
                    <$t>::from_le_bytes(bytes)
                })
            }
            $(
                fn decode_bulk(data: &[u8], big_endian: bool) -> Option<Vec<Self>> {
                    (!big_endian).then(|| $bulk(data))
                }
            )?
        }
    };
}
multi_byte!(f32, "<f4", ">f4", bulk little-endian: kenosis_numerics::bytes::f32_from_le);
multi_byte!(i64, "<i8", ">i8");
multi_byte!(i32, "<i4", ">i4");
multi_byte!(i16, "<i2", ">i2");

impl Element for i8 {
    const SIZE: usize = 1;
    fn byte_order(descr: &str) -> Option<bool> {
        matches!(descr, "|i1" | "i1" | "b").then_some(false)
    }
    fn decode(bytes: &[u8], _: bool) -> Option<Self> {
        Some(i8::from_le_bytes(bytes.try_into().ok()?))
    }
}

impl Element for u8 {
    const SIZE: usize = 1;
    fn byte_order(descr: &str) -> Option<bool> {
        matches!(descr, "|u1" | "u1" | "B").then_some(false)
    }
    fn decode(bytes: &[u8], _: bool) -> Option<Self> {
        match bytes {
            &[b] => Some(b),
            _ => None,
        }
    }
}

impl Element for bool {
    const SIZE: usize = 1;
    fn byte_order(descr: &str) -> Option<bool> {
        (descr == "|b1").then_some(false)
    }
    fn decode(bytes: &[u8], _: bool) -> Option<Self> {
        match bytes {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
}

/// Reads an `.npy` file of element type `T` from its bytes: an array of the header's shape,
/// with Fortran-order strides when the file is in Fortran order (the elements are not moved).
///
/// # Errors
/// [`BadNpy`]: the framing or the header is malformed (see [`header`]), the header's dtype is
/// not one `T` is read from ([`BadNpy::Dtype`]), the data the header declares is not exactly
/// the bytes after it ([`BadNpy::Size`], checked before anything is allocated for the data),
/// the shape cannot be an array's ([`BadNpy::ShapeOverflow`]), or a bool byte is neither 0
/// nor 1 ([`BadNpy::Bool`]).
pub fn read<T: Element>(bytes: &[u8]) -> Result<ArrayD<T>, BadNpy> {
    let (header, data) = header(bytes)?;
    let big_endian =
        T::byte_order(&header.descr).ok_or_else(|| BadNpy::Dtype(repr(&header.descr)))?;
    check_size(&header.shape, T::SIZE, data.len())?;
    let values = match T::decode_bulk(data, big_endian) {
        Some(values) => values,
        None => {
            let mut values = Vec::with_capacity(data.len() / T::SIZE);
            for (index, chunk) in data.chunks_exact(T::SIZE).enumerate() {
                // Only a bool byte other than 0 or 1 decodes to nothing.
                let value = T::decode(chunk, big_endian).ok_or(BadNpy::Bool {
                    index,
                    byte: chunk[0],
                })?;
                values.push(value);
            }
            values
        }
    };
    let shape = IxDyn(&header.shape).set_f(header.fortran_order);
    ArrayD::from_shape_vec(shape, values).map_err(|_| BadNpy::ShapeOverflow(header.shape))
}

/// The data a header with `shape` declares for elements of `elem_size` bytes must be exactly
/// the `held` bytes after the header, and an array's size: the product of the non-zero
/// dimensions, in bytes, at most `isize::MAX` (ndarray's bound).
///
/// # Errors
/// [`BadNpy::Size`] stating the declared and the actual sizes; [`BadNpy::ShapeOverflow`].
fn check_size(shape: &[usize], elem_size: usize, held: usize) -> Result<(), BadNpy> {
    let declared = shape
        .iter()
        .try_fold(elem_size, |acc, &d| acc.checked_mul(d));
    if declared != Some(held) {
        return Err(BadNpy::Size {
            shape: shape.to_vec(),
            declared,
            held,
        });
    }
    let addressable = (shape.iter().filter(|&&d| d != 0))
        .try_fold(elem_size, |acc, &d| acc.checked_mul(d))
        .is_some_and(|bytes| isize::try_from(bytes).is_ok());
    if !addressable {
        return Err(BadNpy::ShapeOverflow(shape.to_vec()));
    }
    Ok(())
}

/// The header of an `.npy` file and the data bytes after it.
///
/// # Errors
/// [`BadNpy::NotNpy`] without the magic string; [`BadNpy::Version`] for a version other
/// than 1.0, 2.0 or 3.0; [`BadNpy::TruncatedHeader`] when the file ends inside the length
/// field; [`BadNpy::HeaderPastEnd`] when the header length runs past the file; for the dict,
/// [`BadNpy::HeaderSyntax`] (not a dict literal), [`BadNpy::UnknownKey`],
/// [`BadNpy::MissingKey`], [`BadNpy::DuplicateKey`], [`BadNpy::Value`] (a value of the wrong
/// kind), [`BadNpy::NegativeDim`] and [`BadNpy::DimTooLarge`].
pub fn header(bytes: &[u8]) -> Result<(Header, &[u8]), BadNpy> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(BadNpy::NotNpy)?;
    let (major, minor, rest) = match rest {
        [major, minor, rest @ ..] => (*major, *minor, rest),
        _ => return Err(BadNpy::NotNpy),
    };
    let (header_len, rest) = match (major, minor) {
        (1, 0) => match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
            _ => return Err(BadNpy::TruncatedHeader),
        },
        (2 | 3, 0) => match rest {
            [a, b, c, d, rest @ ..] => {
                let len = u32::from_le_bytes([*a, *b, *c, *d]);
                (usize::try_from(len).unwrap_or(usize::MAX), rest)
            }
            _ => return Err(BadNpy::TruncatedHeader),
        },
        _ => return Err(BadNpy::Version { major, minor }),
    };
    if header_len > rest.len() {
        return Err(BadNpy::HeaderPastEnd {
            header_len,
            file_len: bytes.len(),
        });
    }
    let (text, data) = rest.split_at(header_len);
    // Versions 1.0 and 2.0 are ASCII (numpy reads them as latin-1), 3.0 is UTF-8: every
    // character the dict needs outside its strings is ASCII, and a string with other bytes
    // is no key and no dtype, so the bytes are parsed as they are.
    Ok((Parser { text, at: 0 }.dict()?, data))
}

/// Parses a header's dict literal: `{`, then `'key': value` entries separated by commas
/// (a trailing one allowed), then `}`, with whitespace around any token and after the dict
/// (the padding and the newline). Not a general Python parser: the values are those the
/// format specifies for each key, anything else is refused where it starts.
struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn dict(mut self) -> Result<Header, BadNpy> {
        let (mut descr, mut fortran_order, mut shape) = (None, None, None);
        self.skip_space();
        self.eat(b'{', "'{'")?;
        loop {
            self.skip_space();
            if self.peek() == Some(b'}') {
                break;
            }
            let key = self.string("a quoted key or '}'")?;
            let key = match key {
                b"descr" => "descr",
                b"fortran_order" => "fortran_order",
                b"shape" => "shape",
                other => return Err(BadNpy::UnknownKey(repr(&String::from_utf8_lossy(other)))),
            };
            self.skip_space();
            self.eat(b':', "':'")?;
            self.skip_space();
            let duplicate = match key {
                "descr" => descr.replace(self.descr()?).is_some(),
                "fortran_order" => fortran_order.replace(self.boolean()?).is_some(),
                _ => shape.replace(self.shape()?).is_some(),
            };
            if duplicate {
                return Err(BadNpy::DuplicateKey(key));
            }
            self.skip_space();
            if self.peek() == Some(b',') {
                self.at += 1;
            } else if self.peek() != Some(b'}') {
                return Err(self.syntax("',' or '}'"));
            }
        }
        self.at += 1;
        self.skip_space();
        if self.at != self.text.len() {
            return Err(self.syntax("the end of the header (spaces and a newline)"));
        }
        Ok(Header {
            descr: descr.ok_or(BadNpy::MissingKey("descr"))?,
            fortran_order: fortran_order.ok_or(BadNpy::MissingKey("fortran_order"))?,
            shape: shape.ok_or(BadNpy::MissingKey("shape"))?,
        })
    }

    /// `'descr'`: a dtype string (a structured dtype's list is refused).
    fn descr(&mut self) -> Result<String, BadNpy> {
        if !matches!(self.peek(), Some(b'\'' | b'"')) {
            return Err(self.value("descr", "a dtype string such as '<f4'"));
        }
        let s = self.string("a dtype string such as '<f4'")?;
        Ok(String::from_utf8_lossy(s).into_owned())
    }

    /// `'fortran_order'`: `True` or `False`.
    fn boolean(&mut self) -> Result<bool, BadNpy> {
        for (word, value) in [(&b"True"[..], true), (b"False", false)] {
            let rest = &self.text[self.at..];
            let ends = rest
                .get(word.len())
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
            if rest.starts_with(word) && ends {
                self.at += word.len();
                return Ok(value);
            }
        }
        Err(self.value("fortran_order", "True or False"))
    }

    /// `'shape'`: `(` dims separated by commas `)`, where a single dim needs a trailing
    /// comma (`(3)` is a parenthesized integer in Python, not a tuple).
    fn shape(&mut self) -> Result<Vec<usize>, BadNpy> {
        const EXPECTED: &str = "a tuple of dimensions such as (1, 3, 224, 224) or (3,)";
        let start = self.at;
        if self.peek() != Some(b'(') {
            return Err(self.value("shape", EXPECTED));
        }
        self.at += 1;
        let mut dims = Vec::new();
        let mut comma = false;
        loop {
            self.skip_space();
            if self.peek() == Some(b')') {
                self.at += 1;
                break;
            }
            if !dims.is_empty() && !comma {
                return Err(self.syntax("',' or ')'"));
            }
            dims.push(self.dim()?);
            self.skip_space();
            comma = self.peek() == Some(b',');
            if comma {
                self.at += 1;
            }
        }
        if dims.len() == 1 && !comma {
            self.at = start;
            return Err(self.value("shape", EXPECTED));
        }
        Ok(dims)
    }

    /// One dimension: a decimal integer, with Python 2's `L` suffix allowed.
    fn dim(&mut self) -> Result<usize, BadNpy> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
            self.skip_space();
        }
        let digits_at = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let digits = &self.text[digits_at..self.at];
        if digits.is_empty() {
            self.at = start;
            return Err(self.value("shape", "a tuple of non-negative integers"));
        }
        if matches!(self.peek(), Some(b'L' | b'l')) {
            self.at += 1;
        }
        let shown = || excerpt(&self.text[start..digits_at + digits.len()]);
        let zero = digits.iter().all(|&c| c == b'0');
        if negative && !zero {
            return Err(BadNpy::NegativeDim(shown()));
        }
        digits
            .iter()
            .try_fold(0usize, |n, &c| {
                n.checked_mul(10)?.checked_add(usize::from(c - b'0'))
            })
            .ok_or_else(|| BadNpy::DimTooLarge(shown()))
    }

    /// A string in single or double quotes, without escapes (numpy writes none) or line
    /// breaks; its bytes.
    fn string(&mut self, expected: &'static str) -> Result<&'a [u8], BadNpy> {
        let Some(quote @ (b'\'' | b'"')) = self.peek() else {
            return Err(self.syntax(expected));
        };
        let text = self.text;
        let start = self.at + 1;
        let len = text[start..]
            .iter()
            .position(|&c| c == quote || c == b'\\' || c == b'\n' || c == b'\r');
        match len.map(|len| (len, text[start + len])) {
            Some((len, c)) if c == quote => {
                self.at = start + len + 1;
                Ok(&text[start..start + len])
            }
            Some((len, _)) => {
                self.at = start + len;
                Err(self.syntax("a closing quote (escapes are not supported)"))
            }
            None => {
                self.at = text.len();
                Err(self.syntax("a closing quote"))
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    /// Skips Python's whitespace between tokens.
    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8, expected: &'static str) -> Result<(), BadNpy> {
        if self.peek() != Some(c) {
            return Err(self.syntax(expected));
        }
        self.at += 1;
        Ok(())
    }

    /// A syntax error at the current position.
    fn syntax(&self, expected: &'static str) -> BadNpy {
        BadNpy::HeaderSyntax {
            at: self.at,
            expected,
            found: self.found(),
        }
    }

    /// A value error for `key` at the current position.
    fn value(&self, key: &'static str, expected: &'static str) -> BadNpy {
        BadNpy::Value {
            key,
            expected,
            found: self.found(),
        }
    }

    /// An excerpt of the text from the current position, or `the end of the header`.
    fn found(&self) -> String {
        match self.text.get(self.at..) {
            Some(rest) if !rest.is_empty() => excerpt(rest),
            _ => "the end of the header".to_owned(),
        }
    }
}

/// Up to [`EXCERPT`] characters of `bytes` in backticks, `...` marking a cut.
fn excerpt(bytes: &[u8]) -> String {
    format!("`{}`", shorten(&String::from_utf8_lossy(bytes)))
}

/// `s` as a quoted Python string, cut after [`EXCERPT`] characters.
fn repr(s: &str) -> String {
    format!("'{}'", shorten(s))
}

/// Up to [`EXCERPT`] characters of `s`, control characters escaped, `...` marking a cut.
fn shorten(s: &str) -> String {
    let mut shown = String::new();
    for c in s.chars().take(EXCERPT) {
        if c.is_control() {
            shown.extend(c.escape_debug());
        } else {
            shown.push(c);
        }
    }
    if s.chars().nth(EXCERPT).is_some() {
        shown.push_str("...");
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array, ArrayD, Dimension};
    use ndarray_npy::{WritableElement, WriteNpyExt};

    /// An `.npy` file as numpy lays it out: `prefix` (magic, version, header length),
    /// `dict`, spaces up to a multiple of 64 bytes less one, a newline, then `data`.
    fn numpy_file(prefix: &[u8], dict: &str, data: &[u8]) -> Vec<u8> {
        let mut file = [prefix, dict.as_bytes()].concat();
        while file.len() % 64 != 63 {
            file.push(b' ');
        }
        file.push(b'\n');
        file.extend_from_slice(data);
        file
    }

    /// An `.npy` file of `version` (1, 2 or 3) with header text `header` (taken as it is,
    /// no padding) and `data`.
    fn raw(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
        let mut file = [MAGIC, &[version, 0]].concat();
        match version {
            1 => file.extend_from_slice(&(header.len() as u16).to_le_bytes()),
            _ => file.extend_from_slice(&(header.len() as u32).to_le_bytes()),
        }
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(data);
        file
    }

    /// Files numpy 2.4 wrote (`numpy.lib.format.write_array`, the versions forced where not
    /// 1.0), their bytes copied here: the headers as numpy writes them, big-endian data,
    /// Fortran order, a scalar, a 1-D and an empty array.
    #[test]
    fn files_numpy_wrote_read_back() {
        let f32_be_fortran_v2 = numpy_file(
            b"\x93NUMPY\x02\x00t\x00\x00\x00",
            "{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3), }",
            b"\xbf\x80\x00\x00?\x00\x00\x00\xbf\x00\x00\x00?\x80\x00\x00\x00\x00\x00\x00?\xc0\x00\x00",
        );
        let a = read::<f32>(&f32_be_fortran_v2).unwrap();
        assert_eq!(a.shape(), [2, 3]);
        assert!(!a.is_standard_layout());
        let expected = [[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]];
        assert_eq!(
            a,
            Array::from_shape_fn((2, 3), |(i, j)| expected[i][j]).into_dyn()
        );

        let i16_be_v3 = numpy_file(
            b"\x93NUMPY\x03\x00t\x00\x00\x00",
            "{'descr': '>i2', 'fortran_order': False, 'shape': (2, 3), }",
            b"\x00\x01\xff\xfe\x01,\x00\x04\xff\xfb\x7f\xff",
        );
        let a = read::<i16>(&i16_be_v3).unwrap();
        assert_eq!(
            a.iter().copied().collect::<Vec<_>>(),
            [1, -2, 300, 4, -5, 32767]
        );
        assert_eq!(a.shape(), [2, 3]);

        let i64_fortran = numpy_file(
            b"\x93NUMPY\x01\x00v\x00",
            "{'descr': '<i8', 'fortran_order': True, 'shape': (2, 2), }",
            b"\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\
              \xfe\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x01\x00\x00",
        );
        let a = read::<i64>(&i64_fortran).unwrap();
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), [1, -2, 3, 1 << 40]);

        let bool_scalar = numpy_file(
            b"\x93NUMPY\x01\x00v\x00",
            "{'descr': '|b1', 'fortran_order': False, 'shape': (), }",
            b"\x01",
        );
        let a = read::<bool>(&bool_scalar).unwrap();
        assert_eq!(a.shape(), [] as [usize; 0]);
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), [true]);

        let u8_1d = numpy_file(
            b"\x93NUMPY\x01\x00v\x00",
            "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }",
            b"\x00\x07\xff",
        );
        assert_eq!(
            read::<u8>(&u8_1d).unwrap().into_raw_vec_and_offset().0,
            [0, 7, 255]
        );

        let i8_empty = numpy_file(
            b"\x93NUMPY\x01\x00v\x00",
            "{'descr': '|i1', 'fortran_order': False, 'shape': (2, 0, 3), }",
            b"",
        );
        assert_eq!(read::<i8>(&i8_empty).unwrap().shape(), [2, 0, 3]);

        // The layout rule the helper follows is numpy's (and ndarray-npy's): the header ends
        // at a multiple of 64 bytes.
        for file in [&f32_be_fortran_v2, &i16_be_v3, &i64_fortran, &u8_1d] {
            let data_start = file.len() - header(file).unwrap().1.len();
            assert_eq!(data_start % 64, 0);
        }
    }

    /// `a` written by ndarray-npy (little-endian, in `a`'s own order: C, or Fortran for a
    /// Fortran-layout array) and the same file rewritten big-endian.
    fn both_endians<T: WritableElement>(a: &ArrayD<T>) -> [Vec<u8>; 2] {
        let mut little = Vec::new();
        a.write_npy(&mut little).unwrap();
        let (_, data) = header(&little).unwrap();
        let data_start = little.len() - data.len();
        let mut big = little.clone();
        let size = data.len() / a.len().max(1);
        if size > 1 {
            let descr_at = (little.windows(2).position(|w| w == b"'<")).unwrap() + 1;
            big[descr_at] = b'>';
            for element in big[data_start..].chunks_exact_mut(size) {
                element.reverse();
            }
        }
        [little, big]
    }

    /// Every dtype, in C and Fortran order and both byte orders, over shapes from a scalar
    /// to three dimensions and an empty array: what ndarray-npy writes reads back equal,
    /// with the order the header states.
    #[test]
    fn files_ndarray_npy_wrote_read_back_identically() {
        fn check<T: WritableElement + Element + PartialEq + std::fmt::Debug>(
            make: impl Fn(usize) -> T,
        ) {
            let shapes: [&[usize]; 6] = [&[], &[3], &[2, 3], &[2, 3, 4], &[0, 3], &[1, 1, 5]];
            for shape in shapes {
                // Each element its C-order index, so that a misplaced one shows.
                let c = ArrayD::from_shape_fn(shape, |i| {
                    make(
                        i.slice()
                            .iter()
                            .zip(shape)
                            .fold(0, |acc, (&k, &n)| acc * n + k),
                    )
                });
                let fortran = c.t().as_standard_layout().reversed_axes().into_owned();
                assert_eq!(fortran, c);
                for a in [&c, &fortran] {
                    // ndarray-npy writes C order where the array has it (a Fortran-layout
                    // array with at most one dimension above 1 has both).
                    let is_fortran = !a.is_standard_layout();
                    for file in both_endians(a) {
                        let (h, _) = header(&file).unwrap();
                        assert_eq!(h.shape, shape);
                        assert_eq!(h.fortran_order, is_fortran, "{shape:?}");
                        let read = read::<T>(&file).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
                        assert_eq!(&read, a, "{shape:?}");
                        if is_fortran {
                            assert_eq!(read.strides(), a.strides(), "{shape:?}");
                        } else {
                            assert!(read.is_standard_layout(), "{shape:?}");
                        }
                    }
                }
            }
        }
        check(|i| i as f32 * -0.37 + f32::EPSILON);
        check(|i| (i as i64 - 9) * (1 << 35));
        check(|i| (i as i32 - 9) * 100_003);
        check(|i| (i as i16 - 9) * 1_001);
        check(|i| (i as i8).wrapping_mul(37));
        check(|i| (i as u8).wrapping_mul(91));
        check(|i| i % 3 == 1);
        // The bytes are taken exactly: a NaN's payload and a negative zero survive.
        let odd = ArrayD::from_shape_vec(
            vec![3],
            vec![f32::from_bits(0x7fc0_1234), -0.0, f32::MIN_POSITIVE / 2.0],
        )
        .unwrap();
        for file in both_endians(&odd) {
            let read = read::<f32>(&file).unwrap();
            let bits = |a: &ArrayD<f32>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&read), bits(&odd));
        }
    }

    #[test]
    fn headers_in_any_key_order_and_spacing_are_read() {
        let data = [1u8, 2, 3, 4, 5, 6];
        for text in [
            "{'shape': (2, 3), 'fortran_order': False, 'descr': '|u1'}\n",
            "{\"descr\":\"|u1\",\"fortran_order\":False,\"shape\":(2,3)}",
            "  {'descr' : '|u1' ,\n 'fortran_order':False,'shape':( 2 , 3 , ) , }   \n",
            "{'descr': 'u1', 'fortran_order': False, 'shape': (2L, 3L)}\n",
            "{'descr': 'B', 'fortran_order': False, 'shape': (2, 3)}\t\r\n",
        ] {
            for version in [1, 2, 3] {
                let a = read::<u8>(&raw(version, text, &data))
                    .unwrap_or_else(|e| panic!("{text:?}: {e}"));
                assert_eq!(a.shape(), [2, 3], "{text:?}");
                assert_eq!(a.iter().copied().collect::<Vec<_>>(), data);
            }
        }
        let fortran = raw(
            1,
            "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3)}\n",
            &data,
        );
        let a = read::<u8>(&fortran).unwrap();
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), [1, 3, 5, 2, 4, 6]);
        let (h, _) = header(&raw(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': ()}",
            &[0; 4],
        ))
        .unwrap();
        assert_eq!(
            h,
            Header {
                descr: "<f4".into(),
                fortran_order: false,
                shape: vec![]
            }
        );
    }

    /// Each malformed framing or header gives the error naming its problem.
    #[test]
    fn malformed_files_give_the_error_naming_the_problem() {
        let f4 = [0u8; 4];
        let header_case = |text: &str| read::<f32>(&raw(1, text, &f4)).unwrap_err();
        let cases: Vec<(BadNpy, &str)> = vec![
            (read::<f32>(b"PK\x03\x04").unwrap_err(), "not an .npy file"),
            (read::<f32>(b"\x93NUMPY").unwrap_err(), "not an .npy file"),
            (read::<f32>(b"\x93NUMPY\x01\x00\x05").unwrap_err(), "the .npy header is truncated"),
            (read::<f32>(b"\x93NUMPY\x02\x00\x05\x00\x00").unwrap_err(), "the .npy header is truncated"),
            (read::<f32>(b"\x93NUMPY\x04\x00\x00\x00").unwrap_err(), ".npy format version 4.0 is not supported"),
            (read::<f32>(b"\x93NUMPY\x01\x01\x00\x00").unwrap_err(), ".npy format version 1.1 is not supported"),
            (read::<f32>(b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}").unwrap_err(), "declares 4294967295 header bytes but the file has 14 bytes"),
            (header_case(""), "expected '{' at byte 0 of the header, found the end of the header"),
            (header_case("['descr', '<f4']"), "expected '{' at byte 0 of the header, found `['descr', '<f4']`"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)"), "expected ',' or '}' at byte 54 of the header, found the end of the header"),
            (header_case("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}"), "expected ',' or '}' at byte 16"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}}"), "expected the end of the header (spaces and a newline) at byte 55"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\0"), "expected the end of the header"),
            (header_case("{descr: '<f4'}"), "expected a quoted key or '}' at byte 1 of the header, found `descr: '<f4'}`"),
            (header_case("{'descr': '<f4', 'fortran_order' False}"), "expected ':' at byte 33"),
            (header_case("{'descr': '<f4, 'fortran_order': False}"), "expected ',' or '}' at byte 17 of the header, found `fortran_order': False}`"),
            (header_case("{'descr': '<f4"), "expected a closing quote at byte 14 of the header, found the end of the header"),
            (header_case("{'descr': '\\x3cf4'}"), "expected a closing quote (escapes are not supported) at byte 11"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}"), "the .npy header has unknown key 'extra'; it takes 'descr', 'fortran_order' and 'shape'"),
            (header_case("{'descr': '<f4', 'fortran_order': False}"), "the .npy header has no 'shape' key"),
            (header_case("{'shape': (1,), 'fortran_order': False}"), "the .npy header has no 'descr' key"),
            (header_case("{'shape': (1,), 'descr': '<f4'}"), "the .npy header has no 'fortran_order' key"),
            (header_case("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}"), "the .npy header gives 'descr' twice"),
            (header_case("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"), "the .npy header's 'descr' is `[('a', '<f4')], 'fortran...`, not a dtype string such as '<f4'"),
            (header_case("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}"), "the .npy header's 'fortran_order' is `0, 'shape': (1,)}`, not True or False"),
            (header_case("{'descr': '<f4', 'fortran_order': Trueish, 'shape': (1,)}"), "'fortran_order' is `Trueish"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}"), "the .npy header's 'shape' is `[1]}`, not a tuple of dimensions"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1)}"), "the .npy header's 'shape' is `(1)}`, not a tuple of dimensions such as (1, 3, 224, 224) or (3,)"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1 1)}"), "expected ',' or ')' at byte 53 of the header, found `1)}`"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (,)}"), "the .npy header's 'shape' is `,)}`, not a tuple of non-negative integers"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,)}"), "expected ',' or ')' at byte 52 of the header, found `.5,)}`"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"), "the .npy header's shape has dimension `-1`, which is negative"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}"), "dimension `-3`, which is negative"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)}"), "the .npy header's shape has dimension `18446744073709551616`, more than usize::MAX"),
            (header_case("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}"), "the .npy header declares dtype '<f8'"),
            (header_case("{'descr': 'float32', 'fortran_order': False, 'shape': (1,)}"), "declares dtype 'float32'"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}"), "declares shape [2] (8 bytes of data) but the file holds 4 bytes after it"),
            (header_case("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}"), "declares shape [4611686018427387904, 4] (more than usize::MAX bytes of data)"),
        ];
        for (err, text) in cases {
            assert!(
                err.to_string().contains(text),
                "{err} does not contain {text}"
            );
        }
        // The size check is exact both ways: a scalar is one element, not more.
        let scalar = "{'descr': '<f4', 'fortran_order': False, 'shape': ()}";
        assert!(read::<f32>(&raw(1, scalar, &[0; 4])).is_ok());
        let err = read::<f32>(&raw(1, scalar, &[0; 5]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("declares shape [] (4 bytes of data) but the file holds 5 bytes"),
            "{err}"
        );

        // A zero dimension with others past isize::MAX bytes: no array has that shape.
        let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4)}";
        assert!(matches!(
            read::<f32>(&raw(1, huge, &[])),
            Err(BadNpy::ShapeOverflow(_))
        ));
        let bools = raw(
            1,
            "{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}",
            &[1, 0, 2],
        );
        let err = read::<bool>(&bools).unwrap_err();
        assert!(matches!(err, BadNpy::Bool { index: 2, byte: 2 }), "{err}");
        assert_eq!(
            err.to_string(),
            "the .npy data has byte 0x02 at element 2, which is not a bool (0 or 1)"
        );
        // A hostile key is quoted shortened and escaped.
        let err = header_case(&format!("{{'{}\u{1b}': 1}}", "k".repeat(100))).to_string();
        assert!(
            err.contains(&format!("unknown key '{}...'", "k".repeat(24))),
            "{err}"
        );
    }

    /// Random corruptions of valid files (bytes flipped, cut, spliced) are refused with an
    /// error or read, and never panic or allocate beyond the file: the fuzz target's
    /// property, run briefly on every test run.
    #[test]
    fn corrupted_files_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let seeds: Vec<Vec<u8>> = [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
            "{'descr': '>f4', 'fortran_order': True, 'shape': (3, 2), }",
            "{'descr': '|b1', 'fortran_order': False, 'shape': (), }",
        ]
        .iter()
        .map(|h| numpy_file(b"\x93NUMPY\x01\x00v\x00", h, &[1; 24]))
        .collect();
        for _ in 0..20_000 {
            let mut file = seeds[rng.random_range(0..seeds.len())].clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..file.len());
                match rng.random_range(0..4) {
                    0 => file[at] = rng.random(),
                    1 => file.truncate(at),
                    2 => {
                        file[at] = *b"(),:'-9{} LTrueFalse"
                            .get(rng.random_range(0..20))
                            .unwrap()
                    }
                    _ => file.insert(at, rng.random()),
                }
                if file.is_empty() {
                    break;
                }
            }
            let _ = read::<f32>(&file);
            let _ = read::<bool>(&file);
            let _ = read::<i64>(&file);
        }
    }
}
