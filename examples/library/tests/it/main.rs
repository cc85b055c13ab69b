//! Runs the library example as a user would and checks what it prints: the reply on stdout,
//! and on stderr the tool and action calls, the data both emitted and the stored sessions.

use std::process::Command;

#[test]
fn the_example_runs_with_its_initializer_its_tool_and_its_action() {
    let output = Command::new(env!("CARGO_BIN_EXE_flue-example-library"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    // The reply: the model called the tool, handed its answer to the action, whose own
    // session wrote the brief.
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "Your forecast brief: Lisbon: clear skies and 21 \u{b0}C, a fine day by the river.\n"
    );
    for expected in [
        // The custom tool, configured by the initializer for the instance's desk.
        "tool call: weather {\"city\":\"Lisbon\"}",
        "data: forecast {\"city\":\"Lisbon\",\"icon\":\"sun\",\"next_hours\":[21,22,20]}",
        // The action, called like a tool; what it emitted reaches the caller's stream.
        "tool call: brief {\"celsius\":21,\"city\":\"Lisbon\",\"sky\":\"clear\"}",
        "data: brief {\"city\":\"Lisbon\",\"words\":12}",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    // Two stored sessions: the action's own (under its scope's prefix) and the caller's.
    let sessions = stderr
        .lines()
        .find_map(|line| line.strip_prefix("sessions: "))
        .unwrap_or_else(|| panic!("no session listing in:\n{stderr}"));
    let names: Vec<&str> = sessions.split(", ").collect();
    assert_eq!(names.len(), 2, "{sessions}");
    assert!(
        names[0].starts_with("action:") && names[0].ends_with(":brief"),
        "{sessions}"
    );
    assert_eq!(names[1], "default");
}
