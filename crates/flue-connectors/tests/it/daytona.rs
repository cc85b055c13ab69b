//! Tests: `DaytonaSandbox` against the fake Daytona service — the shared contract, and the
//! sandbox lifecycle (create, wait, reuse, delete) and authentication.

use std::sync::Arc;

use flue_connectors::{DaytonaConfig, DaytonaSandbox};
use flue_core::{ExecOptions, Sandbox};
use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;

use crate::daytona_fake::{FAKE_KEY, FakeDaytona};
use crate::sandbox_contract::{Backend, run_ok};

mod contract {
    crate::sandbox_contract::sandbox_contract!(super::backend);
}

/// A Daytona sandbox created on a fresh fake; the outside directory is on the host, where
/// the fake runs its commands.
pub async fn backend() -> Backend {
    let fake = FakeDaytona::start().await;
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    let sandbox = DaytonaSandbox::connect(DaytonaConfig::new(FAKE_KEY).with_api_url(&fake.api_url))
        .await
        .unwrap();
    let outside_path = outside.path().to_path_buf();
    Backend {
        sandbox: Arc::new(sandbox),
        outside: outside.path().display().to_string(),
        outside_state: Box::new(move || {
            let dir = outside_path.clone();
            Box::pin(async move {
                let mut names: Vec<String> = std::fs::read_dir(&dir)
                    .unwrap()
                    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                let secret = std::fs::read_to_string(dir.join("secret.txt")).unwrap_or_default();
                (names, secret)
            })
        }),
        _guard: Box::new((fake, outside)),
    }
}

#[tokio::test]
async fn a_created_sandbox_is_started_used_and_deleted() {
    let fake = FakeDaytona::start().await;
    let config = DaytonaConfig::new(FAKE_KEY)
        .with_api_url(&fake.api_url)
        .with_label("team", "agents");
    let sandbox = DaytonaSandbox::connect(config).await.unwrap();
    let id = sandbox.id().to_owned();
    assert_eq!(fake.sandbox_state(&id).as_deref(), Some("started"));
    assert_eq!(
        fake.sandbox_settings(&id),
        Some((json!({"created-by": "flue", "team": "agents"}), true))
    );
    sandbox.write_file("hello.txt", b"hi").await.unwrap();
    assert_eq!(run_ok(&sandbox, "cat hello.txt").await.stdout, "hi");
    sandbox.cleanup().await.unwrap();
    assert_eq!(fake.sandbox_state(&id).as_deref(), Some("destroyed"));

    let log = fake.log();
    let calls: Vec<String> = log
        .iter()
        .filter(|request| request.target.starts_with("/api/"))
        .map(|request| format!("{} {}", request.method, request.target))
        .collect();
    assert_eq!(
        calls,
        vec![
            "POST /api/sandbox".to_owned(),
            format!("GET /api/sandbox/{id}"),
            format!("DELETE /api/sandbox/{id}"),
        ]
    );
    // Every request carried the key in its header, and no URL carries it.
    assert!(log.iter().all(|request| request.authorized));
    assert!(log.iter().all(|request| !request.target.contains(FAKE_KEY)));
}

#[tokio::test]
async fn an_existing_sandbox_is_started_and_kept() {
    let fake = FakeDaytona::start().await;
    let work_dir = fake.add_sandbox("existing", "stopped");
    std::fs::write(work_dir.join("left.txt"), "from before").unwrap();
    let config = DaytonaConfig::new(FAKE_KEY)
        .with_api_url(&fake.api_url)
        .with_sandbox_id("existing")
        .with_network();
    let sandbox = DaytonaSandbox::connect(config).await.unwrap();
    assert_eq!(sandbox.cwd(), work_dir.display().to_string());
    assert_eq!(sandbox.read_file("left.txt").await.unwrap(), "from before");
    sandbox.cleanup().await.unwrap();
    assert_eq!(fake.sandbox_state("existing").as_deref(), Some("started"));
    assert!(
        fake.log()
            .iter()
            .any(|request| request.target == "/api/sandbox/existing/start")
    );
}

#[tokio::test]
async fn a_workspace_inside_the_sandbox_is_created_and_confines_paths() {
    let fake = FakeDaytona::start().await;
    let sandbox = DaytonaSandbox::connect(DaytonaConfig::new(FAKE_KEY).with_api_url(&fake.api_url))
        .await
        .unwrap();
    let project = format!("{}/project", sandbox.cwd());
    sandbox
        .write_file("outside-project.txt", b"x")
        .await
        .unwrap();
    let inner = DaytonaSandbox::connect(
        DaytonaConfig::new(FAKE_KEY)
            .with_api_url(&fake.api_url)
            .with_sandbox_id(sandbox.id())
            .with_workspace(&project),
    )
    .await
    .unwrap();
    assert_eq!(inner.cwd(), project);
    assert_eq!(run_ok(&inner, "pwd").await.stdout, format!("{project}\n"));
    assert_eq!(
        inner
            .read_file("../outside-project.txt")
            .await
            .unwrap_err()
            .kind(),
        "outside_workspace"
    );
}

#[tokio::test]
async fn a_bad_key_is_a_typed_error_without_the_key() {
    let fake = FakeDaytona::start().await;
    let wrong = "dtn_wrong_key_456";
    let err = DaytonaSandbox::connect(DaytonaConfig::new(wrong).with_api_url(&fake.api_url))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "sandbox_unavailable");
    let message = err.to_string();
    assert!(
        message.contains("401") && message.contains("DAYTONA_API_KEY"),
        "{message}"
    );
    assert!(!message.contains(wrong), "{message}");
    assert!(!format!("{err:?}").contains(wrong));
}

#[tokio::test]
async fn an_unreachable_service_is_a_typed_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let err = DaytonaSandbox::connect(
        DaytonaConfig::new(FAKE_KEY).with_api_url(format!("http://127.0.0.1:{port}/api")),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), "sandbox_unavailable");
}

#[tokio::test]
async fn env_names_that_cannot_be_exported_are_refused() {
    let backend = backend().await;
    let err = backend
        .sandbox
        .exec("true", ExecOptions::new().with_env("BAD-NAME", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unsupported");
}
