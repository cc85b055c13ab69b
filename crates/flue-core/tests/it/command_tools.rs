//! Tests: command tools (`CommandToolSpec`) run in every sandbox, with the model's input
//! passed as data (stdin JSON and environment variables), never as shell text.

use std::time::{Duration, Instant};

use flue_core::{ToolError, tool::CommandToolSpec};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::sandboxes::{Fixture, SANDBOXES};

fn count_lines() -> CommandToolSpec {
    CommandToolSpec::new(
        "count_lines",
        "Count the lines of a file",
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        }),
        r#"wc -l < "$path"   # the path arrives as a variable"#,
    )
}

async fn call(fixture: &Fixture, spec: &CommandToolSpec, input: Value) -> Result<Value, ToolError> {
    spec.to_tool().unwrap().call(input, &fixture.ctx).await
}

#[tokio::test]
async fn input_properties_arrive_as_environment_variables() {
    for (name, open) in SANDBOXES {
        let fixture = Fixture::new(*open, &[("notes.txt", "a\nb\nc\n")]).await;
        let output = call(&fixture, &count_lines(), json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(output["exit_code"], json!(0), "{name}: {output}");
        assert_eq!(output["stdout"].as_str().unwrap().trim(), "3", "{name}");
    }
}

#[tokio::test]
async fn the_whole_input_arrives_on_stdin_as_json() {
    let spec = CommandToolSpec::new(
        "echo_input",
        "Echo the input",
        json!({"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array"}}}),
        "cat; echo; echo \"n=$n tags=$tags\"",
    );
    for (name, open) in SANDBOXES {
        let fixture = Fixture::new(*open, &[]).await;
        let input = json!({"n": 7, "tags": ["a", "b"]});
        let output = call(&fixture, &spec, input.clone()).await.unwrap();
        let stdout = output["stdout"].as_str().unwrap();
        let (first, second) = stdout.split_once('\n').unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(first).unwrap(),
            input,
            "{name}"
        );
        assert_eq!(second, "n=7 tags=[\"a\",\"b\"]\n", "{name}");
    }
}

#[tokio::test]
async fn shell_text_in_the_input_is_never_run() {
    let spec = CommandToolSpec::new(
        "greet",
        "Greet someone",
        json!({"type": "object", "properties": {"who": {"type": "string"}}}),
        r#"echo "hello $who""#,
    );
    let hostile = [
        "$(touch pwned)",
        "`touch pwned`",
        "x; touch pwned",
        "x\" ; touch pwned ; echo \"",
        "'; touch pwned; '",
        "x\n touch pwned",
    ];
    for (name, open) in SANDBOXES {
        let fixture = Fixture::new(*open, &[]).await;
        for who in hostile {
            let output = call(&fixture, &spec, json!({"who": who})).await.unwrap();
            assert_eq!(output["stdout"], json!(format!("hello {who}\n")), "{name}");
        }
        let listing = fixture.ctx.sandbox.readdir(".").await.unwrap();
        assert!(
            !listing.iter().any(|entry| entry == "pwned"),
            "{name}: {listing:?}"
        );
    }
}

#[tokio::test]
async fn the_result_carries_stderr_and_the_exit_code() {
    let spec = CommandToolSpec::new(
        "fail",
        "Fails",
        json!({"type": "object"}),
        "echo out; echo err >&2; exit 3",
    );
    for (name, open) in SANDBOXES {
        let fixture = Fixture::new(*open, &[]).await;
        let output = call(&fixture, &spec, json!({})).await.unwrap();
        assert_eq!(
            output,
            json!({"exit_code": 3, "stdout": "out\n", "stderr": "err\n"}),
            "{name}"
        );
    }
}

#[tokio::test]
async fn invalid_input_is_refused_before_the_command_runs() {
    for (name, open) in SANDBOXES {
        let fixture = Fixture::new(*open, &[]).await;
        let err = call(&fixture, &count_lines(), json!({"path": 3}))
            .await
            .unwrap_err();
        assert_eq!(err.kind, "invalid_input", "{name}");
    }
}

#[tokio::test]
async fn long_output_keeps_its_tail() {
    let spec = CommandToolSpec::new(
        "loud",
        "Prints a lot",
        json!({"type": "object"}),
        "for i in 1 2 3 4 5 6 7 8 9; do printf 'line%s\\n' $i; done",
    )
    .with_max_output_chars(6);
    for (name, open) in SANDBOXES {
        let fixture = Fixture::new(*open, &[]).await;
        let output = call(&fixture, &spec, json!({})).await.unwrap();
        assert_eq!(
            output["stdout"],
            json!("[output truncated: showing the last 6 of 54 characters]\nline9\n"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_command_past_its_time_limit_is_killed_with_exit_code_124() {
    let spec = CommandToolSpec::new("slow", "Sleeps", json!({"type": "object"}), "sleep 30")
        .with_timeout_ms(300);
    let fixture = Fixture::new(SANDBOXES[0].1, &[]).await;
    let started = Instant::now();
    let output = call(&fixture, &spec, json!({})).await.unwrap();
    assert_eq!(
        output["exit_code"],
        json!(flue_core::sandbox::TIMEOUT_EXIT_CODE)
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// `state: write`: the command reads the state from `FLUE_STATE`, finds it in the file
/// `FLUE_STATE_FILE` names and leaves the new state there; the file is gone after the call. A
/// failing command changes nothing; a file that does not hold an object is `invalid_state`.
/// The call's idempotency key and attempt arrive as variables.
#[tokio::test]
async fn state_write_commands_read_the_state_and_leave_the_new_one_in_their_file() {
    let write = |command: &str| {
        CommandToolSpec::new(
            "note",
            "Writes the state",
            json!({"type": "object"}),
            command,
        )
        .with_state(flue_core::tool::CommandState::Write)
        .with_replay_safe(true)
    };
    for (name, open) in SANDBOXES {
        let mut fixture = Fixture::new(*open, &[]).await;
        let state = flue_core::tool::ToolState::new(Some(json!({"n": 1})), 1);
        fixture.ctx = fixture.ctx.clone().with_state(state.clone());
        fixture.ctx.idempotency_key = "ik_0123".into();
        fixture.ctx.attempt = 2;
        let spec = write(
            r#"echo "$FLUE_STATE $FLUE_IDEMPOTENCY_KEY $FLUE_TOOL_ATTEMPT"; cat "$FLUE_STATE_FILE"; printf '{"n":2}' > "$FLUE_STATE_FILE""#,
        );
        let tool = spec.to_tool().unwrap();
        assert!(tool.meta().replay_safe, "{name}");
        let output = tool.call(json!({}), &fixture.ctx).await.unwrap();
        assert_eq!(
            output["stdout"], "{\"n\":1} ik_0123 2\n{\"n\":1}",
            "{name}: {output}"
        );
        assert_eq!(state.get(), json!({"n": 2}), "{name}");
        let left: Vec<String> = fixture
            .ctx
            .sandbox
            .readdir(&fixture.ctx.cwd)
            .await
            .unwrap()
            .into_iter()
            .filter(|entry| entry.starts_with(".flue-state"))
            .collect();
        assert!(left.is_empty(), "{name}: {left:?}");

        let failing = write(r#"printf '{"n":3}' > "$FLUE_STATE_FILE"; exit 1"#);
        failing
            .to_tool()
            .unwrap()
            .call(json!({}), &fixture.ctx)
            .await
            .unwrap();
        assert_eq!(
            state.get(),
            json!({"n": 2}),
            "{name}: a failing command wrote"
        );

        let bad = write(r#"printf '[1]' > "$FLUE_STATE_FILE""#);
        let err = bad
            .to_tool()
            .unwrap()
            .call(json!({}), &fixture.ctx)
            .await
            .unwrap_err();
        assert_eq!(err.kind, "invalid_state", "{name}: {err:?}");
        assert_eq!(state.get(), json!({"n": 2}), "{name}");
    }
}
