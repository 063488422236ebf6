//! The speed check (`speed_check`, `min_speedup`): the INT8 model is timed against FP32 in
//! the build, where the build machine runs the target's code, and a floor it misses fails the
//! build (above 1) or, after revised placements, gives way to the FP32 model (at most 1).

use std::path::Path;

use kenosis_quantize::onnx::ModelProto;
use kenosis_quantize::pipeline::{quantize, Calibration, QuantizeOptions, Quantized};
use kenosis_quantize::speed::SpeedCheck;
use kenosis_quantize::Error;
use kenosis_request::kernel_costs::KernelCosts;
use kenosis_request::kernels::TargetCpu;
use prost::Message;

mod support;

fn quantize_tiny(options: QuantizeOptions) -> Result<Quantized, Error> {
    let bytes = std::fs::read(support::TINY).expect("fixture");
    quantize(
        Path::new(support::TINY),
        &bytes,
        &Calibration::Synthetic,
        &options,
    )
}

fn with_floor(min_speedup: f64) -> QuantizeOptions {
    QuantizeOptions {
        min_speedup: Some(min_speedup),
        ..support::tiny_options()
    }
}

fn quantize_linear_nodes(bytes: &[u8]) -> usize {
    let model = ModelProto::decode(bytes).expect("artifact decodes");
    let graph = model.graph.expect("graph");
    (graph.node.iter())
        .filter(|n| n.op_type() == "QuantizeLinear")
        .count()
}

#[test]
fn an_unreachable_floor_fails_with_the_measured_latencies() {
    let Err(Error::SpeedTarget { path, report }) = quantize_tiny(with_floor(100.0)) else {
        panic!("no model runs 100 times faster in INT8");
    };
    assert_eq!(path, Path::new(support::TINY));
    assert!(
        report.contains("min_speedup 100 not reached") && report.contains("ms against FP32"),
        "{report}"
    );
}

#[test]
fn a_met_floor_is_reported_and_keeps_the_int8_model() {
    let q = quantize_tiny(with_floor(0.01)).expect("quantizes");
    let Some(SpeedCheck::Measured(s)) = &q.report.speed else {
        panic!("measured on the build machine: {:?}", q.report.speed);
    };
    assert!(s.fp32_ms > 0.0 && s.int8_ms > 0.0, "{s:?}");
    assert!(!s.kept_fp32);
    assert!(quantize_linear_nodes(&q.bytes) > 0);
    let line = q.report.summary_line();
    assert!(
        line.contains("; speed against FP32 on this machine: ") && line.contains("at 1 thread"),
        "{line}"
    );
    // One thread, then the count the application runs (the runtime's default here).
    let counts: Vec<_> = s.timings.iter().map(|t| t.threads).collect();
    assert_eq!(
        counts,
        kenosis_quantize::speed::thread_counts(None),
        "{s:?}"
    );
    for t in &s.timings {
        assert!(t.rounds >= kenosis_quantize::speed::MIN_RUNS, "{t:?}");
        let [low, high] = t.speedup_band;
        assert!(low <= t.speedup && t.speedup <= high, "{t:?}");
    }
    // The report's figures are those of the count where INT8 fared worst.
    let worst = s
        .timings
        .iter()
        .map(|t| t.speedup)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(s.speedup, worst, "{s:?}");
}

#[test]
fn intra_threads_is_the_count_timed_beside_one_thread() {
    let mut options = with_floor(0.01);
    options.intra_threads = Some(3);
    let q = quantize_tiny(options).expect("quantizes");
    let Some(SpeedCheck::Measured(s)) = &q.report.speed else {
        panic!("measured on the build machine: {:?}", q.report.speed);
    };
    let counts: Vec<_> = s.timings.iter().map(|t| t.threads).collect();
    assert_eq!(counts, [Some(1), Some(3)], "{s:?}");
    assert!(
        q.report.summary_line().contains("at 3 threads"),
        "{}",
        q.report.summary_line()
    );
}

#[test]
fn at_a_floor_of_one_a_slower_int8_model_gives_way_to_fp32() {
    let q = quantize_tiny(with_floor(1.0)).expect("quantizes");
    let Some(SpeedCheck::Measured(s)) = &q.report.speed else {
        panic!("measured on the build machine: {:?}", q.report.speed);
    };
    // Which way the timing goes depends on the machine; what follows from it does not.
    assert_eq!(s.kept_fp32, s.speedup < 1.0, "{s:?}");
    assert_eq!(quantize_linear_nodes(&q.bytes) == 0, s.kept_fp32, "{s:?}");
    if s.kept_fp32 {
        let summary = q.report.summary_line();
        assert!(
            summary.starts_with("kenosis: kept ")
                && summary.contains("the artifact is the FP32 model"),
            "{summary}"
        );
        // The shipped model is FP32: no INT8 figures describe it.
        assert_eq!(q.report.fidelity, None);
        assert!(
            q.report.ops_quantized.is_empty(),
            "{:?}",
            q.report.ops_quantized
        );
    }
}

#[test]
fn a_build_for_another_machine_does_not_time_and_says_why() {
    let options = QuantizeOptions {
        host_runs_target: false,
        ..with_floor(100.0)
    };
    let q = quantize_tiny(options).expect("a cross build does not fail on speed");
    let Some(SpeedCheck::NotMeasured(why)) = &q.report.speed else {
        panic!("not measured: {:?}", q.report.speed);
    };
    assert!(why.contains("does not run the target's code"), "{why}");
    assert!(q.report.summary_line().contains("speed not measured"));
}

/// With default options the time estimate finds the tiny model's layers too small to repay
/// their conversions: the artifact is the FP32 graph, and the build says so.
#[test]
fn a_model_no_int8_placement_speeds_up_stays_fp32_and_says_so() {
    let q = quantize_tiny(QuantizeOptions::default()).expect("quantizes");
    assert_eq!(quantize_linear_nodes(&q.bytes), 0);
    let summary = q.report.summary_line();
    assert!(
        summary.contains("no INT8 placement is estimated faster than FP32 on the target"),
        "{summary}"
    );
    assert!(
        (q.report.nodes_fp32.iter()).any(|n| n.reason.is_estimated_faster()),
        "{:?}",
        q.report.nodes_fp32
    );
    // Nothing to time: the artifact is the FP32 graph, and the report says so.
    let Some(SpeedCheck::NotMeasured(why)) = &q.report.speed else {
        panic!("not timed: {:?}", q.report.speed);
    };
    assert!(why.contains("no op is quantized"), "{why}");
    // The same model with the estimate off quantizes its Conv.
    let all = quantize_tiny(support::tiny_options()).expect("quantizes");
    assert!(quantize_linear_nodes(&all.bytes) > 0);
}

/// The default check (floor 1, `speed_check` and `fp32_where_faster` on) on a placement that
/// quantizes the tiny model's Conv (prices that make conversions almost free): if the INT8
/// artifact is slower, the placement is revised twice (conversions priced 2x, 4x: still
/// almost free, so still INT8) and the FP32 model ships; if it is faster, INT8 ships. Which
/// way the timing goes depends on the machine; what follows from it does not.
#[test]
fn the_default_check_revises_a_slower_placement_before_it_ships_fp32() {
    let cheap = KernelCosts {
        conversion: 1e-6,
        layout: 1e-6,
        ..KernelCosts::of(TargetCpu::X86Vnni)
    };
    let options = QuantizeOptions {
        measured_costs: Some(cheap),
        ..QuantizeOptions::default()
    };
    assert!(options.speed_check && options.fp32_where_faster && options.min_speedup.is_none());
    let q = quantize_tiny(options.clone()).expect("quantizes");
    let pricing = q.report.kernel_costs.clone().expect("priced");
    assert!(pricing.measured && pricing.costs == cheap, "{pricing:?}");
    let Some(SpeedCheck::Measured(s)) = &q.report.speed else {
        panic!("measured on the build machine: {:?}", q.report.speed);
    };
    assert_eq!(s.min_speedup, 1.0);
    assert_eq!(s.kept_fp32, s.speedup < 1.0, "{s:?}");
    if s.kept_fp32 {
        assert_eq!(s.revisions, 2, "{s:?}");
        assert_eq!(quantize_linear_nodes(&q.bytes), 0);
        assert!(
            (q.report.summary_line()).contains("after 2 revised placements"),
            "{}",
            q.report.summary_line()
        );
    } else {
        assert!(quantize_linear_nodes(&q.bytes) > 0, "{s:?}");
    }

    // `speed_check = false`: the same placement ships untimed, in INT8.
    let untimed = quantize_tiny(QuantizeOptions {
        speed_check: false,
        ..options
    })
    .expect("quantizes");
    assert_eq!(untimed.report.speed, None);
    assert!(quantize_linear_nodes(&untimed.bytes) > 0);
}
