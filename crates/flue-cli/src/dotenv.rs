//! `.env` files: `KEY=VALUE` lines; values already in the process environment win.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};

/// Variables from an env file merged under the process environment.
#[derive(Debug, Default)]
pub(crate) struct EnvVars {
    vars: BTreeMap<String, String>,
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
        Ok(Self { vars })
    }

    /// The value of `key`: the process environment first, then the file.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        std::env::var(key)
            .ok()
            .or_else(|| self.vars.get(key).cloned())
    }
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
    fn rejects_lines_without_equals() {
        let err = parse("A=1\noops\n").unwrap_err();
        assert_eq!(err.to_string(), "line 2: expected KEY=VALUE");
    }
}
