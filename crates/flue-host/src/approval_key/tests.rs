//! Where the approval key comes from.

use super::*;

#[test]
fn the_key_file_is_created_once_readable_by_the_user_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flue");
    let env = Env::from_vars([("FLUE_CONFIG_DIR".to_owned(), config.display().to_string())]);
    assert!(approval_key(&env).unwrap().is_some());
    let path = config.join(FILE_NAME);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let written = std::fs::read_to_string(&path).unwrap();
    assert_eq!(written.len(), 64);
    assert!(approval_key(&env).unwrap().is_some());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
}

#[test]
fn a_bad_variable_is_an_error_and_a_good_one_wins() {
    let bad = Env::from_vars([(APPROVAL_KEY_VAR.to_owned(), "abc".to_owned())]);
    assert!(approval_key(&bad).is_err());
    let good = Env::from_vars([(APPROVAL_KEY_VAR.to_owned(), "ab".repeat(32))]);
    assert!(approval_key(&good).unwrap().is_some());
}

#[test]
fn a_workspace_env_file_cannot_choose_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        format!("{APPROVAL_KEY_VAR}={}\n", "cd".repeat(32)),
    )
    .unwrap();
    let env = Env::for_root(Vec::new(), dir.path(), None).unwrap();
    assert_eq!(approval_key(&env).unwrap().map(|_| ()), None);
}
