//! Reading the hooks of Claude Code settings files.

use flue_core::hook::HookPoint;

use super::hooks;

#[test]
fn unknown_events_keys_and_types_are_notes_at_their_lines() {
    let text = r#"{
  "permissions": {"allow": ["Bash(npm test)"]},
  "hooks": {
    "TeammateIdle": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {"type": "command", "command": "./guard.sh", "statusMessage": "checking", "timeout": 5},
          {"type": "agent", "prompt": "is this safe?"},
          {"type": "prompt", "prompt": "Is this safe? $ARGUMENTS", "model": "anthropic/claude-haiku-4-5"}
        ]
      }
    ]
  }
}"#;
    let (specs, notes) = hooks(".claude/settings.json", text);
    assert_eq!(specs.len(), 2, "{notes:?}");
    assert_eq!(specs[0].point, HookPoint::PreToolUse);
    assert_eq!(specs[0].declared_in, ".claude/settings.json");
    // A prompt hook runs: it is read with its prompt and model.
    let prompt = specs[1].prompt.as_ref().unwrap();
    assert_eq!(prompt.prompt, "Is this safe? $ARGUMENTS");
    assert_eq!(prompt.model.as_deref(), Some("anthropic/claude-haiku-4-5"));
    let rendered: Vec<String> = notes.iter().map(ToString::to_string).collect();
    assert_eq!(rendered.len(), 3, "{rendered:#?}");
    assert!(
        rendered
            .iter()
            .any(|note| note.starts_with(".claude/settings.json:4: `hooks.TeammateIdle`")),
        "{rendered:#?}"
    );
    assert!(
        rendered.iter().any(|note| note.starts_with(
            ".claude/settings.json:9: `hooks.PreToolUse[0].hooks[0].statusMessage` is ignored"
        )),
        "{rendered:#?}"
    );
    assert!(
        rendered
            .iter()
            .any(|note| note.starts_with(".claude/settings.json:10: ")
                && note.contains("\"agent\"")
                && note.ends_with("this hook is not run")),
        "{rendered:#?}"
    );
}

#[test]
fn disabled_or_broken_settings_run_nothing_and_say_so() {
    let (specs, notes) = hooks(
        ".claude/settings.json",
        r#"{"disableAllHooks": true, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}"#,
    );
    assert!(specs.is_empty());
    assert!(notes[0].message.contains("disableAllHooks"));
    let (specs, notes) = hooks(".claude/settings.local.json", "{\n  \"hooks\": {,\n}");
    assert!(specs.is_empty());
    assert_eq!(notes[0].line, Some(2), "{notes:?}");
}
