//! Misbehaving and unreachable servers: every failure is a typed error naming the server, and
//! a failed call leaves the connection usable when the server is still there.

use std::time::Duration;

use flue_connectors::{McpHttpEndpoint, McpServerOptions, McpStdioCommand, McpTransport};
use flue_core::ToolError;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    call, call_until_answered, connect_error, context, kind_and_message, python, raw_server,
    script, tool,
};

#[tokio::test]
async fn duplicate_adapted_names_are_an_error() {
    let err = connect_error("raw", raw_server("duplicate")).await;
    assert_eq!(
        kind_and_message(&err),
        (
            "mcp_invalid_tools",
            "mcp server \"raw\": tools `a.b` and `a_b` both become `mcp__raw__a_b`; rename one of them on the server".to_owned()
        )
    );
}

#[tokio::test]
async fn nonsense_answers_to_the_handshake_or_the_listing_are_malformed_responses() {
    let mut outcomes = Vec::new();
    for scenario in ["bad-init", "bad-list"] {
        let err = connect_error("raw", raw_server(scenario)).await;
        outcomes.push(kind_and_message(&err));
    }
    assert_eq!(
        outcomes,
        [
            (
                "mcp_malformed_response",
                "mcp server \"raw\": the server's answer to `initialize` is not a valid MCP result"
                    .to_owned()
            ),
            (
                "mcp_malformed_response",
                "mcp server \"raw\": the answer to tools/list is not a tool list".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn pagination_is_followed_and_a_repeated_cursor_is_an_error() {
    let connection = flue_connectors::connect_mcp_server("raw", raw_server("pages"))
        .await
        .unwrap();
    let tools = connection.tools();
    let names: Vec<&str> = tools.iter().map(flue_core::ToolDefinition::name).collect();
    assert_eq!(names, ["mcp__raw__one", "mcp__raw__two", "mcp__raw__three"]);
    connection.close().await.unwrap();

    let err = connect_error("raw", raw_server("cursor-loop")).await;
    assert_eq!(
        kind_and_message(&err),
        (
            "mcp_invalid_tools",
            "mcp server \"raw\": tools/list repeated the pagination cursor \"again\", so the listing would never end; fix the server's pagination".to_owned()
        )
    );
}

#[tokio::test]
async fn error_results_and_output_schemas_become_tool_errors() {
    let connection = flue_connectors::connect_mcp_server("raw", raw_server("calls"))
        .await
        .unwrap();
    let mut results = Vec::new();
    for name in [
        "fail",
        "bad_output",
        "missing_output",
        "good_output",
        "garbled",
    ] {
        results.push(call(&connection, &format!("mcp__raw__{name}"), json!({})).await);
    }
    assert_eq!(
        results,
        [
            Err(ToolError::new("mcp_tool_error", "it broke")),
            Err(ToolError::new(
                "invalid_output",
                "MCP tool `bad_output` returned structured content that does not match its output schema: /count: \"many\" is not of type \"integer\""
            )),
            Err(ToolError::new(
                "invalid_output",
                "MCP tool `missing_output` declares an output schema but returned no structured content"
            )),
            Ok("Structured content:\n{\n  \"count\": 3\n}\n\n{\"count\": 3}".to_owned()),
            Err(ToolError::new(
                "mcp_malformed_response",
                "mcp server \"raw\": the answer to tools/call `garbled` is not a valid tool result"
            )),
        ]
    );
    // None of that broke the connection.
    assert_eq!(
        call(&connection, "mcp__raw__ok", json!({})).await,
        Ok("fine".to_owned())
    );
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_timeout_and_an_abort_leave_the_connection_usable() {
    // The timeout is what is tested, so it is short; the answer after it is waited for, not
    // assumed to come within the same 0.5 s on a busy machine.
    let options = raw_server("calls").with_timeout(Duration::from_millis(500));
    let connection = flue_connectors::connect_mcp_server("raw", options)
        .await
        .unwrap();
    assert_eq!(
        call(&connection, "mcp__raw__hang", json!({})).await,
        Err(ToolError::new(
            "mcp_timeout",
            "mcp server \"raw\": tools/call `hang` got no answer within 0.5 s; the server may be overloaded, or raise the timeout"
        ))
    );
    assert_eq!(
        call_until_answered(&connection, "mcp__raw__ok", json!({})).await,
        Ok("fine".to_owned())
    );
    connection.close().await.unwrap();

    // The abort strikes once the server holds the call (it says so in a file), on a connection
    // whose timeout (generous: it only ends a hung test) cannot fire first.
    let dir = tempfile::TempDir::new().unwrap();
    let mark = dir.path().join("hanging");
    let options = McpServerOptions::new(
        McpStdioCommand::new(python())
            .with_args([script("raw_server.py").as_str(), "calls"])
            .with_env("FIXTURE_HANG_MARK", mark.to_string_lossy()),
    )
    .with_timeout(Duration::from_secs(120));
    let connection = flue_connectors::connect_mcp_server("raw", options)
        .await
        .unwrap();
    let ctx = context();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        while !mark.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    });
    let aborted = tool(&connection, "mcp__raw__hang")
        .call(json!({}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(aborted.kind, "aborted");
    assert_eq!(
        call(&connection, "mcp__raw__ok", json!({})).await,
        Ok("fine".to_owned())
    );
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_server_that_exits_mid_call_is_a_closed_error_with_its_stderr() {
    let connection = flue_connectors::connect_mcp_server("raw", raw_server("calls"))
        .await
        .unwrap();
    let crashed = call(&connection, "mcp__raw__crash", json!({})).await;
    assert_eq!(
        crashed,
        Err(ToolError::new(
            "mcp_server_closed",
            "mcp server \"raw\": the connection closed during tools/call `crash`: the server exited or hung up; a new run reconnects; its stderr ends with:\nfixture: crashing on purpose"
        ))
    );
    let after = call(&connection, "mcp__raw__ok", json!({}))
        .await
        .unwrap_err();
    assert_eq!(after.kind, "mcp_server_closed");
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_server_that_dies_at_start_names_itself_and_hides_secrets() {
    let secret = "s3cret-value-42";
    let options = McpServerOptions::new(
        McpStdioCommand::new(crate::support::python())
            .with_args([crate::support::script("raw_server.py").as_str(), "die"])
            .with_env("FIXTURE_SECRET", secret),
    );
    let err = connect_error("dying", options).await;
    assert_eq!(
        kind_and_message(&err),
        (
            "mcp_start_failed",
            "mcp server \"dying\": the server closed the connection during the MCP handshake; its stderr ends with:\nfixture: cannot start, token [redacted] rejected".to_owned()
        )
    );
}

#[tokio::test]
async fn a_missing_command_is_a_start_error() {
    let options = McpServerOptions::new(McpStdioCommand::new("flue-no-such-mcp-server"));
    let err = connect_error("ghost", options).await;
    assert_eq!(
        kind_and_message(&err),
        (
            "mcp_start_failed",
            "mcp server \"ghost\": cannot start `flue-no-such-mcp-server`: No such file or directory (os error 2); check the command and that it is installed".to_owned()
        )
    );
}

#[tokio::test]
async fn a_working_directory_that_is_not_one_is_named_not_the_command() {
    // As when an agent ran from a bundle file: the file is not a directory to start in.
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("app.flue");
    std::fs::write(&file, "bundle").unwrap();
    for cwd in [file.clone(), dir.path().join("missing")] {
        let options =
            McpServerOptions::new(McpStdioCommand::new(crate::support::python()).with_cwd(&cwd));
        let (kind, message) = kind_and_message(&connect_error("local", options).await);
        assert_eq!(kind, "mcp_start_failed");
        let expected = format!(
            "in {}: that working directory is not a directory",
            cwd.display()
        );
        assert!(message.contains(&expected), "{message}");
        assert!(message.contains("fix the server's `cwd`"), "{message}");
        assert!(!message.contains("installed"), "{message}");
    }
}

#[tokio::test]
async fn unreachable_and_non_mcp_http_servers_are_start_errors() {
    // A port nobody listens on.
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    // A server that answers everything with 404.
    let not_found = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let not_found_port = not_found.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = not_found.accept().await {
            let mut buffer = [0u8; 4096];
            let _ = socket.read(&mut buffer).await;
            let _ = socket
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found")
                .await;
        }
    });
    let mut outcomes = Vec::new();
    for port in [closed_port, not_found_port] {
        for transport in [McpTransport::StreamableHttp, McpTransport::Sse] {
            let url = format!("http://127.0.0.1:{port}/mcp");
            let options =
                McpServerOptions::new(McpHttpEndpoint::new(url).with_transport(transport))
                    .with_timeout(Duration::from_secs(10));
            let err = connect_error("remote", options).await;
            let (kind, message) = kind_and_message(&err);
            let message = message
                .replace(&closed_port.to_string(), "CLOSED")
                .replace(&not_found_port.to_string(), "HTTP404");
            outcomes.push((kind, message));
        }
    }
    let start_failed = |message: &str| {
        (
            "mcp_start_failed",
            format!("mcp server \"remote\": {message}"),
        )
    };
    assert_eq!(
        outcomes,
        [
            start_failed(
                "cannot reach http://127.0.0.1:CLOSED/mcp: Client error: error sending request for url (http://127.0.0.1:CLOSED/mcp)"
            ),
            start_failed(
                "cannot connect to http://127.0.0.1:CLOSED/mcp: cannot open the event stream: error sending request for url (http://127.0.0.1:CLOSED/mcp): client error (Connect): tcp connect error: Connection refused (os error 111)"
            ),
            start_failed(
                "cannot reach http://127.0.0.1:HTTP404/mcp: unexpected server response: HTTP 404 Not Found: not found"
            ),
            start_failed(
                "cannot connect to http://127.0.0.1:HTTP404/mcp: opening the event stream answered 404 Not Found; check the url (legacy servers usually serve it at /sse) and the headers"
            ),
        ]
    );
}
