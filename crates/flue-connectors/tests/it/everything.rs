//! Against `@modelcontextprotocol/server-everything` over stdio, streamable HTTP and SSE.
//!
//! Every check runs once per wire, through `on_every_wire!`.

use std::time::Duration;

use flue_core::{ToolError, tool::Ownership};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{Everything, Wire, call, call_until_answered, tool};

/// Instantiates the async check `$check(wire)` once per wire, as a module of three tests.
macro_rules! on_every_wire {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            use crate::support::Wire;

            #[tokio::test]
            async fn stdio() {
                super::$check(Wire::Stdio).await;
            }

            #[tokio::test]
            async fn streamable_http() {
                super::$check(Wire::StreamableHttp).await;
            }

            #[tokio::test]
            async fn sse() {
                super::$check(Wire::Sse).await;
            }
        }
    )*};
}

on_every_wire!(
    lists_every_tool_with_its_hints,
    calls_text_image_structured_and_resource_tools,
    an_error_result_is_a_tool_error_and_bad_input_never_reaches_the_server,
    progress_resets_the_timeout_and_a_timeout_leaves_the_server_usable,
    closing_the_connection_stops_its_tools,
);

async fn lists_every_tool_with_its_hints(wire: Wire) {
    let server = Everything::start(wire).await;
    let connection = server.connect().await;
    assert_eq!(connection.name(), "everything");
    let tools = connection.tools();
    let listed: Vec<(&str, bool, bool)> = tools
        .iter()
        .map(|tool| (tool.name(), tool.meta().read_only, tool.meta().destructive))
        .collect();
    let read_only = |name| (name, true, false);
    let writes = |name| (name, false, false);
    assert_eq!(
        listed,
        vec![
            read_only("mcp__everything__echo"),
            read_only("mcp__everything__get-annotated-message"),
            read_only("mcp__everything__get-env"),
            read_only("mcp__everything__get-resource-links"),
            read_only("mcp__everything__get-resource-reference"),
            read_only("mcp__everything__get-structured-content"),
            read_only("mcp__everything__get-sum"),
            read_only("mcp__everything__get-tiny-image"),
            writes("mcp__everything__gzip-file-as-resource"),
            writes("mcp__everything__toggle-simulated-logging"),
            writes("mcp__everything__toggle-subscriber-updates"),
            read_only("mcp__everything__trigger-long-running-operation"),
            writes("mcp__everything__simulate-research-query"),
        ]
    );
    assert!(
        connection
            .tools()
            .iter()
            .all(|tool| tool.meta().ownership == Ownership::Mcp)
    );
    let echo = tool(&connection, "mcp__everything__echo");
    assert_eq!(
        echo.description(),
        "MCP tool \"echo\" from server \"everything\". Title: Echo Tool. Echoes back the input string"
    );
    assert_eq!(
        echo.input_schema(),
        &json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"message": {"type": "string", "description": "Message to echo"}},
            "required": ["message"]
        })
    );
    connection.close().await.unwrap();
}

async fn calls_text_image_structured_and_resource_tools(wire: Wire) {
    let server = Everything::start(wire).await;
    let connection = server.connect().await;
    let calls = [
        ("mcp__everything__echo", json!({"message": "hi"})),
        ("mcp__everything__get-sum", json!({"a": 2, "b": 3})),
        ("mcp__everything__get-tiny-image", json!({})),
        (
            "mcp__everything__get-structured-content",
            json!({"location": "Chicago"}),
        ),
        ("mcp__everything__get-resource-links", json!({"count": 2})),
        (
            "mcp__everything__gzip-file-as-resource",
            json!({"name": "x.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resource"}),
        ),
    ];
    let mut results = Vec::new();
    for (name, input) in calls {
        results.push(call(&connection, name, input).await);
    }
    let expected: Vec<Result<String, ToolError>> = [
        "Echo: hi",
        "The sum of 2 and 3 is 5.",
        "Here's the image you requested:\n\n[Image: image/png, 5380 base64 chars]\n\nThe image above is the MCP logo.",
        "Structured content:\n{\n  \"conditions\": \"Light rain / drizzle\",\n  \"humidity\": 82,\n  \"temperature\": 36\n}\n\n{\"temperature\":36,\"conditions\":\"Light rain / drizzle\",\"humidity\":82}",
        "Here are 2 resource links to resources available in this server:\n\n\
         [Resource link: Blob Resource 1 (demo://resource/dynamic/blob/1) - Resource 1: plaintext resource]\n\n\
         [Resource link: Text Resource 2 (demo://resource/dynamic/text/2) - Resource 2: plaintext resource]",
        "[Resource: demo://resource/session/x.gz, application/gzip, 36 base64 chars]",
    ]
    .into_iter()
    .map(|text| Ok(text.to_owned()))
    .collect();
    assert_eq!(results, expected);
    connection.close().await.unwrap();
}

async fn an_error_result_is_a_tool_error_and_bad_input_never_reaches_the_server(wire: Wire) {
    let server = Everything::start(wire).await;
    let connection = server.connect().await;
    let gzip = "mcp__everything__gzip-file-as-resource";
    assert_eq!(
        call(&connection, gzip, json!({"data": "ftp://example.com/file"})).await,
        Err(ToolError::new(
            "mcp_tool_error",
            "Error processing file ftp://example.com/file: Unsupported URL protocol for \
             ftp://example.com/file. Only http, https, and data URLs are supported."
        ))
    );
    assert_eq!(
        call(&connection, "mcp__everything__echo", json!({"text": "hi"})).await,
        Err(ToolError::invalid_input(
            "invalid input for mcp__everything__echo: \"message\" is a required property. \
             Fix the arguments to match the tool's schema and retry."
        ))
    );
    // The server is still there.
    assert_eq!(
        call(
            &connection,
            "mcp__everything__echo",
            json!({"message": "still here"})
        )
        .await,
        Ok("Echo: still here".to_owned())
    );
    connection.close().await.unwrap();
}

async fn progress_resets_the_timeout_and_a_timeout_leaves_the_server_usable(wire: Wire) {
    // Against a 1.5 second timeout: twenty seconds of work (far past the timeout, however busy
    // the machine), then three seconds reported in thirty steps, 0.1 s apart (a fifteenth of
    // the timeout: a busy machine delays a step that much only rarely).
    let endless = json!({"duration": 20, "steps": 1});
    let work = json!({"duration": 3, "steps": 30});
    let long = "mcp__everything__trigger-long-running-operation";
    let mut server = Everything::start(wire).await;
    server.options = server.options.with_timeout(Duration::from_millis(1500));

    let strict = server.connect().await;
    let timed_out = call(&strict, long, endless).await.unwrap_err();
    assert_eq!(timed_out.kind, "mcp_timeout");
    assert_eq!(
        timed_out.message,
        "mcp server \"everything\": tools/call `trigger-long-running-operation` got no answer \
         within 1.5 s; the server may be overloaded, or raise the timeout"
    );
    assert_eq!(
        call_until_answered(
            &strict,
            "mcp__everything__echo",
            json!({"message": "after"})
        )
        .await,
        Ok("Echo: after".to_owned())
    );
    strict.close().await.unwrap();

    server.options = server.options.with_reset_timeout_on_progress();
    let patient = server.connect().await;
    assert_eq!(
        call(&patient, long, work).await,
        Ok("Long running operation completed. Duration: 3 seconds, Steps: 30.".to_owned())
    );
    patient.close().await.unwrap();
}

/// A connection whose server may ask questions (an elicitor is set) times its requests itself,
/// so that a question waiting for a person stops the clock: the same timeout, the same error,
/// and progress still restarts it.
#[tokio::test]
async fn a_connection_that_answers_questions_keeps_its_timeouts() {
    // As above: work far past the timeout, then steps a fifteenth of it apart.
    let endless = json!({"duration": 20, "steps": 1});
    let work = json!({"duration": 3, "steps": 30});
    let long = "mcp__everything__trigger-long-running-operation";
    let mut server = Everything::start(Wire::StreamableHttp).await;
    server.options = server
        .options
        .with_timeout(Duration::from_millis(1500))
        .with_elicitor(std::sync::Arc::new(flue_connectors::AcceptDefaults));
    let strict = server.connect().await;
    let timed_out = call(&strict, long, endless).await.unwrap_err();
    assert_eq!(
        (timed_out.kind.as_str(), timed_out.message.as_str()),
        (
            "mcp_timeout",
            "mcp server \"everything\": tools/call `trigger-long-running-operation` got no \
             answer within 1.5 s; the server may be overloaded, or raise the timeout"
        )
    );
    strict.close().await.unwrap();
    server.options = server.options.with_reset_timeout_on_progress();
    let patient = server.connect().await;
    assert_eq!(
        call(&patient, long, work).await,
        Ok("Long running operation completed. Duration: 3 seconds, Steps: 30.".to_owned())
    );
    patient.close().await.unwrap();
}

async fn closing_the_connection_stops_its_tools(wire: Wire) {
    let server = Everything::start(wire).await;
    let connection = server.connect().await;
    let echo = tool(&connection, "mcp__everything__echo");
    connection.close().await.unwrap();
    let err = echo
        .call(json!({"message": "anyone?"}), &crate::support::context())
        .await
        .unwrap_err();
    assert_eq!(err.kind, "mcp_server_closed");
}
