//! Finds every `include_quantized!` call of the package being built, so that `build.rs` needs
//! no list of models.
//!
//! The package's targets (lib, bins, examples, tests, benches) come from `cargo metadata`;
//! each target's module tree is parsed with `syn`, following `mod x;` (and `#[path]`) to
//! files, through inline modules, nested items and function bodies, and into the token
//! streams of other macros (`vec![include_quantized!(..)]`). The macro counts when its path
//! ends in `include_quantized` or in a name it was imported under (`use ... as q;`). The
//! arguments are parsed with [`kenosis_options::Invocation`], the grammar the macro itself
//! uses.
//!
//! Re-running discovery is cheap: the target list is cached by the bytes of `Cargo.toml` and
//! the file names in the target folders, and each source file's calls and `mod` declarations
//! by its size and modification time (in `OUT_DIR/kenosis-discovery.json`), so an unchanged
//! file is only `stat`ed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use kenosis_options::{Invocation, Options};
use proc_macro2::{TokenStream, TokenTree};
use serde::{Deserialize, Serialize};
use syn::visit::Visit;

use crate::error::{Error, Result};

/// Bumped when the cache layout, the scan or the option grammar changes (a call cached as
/// not parsing may parse now).
const CACHE_VERSION: u32 = 2;

/// One `include_quantized!` call found in the package's sources.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The source file.
    pub file: PathBuf,
    /// 1-based line of the call.
    pub line: usize,
    /// The model path as written (relative to the crate root, or absolute).
    pub model: String,
    /// The options written at the call.
    pub options: Options,
}

/// What a discovery run found.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// Every call, in file order then source order.
    pub calls: Vec<Call>,
    /// Every source file parsed (or taken from the cache), sorted.
    pub files: Vec<PathBuf>,
    /// The folders holding the targets' root files (watched for new files).
    pub dirs: Vec<PathBuf>,
    /// How many files were parsed (not answered by the cache).
    pub parsed: usize,
    /// Whether the target list was taken from the cache (no `cargo metadata` run).
    pub targets_cached: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct DiskCache {
    version: u32,
    /// Fingerprint of `Cargo.toml` and the target folders' listings.
    targets_key: String,
    /// Root source files of the targets.
    roots: Vec<PathBuf>,
    /// `(file, module dir)` → scan.
    files: BTreeMap<String, FileScan>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileScan {
    len: u64,
    mtime_ns: u128,
    /// `mod x;` declarations: candidate files and the module dir of the child.
    mods: Vec<ModDecl>,
    calls: Vec<RawCall>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ModDecl {
    candidates: Vec<PathBuf>,
    child_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RawCall {
    line: usize,
    /// The macro's argument tokens, as text.
    args: String,
    /// Set when the arguments do not parse: line and message.
    error: Option<(usize, String)>,
}

/// Finds every `include_quantized!` call of the package whose manifest folder is
/// `manifest_dir`. With `cache_file`, results are reused across runs.
///
/// # Errors
/// [`Error::Config`] when `cargo metadata` fails; [`Error::InvalidCall`] naming file and line
/// for a call whose arguments do not parse (unknown option, bad value, not a literal).
pub fn discover_calls(manifest_dir: &Path, cache_file: Option<&Path>) -> Result<Discovery> {
    let mut cache: DiskCache = cache_file
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|c: &DiskCache| c.version == CACHE_VERSION)
        .unwrap_or_default();

    let dirs = target_dirs(manifest_dir);
    let key = targets_key(manifest_dir, &dirs)?;
    let targets_cached = cache.targets_key == key && !cache.roots.is_empty();
    if !targets_cached {
        cache.roots = target_roots(manifest_dir)?;
        cache.targets_key = key;
    }

    let mut discovery = Discovery {
        dirs: dirs.into_iter().filter(|d| d.is_dir()).collect(),
        targets_cached,
        ..Default::default()
    };
    let mut fresh: BTreeMap<String, FileScan> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    // (file, module dir); a crate root's modules live next to it.
    let mut stack: Vec<(PathBuf, PathBuf)> = cache
        .roots
        .iter()
        .rev()
        .map(|r| (r.clone(), r.parent().unwrap_or(Path::new(".")).to_owned()))
        .collect();
    let mut calls = Vec::new();
    while let Some((file, mod_dir)) = stack.pop() {
        if !seen.insert(file.clone()) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&file) else {
            continue; // a `mod x;` without a file: rustc reports it
        };
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let cache_key = format!("{}\n{}", file.display(), mod_dir.display());
        let scan = match cache.files.remove(&cache_key) {
            Some(s) if s.len == meta.len() && s.mtime_ns == mtime_ns => s,
            _ => {
                discovery.parsed += 1;
                scan_file(&file, &mod_dir, meta.len(), mtime_ns)
            }
        };
        for m in scan.mods.iter().rev() {
            if let Some(found) = m.candidates.iter().find(|c| c.is_file()) {
                stack.push((found.clone(), m.child_dir.clone()));
            }
        }
        for call in &scan.calls {
            calls.push((file.clone(), call.clone()));
        }
        discovery.files.push(file);
        fresh.insert(cache_key, scan);
    }
    cache.files = fresh;
    cache.version = CACHE_VERSION;
    if let Some(f) = cache_file {
        // A cache that cannot be written only costs time next run.
        #[allow(
            clippy::expect_used,
            reason = "the discovery cache (strings and numbers) always serializes to JSON"
        )]
        let _ = crate::cache::write_atomic(f, &serde_json::to_vec(&cache).expect("serializes"));
    }

    for (file, raw) in calls {
        if let Some((line, message)) = raw.error {
            return Err(Error::InvalidCall {
                file,
                line,
                message,
            });
        }
        let invocation: Invocation = syn::parse_str(&raw.args).map_err(|e| Error::InvalidCall {
            file: file.clone(),
            line: raw.line,
            message: e.to_string(),
        })?;
        discovery.calls.push(Call {
            file,
            line: raw.line,
            model: invocation.path.value(),
            options: invocation.options,
        });
    }
    discovery.files.sort();
    Ok(discovery)
}

/// The folders cargo auto-discovers targets in, plus `src`.
fn target_dirs(manifest_dir: &Path) -> Vec<PathBuf> {
    ["src", "examples", "tests", "benches"]
        .iter()
        .map(|d| manifest_dir.join(d))
        .collect()
}

/// BLAKE3 of `Cargo.toml` and of the names of the files directly in the target folders and
/// in `src/bin` (what decides the target list).
fn targets_key(manifest_dir: &Path, dirs: &[PathBuf]) -> Result<String> {
    let toml = manifest_dir.join("Cargo.toml");
    let mut h = blake3::Hasher::new();
    h.update(&std::fs::read(&toml).map_err(|e| Error::io(&toml, e))?);
    for dir in dirs.iter().cloned().chain([manifest_dir.join("src/bin")]) {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        h.update(dir.to_string_lossy().as_bytes());
        for n in names {
            h.update(n.as_bytes()).update(b"\n");
        }
    }
    Ok(h.finalize().to_hex().to_string())
}

/// Root source files of the package's lib, bin, example, test and bench targets, from
/// [`crate::cargo::metadata`]: the `packages[].manifest_path` and `targets[].kind` /
/// `src_path` fields.
fn target_roots(manifest_dir: &Path) -> Result<Vec<PathBuf>> {
    let manifest = manifest_dir.join("Cargo.toml");
    let failed =
        |what: String| Error::Config(format!("cargo metadata for {}: {what}", manifest.display()));
    let metadata = crate::cargo::metadata(Some(&manifest)).map_err(|e| failed(e.to_string()))?;
    let canonical = manifest.canonicalize().unwrap_or(manifest.clone());
    let package = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| {
            p["manifest_path"].as_str().is_some_and(|p| {
                let p = Path::new(p);
                p == manifest || p.canonicalize().is_ok_and(|p| p == canonical)
            })
        })
        .ok_or_else(|| failed("it lists no package for this manifest".to_owned()))?;
    const KINDS: [&str; 10] = [
        "lib",
        "rlib",
        "dylib",
        "cdylib",
        "staticlib",
        "proc-macro",
        "bin",
        "example",
        "test",
        "bench",
    ];
    let mut roots: Vec<PathBuf> = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k.as_str().is_some_and(|k| KINDS.contains(&k)))
        })
        .filter_map(|t| t["src_path"].as_str().map(PathBuf::from))
        .collect();
    roots.sort();
    roots.dedup();
    Ok(roots)
}

/// Parses one file; a file that does not parse yields nothing (rustc reports it).
fn scan_file(file: &Path, mod_dir: &Path, len: u64, mtime_ns: u128) -> FileScan {
    let mut scan = FileScan {
        len,
        mtime_ns,
        mods: Vec::new(),
        calls: Vec::new(),
    };
    let Ok(text) = std::fs::read_to_string(file) else {
        return scan;
    };
    // Cheap exits: no call and no module declaration to follow.
    let maybe_calls = text.contains("include_quantized");
    if !maybe_calls && !text.contains("mod ") {
        return scan;
    }
    let Ok(ast) = syn::parse_file(&text) else {
        return scan;
    };
    let mut visitor = Visitor {
        file_dir: file.parent().unwrap_or(Path::new(".")).to_owned(),
        dirs: vec![mod_dir.to_owned()],
        mods: Vec::new(),
        macros: Vec::new(),
        names: BTreeSet::from(["include_quantized".to_owned()]),
    };
    visitor.visit_file(&ast);
    scan.mods = visitor.mods;
    if maybe_calls {
        for (name, line, tokens) in visitor.macros {
            if !visitor.names.contains(&name) {
                continue;
            }
            let error = syn::parse2::<Invocation>(tokens.clone())
                .err()
                .map(|e| (e.span().start().line.max(line), e.to_string()));
            scan.calls.push(RawCall {
                line,
                args: tokens.to_string(),
                error,
            });
        }
    }
    scan
}

struct Visitor {
    /// Folder of the file being scanned (base of `#[path]` outside inline modules).
    file_dir: PathBuf,
    /// Module dir stack: the file's, then one more per inline module.
    dirs: Vec<PathBuf>,
    mods: Vec<ModDecl>,
    /// Every macro call: last path segment, line, argument tokens.
    macros: Vec<(String, usize, TokenStream)>,
    /// Names `include_quantized` is called by in this file.
    names: BTreeSet<String>,
}

impl Visitor {
    /// Records `name!(...)` patterns inside another macro's tokens.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            if let TokenTree::Group(g) = tree {
                let is_call = i >= 2
                    && matches!(&trees[i - 1], TokenTree::Punct(p) if p.as_char() == '!')
                    && matches!(&trees[i - 2], TokenTree::Ident(_));
                if is_call {
                    if let TokenTree::Ident(name) = &trees[i - 2] {
                        self.macros
                            .push((name.to_string(), name.span().start().line, g.stream()));
                    }
                }
                self.scan_tokens(g.stream());
            }
        }
    }
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

impl<'ast> Visit<'ast> for Visitor {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        #[allow(
            clippy::expect_used,
            reason = "the folder stack starts with the crate root and pops only what it pushed"
        )]
        let dir = self.dirs.last().expect("never empty").clone();
        let name = m.ident.unraw_string();
        match &m.content {
            None => {
                let decl = match path_attr(&m.attrs) {
                    Some(p) => {
                        let base = if self.dirs.len() > 1 {
                            &dir
                        } else {
                            &self.file_dir
                        };
                        let file = base.join(p);
                        let child_dir = file.parent().unwrap_or(Path::new(".")).to_owned();
                        ModDecl {
                            candidates: vec![file],
                            child_dir,
                        }
                    }
                    None => ModDecl {
                        candidates: vec![
                            dir.join(format!("{name}.rs")),
                            dir.join(&name).join("mod.rs"),
                        ],
                        child_dir: dir.join(&name),
                    },
                };
                self.mods.push(decl);
            }
            Some(_) => {
                let child = match path_attr(&m.attrs) {
                    Some(p) => dir.join(p),
                    None => dir.join(&name),
                };
                self.dirs.push(child);
                syn::visit::visit_item_mod(self, m);
                self.dirs.pop();
            }
        }
    }

    fn visit_item_macro(&mut self, m: &'ast syn::ItemMacro) {
        // `macro_rules!` bodies hold patterns, not calls.
        if m.mac.path.is_ident("macro_rules") {
            return;
        }
        syn::visit::visit_item_macro(self, m);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if let Some(last) = m.path.segments.last() {
            let line = last.ident.span().start().line;
            self.macros
                .push((last.ident.to_string(), line, m.tokens.clone()));
        }
        self.scan_tokens(m.tokens.clone());
    }

    fn visit_use_rename(&mut self, r: &'ast syn::UseRename) {
        if r.ident == "include_quantized" {
            self.names.insert(r.rename.to_string());
        }
    }
}

trait UnrawString {
    fn unraw_string(&self) -> String;
}

impl UnrawString for syn::Ident {
    fn unraw_string(&self) -> String {
        let s = self.to_string();
        s.strip_prefix("r#").map_or(s.clone(), str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn scan(dir: &Path, root: &str) -> Vec<(String, usize, String, String)> {
        let mut cache = DiskCache {
            version: CACHE_VERSION,
            targets_key: targets_key(dir, &target_dirs(dir)).unwrap(),
            roots: vec![dir.join(root)],
            files: BTreeMap::new(),
        };
        let cache_file = dir.join("cache.json");
        std::fs::write(&cache_file, serde_json::to_vec(&cache).unwrap()).unwrap();
        let d = discover_calls(dir, Some(&cache_file)).unwrap();
        cache = serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
        assert!(!cache.files.is_empty());
        d.calls
            .into_iter()
            .map(|c| {
                let file = c.file.strip_prefix(dir).unwrap().display().to_string();
                (file, c.line, c.model, c.options.canonical())
            })
            .collect()
    }

    #[test]
    fn follows_modules_nested_items_renames_and_other_macros() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "Cargo.toml", "[package]\nname = \"x\"\n");
        write(
            d,
            "src/lib.rs",
            "mod a;\n#[path = \"other/b_file.rs\"]\nmod b;\nmod inline {\n    mod c;\n}\n\
             fn f() {\n    let _m = kenosis_runtime::include_quantized!(\"m/lib.onnx\", per_channel = false);\n}\n\
             macro_rules! m { ($p:literal) => { include_quantized!($p) } }\n",
        );
        write(
            d,
            "src/a.rs",
            "mod deep;\nimpl S { fn g() { let v = vec![include_quantized!(\"m/a.onnx\")]; } }\n",
        );
        write(
            d,
            "src/a/deep.rs",
            "use kenosis_runtime::include_quantized as iq;\nconst _: () = { iq!(struct N = \"m/deep.onnx\"); };\n",
        );
        write(
            d,
            "src/other/b_file.rs",
            "fn h() { include_quantized!(\"m/b.onnx\"); }\n",
        );
        write(
            d,
            "src/inline/c.rs",
            "fn k() { include_quantized!(\"m/c.onnx\", method = \"mse\"); }\n",
        );
        write(
            d,
            "src/unlinked.rs",
            "fn k() { include_quantized!(\"m/never.onnx\"); }\n",
        );
        let found = scan(d, "src/lib.rs");
        let want =
            |f: &str, l: usize, m: &str, o: &str| (f.to_owned(), l, m.to_owned(), o.to_owned());
        assert_eq!(
            found,
            vec![
                want("src/lib.rs", 8, "m/lib.onnx", "per_channel = false"),
                want("src/a.rs", 2, "m/a.onnx", ""),
                want("src/a/deep.rs", 2, "m/deep.onnx", ""),
                want("src/other/b_file.rs", 1, "m/b.onnx", ""),
                want("src/inline/c.rs", 1, "m/c.onnx", "method = \"mse\""),
            ]
        );
        // Second run: every file from the cache, same answer.
        assert_eq!(scan(d, "src/lib.rs"), found);
    }

    #[test]
    fn bad_call_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "Cargo.toml", "[package]\nname = \"x\"\n");
        write(
            d,
            "src/main.rs",
            "fn main() {\n\n    include_quantized!(\"m.onnx\",\n        bits = 4);\n}\n",
        );
        let cache = DiskCache {
            version: CACHE_VERSION,
            targets_key: targets_key(d, &target_dirs(d)).unwrap(),
            roots: vec![d.join("src/main.rs")],
            files: BTreeMap::new(),
        };
        let cache_file = d.join("cache.json");
        std::fs::write(&cache_file, serde_json::to_vec(&cache).unwrap()).unwrap();
        let err = discover_calls(d, Some(&cache_file))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("{}:4: ", d.join("src/main.rs").display())),
            "{err}"
        );
        assert!(
            err.contains("unknown include_quantized! option `bits`"),
            "{err}"
        );
    }
}
