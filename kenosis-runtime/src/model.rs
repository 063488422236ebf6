//! [`EmbeddedModel`]: model bytes compiled into the binary plus a lazily created session.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use kenosis_manifest::ElementType;
use ort::environment::Environment;
use ort::session::builder::SessionBuilder;
use ort::session::Session;

use crate::io::{Input, Output, Outputs, TensorInfo};
use crate::Error;

/// The process-wide ONNX Runtime environment all Kenosis sessions are created under.
///
/// `ort` allows one environment per process, so it is created at most once, on first use.
static ENVIRONMENT: OnceLock<Result<Environment, Error>> = OnceLock::new();

/// Makes Kenosis create its sessions under `environment` instead of building its own.
///
/// ONNX Runtime (through `ort`) allows only one environment per process. Kenosis creates one
/// lazily, with default settings, the first time any [`EmbeddedModel`] is used; a program that
/// needs its own environment (custom execution providers, a global thread pool, a logger) or
/// that also uses `ort` directly should build it with [`ort_init`](crate::ort_init) (which
/// loads the bundled ONNX Runtime first, with the `bundled-ort` feature) and hand it over here
/// *before* using any model.
///
/// # Errors
/// Returns `environment` back if Kenosis already has an environment (a model was used before,
/// or `set_environment` was called before).
pub fn set_environment(environment: Environment) -> Result<(), Environment> {
    ENVIRONMENT
        .set(Ok(environment))
        .map_err(|rejected| match rejected {
            Ok(environment) => environment,
            Err(_) => unreachable!("set_environment only ever offers Ok"),
        })
}

/// The shared environment, created on first call.
fn environment() -> Result<&'static Environment, Error> {
    ENVIRONMENT
        .get_or_init(|| {
            crate::ort_init()?
                .with_name("kenosis")
                .with_telemetry(false)
                .build()
                .map_err(|e| Error::Environment {
                    message: e.to_string(),
                })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A change to the session builder, applied just before the model is committed (see
/// [`EmbeddedModel::configure_session`]).
type Configure = Box<dyn Fn(SessionBuilder) -> ort::Result<SessionBuilder> + Send + Sync>;

/// Metadata given at construction: by the macro, from the build-time manifest.
struct Declared {
    inputs: &'static [TensorInfo],
    outputs: &'static [TensorInfo],
}

/// A created session and what was read from it.
struct Loaded {
    session: Mutex<Session>,
    /// Graph inputs as reported by ONNX Runtime (or why they cannot be represented).
    inputs: Result<Vec<TensorInfo>, Error>,
    /// Graph outputs as reported by ONNX Runtime (or why they cannot be represented).
    outputs: Result<Vec<TensorInfo>, Error>,
    /// Output names in graph order, for naming the values `run` returns.
    output_names: Vec<String>,
}

/// An ONNX model whose bytes live in the binary (`&'static [u8]`), with a session created on
/// first use.
///
/// Made by [`include_quantized!`](crate::include_quantized) (an INT8 QDQ model quantized by
/// `kenosis-build` at build time, with its input/output metadata known at compile time) or by
/// [`EmbeddedModel::from_static_bytes`] (any ONNX model, e.g. the FP32 original for comparison).
///
/// # Sessions and threads
/// The ONNX Runtime session is created from the bytes in memory (no temporary files) the first
/// time it is needed: by [`run`](Self::run), [`load`](Self::load),
/// [`with_session`](Self::with_session), or, for models not made by the macro,
/// [`inputs`](Self::inputs)/[`outputs`](Self::outputs). It is created once, even when several
/// threads race for it. If creation fails, the same [`Error::Session`] is returned by every
/// later call; nothing panics.
///
/// `EmbeddedModel` is `Sync` and is meant to live in a `static`. ONNX Runtime sessions need
/// exclusive access to run, so concurrent [`run`](Self::run) calls on one model are serialized
/// by a mutex; each call itself uses ONNX Runtime's intra-op thread pool (see
/// [`set_intra_threads`](Self::set_intra_threads)).
pub struct EmbeddedModel {
    source: &'static str,
    bytes: &'static [u8],
    declared: Option<Declared>,
    /// Intra-op thread count for the session; 0 = `build_threads`, else
    /// [`default_intra_threads`].
    intra_threads: AtomicUsize,
    /// The build's `intra_threads` option (0: none), what its speed check timed.
    build_threads: usize,
    configure: OnceLock<Configure>,
    loaded: OnceLock<Result<Loaded, Error>>,
}

pub use kenosis_manifest::{default_intra_threads, MAX_DEFAULT_INTRA_THREADS};

impl EmbeddedModel {
    /// Used by [`include_quantized!`](crate::include_quantized) to build the model's `static`.
    /// Not a public API: its signature changes with the macro.
    #[doc(hidden)]
    pub const fn __from_macro(
        source: &'static str,
        bytes: &'static [u8],
        inputs: &'static [TensorInfo],
        outputs: &'static [TensorInfo],
        intra_threads: usize,
    ) -> EmbeddedModel {
        EmbeddedModel {
            source,
            bytes,
            declared: Some(Declared { inputs, outputs }),
            intra_threads: AtomicUsize::new(0),
            build_threads: intra_threads,
            configure: OnceLock::new(),
            loaded: OnceLock::new(),
        }
    }

    /// Wraps the bytes of any ONNX model, e.g. `include_bytes!("models/net.onnx")` for the FP32
    /// original of a quantized model. `label` names the model in errors and
    /// [`source`](Self::source).
    ///
    /// Nothing is parsed until first use; input and output metadata are read from the ONNX
    /// Runtime session. Being a `const fn`, it can initialize a `static`:
    ///
    /// ```no_run
    /// use kenosis_runtime::EmbeddedModel;
    /// static FP32: EmbeddedModel =
    ///     EmbeddedModel::from_static_bytes("models/net.onnx", include_bytes!("../testdata/tiny_conv.onnx"));
    /// ```
    pub const fn from_static_bytes(label: &'static str, bytes: &'static [u8]) -> EmbeddedModel {
        EmbeddedModel {
            source: label,
            bytes,
            declared: None,
            intra_threads: AtomicUsize::new(0),
            build_threads: 0,
            configure: OnceLock::new(),
            loaded: OnceLock::new(),
        }
    }

    /// The serialized ONNX model (for `include_quantized!`: the INT8 QDQ artifact).
    pub fn bytes(&self) -> &'static [u8] {
        self.bytes
    }

    /// The model's source label: the path literal given to
    /// [`include_quantized!`](crate::include_quantized), or the label given to
    /// [`from_static_bytes`](Self::from_static_bytes).
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The graph inputs (initializers excluded), in the order [`run`](Self::run) takes them.
    ///
    /// For models made by [`include_quantized!`](crate::include_quantized) this is compile-time
    /// data and never fails or loads the session.
    ///
    /// # Errors
    /// For models made by [`from_static_bytes`](Self::from_static_bytes): [`Error::Environment`]
    /// or [`Error::Session`] if the session cannot be created, [`Error::UnsupportedType`] if an
    /// input is not a tensor of an [`ElementType`].
    pub fn inputs(&self) -> Result<&[TensorInfo], Error> {
        match &self.declared {
            Some(declared) => Ok(declared.inputs),
            None => self.loaded()?.inputs.as_deref().map_err(Clone::clone),
        }
    }

    /// The graph outputs, in the order [`run`](Self::run) returns them.
    ///
    /// # Errors
    /// As for [`inputs`](Self::inputs).
    pub fn outputs(&self) -> Result<&[TensorInfo], Error> {
        match &self.declared {
            Some(declared) => Ok(declared.outputs),
            None => self.loaded()?.outputs.as_deref().map_err(Clone::clone),
        }
    }

    /// Sets the number of threads ONNX Runtime uses *within* one operator (its intra-op thread
    /// pool) for this model's session; `0` means the count the build's `intra_threads` option
    /// set (what its speed check timed), else [`default_intra_threads`] for this machine's
    /// logical CPUs. Must be called before the session is created, i.e. before
    /// the model is first run.
    ///
    /// ```no_run
    /// # static MODEL: kenosis_runtime::EmbeddedModel =
    /// #     kenosis_runtime::EmbeddedModel::from_static_bytes("m", &[]);
    /// MODEL.set_intra_threads(1)?;
    /// # Ok::<(), kenosis_runtime::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::AlreadyLoaded`] if the session already exists (the setting would have no effect).
    /// A call racing with the first use on another thread may take effect or not.
    pub fn set_intra_threads(&self, threads: usize) -> Result<(), Error> {
        if self.loaded.get().is_some() {
            return Err(Error::AlreadyLoaded { model: self.source });
        }
        self.intra_threads.store(threads, Ordering::Relaxed);
        Ok(())
    }

    /// The intra-op thread count this model's session is (or will be) created with:
    /// [`set_intra_threads`](Self::set_intra_threads)'s, else the build's `intra_threads`
    /// option (the count its speed check timed), else [`default_intra_threads`] for this
    /// machine's logical CPUs. `None`: ONNX Runtime's own choice, one thread per physical
    /// core.
    pub fn intra_threads(&self) -> Option<usize> {
        match (
            self.intra_threads.load(Ordering::Relaxed),
            self.build_threads,
        ) {
            (0, 0) => default_intra_threads(
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            ),
            (0, n) | (n, _) => Some(n),
        }
    }

    /// Sets a function that adjusts ONNX Runtime's session builder before the model is
    /// committed: execution providers, session options, or the kernels of custom-domain ops.
    ///
    /// A model with an op of a custom domain ONNX Runtime does not implement is quantized
    /// around that op (the op and everything depending on it stay FP32; see
    /// `kenosis_quantize::calibrate::runnable`), and the op's kernel must be registered here:
    ///
    /// ```no_run
    /// # static MODEL: kenosis_runtime::EmbeddedModel =
    /// #     kenosis_runtime::EmbeddedModel::from_static_bytes("m", &[]);
    /// MODEL.configure_session(|builder| Ok(builder.with_operator_library("libacme_ops.so")?))?;
    /// # Ok::<(), kenosis_runtime::Error>(())
    /// ```
    ///
    /// (or `builder.with_operators(domain)` for kernels written in Rust with `ort::operator`).
    /// An error `configure` returns becomes the model's [`Error::Session`].
    ///
    /// # Errors
    /// [`Error::AlreadyLoaded`] if the session already exists or a function was set before.
    pub fn configure_session(
        &self,
        configure: impl Fn(SessionBuilder) -> ort::Result<SessionBuilder> + Send + Sync + 'static,
    ) -> Result<(), Error> {
        if self.loaded.get().is_some() {
            return Err(Error::AlreadyLoaded { model: self.source });
        }
        self.configure
            .set(Box::new(configure))
            .map_err(|_| Error::AlreadyLoaded { model: self.source })
    }

    /// Creates the session now instead of on first use, so a broken model or runtime setup is
    /// reported at startup. Does nothing if the session exists already.
    ///
    /// # Errors
    /// [`Error::Environment`] or [`Error::Session`] if the session cannot be created.
    pub fn load(&self) -> Result<(), Error> {
        self.loaded().map(|_| ())
    }

    /// Runs `f` with exclusive access to the underlying `ort` session, creating it first if
    /// needed: an escape hatch for what [`run`](Self::run) does not cover (IO binding, run
    /// options, metadata).
    ///
    /// # Errors
    /// [`Error::Environment`] or [`Error::Session`] if the session cannot be created.
    pub fn with_session<R>(&self, f: impl FnOnce(&mut Session) -> R) -> Result<R, Error> {
        let loaded = self.loaded()?;
        let mut session = loaded
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(f(&mut session))
    }

    /// Runs the model on `inputs`, given in graph-input order (see [`inputs`](Self::inputs)),
    /// and returns all outputs in graph-output order.
    ///
    /// Each input is anything that converts [`Into`] an [`Input`]: an `ndarray` view or a
    /// reference to an array of `f32`, `i64`, `i32`, `u8`, `i8` or `bool`, of any
    /// dimensionality. Before anything runs, the inputs are checked against the model's input
    /// metadata: their number, each one's element type, and each one's rank and static
    /// dimensions (dynamic dimensions accept any size).
    ///
    /// ```no_run
    /// # fn demo(model: &kenosis_runtime::EmbeddedModel) -> Result<(), kenosis_runtime::Error> {
    /// let x = ndarray::Array4::<f32>::zeros((1, 3, 224, 224));
    /// let outputs = model.run([x.view()])?;
    /// let logits = outputs[0].as_f32().expect("f32 logits");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Environment`] / [`Error::Session`]: the session cannot be created.
    /// - [`Error::InputCount`], [`Error::InputDtype`], [`Error::InputShape`]: the inputs do not
    ///   match the model; the error names the input, what it expects and what it got.
    /// - [`Error::Run`]: ONNX Runtime failed.
    /// - [`Error::UnsupportedType`]: an output is not a tensor of a type [`Output`] can hold.
    pub fn run<'a, I: Into<Input<'a>>>(
        &self,
        inputs: impl IntoIterator<Item = I>,
    ) -> Result<Outputs, Error> {
        let inputs: Vec<Input<'a>> = inputs.into_iter().map(Into::into).collect();
        // For macro-made models this needs no session, so bad inputs fail fast.
        validate_inputs(self.source, self.inputs()?, &inputs)?;
        let loaded = self.loaded()?;

        let run_error = |e: ort::Error| Error::Run {
            model: self.source,
            message: e.to_string(),
        };
        let values = inputs
            .iter()
            .map(Input::to_ort)
            .collect::<Result<Vec<_>, _>>()
            .map_err(run_error)?;

        let mut session = loaded
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // `values` must outlive the copies below: ONNX Runtime may return a graph input that is
        // also a graph output as an alias of the input's buffer.
        let outputs = session.run(values.as_slice()).map_err(run_error)?;
        let entries = loaded
            .output_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                Ok((
                    name.clone(),
                    Output::from_ort(&outputs[i], self.source, name)?,
                ))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Outputs::new(entries))
    }

    /// The session, created on first call; a creation error is kept and returned every time.
    fn loaded(&self) -> Result<&Loaded, Error> {
        self.loaded
            .get_or_init(|| self.create_session())
            .as_ref()
            .map_err(Clone::clone)
    }

    fn create_session(&self) -> Result<Loaded, Error> {
        let session_error = |message: String| Error::Session {
            model: self.source,
            message,
        };
        let environment = environment()?;
        let mut builder =
            Session::builder(environment).map_err(|e| session_error(e.to_string()))?;
        if let Some(threads) = self.intra_threads() {
            builder = builder
                .with_intra_threads(threads)
                .map_err(|e| session_error(e.to_string()))?;
        }
        if let Some(configure) = self.configure.get() {
            builder = configure(builder).map_err(|e| session_error(e.to_string()))?;
        }
        let session = builder
            .commit_from_memory(self.bytes)
            .map_err(|e| session_error(e.to_string()))?;
        // ONNX Runtime parsed its own copy: the embedded bytes are not read again by it.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        crate::pages::release(self.bytes);

        let describe = |outlets: &[ort::value::Outlet]| {
            outlets
                .iter()
                .map(|outlet| tensor_info(self.source, outlet))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Loaded {
            inputs: describe(session.inputs()),
            outputs: describe(session.outputs()),
            output_names: session
                .outputs()
                .iter()
                .map(|o| o.name().to_owned())
                .collect(),
            session: Mutex::new(session),
        })
    }
}

impl fmt::Debug for EmbeddedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let session = match self.loaded.get() {
            None => "not created",
            Some(Ok(_)) => "created",
            Some(Err(_)) => "failed",
        };
        f.debug_struct("EmbeddedModel")
            .field("source", &self.source)
            .field("bytes", &format_args!("{} bytes", self.bytes.len()))
            .field("inputs", &self.declared.as_ref().map(|d| d.inputs))
            .field("outputs", &self.declared.as_ref().map(|d| d.outputs))
            .field("session", &session)
            .finish()
    }
}

/// Checks count, element types, ranks and static dimensions of `inputs` against `expected`.
fn validate_inputs(
    model: &'static str,
    expected: &[TensorInfo],
    inputs: &[Input<'_>],
) -> Result<(), Error> {
    if inputs.len() != expected.len() {
        return Err(Error::InputCount {
            model,
            expected: expected.len(),
            actual: inputs.len(),
            names: expected.iter().map(|info| info.name.to_string()).collect(),
        });
    }
    for (info, input) in expected.iter().zip(inputs) {
        if input.dtype() != info.dtype {
            return Err(Error::InputDtype {
                model,
                input: info.name.to_string(),
                expected: info.dtype,
                actual: input.dtype(),
            });
        }
        let shape = input.shape();
        let fits = shape.len() == info.shape.len()
            && info
                .shape
                .iter()
                .zip(shape)
                .all(|(want, &got)| want.is_none_or(|want| want == got as i64));
        if !fits {
            return Err(Error::InputShape {
                model,
                input: info.name.to_string(),
                expected: info.shape.to_vec(),
                actual: shape.to_vec(),
            });
        }
    }
    Ok(())
}

/// Converts an `ort` graph input/output description.
fn tensor_info(model: &'static str, outlet: &ort::value::Outlet) -> Result<TensorInfo, Error> {
    use ort::value::{TensorElementType as T, ValueType};

    let unsupported = || Error::UnsupportedType {
        model,
        name: outlet.name().to_owned(),
        ty: outlet.dtype().to_string(),
    };
    let ValueType::Tensor { ty, shape, .. } = outlet.dtype() else {
        return Err(unsupported());
    };
    let dtype = match ty {
        T::Float32 => ElementType::F32,
        T::Uint8 => ElementType::U8,
        T::Int8 => ElementType::I8,
        T::Uint16 => ElementType::U16,
        T::Int16 => ElementType::I16,
        T::Int32 => ElementType::I32,
        T::Int64 => ElementType::I64,
        T::String => ElementType::String,
        T::Bool => ElementType::Bool,
        T::Float16 => ElementType::F16,
        T::Float64 => ElementType::F64,
        T::Uint32 => ElementType::U32,
        T::Uint64 => ElementType::U64,
        _ => return Err(unsupported()),
    };
    Ok(TensorInfo {
        name: Cow::Owned(outlet.name().to_owned()),
        dtype,
        shape: shape.iter().map(|&d| (d >= 0).then_some(d)).collect(),
    })
}
