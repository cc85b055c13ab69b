//! `flue schedules`: the workspace's schedules (docs/schedules.md) with their next fire times,
//! as `flue serve` and `flue dev` will fire them. A workspace with problems prints them all,
//! like `flue build`, and fails.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use flue_build::{Schedule, ScheduleMessage, Timing, Workspace};
use serde_json::{Value, json};

use crate::Exit;
use crate::args::SchedulesArgs;
use crate::stdout::{out, outln};
use crate::terminal::Output;
use crate::workspace::resolve_root;

/// Runs `flue schedules`.
pub(crate) fn list(args: &SchedulesArgs) -> anyhow::Result<Exit> {
    let root = resolve_root(args.root.as_deref())?;
    let output = Output::for_workspace(&root)?;
    let workspace = match Workspace::load(&root) {
        Ok(workspace) => workspace,
        Err(diagnostics) => {
            eprintln!("{diagnostics}");
            let count = diagnostics.as_slice().len();
            let noun = if count == 1 { "problem" } else { "problems" };
            eprintln!("error: the workspace has {count} {noun}");
            return Ok(Exit::Failure);
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let schedules = workspace.schedules();
    let n_next = usize::from(args.next);
    if args.json {
        let listed: Vec<Value> = schedules
            .iter()
            .map(|schedule| to_json(schedule, now, n_next))
            .collect();
        outln!("{}", output.json_pretty(&json!({ "schedules": listed }))?)?;
        return Ok(Exit::Success);
    }
    if schedules.is_empty() {
        eprintln!(
            "no schedules under {}; declare one under `schedules:` in an agent file \
             (docs/schedules.md)",
            root.display()
        );
        return Ok(Exit::Success);
    }
    out!("{}", output.stdout_text(&table(&schedules, now, n_next)))?;
    Ok(Exit::Success)
}

/// One schedule as `--json` prints it.
fn to_json(schedule: &Schedule, now: u64, n_next: usize) -> Value {
    let mut value = json!({
        "name": schedule.name,
        "agent": schedule.agent,
        "file": schedule.path,
        "line": schedule.line,
        "timezone": schedule.timezone_name(),
        "conversation": schedule.conversation,
        "catchUp": schedule.catch_up.as_str(),
        "origin": schedule.origin(),
        "next": schedule
            .next_ticks(now, n_next)
            .into_iter()
            .map(|tick| schedule.local_tick_text(tick))
            .collect::<Vec<_>>(),
    });
    match &schedule.timing {
        Timing::Cron { expression, .. } => value["cron"] = json!(expression),
        Timing::Every { interval_ms } => value["everySeconds"] = json!(interval_ms / 1000),
        _ => {}
    }
    value["message"] = match &schedule.message {
        ScheduleMessage::Text(text) => json!({ "kind": "message", "text": text }),
        ScheduleMessage::Signal {
            signal_type,
            body,
            attributes,
            tag_name,
        } => json!({
            "kind": "signal",
            "type": signal_type,
            "body": body,
            "attributes": attributes,
            "tagName": tag_name,
        }),
        _ => Value::Null,
    };
    value
}

/// One line per schedule under a header: name, agent, timing, zone, conversation, catch-up,
/// then the next fire times in the schedule's zone.
fn table(schedules: &[&Schedule], now: u64, n_next: usize) -> String {
    let rows: Vec<[String; 7]> = schedules
        .iter()
        .map(|schedule| {
            let next: Vec<String> = schedule
                .next_ticks(now, n_next)
                .into_iter()
                .map(|tick| schedule.local_tick_text(tick))
                .collect();
            [
                schedule.name.clone(),
                schedule.agent.clone(),
                schedule.timing_text(),
                schedule.timezone_name().to_owned(),
                schedule.conversation.clone(),
                schedule.catch_up.as_str().to_owned(),
                if next.is_empty() {
                    "never".to_owned()
                } else {
                    next.join(", ")
                },
            ]
        })
        .collect();
    let header = [
        "NAME",
        "AGENT",
        "WHEN",
        "ZONE",
        "CONVERSATION",
        "CATCH-UP",
        "NEXT",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut text = String::new();
        for (idx, cell) in cells.iter().enumerate() {
            if idx + 1 == cells.len() {
                text.push_str(cell);
            } else {
                // Writing to a String cannot fail.
                let _ = write!(text, "{cell:<width$}  ", width = widths[idx]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}
