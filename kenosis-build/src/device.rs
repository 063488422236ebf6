//! The device profile a model's build prices its placement with (see
//! `kenosis_request::device_profile`): the `device_profile` option, else
//! `$KENOSIS_DEVICE_PROFILE` when the build crosses to another target. The profile's bytes
//! enter the cache key through the options' `kernel_costs` line.

use std::path::{Path, PathBuf};

use kenosis_options::Options;

use crate::calibration::expand_out_dir;
use crate::cargo;
use crate::device_profile::{DeviceProfile, ENV};
use crate::error::Result;
use crate::options::QuantizeOptions;

/// The profile `layers` names (relative to `manifest_dir`, a leading `$OUT_DIR` expanded to
/// `out_dir`), else the one [`ENV`] names when `cross` (the target is not the build
/// machine); absolute, with `cargo:rerun-if-changed` printed for it.
///
/// # Errors
/// [`crate::Error::UnsafePath`] for a path a `cargo:` line cannot carry.
pub(crate) fn profile_path(
    layers: &Options,
    cross: bool,
    manifest_dir: &Path,
    out_dir: &Path,
) -> Result<Option<PathBuf>> {
    let named = match &layers.device_profile {
        Some(p) => Some(manifest_dir.join(expand_out_dir(p, out_dir))),
        None => cargo::env(ENV)
            .filter(|p| cross && !p.is_empty())
            .map(PathBuf::from),
    };
    named
        .map(|p| {
            cargo::rerun_if_changed(&p)?;
            Ok(p)
        })
        .transpose()
}

/// `options` pricing with the profile at `path` (see
/// [`QuantizeOptions::with_device_profile`]).
///
/// # Errors
/// [`crate::Error::Io`] or [`crate::Error::DeviceProfile`] naming the file when it cannot be
/// read, is not a profile, or was measured on another CPU class than the target's.
pub(crate) fn apply(options: QuantizeOptions, path: &Path) -> Result<QuantizeOptions> {
    let (profile, hash) = DeviceProfile::read(path)?;
    options.with_device_profile(&profile, &hash, path)
}
