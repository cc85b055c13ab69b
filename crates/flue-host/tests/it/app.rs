//! The serving assembly: a command app runs one message on the workspace store and closes; a
//! server app serves the protocol and swaps its agents on reload; docs/library.md shows the
//! example compiled here.

use std::time::Duration;

use flue_core::{ConversationKey, DeliveredMessage, DispatchOptions, Outcome};
use flue_host::{AgentSet, App, Env, Preflight, RuntimeMode, StoreChoice};
use pretty_assertions::assert_eq;

use crate::{hello_world, workspace};

#[tokio::test]
async fn a_command_app_runs_a_message_on_the_workspace_store_and_closes() {
    let root = hello_world();
    let agents = AgentSet::from_workspace(root.path(), Env::new()).unwrap();
    let app = App::builder(agents)
        .with_preflight(Preflight::Agent("hello".to_owned()))
        .start()
        .await
        .unwrap();
    assert_eq!(app.checks().len(), 1);
    assert_eq!(app.checks()[0].error, None);
    assert!(app.router(flue_server::ServerConfig::default()).is_none());
    let key = ConversationKey::new("hello", "c1");
    let receipt = app
        .runtime()
        .dispatch(
            &key,
            DeliveredMessage::user("hi"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    let settlement = app.runtime().wait(&receipt.submission_id).await.unwrap();
    assert_eq!(settlement.outcome, Outcome::Completed);
    assert_eq!(app.drain(Duration::from_secs(1)).await, 0);
    assert_eq!(app.close().await, Vec::<String>::new());
    assert!(root.path().join(flue_host::DB_PATH).is_file());
}

#[tokio::test]
async fn a_server_app_reports_agents_that_cannot_run_and_swaps_its_agents() {
    let root = workspace(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/s.json\n---\nEcho.\n",
        ),
        (
            "agents/broken.md",
            "---\nmodel: scripted/missing.json\n---\nBroken.\n",
        ),
        (
            "s.json",
            r#"{"rules":[{"reply":{"text":"echo: {{user}}"}}]}"#,
        ),
    ]);
    let agents = AgentSet::from_workspace(root.path(), Env::new()).unwrap();
    let app = App::builder(agents)
        .with_store(StoreChoice::Memory)
        .with_mode(RuntimeMode::Server)
        .with_preflight(Preflight::All)
        .start()
        .await
        .unwrap();
    let failing: Vec<&str> = app
        .checks()
        .iter()
        .filter(|check| check.error.is_some())
        .map(|check| check.agent.as_str())
        .collect();
    assert_eq!(failing, ["broken"]);
    assert_eq!(app.store().description, "memory");
    assert!(app.router(flue_server::ServerConfig::default()).is_some());
    let only_echo = workspace(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/s.json\n---\nEcho.\n",
        ),
        ("s.json", r#"{"rules":[{"reply":{"text":"again"}}]}"#),
    ]);
    let old = app.replace_agents(AgentSet::from_workspace(only_echo.path(), Env::new()).unwrap());
    assert_eq!(old.agents().len(), 2);
    assert_eq!(app.host().agents().agents().len(), 1);
    assert_eq!(app.drain(Duration::from_secs(1)).await, 0);
    old.close().await;
    app.close().await;
}

#[test]
fn docs_library_md_shows_the_serving_example_compiled_here() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/library.md"
    ))
    .unwrap();
    let file = include_str!("library_example.rs");
    let (_header, example) = file.split_once("\n\n").unwrap();
    let fenced = format!("```rust,ignore\n{example}```\n");
    assert!(
        doc.contains(&fenced),
        "docs/library.md must show tests/it/library_example.rs verbatim in a rust,ignore block"
    );
    // A function a program calls: made into a future (never polled) so it counts as used.
    drop(crate::library_example::serve_workspace(
        std::path::Path::new("."),
        "127.0.0.1:0",
        std::future::pending::<()>(),
    ));
}
