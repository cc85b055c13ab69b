//! The prompt of a model call: rebuilt from a real stored log (the conversation of
//! `../timeline/PROVENANCE.md`), and recorded exactly as sent, secrets redacted.

use std::sync::Arc;

use flue_core::model::{ModelRequest, TurnSink};
use flue_core::{
    BatchBody, DEFAULT_SESSION, Record, Redactor, ScriptedProvider, StoredRecord, StreamBatch,
    ThinkingLevel, model_view,
};
use serde_json::Value;

use super::{Call, PromptRecorder, prompt_of};

/// The root session's records of the stored conversation.
fn root_records() -> Vec<StoredRecord> {
    let batches: Vec<StreamBatch> =
        serde_json::from_str(include_str!("../timeline/stream-with-timing.json")).unwrap();
    batches
        .into_iter()
        .filter_map(|batch| match batch.body {
            BatchBody::Records {
                session, records, ..
            } if session == DEFAULT_SESSION => Some(records),
            _ => None,
        })
        .flatten()
        .collect()
}

fn types(shown: &Value) -> Vec<&str> {
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["type"].as_str().unwrap())
        .collect()
}

#[test]
fn each_call_gets_the_records_before_it_as_the_model_saw_them() {
    let records = root_records();
    let first = prompt_of(&records, Call::Turn(1), None).unwrap();
    assert_eq!(first["source"], "log");
    assert_eq!(first["turns"], 3);
    assert_eq!(first["model"], "scripted/script.json");
    assert_eq!(types(&first), ["user"]);
    assert_eq!(first["messages"][0]["content"][0]["text"], "build it");
    assert!(first.get("recorded").is_none());
    // The second call saw the command and its result, not the hook's decision.
    let second = prompt_of(&records, Call::Turn(2), None).unwrap();
    assert_eq!(types(&second), ["user", "assistant", "tool_result"]);
    assert_eq!(second["stored"]["type"], "assistant");
    // By the index of its record, the same call.
    let index = second["index"].as_u64().unwrap();
    assert_eq!(
        prompt_of(&records, Call::Index(index), None).unwrap(),
        second
    );
    assert!(matches!(records[2].record, Record::Hook(_)));
    assert!(prompt_of(&records, Call::Index(2), None).is_none());
    assert!(prompt_of(&records, Call::Turn(0), None).is_none());
    assert!(prompt_of(&records, Call::Turn(4), None).is_none());
}

#[tokio::test]
async fn a_recorded_call_is_shown_as_sent_with_secrets_redacted() {
    let secret = "sk-live-4f9a8b7c6d5e4f3a2b1c";
    let records = root_records();
    // Everything before the second call: the message, the first call, the hook, the result.
    let before: Vec<Record> = records[..4]
        .iter()
        .map(|stored| stored.record.clone())
        .collect();
    let view = model_view(&before);
    let scripted = ScriptedProvider::new(std::env::temp_dir())
        .with_script("s.json", r#"{"rules": [{"reply": {"text": "ok"}}]}"#)
        .unwrap();
    let recorder = PromptRecorder::new();
    let provider = recorder.wrap(
        Arc::new(scripted),
        Redactor::new([secret.to_owned()]).unwrap(),
    );
    let system = format!("You deploy with the token {secret}.");
    let request = ModelRequest {
        model: "s.json",
        system: &system,
        messages: &view,
        tools: &[],
        thinking: ThinkingLevel::default(),
        max_output_tokens: 1000,
    };
    let turn = provider
        .stream_turn(request, &TurnSink::discard())
        .await
        .unwrap();
    assert_eq!(provider.id(), "scripted");
    let shown = prompt_of(&records, Call::Turn(2), Some(&recorder)).unwrap();
    assert_eq!(shown["source"], "recorded", "{shown:#}");
    let recorded = &shown["recorded"];
    assert_eq!(recorded["system"], "You deploy with the token [redacted].");
    assert_eq!(recorded["maxOutputTokens"], 1000);
    assert_eq!(recorded["answer"]["content"][0]["text"], "ok");
    assert_eq!(
        recorded["answer"]["usage"]["output_tokens"],
        turn.usage.output_tokens
    );
    assert!(!shown.to_string().contains(secret), "{shown:#}");
    // Another call's messages are not this one's: the first call is rebuilt from the log.
    let first = prompt_of(&records, Call::Turn(1), Some(&recorder)).unwrap();
    assert_eq!(first["source"], "log");
}

#[tokio::test]
async fn the_recorder_keeps_the_latest_calls_only() {
    let scripted = ScriptedProvider::new(std::env::temp_dir())
        .with_script("s.json", r#"{"rules": [{"reply": {"text": "ok"}}]}"#)
        .unwrap();
    let recorder = PromptRecorder::new();
    let provider = recorder.wrap(Arc::new(scripted), Redactor::default());
    let messages: Vec<Vec<Record>> = (0..super::RECORDED_CALLS + 1)
        .map(|n| vec![Record::User(flue_core::UserMessage::text(format!("m{n}")))])
        .collect();
    for view in &messages {
        let request = ModelRequest {
            model: "s.json",
            system: "",
            messages: view,
            tools: &[],
            thinking: ThinkingLevel::default(),
            max_output_tokens: 10,
        };
        provider
            .stream_turn(request, &TurnSink::discard())
            .await
            .unwrap();
    }
    let key = |view: &[Record]| serde_json::to_string(view).unwrap();
    assert!(recorder.find(&key(&messages[0])).is_none());
    assert!(recorder.find(&key(&messages[1])).is_some());
    assert!(
        recorder
            .find(&key(&messages[super::RECORDED_CALLS]))
            .is_some()
    );
}
