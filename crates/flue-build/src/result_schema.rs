//! `result:` in an agent or skill file: the JSON Schema of a structured result, written inline
//! (a YAML mapping) or as the path of a JSON file relative to the declaring file.
//!
//! An inline schema is checked while the frontmatter is read; a file is read and checked by
//! whoever holds the workspace's files (the loader for agents, the skill loader for skills),
//! through the same [`Source`] as every workspace file, so a bundle carries it. Either way a
//! schema that does not compile is reported with the file, the `result` key's line and the fix.

use std::path::Path;

use flue_core::util::workspace_file::MAX_CONFIG_BYTES;
use gray_matter::Pod;
use serde_json::Value;

use crate::frontmatter::describe;
use crate::source::Source;

/// A `result:` value as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ResultDecl {
    /// An inline schema, checked.
    Inline(Value),
    /// The path of a JSON Schema file, relative to the declaring file's folder.
    File(String),
}

/// Reads a `result:` value: a mapping is an inline schema (checked here), a string the path of
/// a schema file.
pub(crate) fn parse(value: &Pod) -> Result<ResultDecl, String> {
    match value {
        Pod::String(path) if !path.trim().is_empty() => Ok(ResultDecl::File(path.clone())),
        Pod::Hash(_) => {
            let schema = crate::tools::to_json(value);
            check(&schema)?;
            Ok(ResultDecl::Inline(schema))
        }
        other => Err(format!(
            "`result` must be a JSON Schema written as a mapping (`result: {{ type: object, \
             properties: {{ summary: {{ type: string }} }} }}`) or the path of a JSON Schema \
             file relative to this file (`result: schemas/review.json`), got {}",
            describe(other)
        )),
    }
}

/// Checks that `schema` compiles.
fn check(schema: &Value) -> Result<(), String> {
    flue_core::tool::check_schema(schema).map_err(|problem| {
        format!("`result` is not a usable JSON Schema: {problem}; fix the schema")
    })
}

/// Reads and checks the schema file `file` named by the file at `declaring` (a path relative
/// to the workspace root, or a path outside it as the user gave it).
pub(crate) fn load(
    source: &dyn Source,
    declaring: &str,
    file: &str,
    inside_root: bool,
) -> Result<Value, String> {
    let folder = declaring.rsplit_once('/').map_or("", |(folder, _)| folder);
    let bytes = if inside_root {
        let relative = join_inside(folder, file).ok_or_else(|| {
            format!(
                "`result: {file}` leads outside the workspace: keep the schema file inside it, \
                 next to the file that names it"
            )
        })?;
        source.read(&relative, MAX_CONFIG_BYTES).map_err(|err| {
            format!(
                "`result: {file}`: cannot read {relative}: {err}; the path is relative to \
                     the folder of the file that names it"
            )
        })?
    } else {
        let path = Path::new(folder).join(file);
        flue_core::util::workspace_file::read_file_at_most(&path, MAX_CONFIG_BYTES)
            .map_err(|err| format!("`result: {file}`: cannot read {}: {err}", path.display()))?
    };
    let schema: Value = serde_json::from_slice(&bytes).map_err(|err| {
        format!("`result: {file}` is not JSON ({err}): write the schema as a JSON object")
    })?;
    check(&schema).map_err(|problem| format!("{problem} in {file}"))?;
    Ok(schema)
}

/// `file` joined to `folder` (both `/`-separated, relative to the root), or `None` when `..`
/// climbs out of the root or `file` is absolute.
fn join_inside(folder: &str, file: &str) -> Option<String> {
    if file.starts_with('/') || file.contains('\\') {
        return None;
    }
    let mut parts: Vec<&str> = folder.split('/').filter(|part| !part.is_empty()).collect();
    for part in file.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}
