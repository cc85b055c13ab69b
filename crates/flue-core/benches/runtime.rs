//! In-process benchmarks: per-turn overhead of the agent loop and session append cost.
//!
//! Run with `cargo bench -p flue-core --bench runtime` (or `cargo xtask bench`). Prints one
//! line per figure; BENCHMARKS.md records them with the command that produced them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]
#![allow(
    missing_docs,
    clippy::print_stdout,
    reason = "a benchmark binary reports on stdout"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    AgentConfig, AgentProfile, Harness, LocalSandbox, MemoryStore, PromptOptions, ProviderRegistry,
    Record, Redactor, ScriptedProvider, StoredRecord, TaskOptions, UserMessage,
    store::{DynSessionStore, SessionKey},
};
use flue_store::SqliteStore;

const SCRIPT: &str = r#"{
  "rules": [
    {"when": {"tool_result": "read_file"}, "reply": {"text": "The file says: {{tool_result}}"}},
    {"when": {"user_contains": "read"}, "reply": {"tool_calls": [{"name": "read_file", "input": {"path": "note.txt"}}]}},
    {"reply": {"text": "You said: {{user}}"}}
  ]
}"#;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        turn_overhead("memory", Arc::new(MemoryStore::new()), "hello", 200).await;
        let dir = tempfile::tempdir().unwrap();
        let sqlite = Arc::new(SqliteStore::open(&dir.path().join("flue.db")).unwrap());
        turn_overhead("sqlite", sqlite.clone(), "hello", 200).await;
        turn_overhead("sqlite", sqlite, "read the note", 200).await;
        for existing in [10u64, 10_000] {
            append_cost(existing, 500).await;
        }
        task_overhead(200).await;
    });
    redaction(30);
}

/// Redacting 1 MiB of tool output with 20 known secrets: building the redactor, output with
/// no secret in it, and output with 200 of them in assorted transforms.
fn redaction(n: u32) {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let secrets: Vec<String> = (0..20)
        .map(|idx| {
            let body: String = (0..40)
                .map(|_| char::from(ALPHABET[(next() % 62) as usize]))
                .collect();
            format!("sk-{idx:02}-{body}")
        })
        .collect();
    let mut samples = Vec::with_capacity(n as usize);
    let mut redactor = Redactor::default();
    for _ in 0..n {
        let started = Instant::now();
        redactor = Redactor::new(&secrets).unwrap();
        samples.push(started.elapsed());
    }
    report("redactor build, 20 secrets of 46 characters", &mut samples);

    let mut clean = String::with_capacity(1 << 20);
    let mut line_idx = 0u64;
    while clean.len() < 1 << 20 {
        line_idx += 1;
        clean.push_str(&format!(
            "2026-11-24T10:00:00Z INFO request id={:016x} GET /api/v1/items/{line_idx} \
             status=200 bytes={} took {} ms\n",
            next(),
            next() % 100_000,
            next() % 1000
        ));
    }
    clean.truncate(1 << 20);
    let mut leaky = clean.clone();
    for idx in 0..200 {
        let secret = &secrets[idx % secrets.len()];
        let form = match idx % 4 {
            0 => secret.clone(),
            1 => secret.to_uppercase(),
            2 => hex_of(secret),
            _ => secret[..secret.len() / 2].to_owned(),
        };
        let at = (idx * (leaky.len() / 200)).min(leaky.len());
        let at = (0..=at)
            .rev()
            .find(|&at| leaky.is_char_boundary(at))
            .unwrap();
        leaky.insert_str(at, &form);
    }
    for (label, text) in [("no secret in it", &clean), ("200 secrets in it", &leaky)] {
        let mut samples = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let started = Instant::now();
            let redacted = redactor.redact(text);
            samples.push(started.elapsed());
            std::hint::black_box(redacted);
        }
        report(&format!("redact 1 MiB of output, {label}"), &mut samples);
    }
}

fn hex_of(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// Mean wall time of one `session.task` (a child session created and run for one scripted
/// turn, memory store), next to the same turn as a `prompt`.
async fn task_overhead(n: u32) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.json"), SCRIPT).unwrap();
    let providers =
        ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path())));
    let agent = AgentConfig::new()
        .with_model("scripted/script.json")
        .with_subagent(AgentProfile::new("helper").with_instructions("Help."));
    let harness = Harness::builder(agent)
        .with_store(Arc::new(MemoryStore::new()))
        .with_providers(providers)
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap();
    let session = harness.session("default").await.unwrap();
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let started = Instant::now();
        session
            .task("hello", TaskOptions::default().with_agent("helper"))
            .await
            .unwrap();
        samples.push(started.elapsed());
    }
    report(
        "task operation (memory store, subagent without tools, one text turn)",
        &mut samples,
    );
    // The same turn as a prompt of an agent like the subagent, on a fresh session each time.
    let plain = Harness::builder(
        AgentConfig::new()
            .with_model("scripted/script.json")
            .with_instructions("Help."),
    )
    .with_store(Arc::new(MemoryStore::new()))
    .with_providers(
        ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path()))),
    )
    .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
    .build()
    .await
    .unwrap();
    let mut samples = Vec::with_capacity(n as usize);
    for idx in 0..n {
        let session = plain.session(&format!("s{idx}")).await.unwrap();
        let started = Instant::now();
        session
            .prompt("hello", PromptOptions::default())
            .await
            .unwrap();
        samples.push(started.elapsed());
    }
    report(
        "prompt operation (memory store, agent without tools, one text turn)",
        &mut samples,
    );
}

/// Mean wall time of one prompt operation (scripted model, no network) on a fresh session.
async fn turn_overhead(store_name: &str, store: Arc<dyn DynSessionStore>, message: &str, n: u32) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("script.json"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("note.txt"), "benchmarks are data").unwrap();
    let providers =
        ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(dir.path())));
    let agent = AgentConfig::new()
        .with_model("scripted/script.json")
        .with_tools(flue_core::tool::builtin_tools(&["read_file".to_owned()]).unwrap());
    let harness = Harness::builder(agent)
        .with_store(store)
        .with_providers(providers)
        .with_sandbox(Arc::new(LocalSandbox::new(dir.path()).unwrap()))
        .build()
        .await
        .unwrap();
    let mut samples = Vec::with_capacity(n as usize);
    for idx in 0..n {
        // A fresh session per sample keeps history length constant across samples.
        let session = harness.session(&format!("s{idx}")).await.unwrap();
        let started = Instant::now();
        session
            .prompt(message, PromptOptions::default())
            .await
            .unwrap();
        samples.push(started.elapsed());
    }
    report(
        &format!("prompt operation ({store_name} store, {message:?})"),
        &mut samples,
    );
}

/// Mean wall time of appending one turn (user + assistant records) to a SQLite session that
/// already holds `existing` records.
async fn append_cost(existing: u64, n: u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("flue.db")).unwrap();
    let key = SessionKey::new("bench", "default");
    store.create(&key).await.unwrap();
    let filler: Vec<StoredRecord> = (0..existing)
        .map(|idx| {
            record(&format!(
                "filler message number {idx} with some words in it"
            ))
        })
        .collect();
    let mut version = 0;
    for chunk in filler.chunks(1_000) {
        version = store.append(&key, version, chunk).await.unwrap();
    }
    let turn = vec![record("a new question"), record("a new answer")];
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let started = Instant::now();
        version = store.append(&key, version, &turn).await.unwrap();
        samples.push(started.elapsed());
    }
    report(
        &format!("sqlite append of one turn at {existing} records"),
        &mut samples,
    );
}

fn record(text: &str) -> StoredRecord {
    StoredRecord::new(Record::User(UserMessage::text(text)), 0)
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let total: Duration = samples.iter().sum();
    let mean = total / u32::try_from(samples.len()).unwrap();
    let median = samples[samples.len() / 2];
    let p95 = samples[samples.len() * 95 / 100];
    println!(
        "{label}: mean {:.1} us, median {:.1} us, p95 {:.1} us (n={})",
        micros(mean),
        micros(median),
        micros(p95),
        samples.len()
    );
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
