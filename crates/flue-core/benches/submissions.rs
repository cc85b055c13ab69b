//! Durable-submission benchmarks on a SQLite file: dispatch-to-settled throughput over many
//! conversations, admission latency, and restart-to-resumed time after kill -9.
//!
//! Run with `cargo bench -p flue-core --bench submissions` (or `cargo xtask bench`). Prints one
//! line per figure; BENCHMARKS.md records them with the command that produced them. The
//! restart figure runs this binary again as a child (`FLUE_BENCH_CHILD` set), SIGKILLs it while
//! its submission runs, and times a fresh runtime on the same file until the submission runs
//! again and until it settles.
//!
//! `cargo bench -p flue-core --bench submissions -- scale [N ...]` instead measures a store
//! that already holds N settled conversations (default 0, 100,000 and 1,000,000), written in
//! bulk by SQL copies of one real settled conversation: start-up (open and recover), the
//! periodic recovery scan, idle CPU over 30 s, admission latency and throughput. A store that
//! has served for months must cost what an empty one does.
//!
//! `cargo bench -p flue-core --bench submissions -- long [N ...]` measures what one more
//! message costs in a conversation that already holds N messages with their replies (default
//! 10, 1,000 and 10,000; written in bulk through the store's fenced appends): wall time from
//! `dispatch` to settled and the process's CPU time per message, over messages sent one after
//! the other (each one acquires, runs and releases the conversation, as a client waiting for
//! each reply makes it do). The conversation ends with a compaction summary keeping its last
//! 10 records, as a long one does, so that what the model is sent stays the same; the cost
//! must not grow with N.
//!
//! `cargo bench -p flue-core --bench submissions -- fill DIR N` only writes such a store, to
//! `DIR/flue.db` (for a workspace, `DIR` is its `.flue` folder), for timing other processes
//! on it (`flue serve` start-up).
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

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flue_core::{
    AgentConfig, AgentRuntime, AssistantContent, BatchBody, BoxFuture, ConversationKey,
    DeliveredMessage, DispatchOptions, Harness, ModelProvider, Offset, ProviderRegistry, Record,
    ScriptedProvider, StaticAgents, StopReason, StoredRecord, Usage,
    model::{ModelRequest, ModelTurn, TurnSink},
    record::CompactionSummary,
    store::{Acquire, ConversationStore, FencedAppend, SessionKey, SessionStore},
    submission::SubmissionState,
};
use flue_store::SqliteStore;

const SCRIPT: &str = r#"{"rules": [{"reply": {"text": "You said: {{user}}"}}]}"#;

fn main() {
    if let Ok(dir) = std::env::var("FLUE_BENCH_CHILD") {
        child(Path::new(&dir));
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|arg| arg == "long") {
        let sizes: Vec<u64> = args[at + 1..]
            .iter()
            .filter_map(|arg| arg.replace('_', "").parse().ok())
            .collect();
        let sizes = if sizes.is_empty() {
            vec![10, 1_000, 10_000]
        } else {
            sizes
        };
        plain_fsync("before");
        for earlier in sizes {
            runtime.block_on(long_conversation(earlier, 200));
        }
        plain_fsync("after");
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == "fill") {
        let dir = Path::new(args.get(at + 1).expect("fill DIR N: the folder of flue.db"));
        let settled: u64 = args
            .get(at + 2)
            .and_then(|n| n.replace('_', "").parse().ok())
            .expect("fill DIR N: how many settled conversations");
        std::fs::create_dir_all(dir).unwrap();
        let filled = Instant::now();
        runtime.block_on(fill_settled(dir, settled));
        println!(
            "fill {settled} settled conversations into {}: {:.1} s",
            dir.join("flue.db").display(),
            filled.elapsed().as_secs_f64()
        );
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == "scale") {
        let sizes: Vec<u64> = args[at + 1..]
            .iter()
            .filter_map(|arg| arg.replace('_', "").parse().ok())
            .collect();
        let sizes = if sizes.is_empty() {
            vec![0, 100_000, 1_000_000]
        } else {
            sizes
        };
        plain_fsync("before");
        for settled in sizes {
            runtime.block_on(scale(settled));
        }
        plain_fsync("after");
        return;
    }
    plain_fsync("before");
    runtime.block_on(async {
        throughput(tempfile::tempdir().unwrap().path(), 200, 20).await;
        throughput(tempfile::tempdir().unwrap().path(), 1000, 4).await;
        admission_latency(tempfile::tempdir().unwrap().path(), 2000).await;
    });
    restart_to_resumed(10);
    plain_fsync("after");
}

/// The disk's cost of one durable commit at the time of the run, for reading the figures on a
/// shared machine: `write` of 100 bytes plus `fsync`, 200 times, in a fresh file.
fn plain_fsync(when: &str) {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(dir.path().join("probe")).unwrap();
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        let before = Instant::now();
        file.write_all(&[b'x'; 100]).unwrap();
        file.sync_all().unwrap();
        times.push(before.elapsed());
    }
    times.sort();
    println!(
        "plain write + fsync of 100 bytes ({when}, 200 runs): median {:.3} ms, p99 {:.3} ms",
        times[100].as_secs_f64() * 1000.0,
        times[198].as_secs_f64() * 1000.0,
    );
}

fn scripted_agents(dir: &Path) -> Arc<StaticAgents> {
    std::fs::write(dir.join("script.json"), SCRIPT).unwrap();
    let dir = dir.to_owned();
    Arc::new(StaticAgents::new().with_agent("bench", move || {
        Harness::builder(AgentConfig::new().with_model("scripted/script.json"))
            .with_providers(
                ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(&dir))),
            )
            .with_workspace_context(None)
    }))
}

async fn start(dir: &Path, agents: Arc<StaticAgents>) -> (AgentRuntime, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(&dir.join("flue.db")).unwrap());
    let runtime = AgentRuntime::builder(store.clone(), agents)
        .start()
        .await
        .unwrap();
    (runtime, store)
}

/// `conversations` conversations receive `per_conversation` messages each, all dispatched at
/// once (a client per conversation); timed from the first dispatch to the last settlement.
async fn throughput(dir: &Path, conversations: usize, per_conversation: usize) {
    let (runtime, _store) = start(dir, scripted_agents(dir)).await;
    let started = Instant::now();
    let mut clients = Vec::new();
    for conversation in 0..conversations {
        let runtime = runtime.clone();
        clients.push(tokio::spawn(async move {
            let key = ConversationKey::new("bench", format!("c{conversation}"));
            let mut ids = Vec::new();
            for n in 0..per_conversation {
                let receipt = runtime
                    .dispatch(
                        &key,
                        DeliveredMessage::user(format!("m{n}")),
                        DispatchOptions::default(),
                    )
                    .await
                    .unwrap();
                ids.push(receipt.submission_id);
            }
            for id in ids {
                runtime.read(&id).await.unwrap();
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let elapsed = started.elapsed();
    let total = conversations * per_conversation;
    println!(
        "throughput, {conversations} conversations x {per_conversation} messages: {total} \
         submissions dispatched-to-settled in {:.2} s = {:.0} submissions/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    runtime.shutdown().await.unwrap();
}

/// Wall time of `dispatch` (durable admission, before any model work) while the runtime
/// processes the earlier ones, over 100 conversations.
async fn admission_latency(dir: &Path, n: usize) {
    let (runtime, _store) = start(dir, scripted_agents(dir)).await;
    let mut latencies = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for idx in 0..n {
        let key = ConversationKey::new("bench", format!("c{}", idx % 100));
        let before = Instant::now();
        let receipt = runtime
            .dispatch(
                &key,
                DeliveredMessage::user("hi"),
                DispatchOptions::default(),
            )
            .await
            .unwrap();
        latencies.push(before.elapsed());
        ids.push(receipt.submission_id);
    }
    for id in ids {
        runtime.read(&id).await.unwrap();
    }
    latencies.sort();
    let percentile = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    println!(
        "admission latency ({n} dispatches under load): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        percentile(0.50).as_secs_f64() * 1000.0,
        percentile(0.99).as_secs_f64() * 1000.0,
        percentile(1.0).as_secs_f64() * 1000.0,
    );
    runtime.shutdown().await.unwrap();
}

/// The scale figures on a store holding `settled` settled conversations.
async fn scale(settled: u64) {
    let dir = tempfile::tempdir().unwrap();
    let filled = Instant::now();
    fill_settled(dir.path(), settled).await;
    let size = std::fs::metadata(dir.path().join("flue.db")).unwrap().len();
    println!(
        "scale {settled} settled conversations: filled in {:.1} s, store {:.0} MiB",
        filled.elapsed().as_secs_f64(),
        size as f64 / 1_048_576.0
    );

    let mut starts = Vec::new();
    for _ in 0..5 {
        let before = Instant::now();
        let (runtime, _store) = start(dir.path(), scripted_agents(dir.path())).await;
        starts.push(before.elapsed());
        runtime.shutdown().await.unwrap();
    }
    starts.sort();

    let (runtime, store) = start(dir.path(), scripted_agents(dir.path())).await;
    let mut scans = Vec::new();
    for _ in 0..20 {
        let before = Instant::now();
        let pending = store.pending_conversations().await.unwrap();
        scans.push(before.elapsed());
        assert!(pending.is_empty());
    }
    scans.sort();
    let cpu_before = cpu_time();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle_cpu = cpu_time() - cpu_before;
    runtime.shutdown().await.unwrap();
    println!(
        "scale {settled}: start-up (open + recover) median {:.1} ms, max {:.1} ms; recovery \
         scan median {:.3} ms; idle CPU over 30 s {:.0} ms",
        starts[2].as_secs_f64() * 1000.0,
        starts[4].as_secs_f64() * 1000.0,
        scans[10].as_secs_f64() * 1000.0,
        idle_cpu.as_secs_f64() * 1000.0,
    );
    print!("scale {settled}: ");
    admission_latency(dir.path(), 2000).await;
    print!("scale {settled}: ");
    throughput(dir.path(), 200, 20).await;
}

/// One more message in a conversation of `earlier` messages (and as many replies): `n`
/// messages sent one after the other, each dispatched once the previous one settled.
async fn long_conversation(earlier: u64, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let key = ConversationKey::new("bench", "long");
    fill_conversation(dir.path(), &key, earlier).await;
    let (runtime, _store) = start(dir.path(), scripted_agents(dir.path())).await;
    // Warm-up: the first message after start builds caches of its own.
    for idx in 0..5 {
        let receipt = runtime
            .dispatch(
                &key,
                DeliveredMessage::user(format!("warm {idx}")),
                DispatchOptions::default(),
            )
            .await
            .unwrap();
        runtime.read(&receipt.submission_id).await.unwrap();
    }
    let mut walls = Vec::with_capacity(n);
    let cpu_before = thread_cpu_time();
    for idx in 0..n {
        let before = Instant::now();
        let receipt = runtime
            .dispatch(
                &key,
                DeliveredMessage::user(format!("message {idx}")),
                DispatchOptions::default(),
            )
            .await
            .unwrap();
        let reply = runtime.read(&receipt.submission_id).await.unwrap();
        walls.push(before.elapsed());
        assert_eq!(reply, format!("You said: message {idx}"));
    }
    let cpu = thread_cpu_time() - cpu_before;
    runtime.shutdown().await.unwrap();
    walls.sort();
    let percentile = |p: f64| walls[((walls.len() - 1) as f64 * p) as usize];
    println!(
        "long conversation, {earlier} earlier messages: {n} more, one after the other: \
         dispatch-to-settled p50 {:.3} ms, p99 {:.3} ms; CPU {:.3} ms per message",
        percentile(0.50).as_secs_f64() * 1000.0,
        percentile(0.99).as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0 / n as f64,
    );
}

/// Creates `key` with one message through the runtime, then appends `earlier - 1` more
/// messages with their replies through fenced appends (1,000 pairs per append) as an owner
/// would, so that the conversation holds `earlier` messages and replies, and a compaction
/// summary that keeps the last 10 records.
async fn fill_conversation(dir: &Path, key: &ConversationKey, earlier: u64) {
    let (runtime, store) = start(dir, scripted_agents(dir)).await;
    let receipt = runtime
        .dispatch(
            key,
            DeliveredMessage::user("message"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    runtime.read(&receipt.submission_id).await.unwrap();
    runtime.shutdown().await.unwrap();
    let owner = store.register_owner().await.unwrap();
    let fence = match store
        .acquire(key, owner.owner_id(), Duration::from_secs(30))
        .await
        .unwrap()
    {
        Acquire::Owned(fence) => fence,
        Acquire::Held { owner_id } => panic!("held by {owner_id}"),
    };
    let session = SessionKey::new(key.instance_id(), "default");
    let log = store.load(&session, 0).await.unwrap().unwrap();
    // The real message and reply the runtime stored, copied.
    let pair = log.records.clone();
    let mut version = log.version;
    let mut left = earlier.saturating_sub(1);
    while left > 0 {
        let pairs = left.min(1_000);
        let records: Vec<StoredRecord> = (0..pairs).flat_map(|_| pair.clone()).collect();
        version = store
            .append_fenced(FencedAppend {
                fence: &fence,
                submission_id: None,
                applies_input: false,
                resumes_waiting: false,
                session: &session,
                expected_version: version,
                records: &records,
            })
            .await
            .unwrap();
        left -= pairs;
    }
    // A long conversation is compacted: the model sees a summary and the last messages (what
    // it is sent is bounded; what the runtime keeps is the whole log).
    let summary = StoredRecord::new(
        Record::Compaction(CompactionSummary {
            summary: "The user sent numbered messages; each was repeated back.".into(),
            first_kept: version.saturating_sub(20),
            tokens_before: version * 10,
            usage: None,
        }),
        flue_core::util::now_ms(),
    );
    store
        .append_fenced(FencedAppend {
            fence: &fence,
            submission_id: None,
            applies_input: false,
            resumes_waiting: false,
            session: &session,
            expected_version: version,
            records: &[summary],
        })
        .await
        .unwrap();
    assert!(store.release(&fence).await.unwrap());
}

/// CPU time of every thread of this process, in nanoseconds (`/proc/self/task/*/schedstat`).
fn thread_cpu_time() -> Duration {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path().join("schedstat");
        if let Ok(stat) = std::fs::read_to_string(path) {
            total += stat
                .split_whitespace()
                .next()
                .and_then(|ns| ns.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(total)
}

/// Fills `dir`'s store with `n` settled conversations: one real conversation settles through
/// the runtime, then SQL copies every row of it `n` times under new ids (conversation, its
/// stream, session and records, submission).
async fn fill_settled(dir: &Path, n: u64) {
    let (runtime, store) = start(dir, scripted_agents(dir)).await;
    let key = ConversationKey::new("bench", "template");
    let receipt = runtime
        .dispatch(
            &key,
            DeliveredMessage::user("hi"),
            DispatchOptions::default(),
        )
        .await
        .unwrap();
    runtime.read(&receipt.submission_id).await.unwrap();
    runtime.shutdown().await.unwrap();
    drop(store);
    if n == 0 {
        return;
    }
    let db = rusqlite::Connection::open(dir.join("flue.db")).unwrap();
    let template = key.instance_id();
    // Ids that stored JSON repeats (a stream batch names its submission, a settlement its
    // submission, the creation its uid): each copy gets its own, inside the JSON too, so that
    // every reference in a copy points at the copy's rows.
    let mut inner_ids: Vec<String> = db
        .prepare("SELECT submission_id FROM submissions WHERE instance_id = ?1")
        .unwrap()
        .query_map([&template], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    inner_ids.push(
        db.query_row(
            "SELECT uid FROM conversations WHERE instance_id = ?1",
            [&template],
            |row| row.get(0),
        )
        .unwrap(),
    );
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    db.execute_batch("BEGIN").unwrap();
    for table in tables {
        let columns: Vec<(String, String)> = db
            .prepare(&format!(
                "SELECT name, type FROM pragma_table_info('{table}')"
            ))
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        if !columns.iter().any(|(column, _)| column == "instance_id") {
            continue;
        }
        // The copy's ids: instance `bench:c<k>`, conversation `c<k>`, fresh uid and
        // submission ids (in their columns and inside the JSON of the text columns);
        // everything else as the template wrote it.
        let values: Vec<String> = columns
            .iter()
            .map(|(column, kind)| match column.as_str() {
                "instance_id" => "'bench:c' || k.n".to_owned(),
                "id" if table == "conversations" => "'c' || k.n".to_owned(),
                "uid" | "submission_id" => format!("{column} || '-' || k.n"),
                other if kind.eq_ignore_ascii_case("TEXT") => {
                    inner_ids.iter().fold(format!("t.{other}"), |inner, id| {
                        format!("replace({inner}, '{id}', '{id}-' || k.n)")
                    })
                }
                other => format!("t.{other}"),
            })
            .collect();
        let columns: Vec<String> = columns.into_iter().map(|(column, _)| column).collect();
        db.execute(
            &format!(
                "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < ?2)
                 INSERT INTO {table} ({}) SELECT {} FROM {table} t, k WHERE t.instance_id = ?1",
                columns.join(", "),
                values.join(", ")
            ),
            rusqlite::params![template, i64::try_from(n).unwrap()],
        )
        .unwrap();
    }
    // A submission's message lives in a table keyed by the submission alone.
    db.execute(
        "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < ?2)
         INSERT INTO submission_messages (submission_id, message)
         SELECT m.submission_id || '-' || k.n, m.message FROM submission_messages m, k
         WHERE m.submission_id IN (SELECT submission_id FROM submissions WHERE instance_id = ?1)",
        rusqlite::params![template, i64::try_from(n).unwrap()],
    )
    .unwrap();
    db.execute_batch("COMMIT").unwrap();
}

/// CPU time this process has used (user + system), from `/proc/self/stat` in clock ticks.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// A model that never answers `hang` (the child's) and answers anything else at once.
struct HangModel {
    hang: bool,
}

impl ModelProvider for HangModel {
    fn id(&self) -> &str {
        "hang"
    }

    fn stream_turn<'a>(
        &'a self,
        _request: ModelRequest<'a>,
        _sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        let hang = self.hang;
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(ModelTurn {
                content: vec![AssistantContent::Text {
                    text: "resumed".into(),
                }],
                usage: Usage::default(),
                stop_reason: StopReason::EndTurn,
            })
        })
    }
}

fn hang_agents(hang: bool) -> Arc<StaticAgents> {
    Arc::new(StaticAgents::new().with_agent("bench", move || {
        Harness::builder(AgentConfig::new().with_model("hang/any"))
            .with_providers(ProviderRegistry::new().with_provider(Arc::new(HangModel { hang })))
            .with_workspace_context(None)
    }))
}

/// The child: dispatches one submission whose model hangs, says `RUNNING` once it runs, waits.
fn child(dir: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (runtime, store) = start(dir, hang_agents(true)).await;
        let key = ConversationKey::new("bench", "restart");
        let receipt = runtime
            .dispatch(
                &key,
                DeliveredMessage::user("hang"),
                DispatchOptions::default(),
            )
            .await
            .unwrap();
        loop {
            let info = store
                .submission(&receipt.submission_id)
                .await
                .unwrap()
                .unwrap();
            if info.state == SubmissionState::Running && info.input_applied {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        println!("RUNNING {}", receipt.submission_id);
        std::future::pending::<()>().await;
    });
}

/// kill -9 a process mid-submission, then time a new runtime on the same file until the
/// submission's next attempt starts (resumed) and until it settles.
fn restart_to_resumed(runs: usize) {
    let mut resumed = Vec::new();
    let mut settled = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("FLUE_BENCH_CHILD", dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let submission_id = line.trim().strip_prefix("RUNNING ").unwrap().to_owned();
        child.kill().unwrap();
        child.wait().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let key = ConversationKey::new("bench", "restart");
            let started = Instant::now();
            let (runtime, store) = start(dir.path(), hang_agents(false)).await;
            let mut watch = store.watch_head(&key);
            let mut after = Offset::START;
            let mut resumed_at = None;
            let mut settled_at = None;
            while settled_at.is_none() {
                let page = store.read_stream(&key, after, 100).await.unwrap();
                for batch in &page.batches {
                    match &batch.body {
                        BatchBody::Started { attempt: 2, .. } => {
                            resumed_at.get_or_insert_with(|| started.elapsed());
                        }
                        BatchBody::Settled(settlement)
                            if settlement.submission_id == submission_id =>
                        {
                            settled_at = Some(started.elapsed());
                        }
                        _ => {}
                    }
                }
                after = page.next_offset;
                let _ = tokio::time::timeout(Duration::from_millis(5), watch.changed()).await;
            }
            resumed.push(resumed_at.unwrap());
            settled.extend(settled_at);
            runtime.shutdown().await.unwrap();
        });
    }
    resumed.sort();
    settled.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "restart-to-resumed after kill -9 ({runs} runs): resumed median {:.1} ms (max {:.1} ms), \
         settled median {:.1} ms (max {:.1} ms)",
        ms(resumed[runs / 2]),
        ms(resumed[runs - 1]),
        ms(settled[runs / 2]),
        ms(settled[runs - 1]),
    );
}
