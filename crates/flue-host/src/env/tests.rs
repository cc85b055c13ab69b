//! Unit tests of env-file parsing and precedence.

use std::collections::BTreeMap;

use pretty_assertions::assert_eq;

use super::{Env, parse};

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
