//! Against a server built with the official Python SDK: naming, hints, output schemas,
//! headers and environment.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{PyServer, Wire, call, connect_error, kind_and_message};

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

on_every_wire!(names_are_sanitised_and_hints_follow_the_mcp_defaults);

async fn names_are_sanitised_and_hints_follow_the_mcp_defaults(wire: Wire) {
    let server = PyServer::start(wire, &[]).await;
    let connection = flue_connectors::connect_mcp_server("py.fixture", server.options.clone())
        .await
        .unwrap();
    let tools = connection.tools();
    let listed: Vec<(&str, bool, bool)> = tools
        .iter()
        .map(|tool| (tool.name(), tool.meta().read_only, tool.meta().destructive))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("mcp__py_fixture__add", true, false),
            ("mcp__py_fixture__wipe", false, true),
            ("mcp__py_fixture__append_note", false, false),
            // No annotations: not read-only, destructive (the MCP defaults).
            ("mcp__py_fixture__weird_name_v2", false, true),
            ("mcp__py_fixture__unnamed", false, true),
            ("mcp__py_fixture__env_value", false, true),
            ("mcp__py_fixture__release", false, true),
        ]
    );
    // The SDK declares an output schema for every tool; results are checked against it.
    let results = [
        call(&connection, "mcp__py_fixture__add", json!({"a": 2, "b": 3})).await,
        call(&connection, "mcp__py_fixture__weird_name_v2", json!({})).await,
        call(&connection, "mcp__py_fixture__unnamed", json!({})).await,
    ];
    assert_eq!(
        results,
        [
            Ok("Structured content:\n{\n  \"result\": 5\n}\n\n5".to_owned()),
            Ok("Structured content:\n{\n  \"result\": \"weird\"\n}\n\nweird".to_owned()),
            Ok("Structured content:\n{\n  \"result\": \"nameless\"\n}\n\nnameless".to_owned()),
        ]
    );
    connection.close().await.unwrap();
}

#[tokio::test]
async fn headers_reach_http_servers_and_never_show_in_errors() {
    for wire in [Wire::StreamableHttp, Wire::Sse] {
        let server = PyServer::start(wire, &[("FIXTURE_TOKEN", "tok-123")]).await;
        let with_header = |token: &str| {
            let mut options = server.options.clone();
            if let flue_connectors::McpEndpoint::Http(http) = &mut options.endpoint {
                http.headers
                    .insert("Authorization".to_owned(), format!("Bearer {token}"));
            }
            options
        };
        let connection = flue_connectors::connect_mcp_server("secure", with_header("tok-123"))
            .await
            .unwrap_or_else(|err| panic!("{wire:?}: {err}"));
        assert_eq!(
            call(&connection, "mcp__secure__add", json!({"a": 1, "b": 1})).await,
            Ok("Structured content:\n{\n  \"result\": 2\n}\n\n2".to_owned())
        );
        connection.close().await.unwrap();

        let refused = connect_error("secure", with_header("wrong-token-value")).await;
        let (kind, message) = kind_and_message(&refused);
        assert_eq!(kind, "mcp_start_failed", "{wire:?}: {message}");
        assert!(message.starts_with("mcp server \"secure\": "), "{message}");
        assert!(message.contains("401"), "{wire:?}: {message}");
        assert!(
            !message.contains("wrong-token-value"),
            "{wire:?}: {message}"
        );
        assert!(!format!("{:?}", with_header("wrong-token-value")).contains("wrong-token-value"));
    }
}

#[tokio::test]
async fn a_stdio_server_gets_its_env_and_only_allow_listed_host_variables() {
    let server = PyServer::start(Wire::Stdio, &[("FIXTURE_GREETING", "hello")]).await;
    let connection = flue_connectors::connect_mcp_server("py", server.options.clone())
        .await
        .unwrap();
    let mut values = Vec::new();
    // Cargo sets CARGO_MANIFEST_DIR for this test process; the server must not inherit it.
    for name in ["FIXTURE_GREETING", "CARGO_MANIFEST_DIR"] {
        values.push(call(&connection, "mcp__py__env_value", json!({"name": name})).await);
    }
    let structured = |value: &str| {
        Ok(format!(
            "Structured content:\n{{\n  \"result\": \"{value}\"\n}}\n\n{value}"
        ))
    };
    assert_eq!(values, [structured("hello"), structured("<unset>")]);
    connection.close().await.unwrap();
}
