//! `cargo xtask layers`: checks that Kenosis's crates depend one way, and so do the modules
//! inside each of the three crates of the build path. `cargo xtask test` runs it before
//! clippy.
//!
//! The crates ([`CRATES`], from `cargo metadata`): a workspace crate's normal dependencies on
//! other Kenosis crates must come before it in the list; an optional one (a feature's) may
//! not come after it either, except where [`OPTIONAL_LATER`] allows it (the front end's
//! in-process quantizer). Dev-dependencies are free: tests reach anywhere.
//!
//! The modules, over the non-test code of each crate's `src` (items under `#[cfg(test)]` are
//! skipped; test support may reach anywhere):
//! - every top-level module is a leaf or a stage (its crate's table in [`MODULES`]); a module
//!   may use leaves and stages listed before its own, never a later one;
//! - leaves use only leaves; the crate root (`lib.rs`) uses anything;
//! - no two sibling modules use each other, directly or through others (a parent, the
//!   facade of its children, is not their sibling: `mod.rs` re-exports and children use
//!   its shared helpers).
//!
//! The `kenosis` command (`kenosis-cli`) is the binary over the quantizer's library: its
//! non-test code names no module that `kenosis-quantize`'s root declares `#[doc(hidden)]`
//! (see [`hidden_uses`]).
//!
//! Dependencies are the `crate::`, `super::` and `self::` paths in `use` items and in code,
//! resolved to the longest module prefix (a name the crate root imports from another crate
//! is no module of its own, and is not checked here); `$crate` paths inside `macro_rules!`
//! bodies are not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use syn::visit::Visit;

/// No options: the rules and the crates are fixed.
#[derive(clap::Args)]
#[command(about = "Check that Kenosis's crates, and the modules of its build path, depend one way")]
pub struct Args {}

/// Kenosis's crates in dependency order: each may depend only on crates before it.
const CRATES: &[&str] = &[
    "kenosis-options",
    "kenosis-manifest",
    "kenosis-numerics",
    // What the front end and the quantizer both read.
    "kenosis-request",
    "kenosis-quantize",
    "kenosis-macros",
    "kenosis-runtime",
    // The build script's front end: never the quantizer, except as the optional dependency
    // of its `quantizer` feature.
    "kenosis-build",
    "kenosis-cli",
    "kenosis-eval",
    "xtask",
    // Applications of them all: the examples and the workspace's tests.
    "quickstart",
    "classify",
    "detect",
    "kenosis-tests",
];

/// Optional dependencies (`from`, `to`) allowed to point at a crate that does not come before
/// `from` in [`CRATES`]: none today; the front end's `kenosis-quantize` comes before it.
const OPTIONAL_LATER: &[(&str, &str)] = &[];

/// The crates whose modules are checked, each with its top-level modules in dependency order:
/// leaves, then the stages of one model's way through the crate, then what drives them.
const MODULES: &[(&str, &[(&str, Layer)])] = &[
    (
        "kenosis-request",
        &[
            ("onnx", Layer::Leaf),
            ("error", Layer::Leaf),
            ("kernels", Layer::Leaf),
            ("kernel_costs", Layer::Leaf),
            ("device_profile", Layer::Leaf),
            ("model_files", Layer::Stage),
            // Image files decoded by a preprocessing spec (feature `images`).
            ("images", Layer::Stage),
            ("options", Layer::Stage),
            // The request a cache miss sends to the quantizer, and the report head the cache
            // reads.
            ("request", Layer::Stage),
            ("cache", Layer::Stage),
        ],
    ),
    (
        "kenosis-quantize",
        &[
            ("parallel", Layer::Leaf),
            ("onnx", Layer::Leaf),
            ("graph", Layer::Leaf),
            ("types", Layer::Leaf),
            ("ops", Layer::Leaf),
            // Last of the leaves: its reasons name nodes, tensors and element types, and wrap
            // the reasons `onnx` and `graph` give.
            ("error", Layer::Leaf),
            ("normalize", Layer::Stage),
            ("calibrate", Layer::Stage),
            ("quantize", Layer::Stage),
            ("fidelity", Layer::Stage),
            ("speed", Layer::Stage),
            // A model against its FP32 original, for `kenosis validate` and users' tools.
            ("compare", Layer::Stage),
            ("report", Layer::Stage),
            ("pipeline", Layer::Stage),
            // `kenosis cast`: decodes and reads external data as the pipeline does.
            ("cast", Layer::Stage),
            ("kernel_bench", Layer::Stage),
            ("serve", Layer::Stage),
            // The public faces of the stages: re-exports only.
            ("model", Layer::Stage),
            ("samples", Layer::Stage),
        ],
    ),
    (
        "kenosis-build",
        &[
            ("cargo", Layer::Stage),
            ("images", Layer::Stage),
            ("discover", Layer::Stage),
            // The front end's driver: the builder `build.rs` fills, the files written for a
            // model, where the quantizer comes from, the calibration data a build names, and
            // `Config::compile`, which drives everything above.
            ("config", Layer::Stage),
            ("artifact", Layer::Stage),
            ("quantizer", Layer::Stage),
            ("calibration", Layer::Stage),
            ("device", Layer::Stage),
            ("compile", Layer::Stage),
        ],
    ),
];

#[derive(Clone, Copy, PartialEq)]
pub enum Layer {
    Leaf,
    Stage,
}

pub fn run(_args: Args) -> Result<ExitCode> {
    let root = crate::workspace_root();
    let mut violations = crate_violations(&workspace_dependencies()?);
    for (krate, layers) in MODULES {
        let found = check(&root.join(krate).join("src"), layers)?;
        violations.extend(found.into_iter().map(|v| format!("{krate}: {v}")));
    }
    let hidden = hidden_modules(&root.join("kenosis-quantize/src/lib.rs"))?;
    let found = hidden_uses(&root.join("kenosis-cli/src"), "kenosis_quantize", &hidden)?;
    violations.extend(found.into_iter().map(|v| format!("kenosis-cli: {v}")));
    if violations.is_empty() {
        eprintln!("xtask: Kenosis's crates and the modules of its build path depend one way");
        return Ok(ExitCode::SUCCESS);
    }
    for v in &violations {
        eprintln!("xtask: layers: {v}");
    }
    bail!(
        "{} crate or module dependencies break the layering",
        violations.len()
    )
}

/// One dependency of a workspace crate on another Kenosis crate.
struct Dependency {
    from: String,
    to: String,
    optional: bool,
    dev: bool,
}

/// The dependencies of the workspace's crates on each other (`cargo metadata --no-deps`).
fn workspace_dependencies() -> Result<Vec<Dependency>> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(crate::workspace_root())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading cargo metadata's output")?;
    let mut found = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let from = package["name"].as_str().unwrap_or_default();
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let to = dep["name"].as_str().unwrap_or_default();
            if CRATES.contains(&to) && to != from {
                found.push(Dependency {
                    from: from.to_owned(),
                    to: to.to_owned(),
                    optional: dep["optional"].as_bool().unwrap_or(false),
                    dev: dep["kind"].as_str() == Some("dev"),
                });
            }
        }
    }
    Ok(found)
}

/// The crate dependencies that break [`CRATES`]' order, one line each.
fn crate_violations(dependencies: &[Dependency]) -> Vec<String> {
    let rank = |name: &str| CRATES.iter().position(|c| *c == name);
    let mut violations = Vec::new();
    for d in dependencies.iter().filter(|d| !d.dev) {
        let (Some(from), Some(to)) = (rank(&d.from), rank(&d.to)) else {
            violations.push(format!(
                "crate `{}` is not listed in xtask's CRATES",
                d.from
            ));
            continue;
        };
        let allowed =
            to < from || (d.optional && OPTIONAL_LATER.contains(&(d.from.as_str(), d.to.as_str())));
        if !allowed {
            violations.push(format!(
                "crate {} depends on {}, which comes after it",
                d.from, d.to
            ));
        }
    }
    // The front end compiles no quantizer unless a build asks for it in process.
    for d in dependencies {
        if d.from == "kenosis-build" && d.to == "kenosis-quantize" && !d.dev && !d.optional {
            violations.push("crate kenosis-build depends on kenosis-quantize by default".into());
        }
    }
    violations.sort();
    violations.dedup();
    violations
}

/// The broken rules of the crate at `src`, one line each; empty when it is layered.
pub fn check(src: &Path, layers: &[(&str, Layer)]) -> Result<Vec<String>> {
    let modules = modules(src)?;
    let names: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let imported = imported_at_root(&src.join("lib.rs"))?;
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    // Modules declared `#[cfg(test)] mod name;`: test support, which may use anything.
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for (module, file) in &modules {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
        let mut paths = Paths::default();
        paths.visit_file(&ast);
        for (inline, path) in paths.found {
            let scope: Vec<String> = module.iter().chain(&inline).cloned().collect();
            if let Some(target) = resolve(&scope, &path, &names) {
                // `crate::cache` where the root imports `cache` from another crate.
                let from_another_crate = target.is_empty()
                    && path.first().is_some_and(|p| p == "crate")
                    && path.get(1).is_some_and(|name| imported.contains(name));
                if &target != module && !from_another_crate {
                    edges.entry(module.clone()).or_default().insert(target);
                }
            }
        }
        for name in paths.test_modules {
            let mut test_module = module.clone();
            test_module.push(name);
            test_only.insert(test_module);
        }
    }
    for m in &test_only {
        edges.remove(m);
        for targets in edges.values_mut() {
            targets.retain(|t| !t.starts_with(m));
        }
    }
    let mut violations = Vec::new();
    for (from, targets) in &edges {
        for to in targets {
            if let Some(why) = breaks_order(layers, from, to) {
                violations.push(format!("{} uses {}: {why}", show(from), show(to)));
            }
        }
    }
    for cycle in cycles(&sibling_edges(&edges)) {
        let names: Vec<String> = cycle.iter().map(|m| show(m)).collect();
        violations.push(format!("cycle: {}", names.join(" -> ")));
    }
    Ok(violations)
}

/// The top-level modules a crate root (`lib`) declares public but `#[doc(hidden)]`: not part
/// of its API.
fn hidden_modules(lib: &Path) -> Result<BTreeSet<String>> {
    let text =
        std::fs::read_to_string(lib).with_context(|| format!("reading {}", lib.display()))?;
    let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", lib.display()))?;
    let hidden = |attrs: &[syn::Attribute]| {
        attrs.iter().any(|a| {
            a.path().is_ident("doc") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "hidden")
        })
    };
    Ok((ast.items.iter())
        .filter_map(|item| match item {
            syn::Item::Mod(m) if hidden(&m.attrs) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect())
}

/// The paths of the non-test code under `src` into a module of crate `krate` that is in
/// `hidden`, one line each (file and path): the crate's API is all such code may use.
fn hidden_uses(src: &Path, krate: &str, hidden: &BTreeSet<String>) -> Result<Vec<String>> {
    let mut violations = BTreeSet::new();
    for file in modules(src)?.into_values() {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
        let mut paths = Paths::default();
        paths.visit_file(&ast);
        for (_, path) in paths.found {
            if path.first().is_some_and(|c| c == krate)
                && path.get(1).is_some_and(|m| hidden.contains(m))
            {
                let name = file
                    .strip_prefix(src)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                violations.insert(format!(
                    "{name} uses {}, a module hidden from {krate}'s API",
                    path.join("::")
                ));
            }
        }
    }
    Ok(violations.into_iter().collect())
}

/// `edges` between siblings: an edge from `a::x::y` to `a::z` is one from `a::x` to `a::z`;
/// edges between a module and its ancestors are dropped.
fn sibling_edges(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut out: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if from.len() > common && to.len() > common {
                out.entry(from[..=common].to_vec())
                    .or_default()
                    .insert(to[..=common].to_vec());
            }
        }
    }
    out
}

/// Module path (`["calibrate", "data"]`; `[]` for the crate root) → its file.
fn modules(src: &Path) -> Result<BTreeMap<Vec<String>, PathBuf>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src)?.with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    Ok(out)
}

/// The module `path` (as written in `module`) names, if it names one of `names`.
fn resolve(
    module: &[String],
    path: &[String],
    names: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    // The module `self::` is relative to is `module`; `super::` goes one up from it.
    let mut base: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => module.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    let mut best = None;
    let mut candidate = base;
    if names.contains(&candidate) {
        best = Some(candidate.clone());
    }
    for segment in rest {
        candidate.push(segment.clone());
        if names.contains(&candidate) {
            best = Some(candidate.clone());
        }
    }
    best
}

/// The names the crate root at `lib` imports from other crates (`use other::{a, b as c}`:
/// `a` and `c`), which modules reach as `crate::a` without using the root.
fn imported_at_root(lib: &Path) -> Result<BTreeSet<String>> {
    fn leaves(tree: &syn::UseTree, found: &mut BTreeSet<String>) {
        match tree {
            syn::UseTree::Path(p) => leaves(&p.tree, found),
            syn::UseTree::Name(n) => {
                found.insert(n.ident.to_string());
            }
            syn::UseTree::Rename(r) => {
                found.insert(r.rename.to_string());
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| leaves(t, found)),
            syn::UseTree::Glob(_) => {}
        }
    }
    let text =
        std::fs::read_to_string(lib).with_context(|| format!("reading {}", lib.display()))?;
    let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", lib.display()))?;
    let mut found = BTreeSet::new();
    for item in &ast.items {
        if let syn::Item::Use(u) = item {
            let local = match &u.tree {
                syn::UseTree::Path(p) => {
                    ["crate", "self", "super"].contains(&&*p.ident.to_string())
                }
                _ => true,
            };
            if !local {
                leaves(&u.tree, &mut found);
            }
        }
    }
    Ok(found)
}

/// Why `from` may not use `to`, if it may not.
fn breaks_order(layers: &[(&str, Layer)], from: &[String], to: &[String]) -> Option<String> {
    if from.is_empty() {
        return None; // the crate root assembles everything
    }
    if to.is_empty() {
        return Some("modules do not use the crate root".into());
    }
    if from.starts_with(to) || to.starts_with(from) {
        return None; // a parent and its children: see `sibling_edges`
    }
    let rank = |m: &[String]| layers.iter().position(|(name, _)| *name == m[0]);
    let (Some(f), Some(t)) = (rank(from), rank(to)) else {
        return Some(format!(
            "top-level module `{}` is not listed in xtask's MODULES",
            if rank(from).is_none() {
                &from[0]
            } else {
                &to[0]
            }
        ));
    };
    if f == t {
        return None; // siblings: the cycle check covers them
    }
    if layers[f].1 == Layer::Leaf && layers[t].1 == Layer::Stage {
        return Some("a leaf module uses a stage".into());
    }
    (t > f).then(|| format!("`{}` comes after `{}`", to[0], from[0]))
}

/// Every cycle of the module graph, each once (Tarjan's strongly connected components with
/// more than one member).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.reverse();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

fn show(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// The `crate`/`super`/`self`-rooted paths of a file's non-test items, each with the inline
/// modules (`mod x { ... }`) it is written in, and the file's `#[cfg(test)] mod name;`s.
#[derive(Default)]
struct Paths {
    inline: Vec<String>,
    found: Vec<(Vec<String>, Vec<String>)>,
    test_modules: Vec<String>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.found.push((self.inline.clone(), path));
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.found.push((self.inline.clone(), path));
            }
            syn::UseTree::Glob(_) => self.found.push((self.inline.clone(), prefix.clone())),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        match item {
            syn::Item::Mod(m) if is_test_only(attrs) && m.content.is_none() => {
                self.test_modules.push(m.ident.to_string());
            }
            _ if is_test_only(attrs) => {}
            syn::Item::Mod(m) => {
                self.inline.push(m.ident.to_string());
                syn::visit::visit_item(self, item);
                self.inline.pop();
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.found.push((self.inline.clone(), segments));
        }
        syn::visit::visit_path(self, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn a_stage_using_a_later_one_and_a_cycle_are_reported_and_test_code_is_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                (
                    "lib.rs",
                    "mod onnx; mod calibrate; mod quantize; #[cfg(test)] mod support;",
                ),
                (
                    "onnx.rs",
                    "#[cfg(test)] mod tests { use crate::quantize::x; }",
                ),
                ("support.rs", "use crate::quantize::x;"),
                ("calibrate/c.rs", "mod inner { use super::super::a::g; }"),
                ("calibrate/mod.rs", "pub mod a; pub mod b;"),
                (
                    "calibrate/a.rs",
                    "use super::{b::f, c}; fn g() { crate::quantize::h() }",
                ),
                ("calibrate/b.rs", "use crate::{onnx, calibrate::a::g};"),
                ("quantize.rs", "use crate::calibrate::a;"),
            ],
        );
        let layers = [
            ("onnx", Layer::Leaf),
            ("calibrate", Layer::Stage),
            ("quantize", Layer::Stage),
        ];
        let v = check(dir.path(), &layers).unwrap();
        assert_eq!(
            v,
            [
                "calibrate::a uses quantize: `quantize` comes after `calibrate`",
                "cycle: calibrate -> quantize",
                "cycle: calibrate::a -> calibrate::b -> calibrate::c",
            ],
            "{v:#?}"
        );
    }

    #[test]
    fn the_build_paths_crates_are_layered() {
        for (krate, layers) in MODULES {
            let src = crate::workspace_root().join(krate).join("src");
            let v = check(&src, layers).unwrap();
            assert!(v.is_empty(), "{krate}: {v:#?}");
        }
        let v = crate_violations(&workspace_dependencies().unwrap());
        assert!(v.is_empty(), "{v:#?}");
        let root = crate::workspace_root();
        let hidden = hidden_modules(&root.join("kenosis-quantize/src/lib.rs")).unwrap();
        assert!(hidden.contains("calibrate"), "{hidden:?}");
        let v = hidden_uses(&root.join("kenosis-cli/src"), "kenosis_quantize", &hidden).unwrap();
        assert!(v.is_empty(), "{v:#?}");
    }

    #[test]
    fn a_path_into_a_hidden_module_is_reported_and_test_code_is_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                (
                    "q/lib.rs",
                    "#[doc(hidden)]\npub mod stage;\npub mod api;\nmod private;",
                ),
                (
                    "cli/main.rs",
                    "use q::api::f; mod run; fn g() { q::stage::h() } \
                     #[cfg(test)] mod tests { use q::stage::t; }",
                ),
                ("cli/run.rs", "use q::{api, stage::{self, k}};"),
            ],
        );
        let hidden = hidden_modules(&dir.path().join("q/lib.rs")).unwrap();
        assert_eq!(hidden, BTreeSet::from(["stage".to_owned()]));
        let v = hidden_uses(&dir.path().join("cli"), "q", &hidden).unwrap();
        assert_eq!(
            v,
            [
                "main.rs uses q::stage::h, a module hidden from q's API",
                "run.rs uses q::stage, a module hidden from q's API",
                "run.rs uses q::stage::k, a module hidden from q's API",
            ]
        );
    }

    #[test]
    fn a_crate_depending_on_a_later_one_is_reported_and_a_dev_dependency_is_not() {
        let dep = |from: &str, to: &str, optional: bool, dev: bool| Dependency {
            from: from.into(),
            to: to.into(),
            optional,
            dev,
        };
        let v = crate_violations(&[
            dep("kenosis-request", "kenosis-quantize", false, false),
            dep("kenosis-build", "kenosis-quantize", false, false),
            dep("kenosis-build", "kenosis-quantize", false, true),
            dep("kenosis-quantize", "kenosis-build", false, true),
            dep("kenosis-build", "kenosis-request", false, false),
        ]);
        assert_eq!(
            v,
            [
                "crate kenosis-build depends on kenosis-quantize by default",
                "crate kenosis-request depends on kenosis-quantize, which comes after it",
            ],
            "{v:#?}"
        );
    }
}
