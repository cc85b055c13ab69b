//! Where the approval key comes from.

use super::*;

#[test]
fn the_key_file_is_created_on_first_use_readable_by_the_user_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flue");
    let path = config.join(FILE_NAME);
    let read = || key_in(&config, false).unwrap();
    assert_eq!(read(), None);
    assert!(!path.exists());
    let made = key_in(&config, true).unwrap().unwrap();
    assert_eq!(made.len(), 32);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Made once: later reads and creations keep it.
    assert_eq!(read(), Some(made.clone()));
    assert_eq!(key_in(&config, true).unwrap(), Some(made));
}

#[test]
fn a_configuration_directory_gives_a_key_that_writes_nothing_until_asked() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flue");
    let env = Env::from_vars([("FLUE_CONFIG_DIR".to_owned(), config.display().to_string())]);
    assert!(approval_key(&env).unwrap().is_some());
    assert!(!config.exists());
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
