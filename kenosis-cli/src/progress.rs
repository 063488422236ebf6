//! Progress on stderr for the long commands (`validate`, `quantize`), with `indicatif`.
//!
//! Bars draw to stderr only when it is a terminal (`ProgressDrawTarget::stderr` hides them
//! otherwise), so pipes, logs and tests see the command's output alone.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps saying `message`, with the count and the elapsed time.
pub fn bar(len: usize, message: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_message(message.to_owned())
}

/// A spinner saying `message` with the elapsed time, for work that reports no progress.
pub fn spinner(message: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        .with_style(style)
        .with_message(message.to_owned());
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}
