//! `docs/benchmarks.md`: the measured figures, written by `cargo xtask bench` between
//! `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` markers, one section per measurement, so
//! that a partial run (`--deploy-only`, `--build-only`) replaces only its own section.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// `<workspace>/docs/benchmarks.md`.
pub fn benchmarks_md() -> PathBuf {
    crate::workspace_root().join("docs").join("benchmarks.md")
}

/// Writes a partial bench's table `text` to `out/NAME.md` and as section `name` of
/// [`benchmarks_md`], and prints it.
pub fn publish(out: &Path, name: &str, text: &str) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let path = out.join(format!("{name}.md"));
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    let docs = benchmarks_md();
    write_section(&docs, name, text)?;
    eprintln!(
        "xtask: wrote {} and {}\n{text}",
        path.display(),
        docs.display()
    );
    Ok(())
}

/// Replaces section `name` of the markdown file at `path` with `body` (appended, with its
/// markers, when the file has no such section; the file is created when missing).
pub fn write_section(path: &Path, name: &str, body: &str) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let updated = with_section(&text, name, body);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, updated).with_context(|| format!("writing {}", path.display()))
}

/// `text` with section `name` replaced by (or extended with) `body`.
fn with_section(text: &str, name: &str, body: &str) -> String {
    let open = format!("<!-- bench:{name} -->");
    let close = format!("<!-- /bench:{name} -->");
    let section = format!("{open}\n{}\n{close}", body.trim_end());
    match (text.find(&open), text.find(&close)) {
        (Some(start), Some(end)) if start < end => {
            format!("{}{section}{}", &text[..start], &text[end + close.len()..])
        }
        _ => {
            let separator = if text.is_empty() || text.ends_with("\n\n") {
                ""
            } else if text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            format!("{text}{separator}{section}\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_section;

    #[test]
    fn a_section_is_replaced_in_place_or_appended() {
        let doc = "# B\n\nintro\n";
        let once = with_section(doc, "deploy", "| a |\n");
        assert_eq!(
            once,
            "# B\n\nintro\n\n<!-- bench:deploy -->\n| a |\n<!-- /bench:deploy -->\n"
        );
        let twice = with_section(&once, "deploy", "| b |");
        assert_eq!(twice, once.replace("| a |", "| b |"));
        let other = with_section(&twice, "models", "m");
        assert!(other.starts_with(&twice) && other.ends_with("<!-- /bench:models -->\n"));
    }
}
