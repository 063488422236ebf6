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

/// Shows `stage` of the quantization of `model`: as `spinner`'s message on a terminal, else
/// as a line on stderr, so that a log shows the stages too.
pub fn stage(spinner: &ProgressBar, model: &str, stage: kenosis_quantize::Stage) {
    use kenosis_quantize::Stage;
    let what = match stage {
        Stage::Decode => "decoding".to_owned(),
        Stage::Normalize => "normalizing and planning".to_owned(),
        Stage::Calibrate { samples } => format!("calibrating on {samples} samples"),
        Stage::Ranges => "choosing ranges".to_owned(),
        Stage::Rewrite => "rewriting".to_owned(),
        Stage::Fidelity => "measuring fidelity".to_owned(),
        Stage::SpeedCheck => "timing against FP32".to_owned(),
        _ => "quantizing".to_owned(),
    };
    if spinner.is_hidden() {
        eprintln!("kenosis: {model}: {what}");
    } else {
        spinner.set_message(format!("{model}: {what}"));
    }
}
