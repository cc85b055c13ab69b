//! Unit tests of the virtual sandbox's helpers: seed rules and command state.

use std::collections::BTreeMap;
use std::path::Path;

use pretty_assertions::assert_eq;

use super::seed::{is_excluded, stays_inside};
use super::{VirtualSandbox, shell_state};

#[test]
fn seed_exclusion_matches_names_and_prefixes() {
    let exclude = vec![".git".to_owned(), ".env*".to_owned()];
    let check = |name: &str| is_excluded(name, &exclude);
    assert_eq!(
        [".git", ".gitignore", ".env", ".env.local", "env", "src"].map(check),
        [true, false, true, true, false, false]
    );
}

#[test]
fn seed_symlinks_must_stay_inside() {
    let check = |base: &str, target: &str| stays_inside(Path::new(base), Path::new(target));
    assert_eq!(
        [
            check("", "a.txt"),
            check("sub", "../a.txt"),
            check("sub", "../../a.txt"),
            check("", "../x"),
            check("a/b", "./../../c"),
            check("", "/etc/passwd"),
        ],
        [true, true, false, false, true, false]
    );
}

#[tokio::test]
async fn a_command_state_has_its_cwd_and_env() {
    let sandbox = VirtualSandbox::new();
    let base = sandbox.new_bash().shell_state();
    let env = BTreeMap::from([("TOKEN".to_owned(), "t".to_owned())]);
    let state = shell_state(&base, Path::new("/workspace/sub"), &env);
    assert_eq!(state.cwd, Path::new("/workspace/sub"));
    assert_eq!(
        (
            state.env.get("PWD").map(String::as_str),
            state.env.get("TOKEN").map(String::as_str)
        ),
        (Some("/workspace/sub"), Some("t"))
    );
}
