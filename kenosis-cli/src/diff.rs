//! `kenosis diff A B`: what differs between two models (an FP32 original and its INT8
//! artifact, or two artifacts of one model).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use kenosis_quantize::model::{self, ModelProto};
use serde::Serialize;

use crate::error::Result;
use crate::format::{Format, Tensor};
use crate::inspect::{first_names, megabytes, op_counts, value_info};

/// How many names a list of nodes or tensors present on one side only shows.
const NAMES_SHOWN: usize = 10;

/// Prints what differs between the models at `a` and `b`, as text or as JSON
/// ([`Comparison`]).
///
/// # Errors
/// As [`crate::model::read`].
pub fn run(a: &Path, b: &Path, format: Format) -> Result<()> {
    let (ma, size_a) = crate::model::read(a)?;
    let (mb, size_b) = crate::model::read(b)?;
    match format {
        Format::Text => print!("{}", report(a, &ma, size_a, b, &mb, size_b)),
        Format::Json => {
            crate::format::print_json(&comparison(a, &ma, size_a, b, &mb, size_b))?;
        }
    }
    Ok(())
}

/// What `kenosis diff --format json` prints (see `docs/cli-json.md`). Lists are complete
/// (the text shows the first names only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The first model.
    pub a: Side,
    /// The second model.
    pub b: Side,
    /// Graph inputs (initializers excluded) of both.
    pub inputs: Interface,
    /// Graph outputs of both.
    pub outputs: Interface,
    /// Node count per operator kind (`domain.Op` outside the default domain), for every
    /// kind either model holds (0 where one has none).
    pub operators: BTreeMap<String, Counts>,
    /// Nodes, by name.
    pub nodes: Named,
    /// Initializers, by name.
    pub initializers: Initializers,
}

/// One model of a [`Comparison`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    /// The file as given.
    pub path: String,
    /// Its size in bytes.
    pub size_bytes: usize,
}

/// The inputs or outputs of both models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interface {
    /// True when both declare the same names, types and shapes in the same order.
    pub same: bool,
    /// A's.
    pub a: Vec<Tensor>,
    /// B's.
    pub b: Vec<Tensor>,
}

/// A count in each model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// In A.
    pub a: usize,
    /// In B.
    pub b: usize,
}

/// Named items (nodes) of both models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Named {
    /// How many A has (distinct names).
    pub a: usize,
    /// How many B has (distinct names).
    pub b: usize,
    /// Names only A has, sorted.
    pub only_in_a: Vec<String>,
    /// Names only B has, sorted.
    pub only_in_b: Vec<String>,
}

/// The initializers of both models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Initializers {
    /// How many A has.
    pub a: usize,
    /// How many B has.
    pub b: usize,
    /// Bytes of payload A's hold.
    pub bytes_a: usize,
    /// Bytes of payload B's hold.
    pub bytes_b: usize,
    /// Present in both with another element type, shape or payload size.
    pub changed: usize,
    /// Names only A has, sorted.
    pub only_in_a: Vec<String>,
    /// Names only B has, sorted.
    pub only_in_b: Vec<String>,
}

/// The [`Comparison`] of `ma` (read from `a`, `size_a` bytes) with `mb`.
pub fn comparison(
    a: &Path,
    ma: &ModelProto,
    size_a: usize,
    b: &Path,
    mb: &ModelProto,
    size_b: usize,
) -> Comparison {
    let (ga, gb) = (graph(ma), graph(mb));
    let interface = |la: &[model::ValueInfoProto], lb: &[model::ValueInfoProto]| {
        let real = |list: &[model::ValueInfoProto], g: &model::GraphProto| -> Vec<Tensor> {
            let inits: BTreeSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
            (list.iter())
                .filter(|v| !inits.contains(v.name()))
                .map(Tensor::of_value)
                .collect()
        };
        let (a, b) = (real(la, ga), real(lb, gb));
        Interface { same: a == b, a, b }
    };
    let (ca, cb): (BTreeMap<_, _>, BTreeMap<_, _>) = (
        op_counts(ma).into_iter().collect(),
        op_counts(mb).into_iter().collect(),
    );
    let operators = (ca.keys().chain(cb.keys()))
        .map(|op| {
            let count = |c: &BTreeMap<String, usize>| c.get(op).copied().unwrap_or(0);
            (
                op.clone(),
                Counts {
                    a: count(&ca),
                    b: count(&cb),
                },
            )
        })
        .collect();
    let names = |g: &model::GraphProto| -> BTreeSet<String> {
        g.node.iter().map(|n| n.name().to_owned()).collect()
    };
    let (na, nb) = (names(ga), names(gb));
    let (wa, wb) = (weights(ga), weights(gb));
    let bytes = |w: &Weights| w.values().map(|v| v.2).sum::<usize>();
    Comparison {
        a: Side {
            path: a.display().to_string(),
            size_bytes: size_a,
        },
        b: Side {
            path: b.display().to_string(),
            size_bytes: size_b,
        },
        inputs: interface(&ga.input, &gb.input),
        outputs: interface(&ga.output, &gb.output),
        operators,
        nodes: Named {
            a: na.len(),
            b: nb.len(),
            only_in_a: na.difference(&nb).cloned().collect(),
            only_in_b: nb.difference(&na).cloned().collect(),
        },
        initializers: Initializers {
            a: wa.len(),
            b: wb.len(),
            bytes_a: bytes(&wa),
            bytes_b: bytes(&wb),
            changed: changed(&wa, &wb),
            only_in_a: (wa.keys())
                .filter(|k| !wb.contains_key(*k))
                .cloned()
                .collect(),
            only_in_b: (wb.keys())
                .filter(|k| !wa.contains_key(*k))
                .cloned()
                .collect(),
        },
    }
}

/// Initializers by name: element type, dims and payload bytes.
type Weights = BTreeMap<String, (i32, Vec<i64>, usize)>;

fn weights(g: &model::GraphProto) -> Weights {
    (g.initializer.iter())
        .map(|t| {
            (
                t.name().to_owned(),
                (t.data_type(), t.dims.clone(), model::payload_bytes(t)),
            )
        })
        .collect()
}

/// Initializers present in both with another type, shape or size.
fn changed(wa: &Weights, wb: &Weights) -> usize {
    (wa.iter())
        .filter(|(name, v)| wb.get(*name).is_some_and(|w| w != *v))
        .count()
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
    let names = |g: &model::GraphProto| -> BTreeSet<String> {
        g.node.iter().map(|n| n.name().to_owned()).collect()
    };
    one_sided(&mut out, "nodes", &names(ga), &names(gb));
    let (wa, wb) = (weights(ga), weights(gb));
    let bytes = |w: &Weights| w.values().map(|v| v.2).sum::<usize>();
    let _ = writeln!(
        out,
        "initializers: {} ({}) → {} ({})",
        wa.len(),
        megabytes(bytes(&wa)),
        wb.len(),
        megabytes(bytes(&wb))
    );
    let changed = changed(&wa, &wb);
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

fn graph(m: &ModelProto) -> &model::GraphProto {
    static EMPTY: std::sync::OnceLock<model::GraphProto> = std::sync::OnceLock::new();
    m.graph
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
}

/// The non-initializer entries of `list`, described.
fn io(list: &[model::ValueInfoProto], g: &model::GraphProto) -> Vec<String> {
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
