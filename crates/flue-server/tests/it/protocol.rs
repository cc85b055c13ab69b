//! The protocol in process: admission, snapshots, updates (plain, long-poll, SSE), abort,
//! uid conditions, and every refusal with its envelope and nothing stored.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use futures::StreamExt;
use http_body_util::BodyExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::host::{app, call, fast_config, get, post_json, send, settled};

const ZERO: &str = "0000000000000000_0000000000000000";

async fn admission_returns_202_with_coordinates_and_the_reply_lands_in_the_snapshot() {
    let app = app(fast_config()).await;
    let reply = post_json(
        &app,
        "/agents/plain/c1?x=1",
        r#"{"kind":"user","body":"hi"}"#,
    )
    .await;
    assert_eq!(reply.status, 202);
    let admission = reply.json();
    assert_eq!(admission["streamUrl"], "http://test.local/agents/plain/c1");
    assert_eq!(
        reply.header("location"),
        Some("http://test.local/agents/plain/c1")
    );
    assert_eq!(
        reply.header("stream-next-offset"),
        admission["offset"].as_str()
    );
    assert!(!admission["submissionId"].as_str().unwrap().is_empty());
    assert!(!admission["uid"].as_str().unwrap().is_empty());

    let submission = admission["submissionId"].as_str().unwrap();
    let snapshot = settled(&app, "/agents/plain/c1", submission).await;
    assert_eq!(snapshot["v"], 1);
    assert_eq!(snapshot["conversationId"], "plain/c1");
    let messages = snapshot["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(
        messages[0]["parts"],
        json!([{"type": "text", "text": "hi", "state": "done"}])
    );
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["submissionId"], submission);
    assert_eq!(
        messages[1]["parts"],
        json!([{"type": "text", "text": "Hello from the fake model.", "state": "done"}])
    );
    assert_eq!(
        snapshot["settlements"],
        json!([{"submissionId": submission, "outcome": "completed", "answeredBySubmissionId": submission}])
    );

    let history = get(&app, "/agents/plain/c1?view=history").await;
    assert_eq!(history.header("cache-control"), Some("no-store"));
    assert_eq!(history.header("stream-up-to-date"), Some("true"));
    assert_eq!(
        history.header("stream-next-offset"),
        snapshot["offset"].as_str()
    );
    assert_eq!(history.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        history.header("cross-origin-resource-policy"),
        Some("cross-origin")
    );

    let head = call(
        &app,
        Request::head("/agents/plain/c1")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("stream-next-offset"),
        snapshot["offset"].as_str()
    );
    assert_eq!(head.header("stream-up-to-date"), Some("true"));
}

async fn tool_calls_appear_as_dynamic_tool_parts_and_chunks() {
    let app = app(fast_config()).await;
    let admission = send(&app, "/agents/tool/t1", "six times seven").await;
    let submission = admission["submissionId"].as_str().unwrap();
    let snapshot = settled(&app, "/agents/tool/t1", submission).await;
    let parts = snapshot["messages"][1]["parts"].as_array().unwrap().clone();
    assert_eq!(parts.len(), 3, "{parts:#?}");
    assert_eq!(parts[0]["text"], "Looking up.");
    assert_eq!(parts[1]["type"], "dynamic-tool");
    assert_eq!(parts[1]["toolName"], "lookup");
    assert_eq!(parts[1]["state"], "output-available");
    assert_eq!(parts[1]["input"], json!({"query": "six times seven"}));
    assert_eq!(
        parts[1]["output"],
        json!({"query": "six times seven", "answer": 42})
    );
    assert!(
        parts[2]["text"]
            .as_str()
            .unwrap()
            .starts_with("Final answer:")
    );

    let offset = admission["offset"].as_str().unwrap();
    let updates = get(
        &app,
        &format!("/agents/tool/t1?view=updates&offset={offset}"),
    )
    .await;
    assert_eq!(updates.status, 200);
    let chunks = updates.json();
    let types: Vec<&str> = chunks
        .as_array()
        .unwrap()
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap())
        .filter(|kind| *kind != "message-delta" && *kind != "message-completed")
        .collect();
    // (`message-completed` of the first step comes before or after its `tool-input`.)
    assert_eq!(
        types,
        [
            "stream-checkpoint",
            "message-started",
            "tool-input",
            "tool-output",
            "message-started",
            "submission-settled"
        ]
    );
    let completed = chunks
        .as_array()
        .unwrap()
        .iter()
        .filter(|chunk| chunk["type"] == "message-completed")
        .count();
    assert_eq!(completed, 2);
    // Positions are strictly increasing.
    let positions: Vec<(u64, u64)> = chunks.as_array().unwrap()[1..]
        .iter()
        .map(|chunk| {
            (
                chunk["position"]["batch"].as_u64().unwrap(),
                chunk["position"]["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        positions.windows(2).all(|pair| pair[0] < pair[1]),
        "{positions:?}"
    );
}

async fn reading_from_the_origin_begins_with_a_reset() {
    let app = app(fast_config()).await;
    let admission = send(&app, "/agents/plain/o1", "hi").await;
    settled(
        &app,
        "/agents/plain/o1",
        admission["submissionId"].as_str().unwrap(),
    )
    .await;
    let chunks = get(&app, "/agents/plain/o1?view=updates&offset=-1")
        .await
        .json();
    assert_eq!(chunks[0]["type"], "stream-checkpoint");
    assert_eq!(chunks[1]["type"], "conversation-reset");
    assert_eq!(chunks[1]["position"], json!({"batch": 1, "index": 0}));
    // The user message is in the reset's snapshot (when the first batch holds it) or follows.
    let in_reset = &chunks[1]["snapshot"]["messages"][0]["parts"][0]["text"];
    let appended = &chunks[2]["message"]["parts"][0]["text"];
    assert!(in_reset == "hi" || appended == "hi", "{chunks:#}");
    // Applying every chunk yields the snapshot's messages.
    let snapshot = get(&app, "/agents/plain/o1").await.json();
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 2);
}

async fn updates_from_the_head_are_empty_and_up_to_date_and_long_poll_times_out_empty() {
    let app = app(fast_config()).await;
    let admission = send(&app, "/agents/plain/h1", "hi").await;
    let snapshot = settled(
        &app,
        "/agents/plain/h1",
        admission["submissionId"].as_str().unwrap(),
    )
    .await;
    let head = snapshot["offset"].as_str().unwrap();
    let plain = get(
        &app,
        &format!("/agents/plain/h1?view=updates&offset={head}"),
    )
    .await;
    assert_eq!(plain.json(), json!([]));
    assert_eq!(plain.header("stream-next-offset"), Some(head));
    assert_eq!(plain.header("stream-up-to-date"), Some("true"));

    let started = std::time::Instant::now();
    let poll = get(
        &app,
        &format!("/agents/plain/h1?view=updates&offset={head}&live=long-poll"),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(poll.json(), json!([]));
    assert_eq!(poll.header("stream-next-offset"), Some(head));
    assert_eq!(poll.header("stream-up-to-date"), Some("true"));
}

async fn a_parked_long_poll_returns_as_soon_as_the_next_message_lands() {
    let app = app(ServerConfig {
        long_poll_timeout: Duration::from_secs(120),
        ..fast_config()
    })
    .await;
    let admission = send(&app, "/agents/plain/lp", "one").await;
    let snapshot = settled(
        &app,
        "/agents/plain/lp",
        admission["submissionId"].as_str().unwrap(),
    )
    .await;
    let head = snapshot["offset"].as_str().unwrap().to_owned();
    let poller = {
        let app = app.clone();
        tokio::spawn(async move {
            get(
                &app,
                &format!("/agents/plain/lp?view=updates&offset={head}&live=long-poll"),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    send(&app, "/agents/plain/lp", "two").await;
    let reply = poller.await.unwrap();
    // The poll answers on the message, not at its time limit (two minutes: a busy machine
    // answers long before).
    assert!(started.elapsed() < Duration::from_secs(60));
    let chunks = reply.json();
    assert_eq!(chunks[1]["type"], "message-appended");
    assert_eq!(chunks[1]["message"]["parts"][0]["text"], "two");
}

use flue_server::ServerConfig;

async fn pages_hold_at_most_100_batches_and_say_when_more_is_waiting() {
    let app = app(fast_config()).await;
    let mut last = String::new();
    for idx in 0..30 {
        let admission = send(&app, "/agents/plain/p1", &format!("m{idx}")).await;
        last = admission["submissionId"].as_str().unwrap().to_owned();
    }
    let snapshot = settled(&app, "/agents/plain/p1", &last).await;
    let head = snapshot["offset"].as_str().unwrap().to_owned();
    let mut offset = ZERO.to_owned();
    let mut pages = 0;
    let mut user_messages = 0;
    loop {
        let page = get(
            &app,
            &format!("/agents/plain/p1?view=updates&offset={offset}"),
        )
        .await;
        pages += 1;
        let next = page.header("stream-next-offset").unwrap().to_owned();
        let batch_span = next[17..].parse::<u64>().unwrap() - offset[17..].parse::<u64>().unwrap();
        assert!(batch_span <= 100);
        user_messages += page
            .json()
            .as_array()
            .unwrap()
            .iter()
            .filter(|chunk| chunk["type"] == "message-appended")
            .count();
        offset = next;
        if page.header("stream-up-to-date") == Some("true") {
            break;
        }
        assert!(pages < 50);
    }
    assert_eq!(offset, head);
    assert!(pages >= 2, "{pages} pages");
    assert_eq!(user_messages, 30);
}

async fn sse_frames_data_then_control_with_ids_and_resumes_from_last_event_id() {
    let app = app(fast_config()).await;
    let admission = send(&app, "/agents/plain/s1", "hi").await;
    let submission = admission["submissionId"].as_str().unwrap();
    let offset = admission["offset"].as_str().unwrap();
    let response = app
        .clone()
        .oneshot(
            Request::get(format!(
                "/agents/plain/s1?view=updates&offset={offset}&live=sse"
            ))
            .body(Body::empty())
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["cache-control"], "no-cache");
    let mut body = response.into_body().into_data_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !text.contains(&format!("\"submissionId\":\"{submission}\",\"outcome\""))
        || !text.ends_with("\n\n")
    {
        let frame = tokio::time::timeout_at(deadline, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&frame).unwrap());
    }
    // Wait for a heartbeat too.
    while !text.contains(": heartbeat\n\n") {
        let frame = tokio::time::timeout_at(deadline, body.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&frame).unwrap());
    }
    let events: Vec<&str> = text
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .collect();
    let mut last_id = None;
    for event in &events {
        if let Some(data) = event.strip_prefix("event: data\ndata:") {
            let chunks: Value = serde_json::from_str(data).unwrap();
            assert!(chunks.as_array().unwrap().len() > 1);
        } else if let Some(rest) = event.strip_prefix("event: control\nid: ") {
            let (id, data) = rest.split_once("\ndata:").unwrap();
            let control: Value = serde_json::from_str(data).unwrap();
            assert_eq!(control["streamNextOffset"], id);
            last_id = Some(id.to_owned());
        } else {
            assert_eq!(*event, ": heartbeat");
        }
    }
    let last_id = last_id.unwrap();

    // A reconnect naming the last id starts from there: nothing new, just a control event.
    let response = app
        .clone()
        .oneshot(
            Request::get(format!(
                "/agents/plain/s1?view=updates&offset={offset}&live=sse"
            ))
            .header("last-event-id", &last_id)
            .body(Body::empty())
            .unwrap(),
        )
        .await
        .unwrap();
    let mut body = response.into_body().into_data_stream();
    let first = body.next().await.unwrap().unwrap();
    assert_eq!(
        std::str::from_utf8(&first).unwrap(),
        format!(
            "event: control\nid: {last_id}\ndata:{{\"streamNextOffset\":\"{last_id}\",\"upToDate\":true}}\n\n"
        )
    );
}

/// Reads SSE frames until `done` holds for the chunks seen; returns every chunk in order, with
/// the instant each data event arrived.
async fn sse_chunks(
    body: &mut (impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin),
    done: impl Fn(&[Value]) -> bool,
) -> Vec<(tokio::time::Instant, Value)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut buffer = String::new();
    let mut chunks = Vec::new();
    loop {
        while let Some((event, rest)) = buffer.split_once("\n\n") {
            if let Some(data) = event.strip_prefix("event: data\ndata:") {
                let now = tokio::time::Instant::now();
                let batch: Vec<Value> = serde_json::from_str(data).unwrap();
                assert_eq!(batch[0]["type"], "stream-checkpoint", "{data}");
                chunks.extend(batch.into_iter().skip(1).map(|chunk| (now, chunk)));
            }
            buffer = rest.to_owned();
        }
        let seen: Vec<Value> = chunks.iter().map(|(_, chunk)| chunk.clone()).collect();
        if done(&seen) {
            return chunks;
        }
        let frame = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("the SSE stream went quiet")
            .unwrap()
            .unwrap();
        buffer.push_str(std::str::from_utf8(&frame).unwrap());
    }
}

/// What the official client holds of one submission's reply: it skips chunks at or before the
/// last applied position, appends deltas to the messages the submission started, replaces
/// everything on a reset.
#[derive(Clone, Debug, Default)]
struct ClientReply {
    last: Option<(u64, u64)>,
    replies: Vec<String>,
    text: String,
}

impl ClientReply {
    fn apply(&mut self, chunks: &[Value], submission: &str) -> &str {
        for chunk in chunks {
            let position = (
                chunk["position"]["batch"].as_u64().unwrap(),
                chunk["position"]["index"].as_u64().unwrap(),
            );
            if self.last.is_some_and(|last| position <= last) {
                continue;
            }
            self.last = Some(position);
            match chunk["type"].as_str().unwrap() {
                "conversation-reset" => {
                    let messages = chunk["snapshot"]["messages"].as_array().unwrap();
                    let mine = messages.iter().filter(|message| {
                        message["role"] == "assistant" && message["submissionId"] == submission
                    });
                    self.replies = mine
                        .clone()
                        .map(|message| message["id"].as_str().unwrap().to_owned())
                        .collect();
                    self.text = mine
                        .flat_map(|message| message["parts"].as_array().unwrap().clone())
                        .filter(|part| part["type"] == "text")
                        .map(|part| part["text"].as_str().unwrap().to_owned())
                        .collect();
                }
                "message-started" if chunk["submissionId"] == submission => {
                    self.replies
                        .push(chunk["messageId"].as_str().unwrap().to_owned());
                }
                "message-delta"
                    if chunk["kind"] == "text"
                        && self
                            .replies
                            .iter()
                            .any(|id| chunk["messageId"] == id.as_str()) =>
                {
                    self.text.push_str(chunk["delta"].as_str().unwrap());
                }
                _ => {}
            }
        }
        &self.text
    }
}

async fn sse_streams_text_as_the_model_produces_it_and_a_resumed_reader_sees_it_once() {
    let app = app(fast_config()).await;
    let first = send(&app, "/agents/stream/d1", "hi").await;
    settled(
        &app,
        "/agents/stream/d1",
        first["submissionId"].as_str().unwrap(),
    )
    .await;
    let admission = send(&app, "/agents/stream/d1", "again").await;
    let submission = admission["submissionId"].as_str().unwrap().to_owned();
    let offset = admission["offset"].as_str().unwrap();
    let open = |offset: String| {
        let app = app.clone();
        async move {
            let response = app
                .oneshot(
                    Request::get(format!(
                        "/agents/stream/d1?view=updates&offset={offset}&live=sse"
                    ))
                    .body(Body::empty())
                    .unwrap(),
                )
                .await
                .unwrap();
            response.into_body().into_data_stream()
        }
    };
    let mut body = open(offset.to_owned()).await;
    // The first piece of text arrives while the turn is still being produced: the snapshot
    // does not have the reply's text yet.
    let early = sse_chunks(&mut body, |chunks| {
        chunks
            .iter()
            .any(|chunk| chunk["type"] == "message-delta" && chunk["kind"] == "text")
    })
    .await;
    let snapshot = get(&app, "/agents/stream/d1").await.json();
    let reply = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "assistant" && message["submissionId"] == submission)
        .flat_map(|message| message["parts"].as_array().unwrap().clone())
        .filter(|part| part["type"] == "text")
        .map(|part| part["text"].as_str().unwrap().to_owned())
        .collect::<String>();
    assert_ne!(
        reply, "Hello from the slow fake model.",
        "the reply is not complete yet"
    );
    let reasoning = early
        .iter()
        .any(|(_, chunk)| chunk["type"] == "message-delta" && chunk["kind"] == "reasoning");
    assert!(reasoning, "reasoning streams too: {early:?}");
    let control_offset = get(&app, "/agents/stream/d1")
        .await
        .header("stream-next-offset")
        .unwrap()
        .to_owned();

    // Follow to the settlement: the text deltas came one by one, and the client's text is
    // the reply exactly once.
    let settled_marker = format!("\"submissionId\":\"{submission}\"");
    let rest = sse_chunks(&mut body, |chunks| {
        chunks.iter().any(|chunk| {
            chunk["type"] == "submission-settled" && chunk.to_string().contains(&settled_marker)
        })
    })
    .await;
    let all: Vec<Value> = early
        .iter()
        .chain(rest.iter())
        .map(|(_, chunk)| chunk.clone())
        .collect();
    let text_deltas = all
        .iter()
        .filter(|chunk| chunk["type"] == "message-delta" && chunk["kind"] == "text")
        .count();
    assert!(text_deltas >= 5, "one delta per piece: {all:?}");
    assert_eq!(
        ClientReply::default().apply(&all, &submission),
        "Hello from the slow fake model.",
        "{all:?}"
    );

    // A reader that saw the live text and resumes from the offset it held then (the
    // durable head during the turn) ends with the reply once, not twice.
    let seen_live: Vec<Value> = early.iter().map(|(_, chunk)| chunk.clone()).collect();
    let mut held = ClientReply::default();
    held.apply(&seen_live, &submission);
    let mut resumed = open(control_offset).await;
    let replay = sse_chunks(&mut resumed, |chunks| {
        chunks.iter().any(|chunk| {
            chunk["type"] == "submission-settled" && chunk.to_string().contains(&settled_marker)
        })
    })
    .await;
    let replay: Vec<Value> = replay.into_iter().map(|(_, chunk)| chunk).collect();
    assert_eq!(
        held.apply(&replay, &submission),
        "Hello from the slow fake model.",
        "{replay:?}"
    );
}

async fn an_unread_sse_stream_blocks_neither_the_agent_nor_other_readers() {
    let app = app(fast_config()).await;
    let admission = send(&app, "/agents/plain/slow", "first").await;
    // Open a stream and never read it.
    let _stalled = app
        .clone()
        .oneshot(
            Request::get(format!(
                "/agents/plain/slow?view=updates&offset={}&live=sse",
                admission["offset"].as_str().unwrap()
            ))
            .body(Body::empty())
            .unwrap(),
        )
        .await
        .unwrap();
    let mut last = String::new();
    for idx in 0..20 {
        last = send(&app, "/agents/plain/slow", &format!("m{idx}")).await["submissionId"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    let snapshot = tokio::time::timeout(
        Duration::from_secs(120),
        settled(&app, "/agents/plain/slow", &last),
    )
    .await
    .unwrap();
    assert_eq!(snapshot["settlements"].as_array().unwrap().len(), 21);
}

async fn abort_settles_the_running_and_every_queued_submission_aborted() {
    let app = app(fast_config()).await;
    let running = send(&app, "/agents/slow-tool/a1", "wait").await;
    let queued = send(&app, "/agents/slow-tool/a1", "also wait").await;
    // Let the first reach its tool call.
    for _ in 0..200 {
        let snapshot = get(&app, "/agents/slow-tool/a1").await.json();
        if snapshot.to_string().contains("input-available") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = get(
        &app,
        &format!(
            "/agents/slow-tool/a1/submissions/{}",
            running["submissionId"].as_str().unwrap()
        ),
    )
    .await
    .json();
    assert_eq!(status["state"], "running");
    let abort = post_json(&app, "/agents/slow-tool/a1/abort", "").await;
    assert_eq!(abort.status, 200);
    assert_eq!(abort.json(), json!({"aborted": true}));
    for admission in [&running, &queued] {
        let submission = admission["submissionId"].as_str().unwrap();
        let snapshot = settled(&app, "/agents/slow-tool/a1", submission).await;
        let settlement = snapshot["settlements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|settlement| settlement["submissionId"] == submission)
            .unwrap()
            .clone();
        assert_eq!(settlement["outcome"], "aborted");
        assert_eq!(settlement["error"]["type"], "submission_aborted");
        let status = get(
            &app,
            &format!("/agents/slow-tool/a1/submissions/{submission}"),
        )
        .await
        .json();
        assert_eq!(status["state"], "settled");
        assert_eq!(status["outcome"], "aborted");
    }
    // Idle now: nothing to abort.
    let abort = post_json(&app, "/agents/slow-tool/a1/abort", "").await;
    assert_eq!(abort.json(), json!({"aborted": false}));
    // The conversation goes on.
    let next = send(&app, "/agents/slow-tool/a1", "again").await;
    assert_eq!(next["uid"], running["uid"]);
}

async fn uid_conditions_create_only_continue_only_and_store_nothing_when_they_fail() {
    let app = app(fast_config()).await;
    let created = post_json(
        &app,
        "/agents/plain/u1",
        r#"{"kind":"user","body":"a","uid":null}"#,
    )
    .await;
    assert_eq!(created.status, 202);
    let uid = created.json()["uid"].as_str().unwrap().to_owned();
    let exists = post_json(
        &app,
        "/agents/plain/u1",
        r#"{"kind":"user","body":"b","uid":null}"#,
    )
    .await;
    assert_eq!(exists.status, 409);
    assert_eq!(exists.error_type(), "agent_instance_exists");
    assert_eq!(exists.json()["error"]["meta"]["uid"], uid.as_str());
    let wrong = post_json(
        &app,
        "/agents/plain/u1",
        r#"{"kind":"user","body":"c","uid":"inst_nope"}"#,
    )
    .await;
    assert_eq!(wrong.status, 404);
    assert_eq!(wrong.error_type(), "agent_instance_not_found");
    let absent = post_json(
        &app,
        "/agents/plain/u2",
        &format!(r#"{{"kind":"user","body":"d","uid":"{uid}"}}"#),
    )
    .await;
    assert_eq!(absent.error_type(), "agent_instance_not_found");
    let right = post_json(
        &app,
        "/agents/plain/u1",
        &format!(r#"{{"kind":"user","body":"e","uid":"{uid}"}}"#),
    )
    .await;
    assert_eq!(right.status, 202);
    settled(
        &app,
        "/agents/plain/u1",
        right.json()["submissionId"].as_str().unwrap(),
    )
    .await;
    let texts: Vec<Value> = get(&app, "/agents/plain/u1").await.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| message["parts"][0]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("a"), json!("e")]);
    assert_eq!(
        get(&app, "/agents/plain/u2").await.error_type(),
        "stream_not_found"
    );
}

async fn signals_and_images_are_admitted_as_their_messages() {
    let app = app(fast_config()).await;
    let signal = post_json(
        &app,
        "/agents/plain/sig",
        r#"{"kind":"signal","type":"build.failed","body":"{\"job\":7}","attributes":{"repo":"x"},"tagName":"ci-event"}"#,
    )
    .await;
    assert_eq!(signal.status, 202);
    let snapshot = settled(
        &app,
        "/agents/plain/sig",
        signal.json()["submissionId"].as_str().unwrap(),
    )
    .await;
    let message = &snapshot["messages"][0];
    assert_eq!(message["role"], "system");
    assert_eq!(message["purpose"], "dispatch");
    assert_eq!(message["signal"]["tagName"], "ci-event");
    assert_eq!(message["signal"]["attributes"]["repo"], "x");

    let image = post_json(
        &app,
        "/agents/plain/img",
        r#"{"kind":"user","body":"look","attachments":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png","filename":"a.png"}]}"#,
    )
    .await;
    assert_eq!(image.status, 202);
    let snapshot = settled(
        &app,
        "/agents/plain/img",
        image.json()["submissionId"].as_str().unwrap(),
    )
    .await;
    let parts = &snapshot["messages"][0]["parts"];
    assert_eq!(parts[1]["type"], "file");
    assert_eq!(parts[1]["mediaType"], "image/png");
    assert_eq!(parts[1]["size"], 8);
    // FIXME: the durable runtime does not store the uploader's filename (the in-process
    // runtime that kept it, `a.png` here, is gone); the part has none.
    assert_eq!(parts[1].get("filename"), None);

    // The part's id serves the image's bytes, with the headers of the protocol.
    let id = parts[1]["id"].as_str().unwrap();
    let bytes = get(&app, &format!("/agents/plain/img/attachments/{id}")).await;
    assert_eq!(bytes.status, 200);
    assert_eq!(bytes.body, b"\x89PNG\r\n\x1a\n");
    assert_eq!(bytes.header("content-type"), Some("image/png"));
    assert_eq!(bytes.header("content-length"), Some("8"));
    assert_eq!(bytes.header("content-disposition"), Some("inline"));
    assert_eq!(
        bytes.header("cache-control"),
        Some("private, max-age=31536000, immutable")
    );
    assert_eq!(bytes.header("content-security-policy"), Some("sandbox"));
    assert_eq!(bytes.header("x-content-type-options"), Some("nosniff"));
    // Only within its conversation, and only ids that exist.
    let other = post_json(&app, "/agents/plain/img2", r#"{"kind":"user","body":"x"}"#).await;
    assert_eq!(other.status, 202);
    for uri in [
        format!("/agents/plain/img2/attachments/{id}"),
        "/agents/plain/img/attachments/att_nope_0".to_owned(),
        format!("/agents/plain/img/attachments/{}9", &id[..id.len() - 1]),
    ] {
        let missing = get(&app, &uri).await;
        assert_eq!(
            (missing.status, missing.error_type()),
            (404, "attachment_not_found".to_owned()),
            "{uri}"
        );
    }
    let none = get(&app, &format!("/agents/plain/nobody/attachments/{id}")).await;
    assert_eq!(none.error_type(), "stream_not_found");
    // Data that is not base64, and too many images, are refused before anything is stored.
    let image = |data: &str| json!({"type": "image", "data": data, "mimeType": "image/png"});
    for attachments in [vec![image("not base64!")], vec![image("iVBORw0KGgo="); 17]] {
        let body = json!({"kind": "user", "body": "x", "attachments": attachments});
        let refused = post_json(&app, "/agents/plain/img3", &body.to_string()).await;
        assert_eq!(
            (refused.status, refused.error_type()),
            (400, "invalid_request".to_owned())
        );
    }
    assert_eq!(
        get(&app, "/agents/plain/img3").await.error_type(),
        "stream_not_found"
    );
}

async fn a_request_over_the_timeout_and_extractor_rejections_carry_the_envelope() {
    let app = app(ServerConfig {
        request_timeout: Duration::from_millis(100),
        long_poll_timeout: Duration::from_secs(10),
        ..fast_config()
    })
    .await;
    let admission = send(&app, "/agents/plain/t1", "hi").await;
    settled(
        &app,
        "/agents/plain/t1",
        admission["submissionId"].as_str().unwrap(),
    )
    .await;
    let head = get(&app, "/agents/plain/t1").await;
    let offset = head.header("stream-next-offset").unwrap().to_owned();
    // A long-poll at the head waits longer than the request timeout allows.
    let parked = get(
        &app,
        &format!("/agents/plain/t1?view=updates&offset={offset}&live=long-poll"),
    )
    .await;
    assert_eq!(
        (parked.status, parked.error_type()),
        (408, "request_timeout".to_owned())
    );
    assert_eq!(parked.header("content-type"), Some("application/json"));
    assert!(
        !parked.json()["error"]["details"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    // A path segment that is not UTF-8 once decoded is axum's rejection, in the envelope.
    let undecodable = get(&app, "/agents/plain/%FF%FE").await;
    assert_eq!(
        (undecodable.status, undecodable.error_type()),
        (400, "invalid_request".to_owned())
    );
    assert_eq!(undecodable.header("content-type"), Some("application/json"));
    assert_eq!(
        undecodable.header("x-content-type-options"),
        Some("nosniff")
    );
}

/// (method, uri, content type, body, status, type)
type Refusal = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
    u16,
    &'static str,
);

const REFUSALS: &[Refusal] = &[
    (
        "POST",
        "/agents/nope/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi"}"#,
        404,
        "agent_not_found",
    ),
    (
        "POST",
        "/agents/plain/x",
        None,
        r#"{"kind":"user","body":"hi"}"#,
        415,
        "unsupported_media_type",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("text/plain"),
        r#"{"kind":"user","body":"hi"}"#,
        415,
        "unsupported_media_type",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"#,
        400,
        "invalid_json",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#""hi""#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"robot","body":"hi"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","uid":"inst_1","initialData":{}}"#,
        400,
        "invalid_request",
    ),
    // `initialData` seeds the state, which is a JSON object.
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","initialData":[7]}"#,
        400,
        "invalid_request",
    ),
    // Unknown fields, and fields of the other kind, are refused by name.
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","priority":"high"}"#,
        400,
        "invalid_request",
    ),
    // A message's choices of the wrong shape (whether the agent has them is checked at
    // dispatch), a skill on a signal.
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","model":7}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","thinking":"extreme"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","args":{"a":1}}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"signal","type":"t","body":"b","skill":"s"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"signal","type":"t","body":"b","attachments":[]}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","idempotencyKey":7}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi","idempotencyKey":""}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"signal","type":"","body":"b"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"signal","type":"t","body":"b","tagName":"a b"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"b","attachments":[{"type":"audio","data":"AA==","mimeType":"audio/wav"}]}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/x?wait=true",
        Some("application/json"),
        r#"{"kind":"user","body":"hi"}"#,
        400,
        "invalid_request",
    ),
    (
        "POST",
        "/agents/plain/%20",
        Some("application/json"),
        r#"{"kind":"user","body":"hi"}"#,
        400,
        "invalid_request",
    ),
    (
        "PUT",
        "/agents/plain/x",
        Some("application/json"),
        r#"{"kind":"user","body":"hi"}"#,
        405,
        "method_not_allowed",
    ),
    (
        "PATCH",
        "/agents/plain/x",
        None,
        "",
        405,
        "method_not_allowed",
    ),
    (
        "GET",
        "/agents/plain/x/abort",
        None,
        "",
        405,
        "method_not_allowed",
    ),
    ("GET", "/agents/plain/x", None, "", 404, "stream_not_found"),
    (
        "GET",
        "/agents/plain/x?view=updates&offset=-1",
        None,
        "",
        404,
        "stream_not_found",
    ),
    (
        "GET",
        "/agents/plain/x?view=updates",
        None,
        "",
        400,
        "invalid_request",
    ),
    (
        "GET",
        "/agents/plain/x?view=updates&offset=12",
        None,
        "",
        400,
        "invalid_request",
    ),
    (
        "GET",
        "/agents/plain/x?view=updates&offset=-1&offset=-1",
        None,
        "",
        400,
        "invalid_request",
    ),
    (
        "GET",
        "/agents/plain/x?view=updates&offset=-1&live=forever",
        None,
        "",
        400,
        "invalid_request",
    ),
    (
        "GET",
        "/agents/plain/x?view=updates&offset=-1&tail=5",
        None,
        "",
        400,
        "invalid_request",
    ),
    (
        "GET",
        "/agents/plain/x?view=history&offset=-1",
        None,
        "",
        400,
        "invalid_request",
    ),
    (
        "GET",
        "/agents/plain/x?view=pictures",
        None,
        "",
        400,
        "invalid_request",
    ),
    ("GET", "/nowhere", None, "", 404, "route_not_found"),
    (
        "GET",
        "/agents/plain/x/attachments/a1",
        None,
        "",
        404,
        "stream_not_found",
    ),
];

async fn every_refusal_has_its_status_envelope_and_stores_nothing() {
    let app = app(fast_config()).await;
    for (method, uri, content_type, body, status, kind) in REFUSALS {
        let mut request = Request::builder().method(*method).uri(*uri);
        if let Some(content_type) = content_type {
            request = request.header("content-type", *content_type);
        }
        let reply = call(&app, request.body(Body::from(*body)).unwrap()).await;
        assert_eq!(
            (reply.status, reply.error_type()),
            (*status, (*kind).to_owned()),
            "{method} {uri} {body}"
        );
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        if *status == 405 {
            assert!(reply.header("allow").is_some(), "{method} {uri}");
        }
    }
    // None of the refused sends created the conversation.
    assert_eq!(
        get(&app, "/agents/plain/x").await.error_type(),
        "stream_not_found"
    );
    let head = call(
        &app,
        Request::head("/agents/plain/x")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, 404);
    assert!(head.body.is_empty());
}

/// The refusals of unknown fields and `initialData` name the field.
async fn unknown_fields_and_initial_data_are_refused_by_name() {
    let app = app(fast_config()).await;
    let unknown = post_json(
        &app,
        "/agents/plain/f",
        r#"{"kind":"user","body":"hi","priority":"high"}"#,
    )
    .await;
    assert_eq!(unknown.status, 400);
    let message = unknown.json()["error"]["details"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("Unknown field `priority`")
            && message.contains("`kind`, `body`, `attachments`"),
        "{message}"
    );
    let big = json!({"kind": "user", "body": "hi", "initialData": {"big": "x".repeat(70_000)}});
    for (body, expected) in [
        (
            r#"{"kind":"user","body":"hi","initialData":"issue 7"}"#.to_owned(),
            "`initialData` cannot be the conversation's state: invalid state: the state must be \
             a JSON object",
        ),
        (
            big.to_string(),
            "`initialData` cannot be the conversation's state: the state is 70010 bytes",
        ),
        (
            r#"{"kind":"user","body":"hi","uid":"u1","initialData":{"issue":7}}"#.to_owned(),
            "`initialData` with a string `uid` is a contradiction",
        ),
    ] {
        let initial = post_json(&app, "/agents/plain/f", &body).await;
        assert_eq!(initial.status, 400);
        let message = initial.json()["error"]["details"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.starts_with(expected), "{message}");
    }
    let too_long = json!({"kind": "user", "body": "hi", "idempotencyKey": "k".repeat(257)});
    let refused = post_json(&app, "/agents/plain/f", &too_long.to_string()).await;
    assert_eq!(refused.status, 400);
    // Keys that would show as something else in a log or console: a right-to-left override
    // (`evil` shows as `live`), an isolate, a zero-width space, a left-to-right mark, a line
    // separator, an escape.
    for key in [
        "order-\u{202E}live",
        "order-\u{2067}42\u{2069}",
        "order\u{200B}42",
        "order-\u{200E}42",
        "order\u{2028}42",
        "order-\u{1b}[2J",
    ] {
        let body = json!({"kind": "user", "body": "hi", "idempotencyKey": key});
        let refused = post_json(&app, "/agents/plain/f", &body.to_string()).await;
        assert_eq!(refused.status, 400, "{key:?}");
        let details = refused.json()["error"]["details"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            details.starts_with("`idempotencyKey` holds the character U+"),
            "{details}"
        );
    }
    // Spaces, punctuation and letters of any script are fine.
    let visible = json!({"kind": "user", "body": "hi", "idempotencyKey": "Bestellung 42 · ü/ש"});
    let accepted = post_json(&app, "/agents/plain/visible-key", &visible.to_string()).await;
    assert_eq!(accepted.status, 202, "{:?}", accepted.json());
    // The keys of schedule ticks are not a client's to take.
    let tick = json!({"kind": "user", "body": "hi", "idempotencyKey": "schedule:nightly:2026-01-01T00:00:00Z"});
    let refused = post_json(&app, "/agents/plain/f", &tick.to_string()).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.json()["error"]["details"]
            .as_str()
            .unwrap()
            .contains("belong to the ticks of schedules"),
        "{:?}",
        refused.json()
    );
    assert_eq!(
        get(&app, "/agents/plain/f").await.error_type(),
        "stream_not_found"
    );
}

/// `idempotencyKey`: the same key and message give the first receipt again (`deduplicated`),
/// nothing is admitted twice and the model runs once; the same key with another message is 409
/// `submission_conflict` naming the submission; keys are per conversation.
async fn an_idempotency_key_converges_on_the_first_submission() {
    let app = app(fast_config()).await;
    let body = r#"{"kind":"user","body":"hi","idempotencyKey":"order-17"}"#;
    let first = post_json(&app, "/agents/plain/k", body).await;
    assert_eq!(first.status, 202);
    let first = first.json();
    assert_eq!(first.get("deduplicated"), None);
    let submission = first["submissionId"].as_str().unwrap().to_owned();
    // Before and after the first one settles.
    let again = post_json(&app, "/agents/plain/k", body).await;
    assert_eq!(again.status, 202);
    let again = again.json();
    assert_eq!(again["submissionId"], submission.as_str());
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["uid"], first["uid"]);
    assert_eq!(again["offset"], first["offset"]);
    let snapshot = settled(&app, "/agents/plain/k", &submission).await;
    let late = post_json(&app, "/agents/plain/k", body).await.json();
    assert_eq!(late["submissionId"], submission.as_str());
    assert_eq!(late["deduplicated"], true);
    let after = get(&app, "/agents/plain/k").await.json();
    assert_eq!(after["messages"], snapshot["messages"]);
    let messages = after["messages"].as_array().unwrap();
    assert_eq!(
        messages
            .iter()
            .map(|message| message["role"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["user", "assistant"]
    );
    assert_eq!(after["settlements"].as_array().unwrap().len(), 1);

    let conflict = post_json(
        &app,
        "/agents/plain/k",
        r#"{"kind":"user","body":"something else","idempotencyKey":"order-17"}"#,
    )
    .await;
    assert_eq!(
        (conflict.status, conflict.error_type()),
        (409, "submission_conflict".to_owned())
    );
    assert_eq!(
        conflict.json()["error"]["meta"]["submissionId"],
        submission.as_str()
    );
    // The same key in another conversation is another delivery.
    let elsewhere = post_json(&app, "/agents/plain/k2", body).await.json();
    assert_ne!(elsewhere["submissionId"], submission.as_str());
    assert_eq!(elsewhere.get("deduplicated"), None);
}

async fn offsets_past_the_head_and_large_bodies_are_refused() {
    let app = app(ServerConfig {
        body_limit: 1024,
        ..fast_config()
    })
    .await;
    send(&app, "/agents/plain/b1", "hi").await;
    let past = get(
        &app,
        "/agents/plain/b1?view=updates&offset=0000000000000000_0000000000009999",
    )
    .await;
    assert_eq!(
        (past.status, past.error_type()),
        (500, "conversation_stream_store_failure".to_owned())
    );
    let big = format!(r#"{{"kind":"user","body":"{}"}}"#, "x".repeat(4096));
    let reply = post_json(&app, "/agents/plain/b2", &big).await;
    assert_eq!(
        (reply.status, reply.error_type()),
        (413, "payload_too_large".to_owned())
    );
    assert_eq!(
        get(&app, "/agents/plain/b2").await.error_type(),
        "stream_not_found"
    );
}

async fn a_token_is_required_on_every_route_when_configured() {
    let app = app(ServerConfig {
        token: Some("s3cret".to_owned()),
        ..fast_config()
    })
    .await;
    for uri in [
        "/_flue/health",
        "/agents/plain/x",
        "/agents/plain/x/state",
        "/nowhere",
    ] {
        let reply = get(&app, uri).await;
        assert_eq!(
            (reply.status, reply.error_type()),
            (401, "unauthorized".to_owned()),
            "{uri}"
        );
    }
    let wrong = call(
        &app,
        Request::get("/_flue/health")
            .header("authorization", "Bearer s3cre7")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(wrong.status, 401);
    let right = call(
        &app,
        Request::get("/_flue/health")
            .header("authorization", "Bearer s3cret")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(right.status, 200);
}

/// `initialData` seeds the conversation's state, which `GET .../state` reads: 404 before the
/// conversation exists, the seed (version 1) once the first message reached the log; a later
/// message's `initialData` changes nothing.
async fn initial_data_seeds_the_state_that_get_state_reads() {
    let app = app(fast_config()).await;
    let missing = get(&app, "/agents/plain/s1/state").await;
    assert_eq!(missing.status, 404);
    let first = post_json(
        &app,
        "/agents/plain/s1",
        r#"{"kind":"user","body":"hi","initialData":{"issue":7,"labels":["bug"]}}"#,
    )
    .await;
    assert_eq!(first.status, 202);
    let submission = first.json()["submissionId"].as_str().unwrap().to_owned();
    let snapshot = settled(&app, "/agents/plain/s1", &submission).await;
    // The seed is not a message.
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 2);
    let state = get(&app, "/agents/plain/s1/state").await;
    assert_eq!(state.status, 200);
    assert_eq!(
        state.json(),
        json!({"state": {"issue": 7, "labels": ["bug"]}, "version": 1, "source": "initial_data"})
    );
    let second = post_json(
        &app,
        "/agents/plain/s1",
        r#"{"kind":"user","body":"again","initialData":{"issue":8}}"#,
    )
    .await;
    let submission = second.json()["submissionId"].as_str().unwrap().to_owned();
    settled(&app, "/agents/plain/s1", &submission).await;
    let state = get(&app, "/agents/plain/s1/state").await;
    assert_eq!(state.json()["state"]["issue"], 7);
    assert_eq!(state.json()["version"], 1);
    // Without initialData a conversation's state is empty.
    let plain = post_json(&app, "/agents/plain/s2", r#"{"kind":"user","body":"hi"}"#).await;
    let submission = plain.json()["submissionId"].as_str().unwrap().to_owned();
    settled(&app, "/agents/plain/s2", &submission).await;
    let state = get(&app, "/agents/plain/s2/state").await;
    assert_eq!(state.json(), json!({"state": {}, "version": 0}));
}

async fn health_and_agents_describe_the_server() {
    let app = app(fast_config()).await;
    assert_eq!(
        get(&app, "/_flue/health").await.json(),
        json!({"status": "ok"})
    );
    let agents = get(&app, "/_flue/agents").await.json();
    assert_eq!(
        agents["agents"][0],
        json!({"name": "plain", "description": "the plain agent", "model": "scripted/test.json"})
    );
    assert_eq!(agents["agents"].as_array().unwrap().len(), 4);
}

async fn cors_is_off_unless_origins_are_configured() {
    let request = || {
        Request::get("/_flue/health")
            .header("origin", "https://app.example.com")
            .body(Body::empty())
            .unwrap()
    };
    let off = app(fast_config()).await.oneshot(request()).await.unwrap();
    assert!(off.headers().get("access-control-allow-origin").is_none());
    let on = app(ServerConfig {
        cors_origins: vec!["https://app.example.com".to_owned()],
        ..fast_config()
    })
    .await
    .oneshot(request())
    .await
    .unwrap();
    assert_eq!(
        on.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    assert!(
        on.headers()["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("stream-next-offset")
    );
    let _ = on.into_body().collect().await;
}

/// Each test runs on a multi-threaded runtime (the durable runtime's follower and readers run
/// beside the request).
macro_rules! tests {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn durable() {
                super::$name().await;
            }
        }
    )*};
}

tests!(
    admission_returns_202_with_coordinates_and_the_reply_lands_in_the_snapshot,
    tool_calls_appear_as_dynamic_tool_parts_and_chunks,
    reading_from_the_origin_begins_with_a_reset,
    updates_from_the_head_are_empty_and_up_to_date_and_long_poll_times_out_empty,
    a_parked_long_poll_returns_as_soon_as_the_next_message_lands,
    pages_hold_at_most_100_batches_and_say_when_more_is_waiting,
    sse_frames_data_then_control_with_ids_and_resumes_from_last_event_id,
    sse_streams_text_as_the_model_produces_it_and_a_resumed_reader_sees_it_once,
    an_unread_sse_stream_blocks_neither_the_agent_nor_other_readers,
    abort_settles_the_running_and_every_queued_submission_aborted,
    uid_conditions_create_only_continue_only_and_store_nothing_when_they_fail,
    signals_and_images_are_admitted_as_their_messages,
    a_request_over_the_timeout_and_extractor_rejections_carry_the_envelope,
    every_refusal_has_its_status_envelope_and_stores_nothing,
    unknown_fields_and_initial_data_are_refused_by_name,
    initial_data_seeds_the_state_that_get_state_reads,
    an_idempotency_key_converges_on_the_first_submission,
    offsets_past_the_head_and_large_bodies_are_refused,
    a_token_is_required_on_every_route_when_configured,
    health_and_agents_describe_the_server,
    cors_is_off_unless_origins_are_configured,
);
