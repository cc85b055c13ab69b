//! A configured `cwd` (the agent's, or a task's) is where relative paths and commands start:
//! `harness.fs()`, `harness.shell`, `session.fs()`, `session.shell`, the file tools, `bash`
//! and tasks (`TaskOptions::with_cwd`), in every sandbox.

use std::sync::Arc;

use flue_core::{
    AgentConfig, ExecOptions, Harness, PromptOptions, ProviderRegistry, TaskOptions,
    tool::builtin_tool,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::rules::{Reply, RuleProvider};
use crate::sandboxes::SANDBOXES;

/// Replies by calling `read_file` on `note.txt`, then `bash` `pwd; cat note.txt`, then
/// answering with both results.
fn reader() -> Arc<RuleProvider> {
    RuleProvider::new(|seen| {
        let results: Vec<String> = seen
            .messages
            .iter()
            .filter_map(|record| match record {
                flue_core::Record::ToolResult(result) => Some(result.content.clone()),
                _ => None,
            })
            .collect();
        match results.len() {
            0 => Reply::Calls(vec![("read_file", json!({"path": "note.txt"}))]),
            1 => Reply::Calls(vec![("bash", json!({"command": "cat note.txt; pwd"}))]),
            _ => Reply::Text(results.join("\n---\n")),
        }
    })
}

#[tokio::test]
async fn every_path_starts_in_the_configured_cwd() {
    for (name, open) in SANDBOXES {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deeper")).unwrap();
        std::fs::write(dir.path().join("note.txt"), "root note\n").unwrap();
        std::fs::write(dir.path().join("sub/note.txt"), "sub note\n").unwrap();
        std::fs::write(dir.path().join("sub/deeper/note.txt"), "deeper note\n").unwrap();
        let sandbox = open(dir.path().to_path_buf()).await;
        let provider = reader();
        let harness = Harness::builder(
            AgentConfig::new()
                .with_model("test/m")
                .with_cwd("sub")
                .with_tool(builtin_tool("read_file").unwrap())
                .with_tool(builtin_tool("bash").unwrap()),
        )
        .with_providers(ProviderRegistry::new().with_provider(provider.clone()))
        .with_sandbox(sandbox)
        .with_workspace_context(None)
        .build()
        .await
        .unwrap();

        assert_eq!(
            harness.fs().read_file("note.txt").await.unwrap(),
            "sub note\n",
            "{name}"
        );
        let shell = harness
            .shell("cat note.txt", ExecOptions::new())
            .await
            .unwrap();
        assert_eq!(shell.stdout, "sub note\n", "{name}");
        let shell = harness
            .shell("cat note.txt", ExecOptions::new().with_cwd("deeper"))
            .await
            .unwrap();
        assert_eq!(shell.stdout, "deeper note\n", "{name}");

        let session = harness.session("default").await.unwrap();
        assert_eq!(
            session.fs().read_file("note.txt").await.unwrap(),
            "sub note\n",
            "{name}"
        );
        session.fs().write_file("made.txt", b"made").await.unwrap();
        assert!(harness.fs().exists("made.txt").await.unwrap(), "{name}");
        let shell = session
            .shell("cat note.txt", ExecOptions::new())
            .await
            .unwrap();
        assert_eq!(shell.stdout, "sub note\n", "{name}");

        let reply = session
            .prompt("read it", PromptOptions::default())
            .await
            .unwrap();
        let parts: Vec<&str> = reply.text.split("\n---\n").collect();
        assert!(parts[0].contains("sub note"), "{name}: {}", parts[0]);
        assert!(parts[1].starts_with("sub note\n"), "{name}: {}", parts[1]);
        assert!(
            parts[1].trim_end().ends_with("/sub"),
            "{name}: {}",
            parts[1]
        );

        let reply = session
            .task("read it", TaskOptions::default().with_cwd("deeper"))
            .await
            .unwrap();
        let parts: Vec<&str> = reply.text.split("\n---\n").collect();
        assert!(parts[0].contains("deeper note"), "{name}: {}", parts[0]);
        assert!(
            parts[1].starts_with("deeper note\n"),
            "{name}: {}",
            parts[1]
        );
        assert!(
            parts[1].trim_end().ends_with("/sub/deeper"),
            "{name}: {}",
            parts[1]
        );
    }
}
