//! Environment values for a workspace: the process environment (a snapshot the caller passes)
//! over a `.env` file of `KEY=VALUE` lines.
//!
//! Nothing here reads or changes the process environment: the caller hands the variables in
//! (`Env::from_vars(std::env::vars())`), and every consumer (providers, sandboxes, MCP
//! servers) asks the [`Env`] value.
//!
//! An [`Env`] also knows which values are secrets, for the harness's redactor
//! ([`Env::secrets`]): every value of the env file, every given variable whose name says it
//! holds one (it contains `KEY`, `TOKEN`, `SECRET`, `PASSWORD`, `PASSWD` or `CREDENTIAL`), and
//! every value read with [`Env::secret`] (provider keys, `${VAR}` in MCP declarations,
//! `DAYTONA_API_KEY`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use flue_core::util::workspace_file::{
    MAX_CONFIG_BYTES, WorkspaceFileError, WorkspaceFiles, read_file_at_most,
};

use crate::HostError;

#[cfg(test)]
mod tests;

/// Parts of a variable name that mark its value as a secret (compared upper-cased).
const SECRET_NAME_PARTS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Variables from the caller's environment, with an env file's values below them.
#[derive(Clone, Default)]
pub struct Env {
    /// Values that win (the process environment).
    vars: BTreeMap<String, String>,
    /// Values from the env file.
    file: BTreeMap<String, String>,
    /// True when the env file is the workspace's own `.env` (not one the user named).
    file_from_workspace: bool,
    /// Values read with [`Env::secret`]; shared by clones, so a harness opened later redacts
    /// what any of them read.
    read_secrets: Arc<Mutex<BTreeSet<String>>>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: the values are keys.
        f.debug_struct("Env")
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .field("file", &self.file.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
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
            file_from_workspace: false,
            read_secrets: Arc::default(),
        }
    }

    /// Adds the env file at `path` below the variables already given. A missing file is
    /// fine when `required` is false (the workspace's default `.env`); `--env FILE` passes
    /// true. The file must be a regular file of at most
    /// [`MAX_CONFIG_BYTES`](flue_core::util::workspace_file::MAX_CONFIG_BYTES).
    pub fn with_file(self, path: &Path, required: bool) -> Result<Self, HostError> {
        let read = read_file_at_most(path, MAX_CONFIG_BYTES);
        self.with_read(path, required, read)
    }

    /// Parses what reading the env file at `path` gave.
    fn with_read(
        mut self,
        path: &Path,
        required: bool,
        read: Result<Vec<u8>, WorkspaceFileError>,
    ) -> Result<Self, HostError> {
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(err) if err.is_not_found() && !required => return Ok(self),
            Err(err) => {
                return Err(HostError::EnvFile {
                    path: path.to_path_buf(),
                    message: format!("cannot read env file {}: {err}", path.display()),
                });
            }
        };
        let Ok(text) = String::from_utf8(bytes) else {
            return Err(HostError::EnvFile {
                path: path.to_path_buf(),
                message: format!(
                    "cannot read env file {}: it is not valid UTF-8; save it as UTF-8",
                    path.display()
                ),
            });
        };
        self.file = parse(&text).map_err(|problem| HostError::EnvFile {
            path: path.to_path_buf(),
            message: format!("in env file {}: {problem}", path.display()),
        })?;
        Ok(self)
    }

    /// `vars` over the workspace's env file: `explicit` (`--env FILE`, which must exist; read
    /// as named) or else `root/.env` (optional; read under the workspace file rule, so a
    /// `.env` linking out of the workspace is refused).
    pub fn for_root(
        vars: impl IntoIterator<Item = (String, String)>,
        root: &Path,
        explicit: Option<&Path>,
    ) -> Result<Self, HostError> {
        let env = Self::from_vars(vars);
        match explicit {
            Some(path) => env.with_file(path, true),
            None => {
                let read = WorkspaceFiles::open(root)
                    .map_err(WorkspaceFileError::Io)
                    .and_then(|files| files.read(".env", MAX_CONFIG_BYTES));
                let mut env = env.with_read(&root.join(".env"), false, read)?;
                env.file_from_workspace = true;
                Ok(env)
            }
        }
    }

    /// The value of `key`: the given variables first, then the file.
    pub fn get(&self, key: &str) -> Option<String> {
        self.vars.get(key).or_else(|| self.file.get(key)).cloned()
    }

    /// The value of `key` in the given variables (the process environment) alone, never a
    /// file's: for what a workspace must not choose.
    pub(crate) fn process_value(&self, key: &str) -> Option<String> {
        self.vars.get(key).cloned()
    }

    /// The value of `key` when it comes from the workspace's own `.env` (the environment
    /// does not set it): a value the workspace chose, not the user.
    pub(crate) fn workspace_file_value(&self, key: &str) -> Option<&str> {
        if !self.file_from_workspace || self.vars.contains_key(key) {
            return None;
        }
        self.file.get(key).map(String::as_str)
    }

    /// The value of `key`, as [`Env::get`], remembered as a secret for [`Env::secrets`].
    pub fn secret(&self, key: &str) -> Option<String> {
        let value = self.get(key)?;
        if let Ok(mut read) = self.read_secrets.lock() {
            read.insert(value.clone());
        }
        Some(value)
    }

    /// Every value to redact from output (see the module docs), for
    /// [`HarnessBuilder::with_secrets`](flue_core::HarnessBuilder::with_secrets), which drops
    /// short values and plain words.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets: BTreeSet<String> = self.file.values().cloned().collect();
        secrets.extend(
            self.vars
                .iter()
                .filter(|(name, _)| is_secret_name(name))
                .map(|(_, value)| value.clone()),
        );
        if let Ok(read) = self.read_secrets.lock() {
            secrets.extend(read.iter().cloned());
        }
        secrets.into_iter().collect()
    }
}

/// Whether a variable's name says it holds a secret (`OPENAI_API_KEY`, `GITHUB_TOKEN`, ...).
fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
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
