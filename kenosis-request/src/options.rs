//! The options of a build, generated from `kenosis-options`' declaration table (see
//! `kenosis_options::table`): each option's field of the resolved [`QuantizeOptions`] with
//! its default and check, and its line in the cache key (`kenosis-build`'s `Config` setters
//! come from the same table). Nothing here names an option: adding one to the table adds it
//! everywhere.

use kenosis_options::{BuildTarget, Options};

use crate::device_profile::DeviceProfile;
use crate::error::{Error, Result};
use crate::kernel_costs::{KernelCosts, Pricing};
use crate::kernels::{Evaluation, IntegerKernels, TargetCpu};

/// Generates [`QuantizeOptions`] from the table's `artifact` entries.
macro_rules! define_build_options {
    (
        inputs { $($inputs:tt)* }
        artifact { $(
            $(#[doc = $doc:literal])+
            $name:ident: $ty:ty {
                check: $check:path,
                merge: $merge:ident,
                resolved: $resolved:ty = $default:expr,
                setter: {
                    $(#[$setter_attr:meta])*
                    fn $setter:ident($($arg:ident: $arg_ty:ty),* $(,)?) = $value:expr;
                },
            }
        )* }
    ) => {

        /// Options that determine the artifact, resolved: every option's value (a build's
        /// layers of [`Options`] over the defaults), and how the fidelity check runs. All of
        /// them enter the cache key, through [`QuantizeOptions::canonical`].
        #[derive(Debug, Clone, PartialEq)]
        pub struct QuantizeOptions {
            $(
                $(#[doc = $doc])+
                pub $name: $resolved,
            )*
            /// How the fidelity check runs the INT8 model: on the build machine's integer
            /// kernels, or on the QDQ reference where those differ from the target's (see
            /// [`crate::kernels`]).
            pub evaluation: Evaluation,
            /// Whether the build machine runs the target's code (same architecture and integer
            /// kernels), so that a speed measured in the build holds on the target: `true`
            /// from [`QuantizeOptions::resolve`] (a build for its own machine), set by
            /// `Config::compile` from the target.
            pub host_runs_target: bool,
            /// The target's CPU class, whose kernel costs decide which regions run faster in
            /// FP32 (see `kenosis_quantize::quantize::domain`): the build machine's class from
            /// [`QuantizeOptions::resolve`], set by `Config::compile` from the target.
            pub target_cpu: TargetCpu,
            /// The CPU whose measured kernel costs price the placement instead of
            /// [`target_cpu`](Self::target_cpu)'s table row: a hash of the build machine's
            /// [`crate::kernels::cpu_identity`], set by [`QuantizeOptions::for_target`] when
            /// the build machine's CPU class is the target's and slower regions return to
            /// FP32; `None` (the table) otherwise. The cache key names the CPU, not the costs:
            /// they are measured once per CPU and kept (`kernel_bench::cached`).
            pub kernel_costs_cpu: Option<String>,
            /// The costs measured on that CPU (`kernel_bench`), filled in by the quantizer
            /// before it plans, or read from a device profile
            /// ([`QuantizeOptions::with_device_profile`]); `None` until then.
            pub measured_costs: Option<KernelCosts>,
            /// The device whose profile gave [`measured_costs`](Self::measured_costs) (its
            /// CPU's name), for the report; `None` otherwise.
            pub costs_device: Option<String>,
        }

        impl QuantizeOptions {
            /// The options `layers` writes, each unwritten one at its default for `target`.
            pub fn resolve(layers: &Options, target: BuildTarget, evaluation: Evaluation) -> Self {
                Self {
                    $(
                        $name: {
                            let default: fn(&BuildTarget) -> $resolved = $default;
                            layers.$name.clone().map_or_else(|| default(&target), Into::into)
                        },
                    )*
                    evaluation,
                    host_runs_target: true,
                    target_cpu: TargetCpu::of_target("", ""),
                    kernel_costs_cpu: None,
                    measured_costs: None,
                    costs_device: None,
                }
            }

            /// These options as one layer that writes every value (unset optional ones
            /// stay unwritten).
            pub fn to_options(&self) -> Options {
                Options {
                    $($name: self.$name.clone().into(),)*
                    ..Options::default()
                }
            }

            /// The canonical text of these options, which the cache key hashes: one line
            /// `key = value` per option in the declaration table's order, each value in its
            /// call-site spelling (`kenosis_options::value::Value::write`) and `none` for an
            /// optional value left unset, then `evaluation = host_kernels` or
            /// `evaluation = qdq_reference`, then `host_runs_target = true` or `false`, then
            /// `target_cpu = x86`, `x86_vnni` or `aarch64`, then `kernel_costs = table` or
            /// `kernel_costs = measured on ` and the CPU's hash; every line ends in `\n`.
            /// `docs/design.md` ("Cache key") specifies it.
            pub fn canonical(&self) -> String {
                use kenosis_options::value::Value;
                let mut text = String::new();
                $(
                    let value: Option<$ty> = self.$name.clone().into();
                    text.push_str(stringify!($name));
                    text.push_str(" = ");
                    text.push_str(&value.map_or_else(|| "none".to_owned(), |v| v.write()));
                    text.push('\n');
                )*
                text.push_str("evaluation = ");
                text.push_str(self.evaluation.canonical());
                text.push('\n');
                text.push_str(&format!("host_runs_target = {}\n", self.host_runs_target));
                text.push_str(&format!("target_cpu = {}\n", self.target_cpu.canonical()));
                text.push_str(&kernel_costs_line(self.kernel_costs_cpu.as_deref()));
                text
            }
        }
    };
}

kenosis_options::options!(define_build_options);

/// The `kernel_costs` line of [`QuantizeOptions::canonical`]: `table`, or `measured on` and
/// the hash of the CPU they are measured on (`device profile` and the hash of the profile's
/// bytes for a device profile).
fn kernel_costs_line(cpu: Option<&str>) -> String {
    match cpu {
        None => "kernel_costs = table\n".to_owned(),
        Some(cpu) => format!("kernel_costs = measured on {cpu}\n"),
    }
}

impl QuantizeOptions {
    /// The options `layers` writes, each unwritten one at its default for the machine this
    /// code runs on (as a build script: the host), with the fidelity check on its own
    /// kernels: what a build for its own machine, or the `kenosis` command, quantizes with.
    pub fn for_host(layers: &Options) -> Self {
        let kernels = TargetCpu::of_target("", "").integer_kernels();
        Self::resolve(
            layers,
            build_target(kernels),
            Evaluation::for_kernels(kernels, IntegerKernels::of_host()),
        )
    }
}

impl QuantizeOptions {
    /// The options `layers` writes, each unwritten one at its default for the build target
    /// `triple` with cargo's `target_features` (`CARGO_CFG_TARGET_FEATURE`; empty for a triple
    /// cargo did not name): what a build script quantizes with, in the front end (the cache
    /// key) and in the quantizer alike. The fidelity check runs on the build machine's
    /// kernels where they compute what the target's do (see [`Evaluation::for_kernels`]); the
    /// speed is measured where the build machine runs the target's code; kernel costs are
    /// measured where the target is of the build machine's own CPU class.
    pub fn for_target(layers: &Options, triple: &str, target_features: &str) -> Self {
        let target_cpu = TargetCpu::of_target(triple, target_features);
        let kernels = target_cpu.integer_kernels();
        let evaluation = Evaluation::for_kernels(kernels, IntegerKernels::of_host());
        let resolved = Self::resolve(layers, build_target(kernels), evaluation);
        let kernel_costs_cpu =
            (resolved.fp32_where_faster && kernels.run_here(triple)).then(|| {
                blake3::hash(crate::kernels::cpu_identity().as_bytes()).to_hex()[..16].to_owned()
            });
        Self {
            host_runs_target: kernels.timed_here(triple),
            target_cpu,
            kernel_costs_cpu,
            ..resolved
        }
    }
}

impl QuantizeOptions {
    /// These options pricing the placement with `profile`'s costs (read from `path`, its bytes
    /// hashing to `hash`; see [`DeviceProfile::read`]) at the thread count the program will
    /// run: the cache key's `kernel_costs` line names the profile's hash.
    ///
    /// # Errors
    /// [`Error::DeviceProfile`] naming `path` when the profile was measured on another CPU
    /// class than the target's.
    pub fn with_device_profile(
        self,
        profile: &DeviceProfile,
        hash: &str,
        path: &std::path::Path,
    ) -> Result<Self> {
        if profile.cpu_class != self.target_cpu.canonical() {
            return Err(Error::DeviceProfile {
                path: path.to_owned(),
                reason: format!(
                    "measured on {} (class {}), but this build targets class {}",
                    profile.cpu,
                    profile.cpu_class,
                    self.target_cpu.canonical()
                ),
            });
        }
        Ok(Self {
            kernel_costs_cpu: Some(format!("device profile {hash}")),
            measured_costs: Some(profile.costs_for(self.intra_threads)),
            costs_device: Some(profile.cpu.clone()),
            ..self
        })
    }

    /// The kernel costs the placement prices with: a device profile's, those measured on
    /// this machine, or the target class's table row.
    pub fn pricing(&self) -> Pricing {
        match (&self.costs_device, self.measured_costs) {
            (Some(device), Some(costs)) => Pricing::of_device(self.target_cpu, costs, device),
            _ => Pricing::new(self.target_cpu, self.measured_costs),
        }
    }
}

impl Default for QuantizeOptions {
    /// [`QuantizeOptions::for_host`] with every option at its default.
    fn default() -> Self {
        Self::for_host(&Options::default())
    }
}

/// What option defaults need to know of a target with `kernels`.
pub(crate) fn build_target(kernels: IntegerKernels) -> BuildTarget {
    BuildTarget {
        saturating_kernels: kernels.wants_reduce_range(),
    }
}

impl QuantizeOptions {
    /// Checks the values no model could make sense of, with the bounds `include_quantized!`
    /// enforces at its call sites (see `kenosis_options::check`).
    ///
    /// # Errors
    /// [`Error::Config`] naming the first bad option and its value.
    pub fn check(&self) -> Result<()> {
        self.to_options()
            .check()
            .map_err(|(key, m)| Error::Config(format!("option `{key}` {m}")))
    }

    /// The fidelity floor, when `min_cosine` or `min_top1_agreement` sets one.
    pub fn fidelity_target(&self) -> Option<FidelityTarget> {
        (self.min_cosine.is_some() || self.min_top1_agreement.is_some()).then_some(FidelityTarget {
            min_cosine: self.min_cosine,
            min_top1_agreement: self.min_top1_agreement,
        })
    }
}

/// A fidelity floor for the INT8 model, measured on held-out calibration samples (see
/// `fidelity::meet_target`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FidelityTarget {
    /// Minimum mean cosine similarity of the first float graph output (flattened; see
    /// `fidelity::Compared` for models without one) to FP32, required of the 95% lower
    /// confidence bound (`fidelity::Measured::cosine_lower_bound`).
    pub min_cosine: Option<f64>,
    /// Minimum fraction of held-out samples whose first output has the same argmax as FP32
    /// (the sample fraction: a confidence bound on a proportion from 20 samples could never
    /// reach 0.9 even at 20 of 20).
    pub min_top1_agreement: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SATURATING: BuildTarget = BuildTarget {
        saturating_kernels: true,
    };

    #[test]
    fn the_cache_key_text_is_one_line_per_option_in_table_order() {
        let o = QuantizeOptions {
            target_cpu: TargetCpu::X86,
            ..QuantizeOptions::resolve(&Options::default(), SATURATING, Evaluation::HostKernels)
        };
        assert_eq!(
            o.canonical(),
            "method = \"mse\"\nper_channel = true\nreduce_range = true\nactivations = \"auto\"\nweights = \"int8\"\nbias_correction = true\n\
             fp32_where_faster = true\ngptq_rounding = true\nmin_cosine = none\nmin_top1_agreement = none\n\
             min_speedup = none\nspeed_check = true\nintra_threads = none\nsynthetic_samples = 16\nsynthetic_image_range = none\n\
             keep_float = []\nevaluation = host_kernels\nhost_runs_target = true\n\
             target_cpu = x86\nkernel_costs = table\n"
        );
        let exact = BuildTarget {
            saturating_kernels: false,
        };
        let o = QuantizeOptions::resolve(&Options::default(), exact, Evaluation::QdqReference);
        assert!(o.canonical().contains("reduce_range = false\n"));
        assert!(o
            .canonical()
            .contains("evaluation = qdq_reference\nhost_runs_target = true\n"));
    }

    #[test]
    fn check_refuses_a_resolved_value_out_of_bounds() {
        let o = QuantizeOptions {
            synthetic_samples: 0,
            ..QuantizeOptions::default()
        };
        let Err(Error::Config(message)) = o.check() else {
            panic!("synthetic_samples = 0 must be refused");
        };
        assert_eq!(message, "option `synthetic_samples` must be at least 1");
        assert!(QuantizeOptions::default().check().is_ok());
    }
}
