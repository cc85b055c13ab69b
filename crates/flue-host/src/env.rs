//! Environment values for a workspace: the process environment (a snapshot the caller passes)
//! over a `.env` file of `KEY=VALUE` lines.
//!
//! Nothing here reads or changes the process environment: the caller hands the variables in
//! (`Env::from_vars(std::env::vars())`), and every consumer (providers, sandboxes, MCP
//! servers) asks the [`Env`] value.

use std::collections::BTreeMap;
use std::path::Path;

use crate::HostError;

#[cfg(test)]
mod tests;

/// Variables from the caller's environment, with an env file's values below them.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// Values that win (the process environment).
    vars: BTreeMap<String, String>,
    /// Values from the env file.
    file: BTreeMap<String, String>,
}

impl Env {
    /// No variables at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// These variables, typically `std::env::vars()`; they win over any env file.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            vars: vars.into_iter().collect(),
            file: BTreeMap::new(),
        }
    }

    /// Adds the env file at `path` below the variables already given. A missing file is
    /// fine when `required` is false (the workspace's default `.env`); `--env FILE` passes
    /// true.
    pub fn with_file(mut self, path: &Path, required: bool) -> Result<Self, HostError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(self);
            }
            Err(err) => {
                return Err(HostError::EnvFile {
                    path: path.to_path_buf(),
                    message: format!("cannot read env file {}: {err}", path.display()),
                });
            }
        };
        self.file = parse(&text).map_err(|problem| HostError::EnvFile {
            path: path.to_path_buf(),
            message: format!("in env file {}: {problem}", path.display()),
        })?;
        Ok(self)
    }

    /// `vars` over the workspace's env file: `explicit` (`--env FILE`, which must exist) or
    /// else `root/.env` (optional).
    pub fn for_root(
        vars: impl IntoIterator<Item = (String, String)>,
        root: &Path,
        explicit: Option<&Path>,
    ) -> Result<Self, HostError> {
        let env = Self::from_vars(vars);
        match explicit {
            Some(path) => env.with_file(path, true),
            None => env.with_file(&root.join(".env"), false),
        }
    }

    /// The value of `key`: the given variables first, then the file.
    pub fn get(&self, key: &str) -> Option<String> {
        self.vars.get(key).or_else(|| self.file.get(key)).cloned()
    }
}

/// The variables of an env file; the error names the line.
fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut vars = BTreeMap::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected KEY=VALUE", idx + 1));
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("line {}: invalid variable name {key:?}", idx + 1));
        }
        vars.insert(key.to_owned(), unquote(value.trim()).to_owned());
    }
    Ok(vars)
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}
