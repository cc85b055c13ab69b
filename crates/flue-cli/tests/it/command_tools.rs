//! `flue run` on examples/command-tools: tools declared as shell commands in an agent file,
//! run in the sandbox with the model's input passed as data; `flue build` refusing a bad one.

use pretty_assertions::assert_eq;

use crate::{Workspace, stderr, stdout};

#[test]
fn the_example_runs_its_command_tools() {
    let ws = Workspace::example("command-tools");
    let output = ws.flue(&[
        "run",
        "notes",
        "-m",
        "How many lines does the grocery list have?",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "That file has 4 lines.\n");
    let err = stderr(&output);
    assert!(
        err.contains("<- count_lines done: notes/groceries.md, exit code 0, 1 byte\n"),
        "{err}"
    );
    let output = ws.flue(&["run", "notes", "-m", "Which notes mention coffee?"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "These notes mention it:\nnotes/groceries.md\nnotes/ideas.md\n"
    );
}

#[test]
fn a_bad_command_tool_fails_the_build_at_its_line() {
    let ws = Workspace::example("command-tools");
    let agent = ws.root().join("agents/notes.md");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, text.replace("name: find_notes", "name: bash")).unwrap();
    let output = ws.flue(&["build"]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains(
            "agents/notes.md:17: command tool `bash` has the name of a built-in tool: rename \
             it, or list the built-in tool by name"
        ),
        "{err}"
    );
}
