//! The runtime's error type.

use kenosis_manifest::ElementType;

/// Everything that can go wrong when loading or running an [`EmbeddedModel`](crate::EmbeddedModel).
///
/// Every variant names the model by its source label (the path given to
/// [`include_quantized!`](crate::include_quantized) or the label given to
/// [`EmbeddedModel::from_static_bytes`](crate::EmbeddedModel::from_static_bytes)), so an error
/// from a program embedding several models says which one failed.
///
/// The type is `Clone` (ONNX Runtime's messages are kept as strings) so that a failed session
/// creation can be reported again, identically, on every later call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The process-wide ONNX Runtime environment could not be created (for example because
    /// another part of the program already created one with `ort::init()`; hand that one to
    /// [`set_environment`](crate::set_environment) instead).
    #[error("kenosis: could not create the ONNX Runtime environment: {message}")]
    Environment {
        /// ONNX Runtime's message.
        message: String,
    },

    /// ONNX Runtime rejected the embedded model bytes (or the session options).
    #[error("kenosis: could not create an ONNX Runtime session for model `{model}`: {message}")]
    Session {
        /// Source label of the model.
        model: &'static str,
        /// ONNX Runtime's message.
        message: String,
    },

    /// [`run`](crate::EmbeddedModel::run) got a different number of inputs than the model has.
    #[error(
        "model `{model}` takes {expected} input(s) ({}), in this order; got {actual}",
        .names.join(", ")
    )]
    InputCount {
        /// Source label of the model.
        model: &'static str,
        /// Number of graph inputs of the model.
        expected: usize,
        /// Number of inputs passed.
        actual: usize,
        /// Names of the model's inputs, in the order `run` expects them.
        names: Vec<String>,
    },

    /// An input array has the wrong element type.
    #[error(
        "model `{model}` input `{input}` expects element type {}, got {}",
        .expected.rust_name(),
        .actual.rust_name()
    )]
    InputDtype {
        /// Source label of the model.
        model: &'static str,
        /// Name of the graph input.
        input: String,
        /// The element type the model declares.
        expected: ElementType,
        /// The element type of the array passed.
        actual: ElementType,
    },

    /// An input array's rank or one of its static dimensions does not match the model.
    #[error(
        "model `{model}` input `{input}` expects shape {} (`?` = any size), got {:?}",
        crate::io::format_shape(.expected),
        .actual
    )]
    InputShape {
        /// Source label of the model.
        model: &'static str,
        /// Name of the graph input.
        input: String,
        /// The declared shape; `None` for a dynamic dimension.
        expected: Vec<Option<i64>>,
        /// The shape of the array passed.
        actual: Vec<usize>,
    },

    /// ONNX Runtime failed while running the model (or while converting inputs/outputs).
    #[error("kenosis: running model `{model}` failed: {message}")]
    Run {
        /// Source label of the model.
        model: &'static str,
        /// ONNX Runtime's message.
        message: String,
    },

    /// A graph input or output has a type Kenosis cannot represent (a sequence, a map,
    /// bfloat16, ...), or an output has an element type [`Output`](crate::Output) has no
    /// variant for.
    #[error(
        "model `{model}` value `{name}` has type {ty}, which kenosis-runtime does not support"
    )]
    UnsupportedType {
        /// Source label of the model.
        model: &'static str,
        /// Name of the graph input or output.
        name: String,
        /// ONNX Runtime's description of the type.
        ty: String,
    },

    /// [`Output::into_f32`](crate::Output::into_f32) (or a sibling) was called on an output of
    /// another element type.
    #[error(
        "output has element type {}, not {}",
        .actual.rust_name(),
        .expected.rust_name()
    )]
    OutputDtype {
        /// The element type asked for.
        expected: ElementType,
        /// The element type of the output.
        actual: ElementType,
    },

    /// An output of a typed wrapper made by [`include_quantized!`](crate::include_quantized)
    /// does not have the element type or rank recorded at build time (the embedded artifact
    /// and its manifest disagree).
    #[error(
        "model `{model}` output `{output}`: expected {expected}, ONNX Runtime returned {actual}"
    )]
    OutputMismatch {
        /// Source label of the model.
        model: &'static str,
        /// Name of the graph output.
        output: String,
        /// Element type and rank declared at build time.
        expected: String,
        /// What was returned.
        actual: String,
    },

    /// A session option was changed after the session had already been created, or
    /// [`EmbeddedModel::configure_session`](crate::EmbeddedModel::configure_session) was
    /// called a second time.
    #[error("model `{model}`: session options must be set once, before the model is first used")]
    AlreadyLoaded {
        /// Source label of the model.
        model: &'static str,
    },
}
