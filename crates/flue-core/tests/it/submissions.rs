//! Durable submissions in process, on real SQLite files: dispatch, replies, FIFO across
//! runtimes, idempotency, send conditions, busy, abort from another runtime, timeouts,
//! exhausted attempts and recovery after shutdown.
//!
//! Several runtimes on one database file stand in for several processes: each opens its own
//! connections and registers its own owner (an OS lock of its own).

use std::sync::Arc;
use std::time::Duration;

use flue_core::{
    AgentRuntime, BatchBody, ConversationKey, DeliveredMessage, DispatchOptions, DurabilityConfig,
    FlueError, Offset, Outcome, Record,
    store::{DynConversationStore, SessionKey},
    submission::SendCondition,
    submission::SubmissionState,
    submission::WhenBusy,
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;

use crate::submission_support::{AGENT, AgentSettings, runtime, side_effect_counts};

struct Setup {
    dir: tempfile::TempDir,
    settings: AgentSettings,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let settings = AgentSettings::new(dir.path());
        Self { dir, settings }
    }

    /// A fresh store on the shared database file (a "process" of its own).
    fn store(&self) -> Arc<SqliteStore> {
        Arc::new(SqliteStore::open(&self.dir.path().join("flue.db")).unwrap())
    }

    async fn runtime(&self) -> AgentRuntime {
        runtime(self.store(), &self.settings).await
    }
}

fn key(id: &str) -> ConversationKey {
    ConversationKey::new(AGENT, id)
}

fn user(text: &str) -> DeliveredMessage {
    DeliveredMessage::user(text)
}

/// The stream of a conversation, summarised: one word per batch.
async fn stream_shape(store: &dyn DynConversationStore, key: &ConversationKey) -> Vec<String> {
    let page = store.read_stream(key, Offset::START, 1000).await.unwrap();
    page.batches
        .iter()
        .map(|batch| match &batch.body {
            BatchBody::Created { .. } => "created".to_owned(),
            BatchBody::Admitted { .. } => "admitted".to_owned(),
            BatchBody::Started { attempt, .. } => format!("started#{attempt}"),
            BatchBody::Records { records, .. } => records
                .iter()
                .map(|stored| match &stored.record {
                    Record::User(_) => "user",
                    Record::Assistant(_) => "assistant",
                    Record::ToolResult(_) => "tool_result",
                    _ => "other",
                })
                .collect::<Vec<_>>()
                .join("+"),
            BatchBody::AbortRequested { .. } => "abort_requested".to_owned(),
            BatchBody::Settled(settlement) => format!("settled:{:?}", settlement.outcome),
            _ => "unknown".to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn dispatch_admits_durably_and_read_returns_the_reply() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("chat-1");
    let receipt = runtime
        .dispatch(&key, user("hi"), DispatchOptions::default())
        .await
        .unwrap();
    assert!(!receipt.deduplicated);
    assert_eq!(receipt.offset, Offset(2), "created, then admitted");
    assert_eq!(
        runtime.read(&receipt.submission_id).await.unwrap(),
        "echo: hi"
    );
    let status = runtime.status(&receipt.submission_id).await.unwrap();
    assert_eq!(status.state, SubmissionState::Settled);
    assert_eq!(status.attempts, 1);
    assert!(status.input_applied);
    assert_eq!(
        stream_shape(runtime.store().as_ref(), &key).await,
        vec![
            "created",
            "admitted",
            "started#1",
            "user",
            "assistant",
            "settled:Completed"
        ]
    );
    // Every batch after the admission belongs to the submission.
    let page = runtime
        .read_stream(&key, receipt.offset, 100)
        .await
        .unwrap();
    assert!(page.up_to_date);
    assert!(
        page.batches
            .iter()
            .all(|batch| batch.submission_id.as_deref() == Some(receipt.submission_id.as_str()))
    );
    // The reply is readable from another "process".
    let other = setup.runtime().await;
    assert_eq!(
        other.read(&receipt.submission_id).await.unwrap(),
        "echo: hi"
    );
    runtime.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test]
async fn tool_calls_run_once_and_the_submission_completes() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let receipt = runtime
        .dispatch(&key("tools"), user("tools 3"), DispatchOptions::default())
        .await
        .unwrap();
    assert_eq!(
        runtime.read(&receipt.submission_id).await.unwrap(),
        "done (3 results)"
    );
    let counts = side_effect_counts(&setup.settings.side_effects);
    assert_eq!(counts.len(), 3);
    assert!(counts.values().all(|count| *count == 1));
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn signals_reach_the_model_in_their_envelope() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let signal = DeliveredMessage::Signal {
        signal_type: "github.issue_opened".into(),
        body: "{\"number\":7}".into(),
        attributes: [("repo".to_owned(), "a&b".to_owned())].into(),
        tag_name: Some("github".into()),
        initial_data: None,
        options: Default::default(),
    };
    let receipt = runtime
        .dispatch(&key("signal"), signal, DispatchOptions::default())
        .await
        .unwrap();
    assert_eq!(
        runtime.read(&receipt.submission_id).await.unwrap(),
        "echo: <github type=\"github.issue_opened\" repo=\"a&amp;b\">\n{\"number\":7}\n</github>"
    );
    let bad_tag = DeliveredMessage::Signal {
        signal_type: "x".into(),
        body: String::new(),
        attributes: Default::default(),
        tag_name: Some("1bad tag".into()),
        initial_data: None,
        options: Default::default(),
    };
    let err = runtime
        .dispatch(&key("signal"), bad_tag, DispatchOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_request");
    let err = runtime
        .dispatch(
            &key("signal"),
            DeliveredMessage::signal(" ", "b"),
            DispatchOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "invalid_request");
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_agents_and_ids_are_refused_before_anything_is_stored() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let err = runtime
        .dispatch(
            &ConversationKey::new("nope", "x"),
            user("hi"),
            DispatchOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "agent_not_found");
    for id in ["", "   ", "a\nb", "a/b", &"x".repeat(125)] {
        let err = runtime
            .dispatch(&key(id), user("hi"), DispatchOptions::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "invalid_id", "{id:?}");
    }
    assert!(
        runtime
            .store()
            .pending_conversations()
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        runtime
            .conversation(&ConversationKey::new("nope", "x"))
            .await
            .unwrap(),
        None
    );
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn idempotency_keys_deduplicate_and_conflict() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("idem");
    let options = DispatchOptions::default().with_idempotency_key("k1");
    let first = runtime
        .dispatch(&key, user("hi"), options.clone())
        .await
        .unwrap();
    let again = runtime
        .dispatch(&key, user("hi"), options.clone())
        .await
        .unwrap();
    assert!(again.deduplicated);
    assert_eq!(
        (
            again.submission_id.as_str(),
            again.offset,
            again.accepted_at,
            again.uid.as_str()
        ),
        (
            first.submission_id.as_str(),
            first.offset,
            first.accepted_at,
            first.uid.as_str()
        )
    );
    runtime.wait(&first.submission_id).await.unwrap();
    let head = runtime.conversation(&key).await.unwrap().unwrap().head;
    let err = runtime
        .dispatch(&key, user("something else"), options)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FlueError::SubmissionConflict { key, submission_id }
            if key == "k1" && *submission_id == first.submission_id),
        "{err:?}"
    );
    assert_eq!(
        runtime.conversation(&key).await.unwrap().unwrap().head,
        head
    );
    // Still deduplicated after settlement, from another runtime.
    let other = setup.runtime().await;
    let late = other
        .dispatch(
            &key,
            user("hi"),
            DispatchOptions::default().with_idempotency_key("k1"),
        )
        .await
        .unwrap();
    assert!(late.deduplicated);
    assert_eq!(late.submission_id, first.submission_id);
    runtime.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_valid_caller_traceparent_is_stored_and_an_invalid_one_dropped() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("traced");
    let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut stored = Vec::new();
    for sent in [
        valid,
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;rm",
        "not a traceparent",
    ] {
        let receipt = runtime
            .dispatch(
                &key,
                user("hi"),
                DispatchOptions::default().with_trace_parent(sent),
            )
            .await
            .unwrap();
        runtime.wait(&receipt.submission_id).await.unwrap();
        stored.push(
            runtime
                .status(&receipt.submission_id)
                .await
                .unwrap()
                .trace_parent,
        );
    }
    assert_eq!(stored, vec![Some(valid.to_owned()), None, None, None]);
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn send_conditions_reach_one_incarnation_and_store_nothing_when_they_fail() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("cond");
    let err = runtime
        .dispatch(
            &key,
            user("hi"),
            DispatchOptions::default().with_condition(SendCondition::Uid("u".into())),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "agent_instance_not_found");
    assert_eq!(runtime.conversation(&key).await.unwrap(), None);
    let created = runtime
        .dispatch(
            &key,
            user("hi"),
            DispatchOptions::default().with_condition(SendCondition::Create),
        )
        .await
        .unwrap();
    // Once the submission settled, nothing but a new admission moves the head.
    assert_eq!(
        runtime.read(&created.submission_id).await.unwrap(),
        "echo: hi"
    );
    let head = runtime.conversation(&key).await.unwrap().unwrap().head;
    let err = runtime
        .dispatch(
            &key,
            user("again"),
            DispatchOptions::default().with_condition(SendCondition::Create),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FlueError::AgentInstanceExists { uid, .. } if *uid == created.uid),
        "{err:?}"
    );
    let err = runtime
        .dispatch(
            &key,
            user("again"),
            DispatchOptions::default().with_condition(SendCondition::Uid("other".into())),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "agent_instance_not_found");
    assert_eq!(
        runtime.conversation(&key).await.unwrap().unwrap().head,
        head
    );
    let continued = runtime
        .dispatch(
            &key,
            user("again"),
            DispatchOptions::default().with_condition(SendCondition::Uid(created.uid.clone())),
        )
        .await
        .unwrap();
    assert_eq!(continued.uid, created.uid);
    assert_eq!(
        runtime.read(&continued.submission_id).await.unwrap(),
        "echo: again"
    );
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn many_runtimes_on_one_conversation_keep_fifo_without_interleaving() {
    let setup = Setup::new();
    let mut runtimes = Vec::new();
    for _ in 0..4 {
        runtimes.push(setup.runtime().await);
    }
    let key = key("busy");
    let mut dispatches = Vec::new();
    for (runtime_idx, runtime) in runtimes.iter().enumerate() {
        let runtime = runtime.clone();
        let key = key.clone();
        dispatches.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 0..8 {
                let text = if n % 2 == 0 {
                    format!("r{runtime_idx} m{n}")
                } else {
                    "tools 1".to_owned()
                };
                let receipt = runtime
                    .dispatch(&key, user(&text), DispatchOptions::default())
                    .await
                    .unwrap();
                ids.push(receipt.submission_id);
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for dispatch in dispatches {
        ids.extend(dispatch.await.unwrap());
    }
    for id in &ids {
        let settlement = runtimes[0].wait(id).await.unwrap();
        assert_eq!(settlement.outcome, Outcome::Completed, "{settlement:?}");
    }
    // Submissions started in admission order, each one finished before the next started.
    let store = runtimes[0].store();
    let mut infos = Vec::new();
    for id in &ids {
        infos.push(store.submission(id).await.unwrap().unwrap());
    }
    infos.sort_by_key(|info| info.position);
    let page = store
        .read_stream(&key, Offset::START, 10_000)
        .await
        .unwrap();
    let mut running: Option<String> = None;
    let mut started_order = Vec::new();
    for batch in &page.batches {
        match &batch.body {
            BatchBody::Started { submission_id, .. } => {
                assert_eq!(running, None, "a submission started while another ran");
                running = Some(submission_id.clone());
                started_order.push(submission_id.clone());
            }
            BatchBody::Records { .. } => {
                assert_eq!(
                    batch.submission_id, running,
                    "records outside their submission"
                );
            }
            BatchBody::Settled(settlement) => {
                assert_eq!(running.as_deref(), Some(settlement.submission_id.as_str()));
                running = None;
            }
            _ => {}
        }
    }
    let admitted_order: Vec<String> = infos
        .iter()
        .map(|info| info.submission_id.clone())
        .collect();
    assert_eq!(started_order, admitted_order);
    // The session log alternates user message and its answer (tool calls in between).
    let log = store
        .load(&SessionKey::new(key.instance_id(), "default"), 0)
        .await
        .unwrap()
        .unwrap();
    let n_users = log
        .records
        .iter()
        .filter(|stored| matches!(stored.record, Record::User(_)))
        .count();
    assert_eq!(n_users, ids.len());
    for runtime in runtimes {
        runtime.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_busy_conversation_refuses_when_asked_not_to_queue() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("no-wait");
    let hang = runtime
        .dispatch(&key, user("hang"), DispatchOptions::default())
        .await
        .unwrap();
    let err = runtime
        .dispatch(
            &key,
            user("hi"),
            DispatchOptions::default().with_when_busy(WhenBusy::Fail),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "session_busy");
    assert!(
        matches!(&err, FlueError::ConversationBusy { unsettled: 1, .. }),
        "{err:?}"
    );
    assert!(runtime.abort(&key).await.unwrap());
    let err = runtime.read(&hang.submission_id).await.unwrap_err();
    assert_eq!(err.kind(), "submission_aborted");
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn abort_from_another_runtime_settles_running_and_queued_work() {
    let setup = Setup::new();
    let owner = setup.runtime().await;
    let key = key("abort");
    let running = owner
        .dispatch(&key, user("hang"), DispatchOptions::default())
        .await
        .unwrap();
    let queued_a = owner
        .dispatch(&key, user("a"), DispatchOptions::default())
        .await
        .unwrap();
    let queued_b = owner
        .dispatch(&key, user("b"), DispatchOptions::default())
        .await
        .unwrap();
    // Wait until the hanging one runs.
    while owner.status(&running.submission_id).await.unwrap().state != SubmissionState::Running {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let other = setup.runtime().await;
    assert!(other.abort(&key).await.unwrap());
    for receipt in [&running, &queued_a, &queued_b] {
        let settlement = other.wait(&receipt.submission_id).await.unwrap();
        assert_eq!(settlement.outcome, Outcome::Aborted);
        assert_eq!(
            settlement.error.as_ref().map(|error| error.kind.as_str()),
            Some("submission_aborted")
        );
    }
    assert!(!other.abort(&key).await.unwrap(), "nothing left to abort");
    // The conversation goes on afterwards.
    let next = other
        .dispatch(&key, user("after"), DispatchOptions::default())
        .await
        .unwrap();
    assert_eq!(
        other.read(&next.submission_id).await.unwrap(),
        "echo: after"
    );
    owner.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_submission_past_its_timeout_is_aborted_and_settles_failed() {
    let mut setup = Setup::new();
    // Short, as the hanging message waits all of it; ten times what the next message needs on
    // a busy machine, as that one runs under it too.
    setup.settings.durability = DurabilityConfig {
        max_attempts: 10,
        timeout_ms: 1_500,
    };
    let runtime = setup.runtime().await;
    let key = key("timeout");
    let receipt = runtime
        .dispatch(&key, user("hang"), DispatchOptions::default())
        .await
        .unwrap();
    let err = runtime.read(&receipt.submission_id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            FlueError::SubmissionTimeout {
                timeout_ms: 1_500,
                ..
            }
        ),
        "{err:?}"
    );
    // The next message runs normally.
    let next = runtime
        .dispatch(&key, user("hi"), DispatchOptions::default())
        .await
        .unwrap();
    assert_eq!(runtime.read(&next.submission_id).await.unwrap(), "echo: hi");
    runtime.shutdown().await.unwrap();
}

#[tokio::test]
async fn interrupted_attempts_are_counted_across_restarts_until_exhausted() {
    let mut setup = Setup::new();
    setup.settings.durability = DurabilityConfig {
        max_attempts: 2,
        timeout_ms: 3_600_000,
    };
    let key = key("attempts");
    let first = setup.runtime().await;
    let receipt = first
        .dispatch(&key, user("hang"), DispatchOptions::default())
        .await
        .unwrap();
    let store = first.store().clone();
    for attempt in 1..=2 {
        let runtime = if attempt == 1 {
            first.clone()
        } else {
            setup.runtime().await
        };
        while store
            .submission(&receipt.submission_id)
            .await
            .unwrap()
            .unwrap()
            .attempts
            < attempt
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        runtime.shutdown().await.unwrap();
    }
    let last = setup.runtime().await;
    let err = last.read(&receipt.submission_id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            FlueError::SubmissionRetryExhausted {
                attempts: 2,
                max_attempts: 2,
                ..
            }
        ),
        "{err:?}"
    );
    last.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_restarted_runtime_resumes_interrupted_tool_work_without_rerunning_it() {
    let mut setup = Setup::new();
    setup.settings.tool_delay = Duration::from_secs(30);
    let first = setup.runtime().await;
    let key = key("resume");
    let receipt = first
        .dispatch(&key, user("tools 2"), DispatchOptions::default())
        .await
        .unwrap();
    while side_effect_counts(&setup.settings.side_effects).len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.shutdown().await.unwrap();
    setup.settings.tool_delay = Duration::ZERO;
    let second = setup.runtime().await;
    assert_eq!(
        second.read(&receipt.submission_id).await.unwrap(),
        "done (2 results)"
    );
    let counts = side_effect_counts(&setup.settings.side_effects);
    assert_eq!(counts.len(), 2);
    assert!(counts.values().all(|count| *count == 1), "{counts:?}");
    let status = second.status(&receipt.submission_id).await.unwrap();
    assert_eq!(status.attempts, 2);
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn wait_for_growth_wakes_on_new_batches() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("growth");
    let receipt = runtime
        .dispatch(&key, user("hang"), DispatchOptions::default())
        .await
        .unwrap();
    while runtime.status(&receipt.submission_id).await.unwrap().state != SubmissionState::Running {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let head = runtime.conversation(&key).await.unwrap().unwrap().head;
    let waiter = {
        let runtime = runtime.clone();
        let key = key.clone();
        tokio::spawn(async move {
            runtime
                .wait_for_growth(&key, head, Duration::from_secs(120))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    runtime.abort(&key).await.unwrap();
    let grown = tokio::time::timeout(Duration::from_secs(120), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(grown > head);
    let same = runtime
        .wait_for_growth(
            &key,
            runtime.conversation(&key).await.unwrap().unwrap().head,
            Duration::from_millis(30),
        )
        .await
        .unwrap();
    assert_eq!(
        same,
        runtime.conversation(&key).await.unwrap().unwrap().head
    );
    runtime.shutdown().await.unwrap();
}

/// A runtime keeps a conversation's log between its messages and reads only what was appended
/// after its copy; a message another runtime processed in between is among that, so the model
/// sees the whole conversation and no append conflicts.
#[tokio::test]
async fn a_runtime_continues_from_its_kept_log_and_what_others_appended() {
    let setup = Setup::new();
    let a = setup.runtime().await;
    let b = setup.runtime().await;
    let key = key("kept");
    for (runtime, text) in [
        (&a, "tools 1"),
        (&b, "tools 1"),
        (&a, "tools 1"),
        (&a, "tools 1"),
        (&b, "last"),
    ] {
        let receipt = runtime
            .dispatch(&key, user(text), DispatchOptions::default())
            .await
            .unwrap();
        let settlement = runtime.wait(&receipt.submission_id).await.unwrap();
        assert_eq!(settlement.outcome, Outcome::Completed, "{settlement:?}");
    }
    let log = a
        .store()
        .load(&SessionKey::new(key.instance_id(), "default"), 0)
        .await
        .unwrap()
        .unwrap();
    let call_ids: Vec<String> = log
        .records
        .iter()
        .filter_map(|stored| match &stored.record {
            Record::Assistant(message) => message.tool_calls().next().map(|call| call.id.clone()),
            _ => None,
        })
        .collect();
    // A call's id counts the records its model saw: each `tools 1` message adds four.
    assert_eq!(call_ids, ["call_1_0", "call_5_0", "call_9_0", "call_13_0"]);
    assert_eq!(log.version, 18);
}

/// A message's choices (model, thinking level, role, a skill with arguments) reach its run
/// and only its run; choices the agent does not have are refused at dispatch, storing nothing
/// (the registry's default check, through the agent's harness builder).
#[tokio::test]
async fn a_message_chooses_its_model_thinking_role_and_skill() {
    let dir = tempfile::tempdir().unwrap();
    let echo = r##"{"rules": [
      {"when": {"system_contains": "# Skill: triage"}, "reply": {"text": "triage: {{user}}"}},
      {"when": {"system_contains": "# Role: terse"}, "reply": {"text": "terse {{model}} {{thinking}}"}},
      {"reply": {"text": "{{model}} {{thinking}}: {{user}}"}}
    ]}"##;
    std::fs::write(dir.path().join("a.json"), echo).unwrap();
    std::fs::write(dir.path().join("b.json"), echo).unwrap();
    let root = dir.path().to_owned();
    let agents = Arc::new(flue_core::StaticAgents::new().with_agent("pick", move || {
        flue_core::Harness::builder(
            flue_core::AgentConfig::new()
                .with_model("scripted/a.json")
                .with_skill(flue_core::Skill::new("triage", "Sorts").with_body("Sort it.")),
        )
        .with_providers(
            flue_core::ProviderRegistry::new()
                .with_provider(Arc::new(flue_core::ScriptedProvider::new(&root))),
        )
        .with_roles(vec![
            flue_core::Role::new("terse", "Short").with_instructions("Be short."),
        ])
        .with_workspace_context(None)
    }));
    let store: Arc<dyn DynConversationStore> =
        Arc::new(SqliteStore::open(&dir.path().join("flue.db")).unwrap());
    let runtime = AgentRuntime::builder(store, agents)
        .with_poll_interval(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let key = ConversationKey::new("pick", "c1");
    let send = |message: DeliveredMessage| {
        let runtime = runtime.clone();
        let key = key.clone();
        async move {
            let receipt = runtime
                .dispatch(&key, message, DispatchOptions::default())
                .await?;
            runtime.read(&receipt.submission_id).await
        }
    };
    let chosen = flue_core::MessageOptions::default()
        .with_model("scripted/b.json")
        .with_thinking(flue_core::ThinkingLevel::High);
    assert_eq!(
        send(user("hi").with_options(chosen)).await.unwrap(),
        "b.json high: hi"
    );
    assert_eq!(send(user("again")).await.unwrap(), "a.json off: again");
    let in_role = flue_core::MessageOptions::default().with_role("terse");
    assert_eq!(
        send(user("x").with_options(in_role)).await.unwrap(),
        "terse a.json off"
    );
    let skill = flue_core::MessageOptions::default()
        .with_skill("triage")
        .with_arg("label", serde_json::json!("bug"));
    assert_eq!(
        send(user("").with_options(skill)).await.unwrap(),
        "triage: Run the skill \"triage\" with these arguments:\n{\n  \"label\": \"bug\"\n}"
    );

    let refused = [
        (
            flue_core::MessageOptions::default().with_role("captain"),
            "`role`",
        ),
        (
            flue_core::MessageOptions::default().with_skill("deploy"),
            "`skill`",
        ),
        (
            flue_core::MessageOptions::default().with_model("scripted/missing.json"),
            "`model`",
        ),
        (
            flue_core::MessageOptions::default().with_model("nowhere/x"),
            "`model`",
        ),
        (
            flue_core::MessageOptions::default().with_arg("label", serde_json::json!(1)),
            "`args`",
        ),
    ];
    let other = ConversationKey::new("pick", "refused");
    for (options, field) in refused {
        let err = runtime
            .dispatch(
                &other,
                user("x").with_options(options),
                DispatchOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, FlueError::InvalidRequest { message } if message.contains(field)),
            "{field}: {err}"
        );
    }
    assert!(
        runtime
            .store()
            .conversation(&other)
            .await
            .unwrap()
            .is_none(),
        "a refused message stores nothing"
    );
    runtime.shutdown().await.unwrap();
}

/// Compaction on request takes the conversation between submissions and gives it back: with
/// nothing old enough to fold it changes nothing, and the next message runs as usual, in this
/// runtime or another one.
#[tokio::test]
async fn compact_on_request_gives_the_conversation_back() {
    let setup = Setup::new();
    let runtime = setup.runtime().await;
    let key = key("compact-1");
    let missing = runtime.compact(&key).await.unwrap_err();
    assert_eq!(missing.kind(), "agent_instance_not_found", "{missing}");
    let first = runtime
        .dispatch(&key, user("hi"), DispatchOptions::default())
        .await
        .unwrap();
    runtime.wait(&first.submission_id).await.unwrap();
    let before = stream_shape(runtime.store().as_ref(), &key).await;
    let events = runtime.compact(&key).await.unwrap();
    // Two short messages are kept verbatim.
    assert!(
        !events.iter().any(|event| matches!(
            event,
            flue_core::Event::CompactionStart { .. } | flue_core::Event::CompactionEnd { .. }
        )),
        "{events:?}"
    );
    assert_eq!(stream_shape(runtime.store().as_ref(), &key).await, before);
    let other = setup.runtime().await;
    let second = other
        .dispatch(&key, user("again"), DispatchOptions::default())
        .await
        .unwrap();
    assert_eq!(
        other.read(&second.submission_id).await.unwrap(),
        "echo: again"
    );
}
