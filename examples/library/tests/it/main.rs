//! Runs the library example as a user would and checks what it prints: the reply on stdout,
//! the tool call and the data the tool emitted on stderr.

use std::process::Command;

#[test]
fn the_example_runs_with_its_initializer_and_its_tool_emitting_data() {
    let output = Command::new(env!("CARGO_BIN_EXE_flue-example-library"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "The weather tool says: {\"celsius\":21,\"city\":\"Lisbon\",\"desk\":\"Lisbon\",\"sky\":\"clear\"}\n"
    );
    assert!(
        stderr.contains("tool call: weather {\"city\":\"Lisbon\"}"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "data: forecast {\"city\":\"Lisbon\",\"icon\":\"sun\",\"next_hours\":[21,22,20]}"
        ),
        "{stderr}"
    );
}
