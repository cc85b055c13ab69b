//! `flue run --jsonl`: the run's events as JSON lines on stdout, as they happen.
//!
//! Each line is one object with `"v": 1` (the schema's version) and a `type`: the events of
//! the run's own submission as the wire format names them (`text_delta`, `thinking_delta`,
//! `tool_start`, `tool_end`, `action_required`, `turn_end` with its `usage`, ...), then a
//! last `settlement` line with the fields of `--json`'s object. Strings are redacted like all
//! output; docs/cli.md documents the schema.

use std::io::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::terminal::Output;

/// The schema version every line carries.
pub(crate) const VERSION: u64 = 1;

/// Writes one event (or the settlement) as a line: its fields, `v` and `type` first.
pub(crate) fn write_line(output: &Output, kind: Option<&str>, value: &impl Serialize) {
    let Ok(Value::Object(fields)) = serde_json::to_value(value) else {
        return;
    };
    let mut line = serde_json::Map::new();
    line.insert("v".to_owned(), Value::from(VERSION));
    if let Some(kind) = kind {
        line.insert("type".to_owned(), Value::from(kind));
    }
    for (key, value) in fields {
        if !(key == "type" && kind.is_some()) {
            line.entry(key).or_insert(value);
        }
    }
    let Ok(text) = output.json_line(&Value::Object(line)) else {
        return;
    };
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (a reader that went away) leaves the run to finish regardless.
    let _ = writeln!(stdout, "{text}");
    let _ = stdout.flush();
}
