//! Repository hygiene as ordinary tests, so a plain `cargo test` catches drift.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly by design"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn all_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "examples"] {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 20, "the walk found too few files: {files:?}");
    files
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let missing: Vec<_> = all_rust_files()
        .into_iter()
        .filter(|path| !std::fs::read_to_string(path).unwrap().starts_with("//!"))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading `//!` doc: {missing:?}"
    );
}

#[test]
fn no_test_is_ignored_or_expected_to_panic() {
    let forbidden = ["#[ignore", "#[should_panic"];
    let offenders: Vec<_> = all_rust_files()
        .into_iter()
        .filter(|path| path.file_name().unwrap() != "tidy.rs")
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            forbidden.iter().any(|attr| text.contains(attr))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "tests must assert today's behaviour instead: {offenders:?}"
    );
}

#[test]
fn architecture_names_every_crate() {
    let architecture = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            architecture.contains(&name),
            "ARCHITECTURE.md does not mention {name}"
        );
    }
}

/// Only the binaries (flue-cli, xtask, examples) write to the terminal: every library crate
/// denies clippy's `print_stdout` and `print_stderr` at its root, as ARCHITECTURE.md says.
#[test]
fn library_crates_deny_printing() {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let lib = entry.unwrap().path().join("src/lib.rs");
        if !lib.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&lib).unwrap();
        if !text.contains("#![deny(clippy::print_stdout, clippy::print_stderr)]") {
            missing.push(relative(&lib));
        }
    }
    missing.sort();
    assert_eq!(
        missing,
        Vec::<String>::new(),
        "library crates that may print"
    );
}

#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        readme.contains("cargo xtask ci"),
        "README must name the test command"
    );
    assert!(
        ci.lines().any(|line| line.trim() == "cargo xtask ci"),
        ".ci/run must run it"
    );
}

// ---------------------------------------------------------------------------------------------
// Layering: which crate of ours may depend on which, and no module cycles inside a crate.
// ARCHITECTURE.md ("Crate dependencies") carries the same tables; a test keeps them equal.
// ---------------------------------------------------------------------------------------------

/// Every crate of ours, the crates of ours it may depend on (`[dependencies]` and
/// `[build-dependencies]`), and the ones its tests may use besides (`[dev-dependencies]` reach
/// further, so a contract suite can run against every backend).
const ALLOWED: &[(&str, &[&str], &[&str])] = &[
    ("flue-protocol", &[], &[]),
    ("flue-core", &["flue-protocol"], &["flue-store"]),
    ("flue-providers", &["flue-core", "flue-protocol"], &[]),
    ("flue-store", &["flue-core", "flue-protocol"], &[]),
    (
        "flue-build",
        &["flue-core", "flue-protocol", "flue-providers"],
        &[],
    ),
    ("flue-connectors", &["flue-core", "flue-protocol"], &[]),
    ("flue-server", &["flue-core", "flue-protocol"], &[]),
    ("flue-telemetry", &["flue-protocol"], &["flue-core"]),
    (
        "flue-host",
        &[
            "flue-build",
            "flue-connectors",
            "flue-core",
            "flue-protocol",
            "flue-providers",
            "flue-server",
            "flue-store",
        ],
        &[],
    ),
    (
        "flue-eval",
        &["flue-build", "flue-core", "flue-host", "flue-protocol"],
        &[],
    ),
    (
        "flue-cli",
        &[
            "flue-build",
            "flue-core",
            "flue-eval",
            "flue-host",
            "flue-protocol",
            "flue-server",
            "flue-telemetry",
        ],
        &["flue-store"],
    ),
];

/// Edges that must never appear in `[dependencies]` or `[build-dependencies]`, and why. `*`
/// stands for every crate of ours. An entry of ALLOWED's first list must not match any of these.
const NEVER: &[(&[&str], &[&str], &str)] = &[
    (
        &["flue-protocol"],
        &["*"],
        "the wire types are data only: every crate reads them, so they read no crate of ours",
    ),
    (
        &["flue-core"],
        &[
            "flue-build",
            "flue-connectors",
            "flue-host",
            "flue-providers",
            "flue-server",
            "flue-store",
            "flue-telemetry",
        ],
        "the runtime reaches backends and frontends only through its own traits; they plug in from outside",
    ),
    (
        &["flue-connectors", "flue-providers", "flue-store"],
        &["flue-connectors", "flue-providers", "flue-store"],
        "backends never import each other: what they share is a trait or a rule of flue-core",
    ),
    (
        &["flue-connectors", "flue-providers", "flue-store"],
        &["flue-build", "flue-host", "flue-server"],
        "a backend knows no workspace file, assembly or route; it knows flue-core's traits",
    ),
    (
        &["flue-telemetry"],
        &[
            "flue-build",
            "flue-connectors",
            "flue-core",
            "flue-host",
            "flue-providers",
            "flue-server",
            "flue-store",
        ],
        "telemetry needs the protocol's names, not the runtime with its SQLite, bashkit and HTTP clients",
    ),
    (
        &["flue-server"],
        &[
            "flue-build",
            "flue-connectors",
            "flue-providers",
            "flue-store",
        ],
        "the HTTP protocol serves any runtime through flue-core's traits; which backends run is the assembly's choice",
    ),
    (
        &["flue-build"],
        &["flue-connectors", "flue-host", "flue-server", "flue-store"],
        "discovery and validation read files and open nothing: no store, sandbox, server or assembly",
    ),
    (
        &["flue-cli"],
        &["flue-connectors", "flue-providers", "flue-store"],
        "the binary parses arguments and renders events; it names no store, sandbox or tool type (flue-host assembles them)",
    ),
    (
        &["flue-eval"],
        &[
            "flue-connectors",
            "flue-providers",
            "flue-server",
            "flue-store",
        ],
        "evals run agents through flue-host's assembly, the way `flue run` does; they name no backend or route",
    ),
    (
        &["*"],
        &["flue-cli"],
        "the binary is the top of the graph; what others need from it belongs in flue-host",
    ),
];

/// Pairs of top-level modules of one crate that may import each other: (crate, module, module,
/// why). ARCHITECTURE.md lists the same pairs. A cycle is allowed only when each of its edges
/// belongs to a pair here.
const NAMED_PAIRS: &[(&str, &str, &str, &str)] = &[];

const ALLOWED_HEADER: [&str; 3] = ["crate", "may depend on", "tests may also use"];
const NEVER_HEADER: [&str; 3] = ["crate", "never depends on", "why"];
const PAIRS_HEADER: [&str; 3] = ["crate", "module pair", "why"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DepKind {
    /// `[dependencies]`, `[build-dependencies]` and their `[target.*]` forms.
    Normal,
    /// `[dev-dependencies]` and its `[target.*]` form.
    Dev,
}

/// One dependency line of a Cargo.toml.
#[derive(Debug)]
struct Dependency {
    name: String,
    kind: DepKind,
    line: usize,
}

/// A crate under crates/: its package name, folder and manifest's dependencies.
struct Manifest {
    name: String,
    dir: PathBuf,
    dependencies: Vec<Dependency>,
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

fn our_crates() -> Vec<Manifest> {
    let mut manifests = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&manifest).unwrap();
        let name = package_name(&text)
            .unwrap_or_else(|| panic!("{}: no `name` in [package]", relative(&manifest)));
        manifests.push(Manifest {
            name,
            dependencies: dependencies(&text),
            dir,
        });
    }
    manifests.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(manifests.len() > 3, "the walk found too few crates");
    manifests
}

fn unquote(text: &str) -> &str {
    text.trim().trim_matches('"').trim_matches('\'')
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "name"
        {
            return Some(unquote(value).to_owned());
        }
    }
    None
}

/// The dependencies a manifest declares, read line by line: enough TOML for our manifests
/// (`name.workspace = true`, `name = { ... }`, `[dependencies.name]`, `[target.*.dependencies]`,
/// a `package = "..."` rename inside an inline table).
fn dependencies(manifest: &str) -> Vec<Dependency> {
    let mut found = Vec::new();
    let mut section: Option<DepKind> = None;
    // Open `[` of a value continued on the next lines (a multi-line array).
    let mut open_brackets = 0i32;
    for (idx, raw) in manifest.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if open_brackets > 0 {
            open_brackets += bracket_balance(line);
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']').trim();
            let (kind, table_name) = dependency_table(header);
            section = kind.filter(|_| table_name.is_none());
            if let (Some(kind), Some(name)) = (kind, table_name) {
                found.push(Dependency {
                    name: name.to_owned(),
                    kind,
                    line: idx + 1,
                });
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        open_brackets = bracket_balance(value);
        let Some(kind) = section else {
            continue;
        };
        let key = unquote(key.split('.').next().unwrap_or(key));
        let name = renamed_package(value).unwrap_or(key);
        found.push(Dependency {
            name: name.to_owned(),
            kind,
            line: idx + 1,
        });
    }
    found
}

fn bracket_balance(text: &str) -> i32 {
    let opened = text.matches('[').count() as i32;
    let closed = text.matches(']').count() as i32;
    opened - closed
}

/// Which kind of dependency table a header opens, and the dependency it names when it is the
/// `[dependencies.name]` form.
fn dependency_table(header: &str) -> (Option<DepKind>, Option<&str>) {
    // `target.'cfg(unix)'.dependencies` reads like `dependencies`.
    let header = match header.strip_prefix("target.") {
        Some(rest) => match rest.rfind("dependencies") {
            Some(at) => rest[..at].rfind('.').map_or(rest, |dot| &rest[dot + 1..]),
            None => return (None, None),
        },
        None => header,
    };
    let (table, name) = match header.split_once('.') {
        Some((table, name)) => (table, Some(unquote(name))),
        None => (header, None),
    };
    let kind = match table {
        "dependencies" | "build-dependencies" => Some(DepKind::Normal),
        "dev-dependencies" => Some(DepKind::Dev),
        _ => None,
    };
    (kind, name)
}

fn renamed_package(value: &str) -> Option<&str> {
    let at = value.find("package")?;
    let rest = value[at + "package".len()..]
        .trim_start()
        .strip_prefix('=')?;
    let rest = rest.trim_start().strip_prefix('"')?;
    rest.split('"').next()
}

fn matches(pattern: &str, name: &str) -> bool {
    pattern == "*" || pattern == name
}

/// The NEVER entry forbidding `from -> to`, if any.
fn never_reason(from: &str, to: &str) -> Option<&'static str> {
    NEVER
        .iter()
        .find(|(froms, tos, _)| {
            froms.iter().any(|pattern| matches(pattern, from))
                && tos.iter().any(|pattern| matches(pattern, to))
        })
        .map(|(_, _, why)| *why)
}

#[test]
fn crate_dependencies_follow_the_layering() {
    const FIX_TABLE: &str = "ALLOWED in xtask/tests/tidy.rs and the table `crate | may depend on | tests may also use` in ARCHITECTURE.md";
    let mut problems = Vec::new();

    // The tables themselves: an allowed edge is never a forbidden one.
    for (from, normal, _) in ALLOWED {
        for to in *normal {
            if let Some(why) = never_reason(from, to) {
                problems.push(format!(
                    "ALLOWED lets {from} -> {to}, which NEVER forbids ({why}): drop one of the two entries"
                ));
            }
        }
    }

    let manifests = our_crates();
    let ours: Vec<&str> = manifests
        .iter()
        .map(|manifest| manifest.name.as_str())
        .collect();
    for (name, _, _) in ALLOWED {
        if !ours.contains(name) {
            problems.push(format!(
                "{name} is in the layering table but no crates/*/Cargo.toml names it: remove its row from {FIX_TABLE}"
            ));
        }
    }
    for manifest in &manifests {
        let path = relative(&manifest.dir.join("Cargo.toml"));
        let Some((_, normal, dev)) = ALLOWED.iter().find(|(name, _, _)| *name == manifest.name)
        else {
            problems.push(format!(
                "{} ({path}) is not in the layering table: add a row for it (its one job decides what it may use) to {FIX_TABLE}, and describe it in ARCHITECTURE.md's crate map",
                manifest.name
            ));
            continue;
        };
        for dependency in &manifest.dependencies {
            let to = dependency.name.as_str();
            if !ours.contains(&to) && !ALLOWED.iter().any(|(name, _, _)| *name == to) {
                continue;
            }
            let from = manifest.name.as_str();
            let at = format!("{path}:{}", dependency.line);
            match dependency.kind {
                DepKind::Normal => {
                    if let Some(why) = never_reason(from, to) {
                        problems.push(format!(
                            "{from} -> {to} ({at}) must never exist: {why}. Fix: remove the dependency and reach what you need through a trait or type of a crate below"
                        ));
                    } else if !normal.contains(&to) {
                        problems.push(format!(
                            "{from} -> {to} ({at}) is not an allowed edge. Fix: remove the dependency, or, if the layering really changes, add {to} to {from}'s row in {FIX_TABLE}"
                        ));
                    }
                }
                DepKind::Dev => {
                    if !normal.contains(&to) && !dev.contains(&to) {
                        problems.push(format!(
                            "{from} -> {to} in [dev-dependencies] ({at}) is not an allowed test edge. Fix: remove it, or add {to} to the tests column of {from}'s row in {FIX_TABLE}"
                        ));
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "crate dependencies break the layering:\n  {}",
        problems.join("\n  ")
    );
}

/// A token of Rust source, enough to follow paths: identifiers (keywords and `$crate`
/// included), `::`, and single punctuation characters. Comments, strings, chars and lifetimes
/// are dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    line: usize,
}

fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut at = 0;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    // Moves past chars[from..to], counting lines.
    let skip = |from: usize, to: usize, line: &mut usize| {
        *line += chars[from..to.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
        to
    };
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c == '\n' {
            line += 1;
            at += 1;
        } else if c.is_whitespace() {
            at += 1;
        } else if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut end = at;
            while end < chars.len() {
                if chars[end] == '/' && chars.get(end + 1) == Some(&'*') {
                    depth += 1;
                    end += 2;
                } else if chars[end] == '*' && chars.get(end + 1) == Some(&'/') {
                    depth -= 1;
                    end += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    end += 1;
                }
            }
            at = skip(at, end, &mut line);
        } else if let Some(end) = raw_string_end(&chars, at) {
            at = skip(at, end, &mut line);
        } else if c == '"' || (c == 'b' && next == Some('"')) || (c == 'c' && next == Some('"')) {
            let mut end = if c == '"' { at + 1 } else { at + 2 };
            while end < chars.len() && chars[end] != '"' {
                end += if chars[end] == '\\' { 2 } else { 1 };
            }
            at = skip(at, end + 1, &mut line);
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            let start = if c == '\'' { at } else { at + 1 };
            if chars.get(start + 1) == Some(&'\\') {
                let mut end = start + 2;
                while end < chars.len() && chars[end] != '\'' {
                    end += 1;
                }
                at = end + 1;
            } else if chars.get(start + 2) == Some(&'\'') {
                at = start + 3;
            } else {
                // A lifetime or label: drop the quote, the name follows as an identifier.
                at = start + 1;
            }
        } else if c == '$' || is_ident(c) {
            let mut end = at + 1;
            while end < chars.len() && is_ident(chars[end]) {
                end += 1;
            }
            tokens.push(Token {
                text: chars[at..end].iter().collect(),
                line,
            });
            at = end;
        } else if c == ':' && next == Some(':') {
            tokens.push(Token {
                text: "::".to_owned(),
                line,
            });
            at += 2;
        } else {
            tokens.push(Token {
                text: c.to_string(),
                line,
            });
            at += 1;
        }
    }
    tokens
}

/// Where a raw string (`r"..."`, `r#"..."#`, `br#"..."#`) starting at `at` ends.
fn raw_string_end(chars: &[char], at: usize) -> Option<usize> {
    if at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_') {
        return None;
    }
    let mut pos = at;
    if matches!(chars.get(pos), Some('b' | 'c')) {
        pos += 1;
    }
    if chars.get(pos) != Some(&'r') {
        return None;
    }
    pos += 1;
    let mut hashes = 0;
    while chars.get(pos) == Some(&'#') {
        hashes += 1;
        pos += 1;
    }
    if chars.get(pos) != Some(&'"') {
        return None;
    }
    pos += 1;
    while pos < chars.len() {
        if chars[pos] == '"' && (1..=hashes).all(|k| chars.get(pos + k) == Some(&'#')) {
            return Some(pos + 1 + hashes);
        }
        pos += 1;
    }
    Some(chars.len())
}

/// The index just past the bracketed group opening at `open` (`(`, `[` or `{`).
fn close_of(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (idx, token) in tokens.iter().enumerate().skip(open) {
        match token.text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 {
                    return idx + 1;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// The index just past the item starting at `start`: its `;` or its `{ ... }` body, or the
/// `,` ending a field or variant; it stops before a bracket closing the enclosing item.
fn item_end(tokens: &[Token], start: usize) -> usize {
    let mut idx = start;
    // Open `<` of generics, so `Vec<(A, B)>` and `Map<K, V>` are not taken for the end.
    let mut angle = 0usize;
    while idx < tokens.len() {
        let previous = idx
            .checked_sub(1)
            .map(|before| tokens[before].text.as_str());
        match tokens[idx].text.as_str() {
            ";" => return idx + 1,
            "," if angle == 0 => return idx + 1,
            "{" => return close_of(tokens, idx),
            "(" | "[" => {
                idx = close_of(tokens, idx);
                continue;
            }
            "}" | ")" | "]" => return idx,
            "<" => angle += 1,
            ">" if !matches!(previous, Some("-" | "=")) => angle = angle.saturating_sub(1),
            _ => {}
        }
        idx += 1;
    }
    tokens.len()
}

fn texts_at(tokens: &[Token], idx: usize, expected: &[&str]) -> bool {
    expected
        .iter()
        .enumerate()
        .all(|(k, text)| tokens.get(idx + k).is_some_and(|token| token.text == *text))
}

/// Whether an outer `#[cfg(test)]` attribute starts at `idx`.
fn is_cfg_test(tokens: &[Token], idx: usize) -> bool {
    texts_at(tokens, idx, &["#", "[", "cfg", "(", "test", ")", "]"])
}

/// One `crate::`/`super::`/`self::` path found in a file: the module path it starts from
/// and the names its use tree opens with (several for a `{a, b::c}` group).
struct PathUse {
    base: Vec<String>,
    heads: Vec<Token>,
}

/// What a source file says about modules: the paths it uses (outside `#[cfg(test)]` items),
/// the `mod` items it declares (name, declared under `#[cfg(test)]`), and its `use`
/// items at the file's top level (for the crate root's re-exports).
#[derive(Default)]
struct FileScan {
    paths: Vec<PathUse>,
    mods: Vec<(String, bool)>,
    top_uses: Vec<Vec<Token>>,
}

/// Scans one file whose module path is `module` (empty for the crate root).
fn scan_file(tokens: &[Token], module: &[String]) -> FileScan {
    let mut scan = FileScan::default();
    if texts_at(tokens, 0, &["#", "!", "[", "cfg", "(", "test", ")", "]"]) {
        return scan;
    }
    // Inline modules we are inside: (name, index of the `}` closing it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut idx = 0;
    while idx < tokens.len() {
        while inline.last().is_some_and(|(_, close)| idx >= *close) {
            inline.pop();
        }
        let text = tokens[idx].text.as_str();
        if is_cfg_test(tokens, idx) {
            let mut item = idx + 7;
            while texts_at(tokens, item, &["#", "["]) {
                item = close_of(tokens, item + 1);
            }
            if inline.is_empty()
                && let Some(name) = declared_mod(tokens, item)
            {
                scan.mods.push((name, true));
            }
            idx = item_end(tokens, item);
            continue;
        }
        if text == "mod"
            && let Some(name) = tokens.get(idx + 1)
        {
            match tokens.get(idx + 2).map(|token| token.text.as_str()) {
                Some("{") => {
                    if inline.is_empty() {
                        scan.mods.push((name.text.clone(), false));
                    }
                    inline.push((name.text.clone(), close_of(tokens, idx + 2) - 1));
                    idx += 3;
                    continue;
                }
                Some(";") if inline.is_empty() => scan.mods.push((name.text.clone(), false)),
                _ => {}
            }
        }
        if text == "use" && inline.is_empty() && brace_depth_is_zero(tokens, idx) {
            let end = item_end(tokens, idx);
            scan.top_uses.push(tokens[idx + 1..end].to_vec());
        }
        let previous = idx
            .checked_sub(1)
            .map(|before| tokens[before].text.as_str());
        let starts_path = previous != Some("::") && previous != Some("in");
        if starts_path && matches!(text, "crate" | "super" | "self") {
            let mut current: Vec<String> = module.to_vec();
            current.extend(inline.iter().map(|(name, _)| name.clone()));
            let mut base = match text {
                "crate" => Vec::new(),
                _ => current,
            };
            let mut at = idx;
            let mut valid = true;
            while texts_at(tokens, at, &["super", "::"]) || texts_at(tokens, at, &["self", "::"]) {
                if tokens[at].text == "super" && base.pop().is_none() {
                    valid = false;
                }
                at += 2;
            }
            if text == "crate" {
                valid = texts_at(tokens, at, &["crate", "::"]);
                at += 2;
            } else if at == idx {
                // `self` or `super` not followed by `::`.
                valid = false;
            }
            if valid {
                scan.paths.push(PathUse {
                    base,
                    heads: use_tree_heads(tokens, at),
                });
            }
            idx = at.max(idx + 1);
            continue;
        }
        idx += 1;
    }
    scan
}

/// Whether `idx` sits outside every `{ ... }` (a rough check for a file-level item).
fn brace_depth_is_zero(tokens: &[Token], idx: usize) -> bool {
    let mut depth = 0i32;
    for token in &tokens[..idx] {
        match token.text.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            _ => {}
        }
    }
    depth == 0
}

/// The name of a `mod name;` or `mod name {` item starting at `idx` (after its visibility).
fn declared_mod(tokens: &[Token], mut idx: usize) -> Option<String> {
    if tokens.get(idx).is_some_and(|token| token.text == "pub") {
        idx += 1;
        if tokens.get(idx).is_some_and(|token| token.text == "(") {
            idx = close_of(tokens, idx);
        }
    }
    if tokens.get(idx)?.text != "mod" {
        return None;
    }
    Some(tokens.get(idx + 1)?.text.clone())
}

/// The first segment of each path of the use tree starting at `idx`: `a` for `a::b`,
/// `a` and `b` for `{a, b::c}`.
fn use_tree_heads(tokens: &[Token], idx: usize) -> Vec<Token> {
    let Some(first) = tokens.get(idx) else {
        return Vec::new();
    };
    if first.text == "*" {
        return Vec::new();
    }
    if first.text != "{" {
        return vec![first.clone()];
    }
    let close = close_of(tokens, idx);
    let mut heads = Vec::new();
    let mut at = idx + 1;
    let mut expect_head = true;
    while at + 1 < close {
        let token = &tokens[at];
        match token.text.as_str() {
            "," => {
                expect_head = true;
                at += 1;
            }
            "{" => {
                if expect_head {
                    heads.extend(use_tree_heads(tokens, at));
                }
                expect_head = false;
                at = close_of(tokens, at);
            }
            _ => {
                if expect_head && token.text != "self" && token.text != "*" {
                    heads.push(token.clone());
                }
                expect_head = false;
                at += 1;
            }
        }
    }
    heads
}

/// The names a crate root's `use` item brings in, each with the top-level module it comes
/// from: `pub use a::{B, c::D as E};` gives B -> a and E -> a.
fn reexports(use_item: &[Token], modules: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut start = 0;
    if use_item
        .first()
        .is_some_and(|token| token.text == "crate" || token.text == "self")
        && use_item.get(1).is_some_and(|token| token.text == "::")
    {
        start = 2;
    }
    let Some(module) = use_item.get(start).map(|token| token.text.clone()) else {
        return Vec::new();
    };
    if !modules.contains(&module) {
        return Vec::new();
    }
    use_item
        .windows(2)
        .filter(|pair| {
            matches!(pair[1].text.as_str(), "," | "}" | ";")
                && pair[0].text != "self"
                && pair[0]
                    .text
                    .starts_with(|c: char| c.is_alphabetic() || c == '_')
        })
        .map(|pair| (pair[0].text.clone(), module.clone()))
        .collect()
}

/// An import of one top-level module by another: where it is written.
type Edges = BTreeMap<(String, String), Vec<String>>;

/// The module import graph of one crate: nodes are the top-level modules the crate root
/// declares, an edge `a -> b` is a path in a's files (outside tests) reaching into b. The
/// crate root itself is the table of contents, not a node: a path to a name the root
/// re-exports counts as a path into the module it comes from.
fn module_graph(crate_dir: &Path) -> (BTreeSet<String>, Edges) {
    let src = crate_dir.join("src");
    let roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .filter(|path| path.is_file())
        .collect();
    let mut modules = BTreeSet::new();
    let mut test_paths: Vec<PathBuf> = Vec::new();
    let mut root_uses = Vec::new();
    for root_file in &roots {
        let tokens = tokenize(&std::fs::read_to_string(root_file).unwrap());
        let scan = scan_file(&tokens, &[]);
        for (name, is_test) in scan.mods {
            if is_test {
                test_paths.push(src.join(&name));
                test_paths.push(src.join(format!("{name}.rs")));
            } else {
                modules.insert(name);
            }
        }
        root_uses.extend(scan.top_uses);
    }
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for use_item in &root_uses {
        reexported.extend(reexports(use_item, &modules));
    }

    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut scans = Vec::new();
    for file in files {
        if roots.contains(&file) || file.file_name().unwrap() == "tests.rs" {
            continue;
        }
        let module = module_path(&src, &file);
        let tokens = tokenize(&std::fs::read_to_string(&file).unwrap());
        let scan = scan_file(&tokens, &module);
        let dir = if matches!(
            file.file_name().unwrap().to_str(),
            Some("mod.rs" | "lib.rs" | "main.rs")
        ) {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for (name, is_test) in &scan.mods {
            if *is_test {
                test_paths.push(dir.join(name));
                test_paths.push(dir.join(format!("{name}.rs")));
            }
        }
        scans.push((file, module, scan));
    }

    let mut edges = Edges::new();
    for (file, module, scan) in scans {
        if test_paths.iter().any(|test| file.starts_with(test)) {
            continue;
        }
        let from = module[0].clone();
        for path_use in scan.paths {
            let targets: Vec<(String, usize)> = match path_use.base.first() {
                Some(top) => vec![(top.clone(), path_use.heads.first().map_or(0, |t| t.line))],
                None => path_use
                    .heads
                    .iter()
                    .filter_map(|head| {
                        let target = if modules.contains(&head.text) {
                            head.text.clone()
                        } else {
                            reexported.get(&head.text)?.clone()
                        };
                        Some((target, head.line))
                    })
                    .collect(),
            };
            for (to, line) in targets {
                if to != from && modules.contains(&to) {
                    edges
                        .entry((from.clone(), to))
                        .or_default()
                        .push(format!("{}:{line}", relative(&file)));
                }
            }
        }
    }
    (modules, edges)
}

/// The module path of a file under `src`: `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(modules: &BTreeSet<String>, edges: &Edges) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a Edges,
        next_index: usize,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        components: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, node: &'a str) {
            self.index.insert(node, self.next_index);
            self.low.insert(node, self.next_index);
            self.next_index += 1;
            self.stack.push(node);
            let edges = self.edges;
            for (from, to) in edges.keys() {
                if from != node {
                    continue;
                }
                if !self.index.contains_key(to.as_str()) {
                    self.visit(to);
                    let low = self.low[node].min(self.low[to.as_str()]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&to.as_str()) {
                    let low = self.low[node].min(self.index[to.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    component.push(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.components.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges,
        next_index: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for module in modules {
        if !tarjan.index.contains_key(module.as_str()) {
            tarjan.visit(module);
        }
    }
    tarjan.components.sort();
    tarjan.components
}

/// A shortest cycle through `start` inside `component` (breadth-first), to show one way round.
fn one_cycle(start: &str, component: &[String], edges: &Edges) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for (from, to) in edges.keys() {
            if from != node || !component.contains(to) || came_from.contains_key(to.as_str()) {
                continue;
            }
            came_from.insert(to, node);
            if to == start {
                let mut cycle = vec![start.to_owned()];
                let mut at = came_from[start];
                while at != start {
                    cycle.push(at.to_owned());
                    at = came_from[at];
                }
                cycle.push(start.to_owned());
                cycle.reverse();
                return cycle;
            }
            queue.push_back(to);
        }
    }
    Vec::new()
}

fn named_pair(krate: &str, from: &str, to: &str) -> bool {
    NAMED_PAIRS.iter().any(|(pair_crate, a, b, _)| {
        *pair_crate == krate && ((*a == from && *b == to) || (*a == to && *b == from))
    })
}

#[test]
fn no_module_cycles_beyond_named_pairs() {
    let mut problems = Vec::new();
    let manifests = our_crates();
    for (krate, a, b, _) in NAMED_PAIRS {
        let Some(manifest) = manifests.iter().find(|manifest| manifest.name == *krate) else {
            problems.push(format!(
                "NAMED_PAIRS names {krate}, which is not a crate under crates/: remove ({a}, {b}) from NAMED_PAIRS and ARCHITECTURE.md"
            ));
            continue;
        };
        let (_, edges) = module_graph(&manifest.dir);
        let has = |x: &str, y: &str| edges.contains_key(&(x.to_owned(), y.to_owned()));
        if !(has(a, b) && has(b, a)) {
            problems.push(format!(
                "{krate}: {a} and {b} do not import each other (any more): remove the pair from NAMED_PAIRS and ARCHITECTURE.md"
            ));
        }
    }
    for manifest in &manifests {
        let (modules, edges) = module_graph(&manifest.dir);
        for component in cycles(&modules, &edges) {
            let inside: Vec<_> = edges
                .iter()
                .filter(|((from, to), _)| component.contains(from) && component.contains(to))
                .collect();
            if inside
                .iter()
                .all(|((from, to), _)| named_pair(&manifest.name, from, to))
            {
                continue;
            }
            let mut report = format!(
                "{}: {} top-level modules import each other in a cycle: {}\n    one way round: {}\n    the imports forming it (edges of named pairs left out):",
                manifest.name,
                component.len(),
                component.join(", "),
                one_cycle(&component[0], &component, &edges).join(" -> ")
            );
            for ((from, to), places) in inside {
                if named_pair(&manifest.name, from, to) {
                    continue;
                }
                let shown = places
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                let more = match places.len() {
                    0..=3 => String::new(),
                    n => format!(" (+{} more)", n - 3),
                };
                report.push_str(&format!("\n      {from} -> {to}: {shown}{more}"));
            }
            report.push_str(
                "\n    Fix: move what both sides need into the lower module (or a new one), or pass it in from above; a pair that must stay goes into NAMED_PAIRS with its reason and into ARCHITECTURE.md",
            );
            problems.push(report);
        }
    }
    assert!(
        problems.is_empty(),
        "module import cycles:\n  {}",
        problems.join("\n  ")
    );
}

/// The rows of the markdown table in `doc` whose header row is `header`: for each row, its
/// line number and the `backticked` names of each cell (prose around them is free), and
/// whether the last cell has text.
fn markdown_table(doc: &str, header: [&str; 3]) -> Vec<(usize, Vec<Vec<String>>, bool)> {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_start_matches('|')
            .trim_end_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect()
    };
    let lines: Vec<&str> = doc.lines().collect();
    let Some(start) = lines.iter().position(|line| {
        line.trim_start().starts_with('|') && cells(line).iter().map(String::as_str).eq(header)
    }) else {
        panic!(
            "ARCHITECTURE.md has no table with the header `| {} |`: write it (see xtask/tests/tidy.rs)",
            header.join(" | ")
        );
    };
    let mut rows = Vec::new();
    for (idx, line) in lines.iter().enumerate().skip(start + 1) {
        if !line.trim_start().starts_with('|') {
            break;
        }
        let row = cells(line);
        if row
            .iter()
            .all(|cell| !cell.is_empty() && cell.chars().all(|c| matches!(c, '-' | ':' | ' ')))
        {
            continue;
        }
        let names = row
            .iter()
            .map(|cell| {
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            })
            .collect();
        let has_reason = row.last().is_some_and(|cell| !cell.is_empty());
        rows.push((idx + 1, names, has_reason));
    }
    rows
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    names.sort();
    names
}

#[test]
fn layering_tables_match_architecture_md() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut problems = Vec::new();

    let mut documented = BTreeMap::new();
    for (line, cells, _) in markdown_table(&doc, ALLOWED_HEADER) {
        let [krate, normal, dev] = cells.as_slice() else {
            problems.push(format!(
                "ARCHITECTURE.md:{line}: a row of the allowed table needs three cells"
            ));
            continue;
        };
        let [krate] = krate.as_slice() else {
            problems.push(format!(
                "ARCHITECTURE.md:{line}: the first cell names one `crate`"
            ));
            continue;
        };
        let mut normal = normal.clone();
        let mut dev = dev.clone();
        normal.sort();
        dev.sort();
        documented.insert(krate.clone(), (line, normal, dev));
    }
    for (krate, normal, dev) in ALLOWED {
        let expected = (sorted(normal), sorted(dev));
        match documented.remove(*krate) {
            None => {
                let cell = |names: &[String]| {
                    names
                        .iter()
                        .map(|name| format!("`{name}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                problems.push(format!(
                    "{krate} is in ALLOWED but not in ARCHITECTURE.md's table: add the row | `{krate}` | {} | {} |",
                    cell(&expected.0),
                    cell(&expected.1)
                ));
            }
            Some((line, normal, dev)) if (normal.clone(), dev.clone()) != expected => {
                problems.push(format!(
                    "{krate}: ARCHITECTURE.md:{line} allows {normal:?} (tests {dev:?}), the test allows {:?} (tests {:?}): make them equal",
                    expected.0, expected.1
                ));
            }
            Some(_) => {}
        }
    }
    for (krate, (line, _, _)) in documented {
        problems.push(format!(
            "ARCHITECTURE.md:{line} has a row for {krate}, which ALLOWED in xtask/tests/tidy.rs lacks: add it there or remove the row"
        ));
    }

    let mut documented_never = BTreeSet::new();
    for (line, cells, has_reason) in markdown_table(&doc, NEVER_HEADER) {
        if cells.len() != 3 || !has_reason {
            problems.push(format!(
                "ARCHITECTURE.md:{line}: a row of the never table has three cells, the last one the reason"
            ));
            continue;
        }
        for from in &cells[0] {
            for to in &cells[1] {
                documented_never.insert((from.clone(), to.clone()));
            }
        }
    }
    let mut tested_never = BTreeSet::new();
    for (froms, tos, _) in NEVER {
        for from in *froms {
            for to in *tos {
                tested_never.insert(((*from).to_owned(), (*to).to_owned()));
            }
        }
    }
    for (from, to) in tested_never.difference(&documented_never) {
        problems.push(format!(
            "NEVER forbids {from} -> {to}, ARCHITECTURE.md's never table does not: add it there with its reason"
        ));
    }
    for (from, to) in documented_never.difference(&tested_never) {
        problems.push(format!(
            "ARCHITECTURE.md's never table forbids {from} -> {to}, NEVER in xtask/tests/tidy.rs does not: add it there or drop it from the doc"
        ));
    }

    let mut documented_pairs = BTreeSet::new();
    for (line, cells, has_reason) in markdown_table(&doc, PAIRS_HEADER) {
        match cells.as_slice() {
            [krate, pair, _] if krate.len() == 1 && pair.len() == 2 && has_reason => {
                let mut pair = pair.clone();
                pair.sort();
                documented_pairs.insert((krate[0].clone(), pair[0].clone(), pair[1].clone()));
            }
            _ => problems.push(format!(
                "ARCHITECTURE.md:{line}: a named pair's row reads `| `crate` | `a`, `b` | why |`"
            )),
        }
    }
    let tested_pairs: BTreeSet<_> = NAMED_PAIRS
        .iter()
        .map(|(krate, a, b, _)| {
            let pair = sorted(&[a, b]);
            ((*krate).to_owned(), pair[0].clone(), pair[1].clone())
        })
        .collect();
    for (krate, a, b) in tested_pairs.difference(&documented_pairs) {
        problems.push(format!(
            "NAMED_PAIRS names {krate}: {a} <-> {b}, ARCHITECTURE.md does not: add it to the table `crate | module pair | why`"
        ));
    }
    for (krate, a, b) in documented_pairs.difference(&tested_pairs) {
        problems.push(format!(
            "ARCHITECTURE.md names the pair {krate}: {a} <-> {b}, NAMED_PAIRS in xtask/tests/tidy.rs does not: add it there or drop it from the doc"
        ));
    }

    assert!(
        problems.is_empty(),
        "the layering tables of xtask/tests/tidy.rs and ARCHITECTURE.md differ:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_manifest_reader_sees_every_dependency_form() {
    let manifest = r#"
[package]
name = "flue-example"
description = "not = a [dependency]"

[dependencies]
flue-core.workspace = true
serde = { workspace = true, features = [
    "derive",
] }
flue-old = { package = "flue-protocol", path = "../flue-protocol" }

[dependencies.flue-store]
workspace = true

[target.'cfg(unix)'.dependencies]
flue-connectors = { workspace = true }

[build-dependencies]
flue-build.workspace = true

[dev-dependencies]
"flue-host" = { workspace = true } # a comment

[lints]
workspace = true
"#;
    assert_eq!(package_name(manifest).as_deref(), Some("flue-example"));
    let found: Vec<(String, DepKind, usize)> = dependencies(manifest)
        .into_iter()
        .map(|dependency| (dependency.name, dependency.kind, dependency.line))
        .collect();
    let expected = [
        ("flue-core", DepKind::Normal, 7),
        ("serde", DepKind::Normal, 8),
        ("flue-protocol", DepKind::Normal, 11),
        ("flue-store", DepKind::Normal, 13),
        ("flue-connectors", DepKind::Normal, 17),
        ("flue-build", DepKind::Normal, 20),
        ("flue-host", DepKind::Dev, 23),
    ]
    .map(|(name, kind, line)| (name.to_owned(), kind, line));
    assert_eq!(found, expected);
}

#[test]
fn the_module_scanner_follows_paths_and_skips_tests() {
    let source = r##"
use crate::{alpha, beta::{One, Two}, gamma::Three as Four};
use super::delta::Five;
use super::*;
pub(crate) fn f() -> crate::epsilon::Six {
    let _ = "crate::zeta::Seven";
    // crate::eta
    let _ = 'x';
    let _: &'static str = r#"crate::theta"#;
    crate::iota::eight();
    pub(in crate::kappa) struct Nine;
}
#[cfg(test)]
#[allow(unused)]
fn only_in_tests() { crate::lambda::ten(); }
#[cfg(test)]
mod tests;
mod inner {
    use super::super::mu::Eleven;
}
"##;
    let scan = scan_file(&tokenize(source), &["here".to_owned(), "below".to_owned()]);
    let found: Vec<(Vec<String>, Vec<String>)> = scan
        .paths
        .iter()
        .map(|path_use| {
            let heads = path_use
                .heads
                .iter()
                .map(|head| head.text.clone())
                .collect();
            (path_use.base.clone(), heads)
        })
        .collect();
    let here = || vec!["here".to_owned()];
    let expected = vec![
        (vec![], vec!["alpha", "beta", "gamma"]),
        (here(), vec!["delta"]),
        (here(), vec![]),
        (vec![], vec!["epsilon"]),
        (vec![], vec!["iota"]),
        (here(), vec!["mu"]),
    ];
    let expected: Vec<(Vec<String>, Vec<String>)> = expected
        .into_iter()
        .map(|(base, heads)| (base, heads.into_iter().map(str::to_owned).collect()))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(
        scan.mods,
        vec![("tests".to_owned(), true), ("inner".to_owned(), false)]
    );
}

/// The backends that stay inside flue-core as modules, and the modules each may import: the
/// error and helper modules and the extension trait it implements (the wire types come from
/// flue-protocol). Like a
/// backend crate, such a module reaches the runtime only through a trait; it never names a
/// session, harness, task or the agent loop. ARCHITECTURE.md lists the same rule.
const IN_CORE_BACKENDS: &[(&str, &[&str])] = &[
    (
        "tool/builtin",
        &["error", "util", "tool", "sandbox", "store"],
    ),
    ("tool/command", &["error", "util", "tool", "sandbox"]),
    ("sandbox", &["error", "util", "sandbox"]),
    ("store/memory", &["error", "util", "store"]),
    ("model/scripted", &["error", "util", "model"]),
];

/// The `crate::<module>` roots a source text names outside comments, with their line numbers.
fn crate_roots(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (idx, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push((idx + 1, name));
            }
            rest = tail;
        }
    }
    found
}

#[test]
fn in_core_backends_reach_the_runtime_only_through_its_traits() {
    let src = root().join("crates/flue-core/src");
    let mut problems = Vec::new();
    for (dir, allowed) in IN_CORE_BACKENDS {
        let mut files = Vec::new();
        let folder = src.join(dir);
        assert!(
            folder.is_dir(),
            "{} is gone: update IN_CORE_BACKENDS",
            folder.display()
        );
        rust_files(&folder, &mut files);
        let file = src.join(format!("{dir}.rs"));
        if file.is_file() {
            files.push(file);
        }
        for path in files {
            if path.file_name().unwrap() == "tests.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (line, name) in crate_roots(&text) {
                if !allowed.contains(&name.as_str()) {
                    problems.push(format!(
                        "{}:{line} names crate::{name}; the backend module {dir} may only use {allowed:?}. Fix: reach the runtime through a trait (or move what it needs into one of those), or change IN_CORE_BACKENDS and ARCHITECTURE.md with a reason",
                        relative(&path)
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_crate_root_scanner_skips_comments() {
    let found =
        crate_roots("use crate::tool::Tool; // crate::session\nlet x = crate::util::now_ms();");
    assert_eq!(found, vec![(1, "tool".to_owned()), (2, "util".to_owned())]);
}

/// The most names flue-core's root may export: the embedder's API. Whatever else is public
/// lives in a named module (`flue_core::store`, `flue_core::submission`, ...).
const CORE_ROOT_LIMIT: usize = 100;

/// The names a crate root exports: `pub mod`, `pub` items, and each leaf of a `pub use`
/// (its `as` name when renamed). A glob re-export comes back as `*`, which no limit can count.
fn root_exports(tokens: &[Token]) -> BTreeSet<String> {
    const ITEMS: [&str; 8] = [
        "mod", "fn", "struct", "enum", "trait", "type", "const", "static",
    ];
    let mut names = BTreeSet::new();
    let mut idx = 0;
    while idx < tokens.len() {
        let is_pub = tokens[idx].text == "pub"
            && tokens.get(idx + 1).is_some_and(|next| next.text != "(")
            && brace_depth_is_zero(tokens, idx);
        if !is_pub {
            idx += 1;
            continue;
        }
        let end = item_end(tokens, idx);
        let mut item = &tokens[idx + 1..end];
        while item
            .first()
            .is_some_and(|token| matches!(token.text.as_str(), "async" | "unsafe" | "extern"))
        {
            item = &item[1..];
        }
        match item.first().map(|token| token.text.as_str()) {
            Some("use") => {
                for pair in item.windows(2) {
                    let leaf = &pair[0].text;
                    if matches!(pair[1].text.as_str(), "," | "}" | ";")
                        && leaf != "self"
                        && (leaf == "*"
                            || leaf.starts_with(|c: char| c.is_alphabetic() || c == '_'))
                    {
                        names.insert(leaf.clone());
                    }
                }
            }
            Some(kind) if ITEMS.contains(&kind) => {
                let name = item.iter().skip(1).find(|token| token.text != "fn");
                names.extend(name.map(|token| token.text.clone()));
            }
            _ => {}
        }
        idx = end.max(idx + 1);
    }
    names
}

#[test]
fn flue_core_root_exports_at_most_100_names() {
    let lib = root().join("crates/flue-core/src/lib.rs");
    let names = root_exports(&tokenize(&std::fs::read_to_string(&lib).unwrap()));
    assert!(
        !names.contains("*"),
        "{} re-exports a glob; name what the root exports",
        relative(&lib)
    );
    assert!(
        names.len() > 20,
        "the root scanner found too few names: {names:?}"
    );
    assert!(
        names.len() <= CORE_ROOT_LIMIT,
        "flue-core's root exports {} names, more than {CORE_ROOT_LIMIT}. Fix: export the new \
         name from its public module (`flue_core::store::X`, `flue_core::submission::X`, ...) \
         instead of the root, or move a rarely used root name there: {names:?}",
        names.len()
    );
}

#[test]
fn the_root_export_scanner_counts_every_form() {
    let source = "pub mod a;\nmod hidden;\npub(crate) use hidden::Secret;\nuse b::C;\n\
                  pub use b::{D, e::{F, G as H}, self};\npub use i::J;\npub async fn k() {}\n\
                  pub const L: u8 = 1;\npub const fn o() {}\nfn m() { pub struct Inner; }\npub use n::*;";
    let found: Vec<String> = root_exports(&tokenize(source)).into_iter().collect();
    assert_eq!(found, ["*", "D", "F", "H", "J", "L", "a", "k", "o"]);
}

/// Inside flue-core, a `crate::` path starts at a module (`crate::tool::Tool`), never at a
/// name the root re-exports for embedders (`crate::Tool`): a module imports from the module
/// that defines a thing, so the root's list can change without touching the runtime.
#[test]
fn flue_core_imports_through_modules_not_the_root() {
    let src = root().join("crates/flue-core/src");
    let lib = src.join("lib.rs");
    let modules: BTreeSet<String> =
        scan_file(&tokenize(&std::fs::read_to_string(&lib).unwrap()), &[])
            .mods
            .into_iter()
            .map(|(name, _)| name)
            .collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    for file in files.iter().filter(|file| **file != lib) {
        let tokens = tokenize(&std::fs::read_to_string(file).unwrap());
        let scan = scan_file(&tokens, &module_path(&src, file));
        for path_use in scan
            .paths
            .iter()
            .filter(|path_use| path_use.base.is_empty())
        {
            for head in &path_use.heads {
                if !modules.contains(&head.text) {
                    problems.push(format!(
                        "{}:{} names crate::{}; import it from the module that defines it",
                        relative(file),
                        head.line,
                        head.text
                    ));
                }
            }
        }
    }
    assert!(modules.len() > 10, "found too few modules: {modules:?}");
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

// ARCHITECTURE.md's invariants that a reading of the sources can check, one test each; the
// behavioural ones name the tests that check them there.

/// The library sources of a crate: `src/`, without sibling `tests.rs` files and their folders.
fn library_sources(krate: &str) -> Vec<PathBuf> {
    let src = root().join("crates").join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let test_dirs: Vec<PathBuf> = files
        .iter()
        .filter(|file| file.file_name().unwrap() == "tests.rs")
        .filter_map(|file| file.parent().map(Path::to_path_buf))
        .filter(|dir| dir.file_name().unwrap() == "tests")
        .collect();
    files.retain(|file| {
        file.file_name().unwrap() != "tests.rs"
            && !test_dirs.iter().any(|dir| file.starts_with(dir))
    });
    assert!(!files.is_empty(), "no sources in {}", relative(&src));
    files.sort();
    files
}

/// Where the tokens `pattern` occur in `file`, outside comments and strings: `path:line`.
fn token_hits(file: &Path, pattern: &[&str]) -> Vec<String> {
    let tokens = tokenize(&std::fs::read_to_string(file).unwrap());
    (0..tokens.len())
        .filter(|&idx| texts_at(&tokens, idx, pattern))
        .map(|idx| format!("{}:{}", relative(file), tokens[idx].line))
        .collect()
}

/// Where `file` builds a value of struct `name` (`Name {` that is not a definition, an impl
/// or a return type): `path:line`.
fn constructions(file: &Path, name: &str) -> Vec<String> {
    let tokens = tokenize(&std::fs::read_to_string(file).unwrap());
    (1..tokens.len())
        .filter(|&idx| texts_at(&tokens, idx, &[name, "{"]))
        .filter(|&idx| {
            !matches!(
                tokens[idx - 1].text.as_str(),
                "struct" | "for" | "impl" | ">"
            )
        })
        .map(|idx| format!("{}:{}", relative(file), tokens[idx].line))
        .collect()
}

#[test]
fn the_environment_is_read_only_where_architecture_md_says() {
    let allowed: &[(&str, &[&str])] = &[
        ("flue-core", &["sandbox/local/mod.rs", "hook/http.rs"]),
        ("flue-providers", &[]),
        ("flue-host", &[]),
    ];
    let mut problems = Vec::new();
    for (krate, files) in allowed {
        let src = root().join("crates").join(krate).join("src");
        for file in library_sources(krate) {
            let shown = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            // Unit tests (`tests.rs`, `*_tests.rs`, `tests/`) may read the environment.
            let test_code = shown.ends_with("tests.rs") || shown.contains("tests/");
            if files.contains(&shown.as_str()) || test_code {
                continue;
            }
            for read in ["var", "var_os", "vars", "vars_os", "current_dir"] {
                problems.extend(token_hits(&file, &["env", "::", read]));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the process environment read outside the places ARCHITECTURE.md names: {problems:?}"
    );
}

#[test]
fn flue_host_links_no_database_driver() {
    let drivers = [
        "rusqlite",
        "libsqlite3-sys",
        "sqlx",
        "postgres",
        "tokio-postgres",
        "diesel",
    ];
    let host = our_crates()
        .into_iter()
        .find(|manifest| manifest.name == "flue-host")
        .unwrap();
    let linked: Vec<&str> = host
        .dependencies
        .iter()
        .filter(|dependency| matches!(dependency.kind, DepKind::Normal))
        .map(|dependency| dependency.name.as_str())
        .filter(|name| drivers.contains(name))
        .collect();
    assert!(
        linked.is_empty(),
        "flue-host links a database driver ({linked:?}); stores come from flue-store"
    );
}

#[test]
fn remote_model_calls_go_through_remote_provider() {
    let mut impls = Vec::new();
    for file in library_sources("flue-providers") {
        let tokens = tokenize(&std::fs::read_to_string(&file).unwrap());
        for idx in 0..tokens.len() {
            if texts_at(&tokens, idx, &["ModelProvider", "for"]) {
                let name = tokens.get(idx + 2).map_or("", |token| token.text.as_str());
                impls.push(format!("{}: {name}", relative(&file)));
            }
        }
    }
    // `OpenAiRouted` only picks one of two `RemoteProvider`s by the model's wire API.
    assert_eq!(
        impls,
        [
            "crates/flue-providers/src/build.rs: OpenAiRouted",
            "crates/flue-providers/src/remote.rs: RemoteProvider",
        ],
        "a ModelProvider impl in flue-providers besides RemoteProvider: add a codec instead"
    );
}

#[test]
fn event_streams_are_parsed_once() {
    let parser = root().join("crates/flue-core/src/util/sse.rs");
    let mut problems = Vec::new();
    for krate in [
        "flue-core",
        "flue-providers",
        "flue-connectors",
        "flue-server",
        "flue-host",
    ] {
        for file in library_sources(krate) {
            if file == parser {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for field in ["\"data:", "\"event:", "\"retry:"] {
                for call in ["strip_prefix(", "starts_with(", "split_once("] {
                    if text.contains(&format!("{call}{field}")) {
                        problems.push(format!("{} reads `{field}` itself", relative(&file)));
                    }
                }
            }
        }
    }
    for krate in ["flue-providers", "flue-connectors"] {
        let uses_parser = library_sources(krate)
            .iter()
            .any(|file| !token_hits(file, &["util", "::", "sse"]).is_empty());
        if !uses_parser {
            problems.push(format!(
                "{krate} no longer reads streams with flue_core::util::sse"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn the_binary_opens_no_harness_and_names_no_backend() {
    let backends = [
        "Harness",
        "HarnessBuilder",
        "MemoryStore",
        "SqliteStore",
        "PostgresStore",
        "LocalSandbox",
        "VirtualSandbox",
        "IsolatedSandbox",
        "DaytonaSandbox",
    ];
    let mut problems = Vec::new();
    for file in library_sources("flue-cli") {
        for name in backends {
            problems.extend(token_hits(&file, &[name]));
        }
        // `flue tools` reads the offered tools of an opened harness and runs nothing; every
        // message goes through the durable runtime.
        if !file.ends_with("flue-cli/src/tools.rs") {
            problems.extend(token_hits(&file, &["harness", "("]));
        }
    }
    assert!(
        problems.is_empty(),
        "flue-cli names a harness or a backend type: {problems:?}"
    );
}

#[test]
fn the_dev_console_loads_nothing_from_the_network() {
    let console =
        std::fs::read_to_string(root().join("crates/flue-server/src/console.rs")).unwrap();
    let policy = console
        .split("pub const CONTENT_SECURITY_POLICY: &str = \"")
        .nth(1)
        .and_then(|rest| rest.split("\";").next())
        .expect("console.rs defines CONTENT_SECURITY_POLICY");
    assert!(policy.contains("default-src 'none'"), "{policy}");
    for directive in policy.split(';') {
        assert!(
            !directive.contains("http") && !directive.contains('*'),
            "the console's CSP allows a network origin: {directive}"
        );
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root().join("crates/flue-server/src/console")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            files.push(path);
        }
    }
    let fetched: Vec<String> = files
        .iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            [
                "src=\"http",
                "href=\"http",
                "url(http",
                "from \"http",
                "fetch(\"http",
            ]
            .iter()
            .any(|form| text.contains(form))
        })
        .map(|path| relative(path))
        .collect();
    assert!(
        fetched.is_empty(),
        "console files naming a remote URL: {fetched:?}"
    );
}

#[test]
fn every_store_backend_decides_with_the_shared_rules() {
    let backends = [
        "crates/flue-core/src/store/memory/conversation.rs",
        "crates/flue-store/src/sqlite/conversation.rs",
        "crates/flue-store/src/postgres/conversation.rs",
    ];
    let missing: Vec<&str> = backends
        .iter()
        .filter(|file| {
            let path = root().join(file);
            token_hits(&path, &["rules", "::"]).is_empty()
                || token_hits(&path, &["listing", "::"]).is_empty()
                || token_hits(&path, &["txn", "::", "AbortTransaction", "for"]).is_empty()
        })
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "store backends that no longer decide with flue_core::store::rules, keep the summaries with store::listing and run the abort of store::txn: {missing:?}"
    );
}

/// The places that build a wire `ErrorInfo`: the two `to_info` conversions (flue-core's
/// `FlueError`, flue-host's error, which defers to it for the runtime's errors) and the
/// frontends' own failures (`flue run`'s envelope, an eval's transcript).
const ERROR_INFO_BUILDERS: [&str; 4] = [
    "crates/flue-core/src/error.rs",
    "crates/flue-host/src/error.rs",
    "crates/flue-cli/src/run.rs",
    "crates/flue-eval/src/runner.rs",
];

#[test]
fn errors_reach_the_wire_through_to_info() {
    let mut builders = BTreeSet::new();
    let mut conversions = Vec::new();
    for manifest in our_crates() {
        let krate = manifest
            .dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if krate == "flue-protocol" {
            continue;
        }
        for file in library_sources(&krate) {
            if !constructions(&file, "ErrorInfo").is_empty() {
                builders.insert(relative(&file));
            }
            conversions.extend(token_hits(&file, &["fn", "to_info"]));
        }
    }
    let expected: BTreeSet<String> = ERROR_INFO_BUILDERS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(
        builders, expected,
        "an ErrorInfo built outside the places ARCHITECTURE.md names: convert with to_info"
    );
    assert_eq!(
        conversions.len(),
        2,
        "one to_info per error type: {conversions:?}"
    );
}

#[test]
fn one_place_claims_a_session_for_an_operation() {
    let mut claims = Vec::new();
    for file in library_sources("flue-core") {
        claims.extend(constructions(&file, "OperationGuard"));
    }
    // The one construction, in `SessionShared::begin`.
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert!(
        claims
            .iter()
            .all(|at| at.starts_with("crates/flue-core/src/shared.rs:")),
        "{claims:?}"
    );
}

#[test]
fn the_offered_tools_are_worked_out_once() {
    let mut definitions = Vec::new();
    for krate in [
        "flue-core",
        "flue-host",
        "flue-server",
        "flue-cli",
        "flue-build",
    ] {
        for file in library_sources(krate) {
            definitions.extend(token_hits(&file, &["fn", "offered_tools"]));
        }
    }
    let files: BTreeSet<&str> = definitions
        .iter()
        .map(|at| at.split(':').next().unwrap_or_default())
        .collect();
    // The rule in the loop; `Harness::offered_tools` calls it; flue-host opens a harness and
    // asks it (for the console and `flue tools`).
    let expected = BTreeSet::from([
        "crates/flue-core/src/agent_loop/tools.rs",
        "crates/flue-core/src/harness.rs",
        "crates/flue-host/src/agents.rs",
        "crates/flue-host/src/host.rs",
    ]);
    assert_eq!(files, expected, "{definitions:?}");
    assert_eq!(definitions.len(), 4, "{definitions:?}");
}
