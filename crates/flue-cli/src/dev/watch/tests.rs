//! Which changes trigger a rebuild.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::relevant;

#[test]
fn agent_skill_settings_env_and_scripts_count_and_nothing_else_does() {
    let root = Path::new("/w");
    let scripts: BTreeSet<PathBuf> = [PathBuf::from("/w/scripts/a.json")].into();
    let cases = [
        ("/w/agents/a.md", true),
        ("/w/agents/nested/b.md", true),
        ("/w/.agents/skills/s/SKILL.md", true),
        ("/w/.agents/roles/r.md", true),
        ("/w/flue.toml", true),
        ("/w/AGENTS.md", true),
        ("/w/.env", true),
        ("/w/.env.local", true),
        ("/w/scripts/a.json", true),
        ("/w/scripts/b.json", false),
        ("/w/.flue/dev.db", false),
        ("/w/.flue", false),
        ("/w/notes.md", false),
        ("/w/sub/flue.toml", false),
        ("/elsewhere/agents/a.md", false),
        ("/w", false),
    ];
    let got: Vec<(&str, bool)> = cases
        .iter()
        .map(|(path, _)| (*path, relevant(root, Path::new(path), &scripts)))
        .collect();
    pretty_assertions::assert_eq!(got, cases.to_vec());
}
