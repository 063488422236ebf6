//! Model inputs, outputs and their metadata.

use std::borrow::Cow;
use std::fmt;
use std::ops::Index;

use kenosis_manifest::ElementType;
use ndarray::{Array, ArrayD, ArrayView, ArrayViewD, Dimension};

use crate::Error;

/// Name, element type and shape of one graph input or output.
///
/// Models made by [`include_quantized!`](crate::include_quantized) carry these as `'static`
/// data computed at build time; models made by
/// [`EmbeddedModel::from_static_bytes`](crate::EmbeddedModel::from_static_bytes) read them from
/// the ONNX Runtime session.
///
/// `Display` prints it as `name: f32[1, 3, ?, ?]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorInfo {
    /// The ONNX value name.
    pub name: Cow<'static, str>,
    /// Element type of the tensor.
    pub dtype: ElementType,
    /// Dimensions, outermost first; `None` for a dynamic (symbolic or unknown) dimension,
    /// which accepts any size.
    pub shape: Cow<'static, [Option<i64>]>,
}

impl TensorInfo {
    /// A `TensorInfo` borrowing `'static` data; usable in `const` and `static` items.
    ///
    /// `TensorInfo` has a destructor (its `Cow`s), so a `&'static [TensorInfo]` is written as a
    /// `const` or `static` item of its own, not as a temporary inside another call:
    ///
    /// ```
    /// use kenosis_runtime::{ElementType, TensorInfo};
    /// const INPUTS: &[TensorInfo] =
    ///     &[TensorInfo::from_static("x", ElementType::F32, &[None, Some(3), Some(224), Some(224)])];
    /// assert_eq!(INPUTS[0].to_string(), "x: f32[?, 3, 224, 224]");
    /// ```
    pub const fn from_static(
        name: &'static str,
        dtype: ElementType,
        shape: &'static [Option<i64>],
    ) -> Self {
        Self {
            name: Cow::Borrowed(name),
            dtype,
            shape: Cow::Borrowed(shape),
        }
    }
}

impl fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}{}",
            self.name,
            self.dtype.rust_name(),
            format_shape(&self.shape)
        )
    }
}

/// Formats a declared shape as `[1, 3, ?, ?]`.
pub(crate) fn format_shape(shape: &[Option<i64>]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| d.map_or_else(|| "?".to_owned(), |d| d.to_string()))
        .collect();
    format!("[{}]", dims.join(", "))
}

/// One input tensor for [`EmbeddedModel::run`](crate::EmbeddedModel::run): a borrowed
/// n-dimensional array of one of the supported element types.
///
/// Build it with `From`/`Into` from an [`ArrayView`] or a `&`[`Array`] of any dimensionality:
/// `run([x.view()])`, `run([&x])`, or for inputs of mixed types
/// `run([Input::from(&ids), Input::from(&mask)])`.
///
/// Arrays in standard (C-contiguous) layout are handed to ONNX Runtime without copying; other
/// layouts (transposed or sliced views) are copied into standard layout first.
#[derive(Debug, Clone)]
pub enum Input<'a> {
    /// `f32` / ONNX `FLOAT`.
    F32(ArrayViewD<'a, f32>),
    /// `i64` / ONNX `INT64`.
    I64(ArrayViewD<'a, i64>),
    /// `i32` / ONNX `INT32`.
    I32(ArrayViewD<'a, i32>),
    /// `u8` / ONNX `UINT8`.
    U8(ArrayViewD<'a, u8>),
    /// `i8` / ONNX `INT8`.
    I8(ArrayViewD<'a, i8>),
    /// `bool` / ONNX `BOOL`.
    Bool(ArrayViewD<'a, bool>),
}

/// Applies `$body` to the array inside any `Input`/`Output` variant.
macro_rules! each_variant {
    ($enum:ident, $value:expr, $v:ident => $body:expr) => {
        match $value {
            $enum::F32($v) => $body,
            $enum::I64($v) => $body,
            $enum::I32($v) => $body,
            $enum::U8($v) => $body,
            $enum::I8($v) => $body,
            $enum::Bool($v) => $body,
        }
    };
}

impl Input<'_> {
    /// The element type of the array.
    pub fn dtype(&self) -> ElementType {
        match self {
            Input::F32(_) => ElementType::F32,
            Input::I64(_) => ElementType::I64,
            Input::I32(_) => ElementType::I32,
            Input::U8(_) => ElementType::U8,
            Input::I8(_) => ElementType::I8,
            Input::Bool(_) => ElementType::Bool,
        }
    }

    /// The shape of the array.
    pub fn shape(&self) -> &[usize] {
        each_variant!(Input, self, v => v.shape())
    }

    /// Wraps the array in an ONNX Runtime value: a zero-copy view when it is contiguous,
    /// an owned copy otherwise.
    pub(crate) fn to_ort<'a>(&'a self) -> ort::Result<ort::session::SessionInputValue<'a>> {
        fn value<'a, T>(v: &ArrayViewD<'a, T>) -> ort::Result<ort::session::SessionInputValue<'a>>
        where
            T: ort::value::PrimitiveTensorElementType + Clone + fmt::Debug + 'static,
        {
            Ok(if v.is_standard_layout() {
                ort::value::TensorRef::from_array_view(v.clone())?.into()
            } else {
                ort::value::Tensor::from_array(v.as_standard_layout().into_owned())?.into()
            })
        }
        each_variant!(Input, self, v => value(v))
    }
}

macro_rules! input_from {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl<'a, D: Dimension> From<ArrayView<'a, $t, D>> for Input<'a> {
            fn from(view: ArrayView<'a, $t, D>) -> Self {
                Input::$variant(view.into_dyn())
            }
        }

        impl<'a, D: Dimension> From<&'a Array<$t, D>> for Input<'a> {
            fn from(array: &'a Array<$t, D>) -> Self {
                Input::$variant(array.view().into_dyn())
            }
        }
    )*};
}

input_from!(f32 => F32, i64 => I64, i32 => I32, u8 => U8, i8 => I8, bool => Bool);

/// One output tensor of [`EmbeddedModel::run`](crate::EmbeddedModel::run), owned, in standard
/// layout, tagged with its element type.
///
/// Borrow it with [`as_f32`](Output::as_f32) (and siblings), which return `None` for another
/// element type, or take it with [`into_f32`](Output::into_f32) (and siblings), which return
/// [`Error::OutputDtype`] for another element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// `f32` / ONNX `FLOAT`.
    F32(ArrayD<f32>),
    /// `i64` / ONNX `INT64`.
    I64(ArrayD<i64>),
    /// `i32` / ONNX `INT32`.
    I32(ArrayD<i32>),
    /// `u8` / ONNX `UINT8`.
    U8(ArrayD<u8>),
    /// `i8` / ONNX `INT8`.
    I8(ArrayD<i8>),
    /// `bool` / ONNX `BOOL`.
    Bool(ArrayD<bool>),
}

macro_rules! output_accessors {
    ($($t:ty => $variant:ident, $as_fn:ident, $into_fn:ident);* $(;)?) => {$(
        #[doc = concat!("A view of the array if this output's element type is `", stringify!($t), "`, else `None`.")]
        pub fn $as_fn(&self) -> Option<ArrayViewD<'_, $t>> {
            match self {
                Output::$variant(array) => Some(array.view()),
                _ => None,
            }
        }

        #[doc = concat!("The array if this output's element type is `", stringify!($t), "`.")]
        ///
        /// # Errors
        /// [`Error::OutputDtype`] naming the actual element type otherwise.
        pub fn $into_fn(self) -> Result<ArrayD<$t>, Error> {
            match self {
                Output::$variant(array) => Ok(array),
                other => Err(Error::OutputDtype {
                    expected: ElementType::$variant,
                    actual: other.dtype(),
                }),
            }
        }
    )*};
}

impl Output {
    /// The element type of the array.
    pub fn dtype(&self) -> ElementType {
        match self {
            Output::F32(_) => ElementType::F32,
            Output::I64(_) => ElementType::I64,
            Output::I32(_) => ElementType::I32,
            Output::U8(_) => ElementType::U8,
            Output::I8(_) => ElementType::I8,
            Output::Bool(_) => ElementType::Bool,
        }
    }

    /// The shape of the array.
    pub fn shape(&self) -> &[usize] {
        each_variant!(Output, self, v => v.shape())
    }

    output_accessors! {
        f32 => F32, as_f32, into_f32;
        i64 => I64, as_i64, into_i64;
        i32 => I32, as_i32, into_i32;
        u8 => U8, as_u8, into_u8;
        i8 => I8, as_i8, into_i8;
        bool => Bool, as_bool, into_bool;
    }

    /// Copies an ONNX Runtime output value into an `Output`.
    pub(crate) fn from_ort(
        value: &ort::value::DynValue,
        model: &'static str,
        name: &str,
    ) -> Result<Self, Error> {
        use ort::value::{TensorElementType as T, ValueType};

        let run_error = |e: ort::Error| Error::Run {
            model,
            message: format!("reading output `{name}`: {e}"),
        };
        let unsupported = || Error::UnsupportedType {
            model,
            name: name.to_owned(),
            ty: value.dtype().to_string(),
        };
        let ValueType::Tensor { ty, .. } = value.dtype() else {
            return Err(unsupported());
        };
        Ok(match ty {
            T::Float32 => Output::F32(
                value
                    .try_extract_array::<f32>()
                    .map_err(run_error)?
                    .to_owned(),
            ),
            T::Int64 => Output::I64(
                value
                    .try_extract_array::<i64>()
                    .map_err(run_error)?
                    .to_owned(),
            ),
            T::Int32 => Output::I32(
                value
                    .try_extract_array::<i32>()
                    .map_err(run_error)?
                    .to_owned(),
            ),
            T::Uint8 => Output::U8(
                value
                    .try_extract_array::<u8>()
                    .map_err(run_error)?
                    .to_owned(),
            ),
            T::Int8 => Output::I8(
                value
                    .try_extract_array::<i8>()
                    .map_err(run_error)?
                    .to_owned(),
            ),
            T::Bool => Output::Bool(
                value
                    .try_extract_array::<bool>()
                    .map_err(run_error)?
                    .to_owned(),
            ),
            _ => return Err(unsupported()),
        })
    }
}

/// The outputs of one [`EmbeddedModel::run`](crate::EmbeddedModel::run) call, in graph-output
/// order, each with its ONNX name.
///
/// Look outputs up by position (`outputs[0]`), by name (`outputs["y"]`, or
/// [`get`](Outputs::get) for an `Option`), iterate them with [`iter`](Outputs::iter), or take
/// them apart with [`remove`](Outputs::remove) / `into_iter()`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    entries: Vec<(String, Output)>,
}

impl Outputs {
    pub(crate) fn new(entries: Vec<(String, Output)>) -> Self {
        Self { entries }
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when the model has no outputs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The output named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Output> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, o)| o)
    }

    /// Removes and returns the output named `name` (so its array can be taken without a copy).
    pub fn remove(&mut self, name: &str) -> Option<Output> {
        let index = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(index).1)
    }

    /// The output names, in graph-output order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// `(name, output)` pairs, in graph-output order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Output)> + '_ {
        self.entries.iter().map(|(n, o)| (n.as_str(), o))
    }
}

impl Index<usize> for Outputs {
    type Output = Output;

    /// The output at `index` in graph-output order.
    ///
    /// # Panics
    /// When `index >= self.len()`.
    fn index(&self, index: usize) -> &Output {
        &self.entries[index].1
    }
}

impl Index<&str> for Outputs {
    type Output = Output;

    /// The output named `name`.
    ///
    /// # Panics
    /// When there is no output of that name; use [`Outputs::get`] to get an `Option`.
    #[allow(
        clippy::panic,
        reason = "Index::index cannot return an error; its documentation names the panic and Outputs::get the alternative"
    )]
    fn index(&self, name: &str) -> &Output {
        self.get(name)
            .unwrap_or_else(|| panic!("model has no output named `{name}`"))
    }
}

impl IntoIterator for Outputs {
    type Item = (String, Output);
    type IntoIter = std::vec::IntoIter<(String, Output)>;

    /// `(name, output)` pairs, in graph-output order.
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Outputs {
    type Item = (&'a str, &'a Output);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, Output)>,
        fn(&'a (String, Output)) -> (&'a str, &'a Output),
    >;

    /// `(name, output)` pairs, in graph-output order.
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(n, o)| (n.as_str(), o))
    }
}
