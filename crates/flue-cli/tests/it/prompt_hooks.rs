//! Prompt hooks (`type: prompt`) in real `flue run` processes: a model judges the hook input
//! with the hook's prompt and answers `{"ok": ...}` in Claude Code's shape. The judge is the
//! scripted model with a script of its own (and a price, so its cost shows); the agent runs in
//! the virtual sandbox, beside which command hooks are refused but prompt hooks run.

use pretty_assertions::assert_eq;

use crate::{Workspace, json, stderr};

/// The agent's model: `clean` -> `rm -rf build`; `greet` -> `echo hello`; `garble` -> `echo
/// garble`; after a bash result -> `tool said: <result>`; `finish` -> `draft`, and after a
/// Stop block's reason a reply citing a source; anything else echoed. No price: what a run
/// costs is the judge's alone.
fn agent_script() -> String {
    let call = |command: &str| serde_json::json!([{"name": "bash", "input": {"command": command}}]);
    serde_json::json!({"rules": [
        {"when": {"tool_result": "bash"}, "reply": {"text": "tool said: {{tool_result}}"}},
        {"when": {"user_matches": "^clean$"}, "reply": {"tool_calls": call("rm -rf build")}},
        {"when": {"user_matches": "^greet$"}, "reply": {"tool_calls": call("echo hello")}},
        {"when": {"user_matches": "^garble$"}, "reply": {"tool_calls": call("echo garble")}},
        {"when": {"user_contains": "cite a source"},
         "reply": {"text": "final: see https://example.com/source"}},
        {"when": {"user_matches": "^finish$"}, "reply": {"text": "draft"}},
        {"reply": {"text": "echo: {{user}}"}}
    ]})
    .to_string()
}

/// The judge: refuses `rm -rf` and an uncited `draft`, answers prose (no `ok`) about `garble`,
/// allows the rest. Priced, so each judgement costs about a cent.
fn judge_script() -> String {
    let answer = |value: serde_json::Value| serde_json::json!({"text": value.to_string()});
    serde_json::json!({
        "model": {"price": {"input": 100.0, "output": 100.0}},
        "rules": [
            {"when": {"user_contains": "\"last_assistant_message\":\"draft\""},
             "reply": answer(serde_json::json!({"ok": false, "reason": "cite a source"}))},
            {"when": {"user_contains": "rm -rf"},
             "reply": answer(serde_json::json!({"ok": false, "reason": "rm -rf destroys the build"}))},
            {"when": {"user_contains": "echo garble"}, "reply": {"text": "Looks fine to me."}},
            {"reply": answer(serde_json::json!({"ok": true}))}
        ]
    })
    .to_string()
}

/// A workspace whose agent `judged` (bash, virtual sandbox) has a prompt hook on `Bash` calls
/// and one on its final reply, both judged by `scripted/judge.json`.
fn workspace(flue_toml: &str) -> Workspace {
    workspace_with("", flue_toml)
}

/// [`workspace`] with `frontmatter` (whole lines) added to the agent file.
fn workspace_with(frontmatter: &str, flue_toml: &str) -> Workspace {
    let hooks = "hooks:\n  \
        PreToolUse:\n    - matcher: Bash\n      hooks:\n        - type: prompt\n          \
        prompt: 'Refuse commands that destroy files. The call: $ARGUMENTS'\n          \
        model: scripted/judge.json\n          timeout: 20\n  \
        Stop:\n    - hooks:\n        - type: prompt\n          \
        prompt: 'Does the reply cite a source?'\n          model: scripted/judge.json\n";
    let agent = format!(
        "---\nmodel: scripted/s.json\ntools: [bash]\nsandbox: virtual\n{frontmatter}{hooks}---\nWork.\n"
    );
    Workspace::new(&[
        ("agents/judged.md", &agent),
        ("s.json", &agent_script()),
        ("judge.json", &judge_script()),
        ("flue.toml", flue_toml),
    ])
}

fn run(ws: &Workspace, message: &str, id: &str) -> std::process::Output {
    ws.flue(&["run", "judged", "-m", message, "--id", id, "--json"])
}

#[test]
fn a_prompt_hook_judges_with_a_model_beside_the_virtual_sandbox_and_its_cost_is_counted() {
    let ws = workspace("");
    // `ok: true`: the call runs; the judgement's cost is the run's (the agent's model is free).
    let out = run(&ws, "greet", "g");
    assert!(out.status.success(), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["message"], "tool said: hello\n", "{envelope}");
    let cost = envelope["usage"]["cost_usd"].as_f64().unwrap_or(0.0);
    assert!(cost > 0.0, "the judgements cost nothing: {envelope}");
    let shown = ws.flue(&["session", "show", "--id", "g"]);
    let shown = crate::stdout(&shown);
    assert!(
        shown.contains("hook PreToolUse by prompt `Refuse commands that destroy files."),
        "{shown}"
    );

    // `ok: false` at PreToolUse ends the operation, as Claude Code's `continue: false`.
    let out = run(&ws, "clean", "c");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["error"]["kind"], "guardrail_tripped", "{envelope}");
    let message = envelope["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("rm -rf destroys the build"), "{message}");

    // `ok: false` at Stop sends the model back with the reason; its second reply passes.
    let out = run(&ws, "finish", "f");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json(&out)["message"],
        "final: see https://example.com/source"
    );

    // An answer without `ok` is a failure: at PreToolUse it fails closed, and the model sees
    // why instead of the call's result.
    let out = run(&ws, "garble", "x");
    assert!(out.status.success(), "{}", stderr(&out));
    let reply = json(&out)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reply.starts_with("tool said: ")
            && reply.contains("the model's answer is not a JSON object"),
        "{reply}"
    );
    assert!(!reply.contains("tool said: garble"), "{reply}");
}

#[test]
fn a_prompt_hooks_cost_counts_against_the_budget() {
    // The agent's own model is free: only the judgement can use the budget up.
    let ws = workspace("[defaults.budget]\nmax_cost_usd = 0.000001\n");
    let out = run(&ws, "greet", "b");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let envelope = json(&out);
    assert_eq!(envelope["error"]["kind"], "budget_exceeded", "{envelope}");
}

#[test]
fn a_prompt_hook_at_a_point_it_cannot_decide_fails_the_build() {
    let agent = "---\nmodel: scripted/s.json\nhooks:\n  SessionEnd:\n    - hooks:\n        \
        - type: prompt\n          prompt: 'Was it good?'\n---\nWork.\n";
    let ws = Workspace::new(&[("agents/a.md", agent), ("s.json", &agent_script())]);
    let out = ws.flue(&["build"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("agents/a.md") && err.contains("a `prompt` hook cannot run at SessionEnd"),
        "{err}"
    );
}

/// The text deltas `flue run --jsonl` printed, joined.
fn streamed_text(out: &std::process::Output) -> String {
    crate::stdout(out)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["type"] == "text_delta")
        .filter_map(|line| line["text"].as_str().map(str::to_owned))
        .collect()
}

/// With `hold_reply_until_stop`, a reply the Stop hook blocks never streams: the deltas are
/// the passed reply alone. Without it the blocked draft streams before the hook sees it.
#[test]
fn a_held_reply_streams_only_once_the_stop_hooks_pass_it() {
    let ws = workspace("");
    let out = ws.flue(&["run", "judged", "-m", "finish", "--id", "l", "--jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let live = streamed_text(&out);
    assert!(
        live.starts_with("draft"),
        "the draft streamed live: {live:?}"
    );

    let ws = workspace_with("hold_reply_until_stop: true\n", "");
    let out = ws.flue(&["run", "judged", "-m", "finish", "--id", "h", "--jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(streamed_text(&out), "final: see https://example.com/source");
    // Interim text of a turn with tool calls is released when that turn ends.
    let out = ws.flue(&["run", "judged", "-m", "greet", "--id", "t", "--jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(streamed_text(&out), "tool said: hello\n");
    // The plain output is the passed reply.
    let out = ws.flue(&["run", "judged", "-m", "finish", "--id", "p"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = crate::stdout(&out);
    assert!(!printed.contains("draft"), "{printed}");
    assert!(
        printed.contains("final: see https://example.com/source"),
        "{printed}"
    );
}
