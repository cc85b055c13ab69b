//! OpenTelemetry export end to end: a real OTLP/HTTP receiver on loopback (axum, decoding the
//! official protobuf messages) receives the spans and metrics of a real `flue run` (a task
//! and tool calls), of a `flue serve` request that carries a W3C `traceparent`, and of that
//! request's submission recovered by a new `flue serve` after the first was killed (SIGKILL),
//! and of a schedule's tick (its span carries the schedule; the submission nests under it).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use pretty_assertions::assert_eq;
use prost::Message;

use crate::serve::{Server, http, slow_secs};
use crate::{Workspace, stderr};

/// What the receiver got.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// Metric names with the service name of their resource.
    metrics: Vec<String>,
    service_names: Vec<String>,
}

/// An OTLP/HTTP receiver on a loopback port, on a thread of its own.
struct Collector {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
}

impl Collector {
    fn start() -> Self {
        let received = Arc::new(Mutex::new(Received::default()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(Arc::clone(&received));
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Self { addr, received }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Span> {
        self.received.lock().unwrap().spans.clone()
    }

    fn metric_names(&self) -> Vec<String> {
        self.received.lock().unwrap().metrics.clone()
    }
}

async fn traces(State(received): State<Arc<Mutex<Received>>>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut received = received.lock().unwrap();
    for resource_spans in request.resource_spans {
        if let Some(resource) = &resource_spans.resource {
            received
                .service_names
                .extend(resource.attributes.iter().filter_map(|kv| {
                    (kv.key == "service.name").then(|| any_string(kv.value.as_ref()?))?
                }));
        }
        for scope_spans in resource_spans.scope_spans {
            received.spans.extend(scope_spans.spans);
        }
    }
    StatusCode::OK
}

async fn metrics(State(received): State<Arc<Mutex<Received>>>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut received = received.lock().unwrap();
    for resource_metrics in request.resource_metrics {
        for scope_metrics in resource_metrics.scope_metrics {
            received
                .metrics
                .extend(scope_metrics.metrics.into_iter().map(|metric| metric.name));
        }
    }
    StatusCode::OK
}

fn any_string(value: &opentelemetry_proto::tonic::common::v1::AnyValue) -> Option<String> {
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        AnyValue::BoolValue(flag) => Some(flag.to_string()),
        AnyValue::DoubleValue(number) => Some(number.to_string()),
        AnyValue::ArrayValue(array) => Some(
            array
                .values
                .iter()
                .filter_map(any_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        _ => None,
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| any_string(kv.value.as_ref()?))
}

/// The spans as a tree: each span's name with its parent's name ("" for a root).
struct Tree {
    spans: Vec<Span>,
}

impl Tree {
    fn parent<'a>(&'a self, span: &Span) -> Option<&'a Span> {
        self.spans
            .iter()
            .find(|other| other.span_id == span.parent_span_id)
    }

    fn named(&self, name: &str) -> Vec<&Span> {
        self.spans.iter().filter(|span| span.name == name).collect()
    }

    fn one(&self, name: &str) -> &Span {
        let found = self.named(name);
        assert_eq!(found.len(), 1, "spans named {name:?}: {:#?}", self.edges());
        found[0]
    }

    /// `(parent name, child name)` for every span, sorted.
    fn edges(&self) -> Vec<(String, String)> {
        let mut edges: Vec<(String, String)> = self
            .spans
            .iter()
            .map(|span| {
                let parent = self.parent(span).map_or("", |parent| parent.name.as_str());
                (parent.to_owned(), span.name.clone())
            })
            .collect();
        edges.sort();
        edges.dedup();
        edges
    }
}

/// Waits for a settlement, then stops the server: SIGTERM drains and flushes.
fn settle_then_stop(server: &mut Server) {
    let started = Instant::now();
    while !server.log().contains("flue_server::settlement") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exited = server.child.wait().unwrap();
    assert!(exited.success(), "{}", server.log());
}

fn flue_run(ws: &Workspace, collector: &Collector, extra_env: &[(&str, &str)]) {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("flue"));
    command.env("FLUE_TRUST", "1");
    command
        .args([
            "run",
            "reviewer",
            "-m",
            "Review src/login.py",
            "--id",
            "r",
            "--root",
        ])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint());
    for (key, value) in extra_env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn flue_run_exports_the_span_tree_of_an_operation_with_a_task_and_its_metrics() {
    let collector = Collector::start();
    let ws = Workspace::example("code-review");
    flue_run(&ws, &collector, &[]);
    // `flue run` flushed before it exited: everything is here already.
    let tree = Tree {
        spans: collector.spans(),
    };
    let edges: Vec<(String, String)> = tree.edges();
    for edge in [
        ("", "flue.submission"),
        ("flue.submission", "flue.attempt"),
        ("flue.attempt", "invoke_agent reviewer"),
        ("invoke_agent reviewer", "chat script.json"),
        ("invoke_agent reviewer", "execute_tool load_skill"),
        ("invoke_agent reviewer", "execute_tool read_file"),
        ("invoke_agent reviewer", "execute_tool task"),
        ("execute_tool task", "invoke_agent security"),
        ("invoke_agent security", "chat script.json"),
    ] {
        assert!(
            edges.contains(&(edge.0.to_owned(), edge.1.to_owned())),
            "missing {edge:?} in {edges:#?}"
        );
    }
    // One trace, and every span's parent was exported (no dangling parents).
    let trace_id = &tree.one("flue.submission").trace_id;
    for span in &tree.spans {
        assert_eq!(&span.trace_id, trace_id, "{}", span.name);
        assert!(
            span.parent_span_id.is_empty() || tree.parent(span).is_some(),
            "{} has a parent that was not exported",
            span.name
        );
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    }
    assert_eq!(collector.received.lock().unwrap().service_names[0], "flue");

    let agent = tree.one("invoke_agent reviewer");
    assert_eq!(
        attr(agent, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attr(agent, "gen_ai.agent.name").as_deref(),
        Some("reviewer")
    );
    assert_eq!(
        attr(agent, "gen_ai.conversation.id").as_deref(),
        Some("reviewer:r")
    );
    assert_eq!(attr(agent, "flue.outcome").as_deref(), Some("completed"));
    let task_agent = tree.one("invoke_agent security");
    assert_eq!(attr(task_agent, "flue.task.depth").as_deref(), Some("1"));
    assert!(
        attr(task_agent, "flue.session")
            .unwrap()
            .starts_with("task:default:"),
        "{task_agent:?}"
    );

    let chats = tree.named("chat script.json");
    assert!(chats.len() >= 3, "{}", chats.len());
    for chat in &chats {
        assert_eq!(chat.kind, SpanKind::Client as i32);
        assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(
            attr(chat, "gen_ai.provider.name").as_deref(),
            Some("scripted")
        );
        assert_eq!(
            attr(chat, "gen_ai.request.model").as_deref(),
            Some("script.json")
        );
        assert_eq!(
            attr(chat, "gen_ai.response.model").as_deref(),
            Some("script.json")
        );
        assert!(
            attr(chat, "gen_ai.usage.input_tokens").is_some(),
            "{chat:?}"
        );
        assert!(
            attr(chat, "gen_ai.usage.output_tokens").is_some(),
            "{chat:?}"
        );
        let finish = attr(chat, "gen_ai.response.finish_reasons").unwrap();
        assert!(["stop", "tool_call"].contains(&finish.as_str()), "{finish}");
        // Contents stay out unless asked for.
        assert_eq!(attr(chat, "gen_ai.output.messages"), None);
    }
    let parent_chat = chats
        .iter()
        .find(|chat| tree.parent(chat).unwrap().name == "invoke_agent reviewer")
        .unwrap();
    assert!(attr(parent_chat, "gen_ai.response.time_to_first_chunk").is_some());

    let read = tree.named("execute_tool read_file")[0];
    assert_eq!(
        attr(read, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(attr(read, "gen_ai.tool.name").as_deref(), Some("read_file"));
    assert!(attr(read, "gen_ai.tool.call.id").is_some());
    assert_eq!(attr(read, "gen_ai.tool.call.arguments"), None);
    assert_eq!(attr(read, "gen_ai.tool.call.result"), None);
    assert_eq!(attr(read, "error.type"), None);
    assert_eq!(
        read.status.as_ref().map_or(0, |status| status.code),
        SpanStatus::Unset as i32
    );

    let metrics = collector.metric_names();
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk",
        "flue.operation.duration",
        "flue.tool.duration",
        "flue.submissions.queued",
        "flue.submissions.running",
        "flue.submissions.settled",
    ] {
        assert!(
            metrics.iter().any(|metric| metric == name),
            "no {name} in {metrics:?}"
        );
    }
}

#[test]
fn message_contents_are_exported_only_when_turned_on_and_secrets_never() {
    let collector = Collector::start();
    let ws = Workspace::example("code-review");
    // A known secret that the file the subagent reads happens to contain.
    let secret = "sk-test-0123456789abcdef";
    let login = ws.root().join("src/login.py");
    let mut text = std::fs::read_to_string(&login).unwrap();
    text.push_str(&format!("\n# key: {secret}\n"));
    std::fs::write(&login, text).unwrap();
    std::fs::write(
        ws.root().join(".env"),
        format!("ANTHROPIC_API_KEY={secret}\n"),
    )
    .unwrap();
    flue_run(
        &ws,
        &collector,
        &[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")],
    );
    let tree = Tree {
        spans: collector.spans(),
    };
    let read = tree.named("execute_tool read_file")[0];
    let arguments = attr(read, "gen_ai.tool.call.arguments").unwrap();
    assert!(arguments.contains("login.py"), "{arguments}");
    let result = attr(read, "gen_ai.tool.call.result").unwrap();
    assert!(result.contains("# key: "), "{result}");
    let reply = attr(tree.named("chat script.json")[0], "gen_ai.output.messages").unwrap();
    assert!(!reply.is_empty());
    for span in &tree.spans {
        for kv in &span.attributes {
            let value = kv.value.as_ref().and_then(any_string).unwrap_or_default();
            assert!(
                !value.contains(secret),
                "{} {} leaks the secret",
                span.name,
                kv.key
            );
        }
    }
}

#[test]
fn a_compaction_summary_is_a_chat_span_of_its_operation() {
    // The window of run.rs's compaction test: the second run compacts before its turn.
    let collector = Collector::start();
    let ws = Workspace::new(&[
        (
            "agents/a.md",
            // Without `task` (offered by default), whose schema would count in the window.
            "---\nmodel: scripted/s.json\ntask: false\ncompaction: { keep_recent_tokens: 10 }\n---\nHi.\n",
        ),
        (
            "s.json",
            r###"{"model": {"context_window": 600}, "rules": [
                {"when": {"user_contains": "<conversation>"}, "reply": {"text": "## Goal\nSay ok."}},
                {"reply": {"text": "ok"}}]}"###,
        ),
    ]);
    let first = ws.flue(&["run", "a", "-m", &"word ".repeat(360), "--id", "c"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let second = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["run", "a", "-m", "again", "--id", "c", "--root"])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .output()
        .unwrap();
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(stderr(&second).contains("compacting context"));
    let tree = Tree {
        spans: collector.spans(),
    };
    let chats = tree.named("chat s.json");
    let replies: Vec<String> = chats
        .iter()
        .map(|chat| {
            assert_eq!(tree.parent(chat).unwrap().name, "invoke_agent a");
            assert!(
                attr(chat, "gen_ai.usage.input_tokens").is_some(),
                "{chat:?}"
            );
            attr(chat, "gen_ai.output.messages").unwrap()
        })
        .collect();
    assert_eq!(replies, ["## Goal\nSay ok.", "ok"]);
}

#[test]
fn a_flue_serve_request_with_a_traceparent_joins_the_callers_trace() {
    let collector = Collector::start();
    let ws = crate::serve::workspace();
    let mut server = Server::start(
        ws.root(),
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint())],
    );
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let (status, body) = http(
        server.addr(),
        "POST",
        "/agents/tool/traced",
        &[
            ("content-type", "application/json"),
            ("traceparent", &format!("00-{trace_id}-{caller_span}-01")),
        ],
        r#"{"kind":"user","body":"what is the answer?"}"#,
    );
    assert_eq!(status, 202, "{body}");
    settle_then_stop(&mut server);

    let tree = Tree {
        spans: collector.spans(),
    };
    let trace_id = hex::decode(trace_id).unwrap();
    let request = tree
        .named("POST")
        .into_iter()
        .find(|span| span.trace_id == trace_id)
        .unwrap_or_else(|| panic!("no request span in the caller's trace: {:#?}", tree.edges()));
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(request.parent_span_id, hex::decode(caller_span).unwrap());
    assert_eq!(
        attr(request, "http.response.status_code").as_deref(),
        Some("202")
    );
    assert_eq!(
        attr(request, "url.path").as_deref(),
        Some("/agents/tool/traced")
    );
    let submission = tree.one("flue.submission");
    assert_eq!(submission.parent_span_id, request.span_id);
    assert_eq!(
        attr(submission, "flue.outcome").as_deref(),
        Some("completed")
    );
    let attempt = tree.one("flue.attempt");
    assert_eq!(attempt.parent_span_id, submission.span_id);
    assert_eq!(attr(attempt, "flue.attempt").as_deref(), Some("1"));
    let agent = tree.one("invoke_agent tool");
    assert_eq!(agent.parent_span_id, attempt.span_id);
    let bash = tree.one("execute_tool bash");
    assert_eq!(bash.parent_span_id, agent.span_id);
    for span in [submission, attempt, agent, bash] {
        assert_eq!(span.trace_id, trace_id, "{}", span.name);
    }
    // The request span ends with the response head, before the work it admitted.
    assert!(request.end_time_unix_nano <= submission.end_time_unix_nano);
}

#[test]
fn a_submission_recovered_after_kill_9_stays_in_the_callers_trace() {
    let ws = crate::serve::workspace();
    slow_secs(&ws, 1);
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let caller_span = "b7ad6b7169203331";
    // The admitting process dies (SIGKILL) inside the first attempt's tool call.
    let mut admitting = Server::start(ws.root(), &[], &[]);
    let (status, body) = http(
        admitting.addr(),
        "POST",
        "/agents/slow-tool/recovered",
        &[
            ("content-type", "application/json"),
            ("traceparent", &format!("00-{trace_id}-{caller_span}-01")),
        ],
        r#"{"kind":"user","body":"work"}"#,
    );
    assert_eq!(status, 202, "{body}");
    let started = Instant::now();
    while !ws.root().join("runs.log").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            admitting.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    admitting.kill9();
    assert!(!admitting.log().contains("flue_server::settlement"));

    // A new process on the same store recovers it, exporting to the receiver.
    let collector = Collector::start();
    let mut recovering = Server::start(
        ws.root(),
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint())],
    );
    settle_then_stop(&mut recovering);

    let tree = Tree {
        spans: collector.spans(),
    };
    let attempt = tree.one("flue.attempt");
    assert_eq!(attr(attempt, "flue.attempt").as_deref(), Some("2"));
    assert_eq!(
        attempt.trace_id,
        hex::decode(trace_id).unwrap(),
        "{:#?}",
        tree.edges()
    );
    assert_eq!(attempt.parent_span_id, hex::decode(caller_span).unwrap());
    assert!(
        tree.named("flue.submission").is_empty(),
        "{:#?}",
        tree.edges()
    );
    // What the attempt runs nests under it, in the caller's trace.
    let agent = tree.one("invoke_agent slow-tool");
    assert_eq!(agent.parent_span_id, attempt.span_id);
    assert_eq!(agent.trace_id, attempt.trace_id);
}

#[test]
fn a_schedule_tick_is_a_span_carrying_the_schedule_with_its_submission_under_it() {
    let collector = Collector::start();
    // Hourly, catching up once: the server fires the latest tick as it starts.
    let ws = Workspace::new(&[
        (
            "agents/ticker.md",
            "---\nmodel: scripted/script.json\nschedules:\n  nightly-sync:\n    every: 1h\n\
             ---\nYou note ticks.\n",
        ),
        (
            "script.json",
            r#"{"rules": [{"reply": {"text": "Noted."}}]}"#,
        ),
    ]);
    let mut server = Server::start(
        ws.root(),
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint())],
    );
    settle_then_stop(&mut server);

    let tree = Tree {
        spans: collector.spans(),
    };
    let schedule = tree.one("flue.schedule nightly-sync");
    assert_eq!(
        attr(schedule, "flue.schedule.name").as_deref(),
        Some("nightly-sync")
    );
    assert!(
        attr(schedule, "flue.schedule.tick").is_some_and(|tick| tick.ends_with(":00:00Z")),
        "{schedule:?}"
    );
    assert_eq!(
        attr(schedule, "gen_ai.conversation.id").as_deref(),
        Some("ticker:schedule-nightly-sync")
    );
    let submission = tree.one("flue.submission");
    assert_eq!(submission.parent_span_id, schedule.span_id);
    assert_eq!(submission.trace_id, schedule.trace_id);
    assert_eq!(
        attr(submission, "flue.outcome").as_deref(),
        Some("completed")
    );
    let attempt = tree.one("flue.attempt");
    assert_eq!(attempt.parent_span_id, submission.span_id);
}

#[test]
fn a_hook_decision_is_a_span_of_its_operation() {
    let collector = Collector::start();
    let ws = crate::hooks::workspace(&crate::hooks::group(
        "PreToolUse",
        "Bash",
        "python3 hooks/bash_validator.py",
        "",
    ));
    let output = Command::new(assert_cmd::cargo::cargo_bin("flue"))
        .env("FLUE_TRUST", "1")
        .args(["run", "guarded", "-m", "clean", "--id", "h", "--root"])
        .arg(ws.root())
        .env_remove("FLUE_LOG")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let tree = Tree {
        spans: collector.spans(),
    };
    let hook = tree.one("flue.hook PreToolUse");
    assert_eq!(tree.parent(hook).unwrap().name, "invoke_agent guarded");
    assert_eq!(attr(hook, "flue.hook.decision").as_deref(), Some("deny"));
    assert!(
        attr(hook, "flue.hook.name")
            .unwrap()
            .contains("bash_validator.py"),
        "{hook:?}"
    );
}

/// A background task's submission is a span of the parent's trace, under the `task` call that
/// started it, and names the parent conversation (`flue.task.parent`).
#[test]
fn a_background_tasks_submission_nests_under_the_task_call_that_started_it() {
    let collector = Collector::start();
    let ws = crate::background_tasks::workspace();
    let mut server = Server::start(
        ws.root(),
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint())],
    );
    crate::background_tasks::send(&server, "o", "wait");
    crate::background_tasks::wait_replies(&ws, "o", 2);
    settle_then_stop(&mut server);

    let tree = Tree {
        spans: collector.spans(),
    };
    let child = tree
        .named("flue.submission")
        .into_iter()
        .find(|span| attr(span, "flue.task.parent").is_some())
        .unwrap_or_else(|| panic!("no background submission: {:#?}", tree.edges()));
    assert_eq!(attr(child, "flue.task.parent").as_deref(), Some("boss:o"));
    assert_eq!(attr(child, "gen_ai.agent.name").as_deref(), Some("worker"));
    assert_eq!(attr(child, "flue.outcome").as_deref(), Some("completed"));
    let call = tree.parent(child).unwrap();
    assert_eq!(call.name, "execute_tool task");
    assert_eq!(call.trace_id, child.trace_id);
}
