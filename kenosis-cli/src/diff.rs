//! `kenosis diff A B`: what differs between two models (an FP32 original and its INT8
//! artifact, or two artifacts of one model).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use kenosis_quantize::onnx::{self, ModelProto};

use crate::error::Result;
use crate::inspect::{first_names, megabytes, op_counts, value_info};

/// How many names a list of nodes or tensors present on one side only shows.
const NAMES_SHOWN: usize = 10;

/// Prints what differs between the models at `a` and `b`.
///
/// # Errors
/// As [`crate::model::read`].
pub fn run(a: &Path, b: &Path) -> Result<()> {
    let (ma, size_a) = crate::model::read(a)?;
    let (mb, size_b) = crate::model::read(b)?;
    print!("{}", report(a, &ma, size_a, b, &mb, size_b));
    Ok(())
}

/// The text `kenosis diff` prints.
pub fn report(
    a: &Path,
    ma: &ModelProto,
    size_a: usize,
    b: &Path,
    mb: &ModelProto,
    size_b: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {} ({})", a.display(), megabytes(size_a));
    let _ = writeln!(out, "B: {} ({})", b.display(), megabytes(size_b));
    let (ga, gb) = (graph(ma), graph(mb));
    for (what, la, lb) in [
        ("inputs", io(&ga.input, ga), io(&gb.input, gb)),
        ("outputs", io(&ga.output, ga), io(&gb.output, gb)),
    ] {
        if la == lb {
            let _ = writeln!(out, "{what}: the same ({})", la.join("; "));
        } else {
            let _ = writeln!(
                out,
                "{what}: differ\n  A: {}\n  B: {}",
                la.join("; "),
                lb.join("; ")
            );
        }
    }
    let (ca, cb): (BTreeMap<_, _>, BTreeMap<_, _>) = (
        op_counts(ma).into_iter().collect(),
        op_counts(mb).into_iter().collect(),
    );
    let ops: BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
    let _ = writeln!(out, "operators (A → B):");
    let mut same = 0;
    for op in ops {
        let (x, y) = (
            ca.get(op).copied().unwrap_or(0),
            cb.get(op).copied().unwrap_or(0),
        );
        if x == y {
            same += 1;
        } else {
            let _ = writeln!(out, "  {op}: {x} → {y}");
        }
    }
    let _ = writeln!(out, "  ({same} operator kinds with the same count)");
    let names = |g: &onnx::GraphProto| -> BTreeSet<String> {
        g.node.iter().map(|n| n.name().to_owned()).collect()
    };
    one_sided(&mut out, "nodes", &names(ga), &names(gb));
    let weights = |g: &onnx::GraphProto| -> BTreeMap<String, (i32, Vec<i64>, usize)> {
        (g.initializer.iter())
            .map(|t| {
                (
                    t.name().to_owned(),
                    (
                        t.data_type(),
                        t.dims.clone(),
                        onnx::tensor::payload_bytes(t),
                    ),
                )
            })
            .collect()
    };
    let (wa, wb) = (weights(ga), weights(gb));
    let bytes =
        |w: &BTreeMap<String, (i32, Vec<i64>, usize)>| w.values().map(|v| v.2).sum::<usize>();
    let _ = writeln!(
        out,
        "initializers: {} ({}) → {} ({})",
        wa.len(),
        megabytes(bytes(&wa)),
        wb.len(),
        megabytes(bytes(&wb))
    );
    let changed = (wa.iter())
        .filter(|(name, v)| wb.get(*name).is_some_and(|w| w != *v))
        .count();
    let _ = writeln!(
        out,
        "  {changed} present in both with another type, shape or size"
    );
    one_sided(
        &mut out,
        "initializers",
        &wa.keys().cloned().collect(),
        &wb.keys().cloned().collect(),
    );
    out
}

fn graph(m: &ModelProto) -> &onnx::GraphProto {
    static EMPTY: std::sync::OnceLock<onnx::GraphProto> = std::sync::OnceLock::new();
    m.graph
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
}

/// The non-initializer entries of `list`, described.
fn io(list: &[onnx::ValueInfoProto], g: &onnx::GraphProto) -> Vec<String> {
    let inits: BTreeSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    (list.iter())
        .filter(|v| !inits.contains(v.name()))
        .map(value_info)
        .collect()
}

/// Writes how many of `what` only A or only B has, with the first names.
fn one_sided(out: &mut String, what: &str, a: &BTreeSet<String>, b: &BTreeSet<String>) {
    for (side, only) in [("A", a.difference(b)), ("B", b.difference(a))] {
        let only: Vec<&String> = only.collect();
        if only.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "{what} only in {side}: {} ({})",
            only.len(),
            first_names(&only, NAMES_SHOWN)
        );
    }
}
