//! `.env` files: `KEY=VALUE` lines; values already in the process environment win.
//!
//! [`EnvVars`] also knows which values are secrets, for the redactor: every value of the file,
//! every process variable whose name says it holds one (`*KEY*`, `*TOKEN*`, `*SECRET*`,
//! `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`), and every value read with [`EnvVars::secret`]
//! (provider keys, `${VAR}` in MCP declarations, `DAYTONA_API_KEY`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, bail};

/// Parts of a variable name that mark its value as a secret (compared upper-cased).
const SECRET_NAME_PARTS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Variables from an env file merged under the process environment.
#[derive(Debug, Default)]
pub(crate) struct EnvVars {
    vars: BTreeMap<String, String>,
    /// Values read as secrets from the process environment.
    read_secrets: Mutex<BTreeSet<String>>,
}

impl EnvVars {
    /// Loads `path`; a missing file is fine only when `required` is false.
    pub(crate) fn load(path: &Path, required: bool) -> anyhow::Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Self::default());
            }
            Err(err) => {
                return Err(err)
                    .with_context(|| format!("cannot read env file {}", path.display()));
            }
        };
        let vars = parse(&text).with_context(|| format!("in env file {}", path.display()))?;
        Ok(Self {
            vars,
            read_secrets: Mutex::default(),
        })
    }

    /// The value of `key`, remembered as a secret to redact from output.
    pub(crate) fn secret(&self, key: &str) -> Option<String> {
        let value = self.get(key)?;
        if let Ok(mut read) = self.read_secrets.lock() {
            read.insert(value.clone());
        }
        Some(value)
    }

    /// Every value to redact: the file's, secret-named process variables' and those read with
    /// [`EnvVars::secret`]. The redactor drops short values and words.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut secrets: BTreeSet<String> = self.vars.values().cloned().collect();
        secrets.extend(
            std::env::vars_os()
                .filter_map(|(name, value)| {
                    Some((name.into_string().ok()?, value.into_string().ok()?))
                })
                .filter(|(name, _)| is_secret_name(name))
                .map(|(_, value)| value),
        );
        if let Ok(read) = self.read_secrets.lock() {
            secrets.extend(read.iter().cloned());
        }
        secrets.into_iter().collect()
    }

    /// The value of `key`: the process environment first, then the file.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        std::env::var(key)
            .ok()
            .or_else(|| self.vars.get(key).cloned())
    }
}

/// Whether a variable's name says it holds a secret (`OPENAI_API_KEY`, `GITHUB_TOKEN`, ...).
fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
}

fn parse(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            bail!("line {}: expected KEY=VALUE", idx + 1);
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("line {}: invalid variable name {key:?}", idx + 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comments_quotes_and_export() {
        let vars = parse("# c\nA=1\nexport B = \"two words\"\n\nC='x=y'\n").unwrap();
        let expected: BTreeMap<String, String> = [("A", "1"), ("B", "two words"), ("C", "x=y")]
            .map(|(k, v)| (k.into(), v.into()))
            .into();
        assert_eq!(vars, expected);
    }

    #[test]
    fn secret_names_are_recognised() {
        for name in [
            "OPENAI_API_KEY",
            "github_token",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSWORD",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "OPENAI_BASE_URL", "NODE_ENV"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn every_file_value_is_a_secret() {
        let env = EnvVars {
            vars: parse("A=one-value-here\nB=\n").unwrap(),
            read_secrets: Mutex::default(),
        };
        let secrets = env.secrets();
        assert!(
            secrets.contains(&"one-value-here".to_owned()),
            "{secrets:?}"
        );
    }

    #[test]
    fn rejects_lines_without_equals() {
        let err = parse("A=1\noops\n").unwrap_err();
        assert_eq!(err.to_string(), "line 2: expected KEY=VALUE");
    }
}
