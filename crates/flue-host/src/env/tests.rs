//! Unit tests of env-file parsing and precedence.

use std::collections::BTreeMap;

use pretty_assertions::assert_eq;

use super::{Env, is_secret_name, parse};

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
    assert_eq!(
        parse("A=1\noops\n"),
        Err("line 2: expected KEY=VALUE".to_owned())
    );
}

#[test]
fn given_variables_win_over_the_file_and_a_missing_optional_file_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".env");
    std::fs::write(&file, "A=file\nB=file\n").unwrap();
    let env = Env::from_vars([("A".to_owned(), "process".to_owned())])
        .with_file(&file, true)
        .unwrap();
    assert_eq!(
        (env.get("A"), env.get("B"), env.get("C")),
        (Some("process".to_owned()), Some("file".to_owned()), None)
    );
    let missing = Env::new().with_file(&dir.path().join("nope"), false);
    assert!(missing.is_ok());
    let err = Env::new()
        .with_file(&dir.path().join("nope"), true)
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_env_file");
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
fn secrets_are_file_values_secret_named_variables_and_values_read_as_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".env");
    std::fs::write(&file, "ANY_NAME=from-the-file\n").unwrap();
    let env = Env::from_vars([
        ("HOME".to_owned(), "/home/someone".to_owned()),
        ("GH_TOKEN".to_owned(), "token-value".to_owned()),
        ("MCP_HEADER".to_owned(), "header-value".to_owned()),
    ])
    .with_file(&file, true)
    .unwrap();
    let clone = env.clone();
    assert_eq!(clone.secret("MCP_HEADER").as_deref(), Some("header-value"));
    assert_eq!(
        env.secrets(),
        ["from-the-file", "header-value", "token-value"].map(String::from)
    );
    // Debug shows names, never values.
    let shown = format!("{env:?}");
    assert!(
        shown.contains("GH_TOKEN") && !shown.contains("token-value"),
        "{shown}"
    );
}
