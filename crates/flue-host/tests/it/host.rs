//! Loading workspaces, listing agents, opening harnesses per conversation, swapping the set.

use std::sync::Arc;

use flue_core::{DEFAULT_SESSION, MemoryStore, PromptOptions};
use flue_host::{AgentInfo, AgentSet, Env, HarnessOptions, Host};
use pretty_assertions::assert_eq;

use crate::{hello_world, workspace};

fn info(name: &str, description: Option<&str>, model: &str) -> AgentInfo {
    let mut agents = AgentSet::from_workspace(
        workspace(&[(
            &format!("agents/{name}.md"),
            &format!(
                "---\n{}model: {model}\n---\nx\n",
                description.map_or(String::new(), |d| format!("description: {d}\n"))
            ),
        )])
        .path(),
        Env::new(),
    )
    .unwrap()
    .agents();
    agents.remove(0)
}

#[tokio::test]
async fn a_workspace_lists_its_agents_and_runs_a_conversation_on_its_store() {
    let root = hello_world();
    let host = Host::open(AgentSet::from_workspace(root.path(), Env::new()).unwrap()).unwrap();
    assert_eq!(
        host.agents().agents(),
        vec![info(
            "hello",
            Some("Greets the user after reading the workspace's greeting file"),
            "scripted/script.json"
        )]
    );
    for id in ["a", "b"] {
        let opened = host
            .open_harness("hello", id, &HarnessOptions::new())
            .await
            .unwrap();
        let session = opened.harness().session(DEFAULT_SESSION).await.unwrap();
        let reply = session
            .prompt("hello", PromptOptions::default())
            .await
            .unwrap();
        assert!(
            reply.text.starts_with("The greeting file says:"),
            "{}",
            reply.text
        );
        drop(session);
        assert_eq!(opened.close().await, Vec::<String>::new());
    }
    assert!(root.path().join(".flue/flue.db").is_file());
    assert_eq!(host.store().list("a").await.unwrap().len(), 1);
    assert_eq!(host.store().list("b").await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_unknown_agent_names_the_known_ones() {
    let root = hello_world();
    let agents = AgentSet::from_workspace(root.path(), Env::new()).unwrap();
    let err = agents
        .open(
            "nobody",
            "x",
            Arc::new(MemoryStore::new()),
            &HarnessOptions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unknown_agent");
    assert_eq!(
        err.to_string(),
        format!(
            "unknown agent \"nobody\": no agents/nobody.md in {} (agents: hello)",
            root.path().display()
        )
    );
}

#[tokio::test]
async fn a_reload_swaps_the_agents_for_harnesses_opened_later() {
    let first = hello_world();
    let second = workspace(&[
        (
            "agents/echo.md",
            "---\nmodel: scripted/s.json\n---\nEcho.\n",
        ),
        (
            "s.json",
            r#"{"rules":[{"reply":{"text":"echo: {{user}}"}}]}"#,
        ),
    ]);
    let host = Host::with_store(
        AgentSet::from_workspace(first.path(), Env::new()).unwrap(),
        Arc::new(MemoryStore::new()),
    );
    let before = host
        .open_harness("hello", "x", &HarnessOptions::new())
        .await
        .unwrap();
    let old = host.replace_agents(AgentSet::from_workspace(second.path(), Env::new()).unwrap());
    assert_eq!(old.agents()[0].name, "hello");
    let err = host
        .open_harness("hello", "y", &HarnessOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unknown_agent");
    let after = host
        .open_harness("echo", "y", &HarnessOptions::new())
        .await
        .unwrap();
    let reply = after
        .harness()
        .session(DEFAULT_SESSION)
        .await
        .unwrap()
        .prompt("ping", PromptOptions::default())
        .await
        .unwrap();
    assert_eq!(reply.text, "echo: ping");
    // The harness opened before the reload keeps its agent.
    assert_eq!(before.harness().agent().name, "hello");
    before.close().await;
    after.close().await;
}

#[test]
fn env_files_are_read_below_the_given_variables_and_errors_name_the_line() {
    let root = workspace(&[
        (".env", "KEY=file\nOTHER=file\n"),
        ("bad.env", "A=1\noops\n"),
    ]);
    let env = Env::for_root([("KEY".to_owned(), "given".to_owned())], root.path(), None).unwrap();
    assert_eq!(
        (env.get("KEY"), env.get("OTHER")),
        (Some("given".to_owned()), Some("file".to_owned()))
    );
    let bad = root.path().join("bad.env");
    let err = Env::for_root([], root.path(), Some(&bad)).unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "invalid_env_file",
            format!("in env file {}: line 2: expected KEY=VALUE", bad.display())
        )
    );
}

#[tokio::test]
async fn a_provider_key_comes_from_the_env_not_the_process() {
    let root = workspace(&[(
        "agents/a.md",
        "---\nmodel: anthropic/claude-sonnet-4-6\n---\nx\n",
    )]);
    let agents = AgentSet::from_workspace(root.path(), Env::new()).unwrap();
    let err = agents
        .open(
            "a",
            "x",
            Arc::new(MemoryStore::new()),
            &HarnessOptions::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "missing_api_key");
    let env = Env::from_vars([("ANTHROPIC_API_KEY".to_owned(), "k".to_owned())]);
    let agents = AgentSet::from_workspace(root.path(), env).unwrap();
    let opened = agents
        .open(
            "a",
            "x",
            Arc::new(MemoryStore::new()),
            &HarnessOptions::new(),
        )
        .await
        .unwrap();
    opened.close().await;
}

#[tokio::test]
async fn the_google_key_is_read_from_gemini_api_key_or_else_google_api_key() {
    let root = workspace(&[(
        "agents/a.md",
        "---\nmodel: google/gemini-2.5-flash\n---\nx\n",
    )]);
    let open = |env: Env| {
        let agents = AgentSet::from_workspace(root.path(), env).unwrap();
        async move {
            agents
                .open(
                    "a",
                    "x",
                    Arc::new(MemoryStore::new()),
                    &HarnessOptions::new(),
                )
                .await
        }
    };
    let err = open(Env::new()).await.unwrap_err();
    assert_eq!(err.kind(), "missing_api_key");
    assert!(err.to_string().contains("GEMINI_API_KEY"), "{err}");
    for var in ["GEMINI_API_KEY", "GOOGLE_API_KEY"] {
        let env = Env::from_vars([(var.to_owned(), "k".to_owned())]);
        open(env).await.unwrap().close().await;
    }
}

#[tokio::test]
async fn a_host_is_the_agent_registry_of_a_submission_runtime() {
    let root = hello_world();
    let store = Arc::new(flue_store::SqliteStore::open(&root.path().join("db.sqlite")).unwrap());
    let host = Arc::new(Host::with_store(
        AgentSet::from_workspace(root.path(), Env::new()).unwrap(),
        Arc::clone(&store) as Arc<dyn flue_core::store::DynSessionStore>,
    ));
    assert_eq!(host.preflight("hello").await.unwrap(), Vec::<String>::new());
    assert_eq!(
        flue_core::AgentRegistry::agent_names(host.as_ref()),
        vec!["hello".to_owned()]
    );
    let runtime = flue_core::AgentRuntime::builder(
        store,
        Arc::clone(&host) as Arc<dyn flue_core::AgentRegistry>,
    )
    .start()
    .await
    .unwrap();
    let mut replies = Vec::new();
    for id in ["one", "two"] {
        let key = flue_core::ConversationKey::new("hello", id);
        let receipt = runtime
            .dispatch(
                &key,
                flue_core::DeliveredMessage::user("hello"),
                Default::default(),
            )
            .await
            .unwrap();
        replies.push(runtime.read(&receipt.submission_id).await.unwrap());
    }
    assert!(
        replies
            .iter()
            .all(|reply| reply.starts_with("The greeting file says:")),
        "{replies:?}"
    );
    let unknown = runtime
        .dispatch(
            &flue_core::ConversationKey::new("nobody", "x"),
            flue_core::DeliveredMessage::user("hi"),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), "agent_not_found");
    runtime.shutdown().await.unwrap();
    assert_eq!(host.close().await, Vec::<String>::new());
}
