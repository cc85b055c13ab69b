//! The console's access modes in process, as an embedder mounts them with `console_app`: a
//! read-only console refuses writes sent from its own page and nothing else; a console with a
//! token serves its page and assets to anyone and its data routes only with the token.

use axum::body::Body;
use axum::http::Request;
use flue_server::{BuildStatus, ConsoleAccess, DevConsole, ServerConfig, console_app, router};
use serde_json::json;
use tower::ServiceExt;

use crate::host::{call, durable_runtime, get};

/// A build status as the assembly layer publishes it (an object; its fields do not matter here).
fn status() -> BuildStatus {
    BuildStatus {
        generation: 1,
        body: json!({"ok": true, "agents": []}),
    }
}

fn message() -> Body {
    Body::from(json!({"kind": "user", "body": "hi"}).to_string())
}

#[tokio::test]
async fn a_read_only_console_refuses_writes_from_its_page_only() {
    let runtime = durable_runtime().await;
    let console = DevConsole::fixed(runtime.clone(), status()).with_access(ConsoleAccess::ReadOnly);
    let app = console_app(router(runtime, ServerConfig::default()), console);

    for (name, value) in [
        ("origin", "http://console.local:3000"),
        ("sec-fetch-site", "same-origin"),
    ] {
        let reply = call(
            &app,
            Request::post("/agents/plain/c1")
                .header("host", "console.local:3000")
                .header("content-type", "application/json")
                .header(name, value)
                .body(message())
                .unwrap(),
        )
        .await;
        assert_eq!(
            (reply.status, reply.error_type()),
            (403, "read_only".to_owned()),
            "{name}"
        );
    }
    // Another site's page is the guard's business (`serve` applies it), and a client without
    // a page keeps the protocol.
    let reply = call(
        &app,
        Request::post("/agents/plain/c1")
            .header("host", "console.local:3000")
            .header("content-type", "application/json")
            .header("origin", "https://app.example.com")
            .body(message())
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, 202);
    let reply = call(
        &app,
        Request::post("/agents/plain/c2")
            .header("content-type", "application/json")
            .body(message())
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, 202);
    // Reading from the page works.
    let state = get(&app, "/_flue/dev/state").await;
    assert_eq!(state.status, 200);
    assert_eq!(state.json()["access"], "read_only");
    let listed = get(&app, "/_flue/dev/conversations?q=plain").await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["total"], 2);
}

#[tokio::test]
async fn a_token_console_serves_its_page_to_anyone_and_its_data_with_the_token() {
    let runtime = durable_runtime().await;
    let token = "console-token-0123456789";
    let console = DevConsole::fixed(runtime.clone(), status())
        .with_access(ConsoleAccess::Token(token.to_owned()));
    let config = ServerConfig {
        token: Some(token.to_owned()),
        ..ServerConfig::default()
    };
    let app = console_app(router(runtime, config), console);
    for path in [
        "/",
        "/_flue/dev/console.css",
        "/_flue/dev/console.js",
        "/_flue/dev/access.js",
        "/_flue/dev/list.js",
        "/_flue/dev/list.css",
        "/_flue/dev/studio.js",
        "/_flue/dev/studio.css",
    ] {
        assert_eq!(get(&app, path).await.status, 200, "{path}");
    }
    for path in [
        "/_flue/dev/state",
        "/_flue/dev/conversations",
        "/_flue/dev/transcript/plain/c1",
        "/_flue/dev/live/plain/c1",
        "/_flue/dev/hint?message=x",
    ] {
        let reply = get(&app, path).await;
        assert_eq!(
            (reply.status, reply.error_type()),
            (401, "unauthorized".to_owned()),
            "{path}"
        );
        // The head only: the live route's body is a stream that does not end.
        let response = app
            .clone()
            .oneshot(
                Request::get(path)
                    .header("authorization", format!("bearer {token}"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path} with the token");
    }
}
