//! Support code for the typed wrappers that [`include_quantized!`](crate::include_quantized)
//! generates. Not a public API: its items change with the macro.

use ndarray::{Array, ArrayD, Dimension};

use crate::io::Output;
use crate::Error;

/// Element types a typed wrapper can return, each with the [`Output`] variant holding it.
pub trait OutputElement: Sized {
    /// The array inside `output` if it holds this element type.
    fn take(output: Output) -> Result<ArrayD<Self>, Output>;
}

macro_rules! output_element {
    ($($t:ty => $variant:ident),*) => {$(
        impl OutputElement for $t {
            fn take(output: Output) -> Result<ArrayD<Self>, Output> {
                match output {
                    Output::$variant(array) => Ok(array),
                    other => Err(other),
                }
            }
        }
    )*};
}

output_element!(f32 => F32, i64 => I64, i32 => I32, u8 => U8, i8 => I8, bool => Bool);

/// Takes the next output (named `name`) of a run and converts it to the element type and rank
/// the build-time manifest declared.
///
/// # Errors
/// [`Error::OutputMismatch`] when the output is missing or has another element type or rank.
pub fn output<T: OutputElement, D: Dimension>(
    model: &'static str,
    outputs: &mut impl Iterator<Item = (String, Output)>,
    name: &'static str,
) -> Result<Array<T, D>, Error> {
    let expected = || {
        format!(
            "{}[{}]",
            std::any::type_name::<T>(),
            D::NDIM.map_or("any rank".to_owned(), |n| format!("rank {n}"))
        )
    };
    let mismatch = |actual: String| Error::OutputMismatch {
        model,
        output: name.to_owned(),
        expected: expected(),
        actual,
    };
    let (_, value) = outputs
        .next()
        .ok_or_else(|| mismatch("no such output".to_owned()))?;
    let array = T::take(value)
        .map_err(|other| mismatch(format!("{}{:?}", other.dtype().rust_name(), other.shape())))?;
    let shape = array.shape().to_vec();
    array
        .into_dimensionality::<D>()
        .map_err(|_| mismatch(format!("{}{shape:?}", std::any::type_name::<T>())))
}
