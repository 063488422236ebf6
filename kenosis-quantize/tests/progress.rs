//! The progress callback: every stage once, in order, with the calibration sample count the
//! report gives.

mod support;

use std::cell::RefCell;
use std::path::Path;

use kenosis_quantize::{quantize_with_progress, Calibration, Stage};

fn stages(options: &kenosis_quantize::QuantizeOptions) -> (Vec<Stage>, kenosis_quantize::Report) {
    let bytes = std::fs::read(support::TINY).expect("fixture");
    let seen = RefCell::new(Vec::new());
    let q = quantize_with_progress(
        Path::new(support::TINY),
        &bytes,
        &Calibration::Synthetic,
        options,
        &|stage| seen.borrow_mut().push(stage),
    )
    .expect("quantizes");
    (seen.into_inner(), q.report)
}

#[test]
fn each_stage_is_reported_once_in_order() {
    let options = kenosis_quantize::QuantizeOptions {
        min_speedup: Some(0.01),
        ..support::tiny_options()
    };
    let (seen, report) = stages(&options);
    assert_eq!(
        seen,
        [
            Stage::Decode,
            Stage::Normalize,
            Stage::Calibrate {
                samples: report.calibration_samples
            },
            Stage::Ranges,
            Stage::Rewrite,
            Stage::Fidelity,
            Stage::SpeedCheck,
        ]
    );
    assert!(report.calibration_samples > 0);
}

#[test]
fn no_speed_check_stage_without_a_floor() {
    // `tiny_options` turns `fp32_where_faster` off, and with it the default floor.
    let (seen, _) = stages(&support::tiny_options());
    assert_eq!(seen.last(), Some(&Stage::Fidelity), "{seen:?}");
    assert!(!seen.contains(&Stage::SpeedCheck), "{seen:?}");
}
