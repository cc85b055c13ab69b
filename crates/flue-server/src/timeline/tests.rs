//! The timeline of real stored streams: one conversation as flue stored it before records
//! carried their timing and as it stores it now (see PROVENANCE.md beside this file).

use flue_core::{BatchBody, StreamBatch};

use super::{Step, submissions, timeline};

fn stream(json: &str) -> Vec<StreamBatch> {
    serde_json::from_str(json).unwrap()
}

fn before_timing() -> Vec<StreamBatch> {
    stream(include_str!("stream-before-timing.json"))
}

fn with_timing() -> Vec<StreamBatch> {
    stream(include_str!("stream-with-timing.json"))
}

fn submission_id(batches: &[StreamBatch]) -> String {
    submissions(batches)[0].submission_id.clone()
}

fn kinds(steps: &[Step]) -> Vec<&'static str> {
    steps.iter().map(|step| step.kind).collect()
}

/// Every step, nested ones included, in the order drawn.
fn flat(steps: &[Step]) -> Vec<&Step> {
    steps
        .iter()
        .flat_map(|step| std::iter::once(step).chain(flat(&step.children)))
        .collect()
}

/// The stored record times (`at`) of `kind` records, in order.
fn record_times(batches: &[StreamBatch], kind: &str) -> Vec<u64> {
    batches
        .iter()
        .filter_map(|batch| match &batch.body {
            BatchBody::Records { records, .. } => Some(records),
            _ => None,
        })
        .flatten()
        .filter(|stored| serde_json::to_value(&stored.record).unwrap()["type"] == kind)
        .map(|stored| stored.at)
        .collect()
}

#[test]
fn both_versions_give_the_same_steps_with_the_task_nested() {
    for batches in [before_timing(), with_timing()] {
        let id = submission_id(&batches);
        let drawn = timeline(&batches, &id, u64::MAX).unwrap();
        assert_eq!(drawn.message, "build it");
        assert_eq!(drawn.outcome.as_deref(), Some("completed"));
        assert_eq!(drawn.attempts, 1);
        assert_eq!(
            kinds(&drawn.steps),
            ["model", "hook", "tool", "model", "task", "model"]
        );
        let task = &drawn.steps[4];
        assert!(task.detail.starts_with("task "), "{task:?}");
        assert_eq!(kinds(&task.children), ["model", "hook", "tool", "model"]);
        assert!(
            task.children
                .iter()
                .all(|step| step.session.starts_with("task:default:")),
            "{task:?}"
        );
        // The task's steps lie inside its call.
        for child in &task.children {
            assert!(child.start >= task.start, "{child:?} before {task:?}");
            assert!(
                child.start + child.duration_ms <= task.start + task.duration_ms + 1,
                "{child:?} after {task:?}"
            );
        }
        // The timeline ends at the settlement, every step within it.
        for step in flat(&drawn.steps) {
            assert!(
                step.start + step.duration_ms <= drawn.duration_ms,
                "{step:?}"
            );
        }
    }
}

#[test]
fn tokens_add_up_over_every_model_call_tasks_included() {
    for batches in [before_timing(), with_timing()] {
        let id = submission_id(&batches);
        let drawn = timeline(&batches, &id, u64::MAX).unwrap();
        let mut stored = flue_core::Usage::default();
        let mut turns = 0;
        for batch in &batches {
            if let BatchBody::Records { records, .. } = &batch.body {
                for record in records {
                    if let flue_core::Record::Assistant(message) = &record.record {
                        stored += message.usage;
                        turns += 1;
                    }
                }
            }
        }
        assert_eq!(turns, 5);
        assert_eq!(drawn.model_calls, 5);
        assert_eq!(drawn.usage, stored);
        let task = &drawn.steps[4];
        let task_usage = task.usage.unwrap();
        let children: u64 = task
            .children
            .iter()
            .filter_map(|step| step.usage)
            .map(|usage| usage.input_tokens)
            .sum();
        assert_eq!(task_usage.input_tokens, children);
        assert!(drawn.steps[0].usage.unwrap().input_tokens > 0);
    }
}

#[test]
fn recorded_timing_is_used_as_stored_and_the_slow_command_is_the_slowest() {
    let batches = with_timing();
    let drawn = timeline(&batches, &submission_id(&batches), u64::MAX).unwrap();
    let sleep = &drawn.steps[2];
    assert_eq!(sleep.label, "bash");
    assert!(!sleep.estimated);
    // `sleep 0.4` ran at least 400 ms.
    assert!(sleep.duration_ms >= 400, "{sleep:?}");
    assert!(sleep.slowest);
    let all = flat(&drawn.steps);
    assert_eq!(all.iter().filter(|step| step.slowest).count(), 1);
    // Model calls, tool runs and the task carry their recorded start; only hooks estimate.
    for step in &all {
        assert_eq!(step.estimated, step.kind == "hook", "{step:?}");
    }
    // The recorded start and duration, as stored on the tool result.
    let result = batches
        .iter()
        .find_map(|batch| match &batch.body {
            BatchBody::Records {
                session, records, ..
            } if session == "default" => records
                .iter()
                .find(|stored| matches!(stored.record, flue_core::Record::ToolResult(_))),
            _ => None,
        })
        .unwrap();
    let timing = result.timing().unwrap();
    assert_eq!(sleep.start, timing.started_at - drawn.accepted_at);
    assert_eq!(sleep.duration_ms, timing.duration_ms);
    // Ended before it was stored.
    assert!(timing.started_at + timing.duration_ms <= result.at);
}

#[test]
fn a_log_without_timing_gets_starts_estimated_from_the_record_before() {
    let batches = before_timing();
    let drawn = timeline(&batches, &submission_id(&batches), u64::MAX).unwrap();
    let all = flat(&drawn.steps);
    assert!(all.iter().all(|step| step.estimated || step.kind == "task"));
    // The command ran from its model turn's record to its result's record.
    let turns = record_times(&batches, "assistant");
    let results = record_times(&batches, "tool_result");
    let sleep = &drawn.steps[2];
    assert_eq!(sleep.start, turns[0] - drawn.accepted_at);
    assert_eq!(sleep.duration_ms, results[0] - turns[0]);
    assert!(sleep.duration_ms >= 400, "{sleep:?}");
    assert!(sleep.slowest);
}

#[test]
fn a_submission_cut_short_mid_task_shows_what_runs_until_now() {
    let mut batches = with_timing();
    // The stream as it was while the helper's command ran: up to its hook decision.
    let hook_in_task = batches
        .iter()
        .position(|batch| {
            matches!(&batch.body, BatchBody::Records { session, records, .. }
                if session.starts_with("task:")
                    && matches!(records[0].record, flue_core::Record::Hook(_)))
        })
        .unwrap();
    batches.truncate(hook_in_task + 1);
    let id = submission_id(&batches);
    let last = batches.last().unwrap().at;
    let now = last + 1000;
    let drawn = timeline(&batches, &id, now).unwrap();
    assert_eq!(drawn.outcome, None);
    assert_eq!(drawn.duration_ms, now - drawn.accepted_at);
    assert_eq!(
        kinds(&drawn.steps),
        ["model", "hook", "tool", "model", "task"]
    );
    let task = &drawn.steps[4];
    assert!(task.running, "{task:?}");
    assert_eq!(task.start + task.duration_ms, drawn.duration_ms);
    assert_eq!(kinds(&task.children), ["model", "hook", "tool"]);
    let command = &task.children[2];
    assert!(command.running && command.estimated, "{command:?}");
    assert_eq!(command.start + command.duration_ms, drawn.duration_ms);
}

#[test]
fn the_submission_list_and_an_unknown_submission() {
    let batches = with_timing();
    let list = submissions(&batches);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].message, "build it");
    assert_eq!(list[0].outcome.as_deref(), Some("completed"));
    assert!(timeline(&batches, "01NOSUCHSUBMISSION", 0).is_none());
    assert!(submissions(&[]).is_empty());
}

#[test]
fn the_timeline_serializes_as_the_console_reads_it() {
    let batches = with_timing();
    let drawn = timeline(&batches, &submission_id(&batches), u64::MAX).unwrap();
    let json = serde_json::to_value(&drawn).unwrap();
    for field in [
        "submissionId",
        "message",
        "acceptedAt",
        "queuedMs",
        "attempts",
        "outcome",
        "durationMs",
        "usage",
        "modelCalls",
        "steps",
    ] {
        assert!(json.get(field).is_some(), "{field} missing in {json:#}");
    }
    let step = &json["steps"][2];
    assert_eq!(step["kind"], "tool");
    assert_eq!(step["slowest"], true);
    assert!(step["durationMs"].as_u64().is_some());
    assert!(step.get("estimated").is_none());
    assert_eq!(json["steps"][4]["children"].as_array().unwrap().len(), 4);
}

#[test]
fn a_pause_lasts_until_its_decision_and_the_call_runs_after_it() {
    let batches = stream(include_str!("stream-pause.json"));
    let id = submission_id(&batches);
    let drawn = timeline(&batches, &id, u64::MAX).unwrap();
    assert_eq!(drawn.outcome.as_deref(), Some("completed"));
    // Resumed after the decision within the same attempt.
    assert_eq!(drawn.attempts, 1);
    assert_eq!(kinds(&drawn.steps), ["model", "pause", "tool", "model"]);
    let pause = &drawn.steps[1];
    assert_eq!(pause.label, "bash waits");
    assert_eq!(pause.detail, "for a decision");
    assert!(!pause.running);
    let asked = record_times(&batches, "action_required")[0];
    let decided = record_times(&batches, "action_resolved")[0];
    assert_eq!(pause.start, asked - drawn.accepted_at);
    assert_eq!(pause.duration_ms, decided - asked);
    let command = &drawn.steps[2];
    assert!(
        command.start >= pause.start + pause.duration_ms,
        "{command:?}"
    );
    assert!(!command.estimated);
    // A person's time is not a slow step.
    assert!(pause.duration_ms > command.duration_ms);
    assert!(!pause.slowest);
    assert!(command.slowest);
}

#[test]
fn a_waiting_submission_shows_the_pause_running_and_no_running_call() {
    let mut batches = stream(include_str!("stream-pause.json"));
    let waiting = batches
        .iter()
        .position(|batch| matches!(batch.body, BatchBody::Waiting { .. }))
        .unwrap();
    batches.truncate(waiting + 1);
    let id = submission_id(&batches);
    let now = batches.last().unwrap().at + 5000;
    let drawn = timeline(&batches, &id, now).unwrap();
    assert_eq!(drawn.outcome, None);
    assert_eq!(kinds(&drawn.steps), ["model", "pause"]);
    let pause = &drawn.steps[1];
    assert!(pause.running);
    assert_eq!(pause.start + pause.duration_ms, drawn.duration_ms);
}

/// A compaction's row carries what writing its summary cost, and the submission's usage counts
/// it (a compaction is model calls too), but not as a call of the agent's model.
#[test]
fn a_compaction_row_carries_its_summary_usage_and_the_total_counts_it() {
    let mut batches = with_timing();
    let id = submission_id(&batches);
    let before = timeline(&batches, &id, u64::MAX).unwrap();
    let spent = flue_core::Usage {
        input_tokens: 700,
        output_tokens: 90,
        ..flue_core::Usage::default()
    };
    // Stored after the root session's first model call, as a compaction between turns is.
    let (batch, index) = batches
        .iter()
        .enumerate()
        .find_map(|(batch, body)| match &body.body {
            BatchBody::Records {
                session, records, ..
            } if session == "default" => records
                .iter()
                .position(|stored| matches!(stored.record, flue_core::Record::Assistant(_)))
                .map(|index| (batch, index)),
            _ => None,
        })
        .unwrap();
    let BatchBody::Records { records, .. } = &mut batches[batch].body else {
        unreachable!()
    };
    let mut compaction = records[index].clone();
    compaction.record = flue_core::Record::Compaction(flue_core::record::CompactionSummary {
        summary: "Earlier: the build was asked for.".to_owned(),
        first_kept: 0,
        tokens_before: 1_000,
        usage: Some(spent),
    });
    records.insert(index + 1, compaction);
    let drawn = timeline(&batches, &id, u64::MAX).unwrap();
    let row = drawn
        .steps
        .iter()
        .find(|step| step.kind == "compaction")
        .unwrap();
    assert_eq!(row.usage, Some(spent));
    assert_eq!(drawn.model_calls, before.model_calls);
    let mut expected = before.usage;
    expected += spent;
    assert_eq!(drawn.usage, expected);
}
