//! `model: false` in an agent file: `flue run` needs `--model`, which then supplies it.

use pretty_assertions::assert_eq;

use crate::{Workspace, stderr, stdout};

fn workspace() -> Workspace {
    let hello = Workspace::hello_world();
    let agent = hello.root().join("agents/hello.md");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(
        &agent,
        text.replace("model: scripted/script.json", "model: false"),
    )
    .unwrap();
    std::fs::write(hello.root().join("flue.toml"), "").unwrap();
    hello
}

#[test]
fn an_agent_with_model_false_runs_on_the_model_given_with_run() {
    let ws = workspace();
    let output = ws.flue(&["run", "hello", "-m", "hi", "--json"]);
    assert!(!output.status.success());
    assert!(
        stdout(&output).contains("\"model_not_configured\""),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    let output = ws.flue(&[
        "run",
        "hello",
        "-m",
        "hi",
        "--model",
        "scripted/script.json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "The greeting file says: Hello, world! Welcome to Flue.\n"
    );
}
