//! Walking a directory tree through the sandbox trait, with `.gitignore` / `.ignore` rules.
//!
//! The walk uses only `readdir` and `stat`, so it works in every sandbox. Symlinks are
//! reported but never followed (no cycles, no escapes). With ignore rules on, `.git`
//! directories are skipped and each directory's `.gitignore` and `.ignore` files apply to what
//! lies below it, as git reads them: a pattern without a slash matches a name at any depth, one
//! with a slash is anchored to its file's directory, a trailing `/` matches directories only, `!`
//! re-includes, and the last matching line wins (deeper files win over shallower ones). Ignore
//! files between the working directory and the walk's root apply too. Not supported: the global
//! excludes file and `.git/info/exclude`.

use std::collections::HashMap;

use globset::{GlobBuilder, GlobMatcher};

use crate::tool::ToolContext;
use crate::tool::builtin::files::{FileError, FilePath, shown_path};

/// Entries a walk looks at before it stops and reports itself truncated.
const MAX_VISITED: usize = 100_000;

/// Names of the ignore files read in every directory.
const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

/// What kind of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Directory,
    Symlink,
}

impl EntryKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
            Self::Symlink => "symlink",
        }
    }
}

/// One entry found by a walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WalkEntry {
    /// Path relative to the walk's root, `/`-separated.
    pub(crate) rel: String,
    /// Absolute sandbox path.
    pub(crate) abs: String,
    pub(crate) kind: EntryKind,
    /// Size in bytes, when the sandbox reports it.
    pub(crate) size: Option<u64>,
}

/// How to walk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkOptions {
    /// Descend into subdirectories.
    pub(crate) recursive: bool,
    /// Apply ignore files and skip `.git`.
    pub(crate) respect_ignore: bool,
}

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// Entries in depth-first order, each directory's entries sorted by name.
    pub(crate) entries: Vec<WalkEntry>,
    /// The walk stopped early (`MAX_VISITED`, or `keep` returned `Stop`).
    pub(crate) truncated: bool,
}

/// What the walk does with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Add it to the result.
    Yes,
    /// Leave it out (a directory is still descended into).
    No,
    /// Add nothing more and stop: the caller has what it can use.
    Stop,
}

/// Walks `root` (a directory), asking `keep` about every entry.
pub(crate) async fn walk(
    ctx: &ToolContext,
    root: &FilePath,
    options: WalkOptions,
    mut keep: impl FnMut(&WalkEntry) -> Keep,
) -> Result<Walk, FileError> {
    let stat = ctx
        .sandbox
        .stat(&root.abs)
        .await
        .map_err(|err| FileError::from_flue(&root.shown, &err))?;
    if !stat.is_dir {
        return Err(FileError::new(
            "not_a_directory",
            format!("{} is a file, not a directory", root.shown),
            "Pass a directory; read_file reads a file.",
        ));
    }
    let mut ignores = IgnoreRules::default();
    if options.respect_ignore {
        for dir in dirs_from_cwd(&ctx.cwd, &root.abs) {
            ignores.load(ctx, &dir).await;
        }
    }
    let mut walk = Walk::default();
    let mut visited = 0usize;
    let root_names = ctx
        .sandbox
        .readdir(&root.abs)
        .await
        .map_err(|err| FileError::from_flue(&root.shown, &err))?;
    // Depth first, in name order: each frame is a directory being listed and the index of its
    // next entry.
    let mut stack: Vec<Frame> = vec![Frame {
        abs: root.abs.clone(),
        rel: String::new(),
        names: root_names,
        next: 0,
    }];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.get(frame.next).cloned() else {
            stack.pop();
            continue;
        };
        frame.next += 1;
        let abs = join(&frame.abs, &name);
        let rel = if frame.rel.is_empty() {
            name.clone()
        } else {
            format!("{}/{name}", frame.rel)
        };
        visited += 1;
        if visited > MAX_VISITED {
            walk.truncated = true;
            return Ok(walk);
        }
        if visited.is_multiple_of(256) && ctx.cancel.is_cancelled() {
            return Err(FileError::new(
                "aborted",
                "the walk was aborted",
                crate::tool::builtin::files::default_action("aborted"),
            ));
        }
        let Ok(stat) = ctx.sandbox.stat(&abs).await else {
            continue;
        };
        let kind = if stat.is_symlink == Some(true) {
            EntryKind::Symlink
        } else if stat.is_dir {
            EntryKind::Directory
        } else {
            EntryKind::File
        };
        let is_dir = kind == EntryKind::Directory;
        if options.respect_ignore && ((is_dir && name == ".git") || ignores.ignored(&abs, is_dir)) {
            continue;
        }
        let entry = WalkEntry {
            rel,
            abs,
            kind,
            size: stat.size,
        };
        match keep(&entry) {
            Keep::Yes => walk.entries.push(entry.clone()),
            Keep::No => {}
            Keep::Stop => {
                walk.truncated = true;
                return Ok(walk);
            }
        }
        if is_dir && options.recursive {
            if options.respect_ignore {
                ignores.load(ctx, &entry.abs).await;
            }
            // An unreadable directory below the root is skipped.
            if let Ok(names) = ctx.sandbox.readdir(&entry.abs).await {
                stack.push(Frame {
                    abs: entry.abs,
                    rel: entry.rel,
                    names,
                    next: 0,
                });
            }
        }
    }
    Ok(walk)
}

/// A directory being listed by [`walk`].
struct Frame {
    abs: String,
    rel: String,
    names: Vec<String>,
    next: usize,
}

/// `dir/name` for an absolute sandbox directory.
fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The directories from `cwd` down to `root` (both included) when `root` is inside `cwd`;
/// otherwise `root` alone.
fn dirs_from_cwd(cwd: &str, root: &str) -> Vec<String> {
    let rel = shown_path(cwd, root);
    if rel == root {
        return vec![root.to_owned()];
    }
    let mut dirs = vec![cwd.to_owned()];
    if rel != "." {
        let mut current = cwd.to_owned();
        for part in rel.split('/') {
            current = join(&current, part);
            dirs.push(current.clone());
        }
    }
    dirs
}

/// Ignore rules by the directory of the file they came from.
#[derive(Debug, Default)]
pub(crate) struct IgnoreRules {
    by_dir: HashMap<String, Vec<IgnoreRule>>,
}

#[derive(Debug, Clone)]
struct IgnoreRule {
    matcher: GlobMatcher,
    negated: bool,
    dir_only: bool,
}

impl IgnoreRules {
    /// Reads the ignore files of `dir`, if any; unreadable ones are skipped.
    async fn load(&mut self, ctx: &ToolContext, dir: &str) {
        let mut rules = Vec::new();
        for name in IGNORE_FILES {
            if let Ok(bytes) = ctx.sandbox.read_file_bytes(&join(dir, name)).await {
                rules.extend(parse_ignore_file(&String::from_utf8_lossy(&bytes)));
            }
        }
        if !rules.is_empty() {
            self.by_dir.insert(dir.to_owned(), rules);
        }
    }

    /// Whether the entry at `abs` is ignored by the rules loaded for its ancestors.
    pub(crate) fn ignored(&self, abs: &str, is_dir: bool) -> bool {
        // Deepest directory first: its rules override shallower ones.
        let mut dir = abs;
        while let Some(cut) = dir.rfind('/') {
            dir = &abs[..cut];
            let base = if dir.is_empty() { "/" } else { dir };
            if let Some(rules) = self.by_dir.get(base) {
                let rel = abs
                    .strip_prefix(base)
                    .unwrap_or(abs)
                    .trim_start_matches('/');
                if let Some(rule) = rules
                    .iter()
                    .rev()
                    .find(|rule| (!rule.dir_only || is_dir) && rule.matcher.is_match(rel))
                {
                    return !rule.negated;
                }
            }
            if dir.is_empty() {
                break;
            }
        }
        false
    }
}

/// The rules of one ignore file; lines that are not valid globs are skipped.
fn parse_ignore_file(text: &str) -> Vec<IgnoreRule> {
    text.lines().filter_map(parse_ignore_line).collect()
}

fn parse_ignore_line(line: &str) -> Option<IgnoreRule> {
    let line = line.trim_end_matches(['\r', ' ', '\t']);
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (negated, line) = match line.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, line.strip_prefix('\\').unwrap_or(line)),
    };
    let (dir_only, line) = match line.strip_suffix('/') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    if line.is_empty() {
        return None;
    }
    // A slash anywhere but at the end anchors the pattern to the ignore file's directory.
    let glob = match line.strip_prefix('/') {
        Some(anchored) => anchored.to_owned(),
        None if line.contains('/') => line.to_owned(),
        None => format!("**/{line}"),
    };
    let matcher = GlobBuilder::new(&glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .ok()?
        .compile_matcher();
    Some(IgnoreRule {
        matcher,
        negated,
        dir_only,
    })
}

/// Rules parsed from `text` as the ignore file of `dir`, for unit tests.
#[cfg(test)]
pub(crate) fn rules_from(dir: &str, text: &str) -> IgnoreRules {
    let mut rules = IgnoreRules::default();
    rules.by_dir.insert(dir.to_owned(), parse_ignore_file(text));
    rules
}
