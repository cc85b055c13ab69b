//! A tool call's result as one line of human output: what it touched and how much came back
//! (`notes.md, 412 bytes`; `exit code 0, 23 bytes`; `not_found: no file notes.md`), not the
//! whole result the model receives (that is `-v`'s, and `--json`'s).

use serde_json::Value;

/// Longest message of a failed call kept in its summary.
const MAX_MESSAGE_CHARS: usize = 200;

/// The file a call names: the `path` of its input (the file tools), if any.
pub(super) fn input_path(input: &Value) -> Option<String> {
    input.get("path").and_then(Value::as_str).map(str::to_owned)
}

/// Most lines of each side of an edit shown; the rest are counted.
const MAX_EDIT_LINES: usize = 8;

/// The edits of an `edit_file` input as diff lines: `-` for each line of `oldText`, `+` for
/// each of `newText`, each side folded after [`MAX_EDIT_LINES`] (a ` ` line counts the rest).
pub(super) fn edit_lines(input: &Value) -> Vec<(char, String)> {
    let mut lines = Vec::new();
    let edits = input.get("edits").and_then(Value::as_array);
    for edit in edits.into_iter().flatten() {
        for (sign, key) in [('-', "oldText"), ('+', "newText")] {
            let text = edit.get(key).and_then(Value::as_str).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            lines.extend(
                all.iter()
                    .take(MAX_EDIT_LINES)
                    .map(|line| (sign, (*line).to_owned())),
            );
            if all.len() > MAX_EDIT_LINES {
                let more = all.len() - MAX_EDIT_LINES;
                lines.push((' ', format!("... {more} more line(s)")));
            }
        }
    }
    lines
}

/// One line saying what call of tool `name` returned. `path` is the file its input named.
pub(super) fn summary(name: &str, path: Option<&str>, is_error: bool, output: &str) -> String {
    let mut parts: Vec<String> = path.map(str::to_owned).into_iter().collect();
    match serde_json::from_str::<Value>(output) {
        Ok(Value::Object(result)) => parts.extend(json_parts(&result, output.len())),
        _ => parts.extend(text_parts(name, is_error, output)),
    }
    parts.join(", ")
}

/// A JSON result: the file tools' `{"ok", "data" | "error"}`, a command tool's
/// `{"exit_code", "stdout", "stderr"}`, or any other object (its size).
fn json_parts(result: &serde_json::Map<String, Value>, n_bytes: usize) -> Vec<String> {
    if let Some(error) = result
        .get("error")
        .filter(|_| result.get("ok") == Some(&Value::Bool(false)))
    {
        let kind = error.get("kind").and_then(Value::as_str).unwrap_or("error");
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        return vec![format!("{kind}: {}", one_line(message))];
    }
    if let Some(code) = result.get("exit_code").and_then(Value::as_i64) {
        let streams = ["stdout", "stderr"]
            .iter()
            .filter_map(|stream| result.get(*stream).and_then(Value::as_str))
            .map(str::len)
            .sum::<usize>();
        return vec![format!("exit code {code}"), bytes(streams)];
    }
    let content = result
        .get("data")
        .and_then(|data| data.get("content"))
        .and_then(Value::as_str);
    vec![bytes(content.map_or(n_bytes, str::len))]
}

/// A text result: `bash`'s (stdout, stderr, then `exit code: N` when not 0), or another tool's
/// text; a failure keeps its message.
fn text_parts(name: &str, is_error: bool, output: &str) -> Vec<String> {
    let trimmed = output.trim_end();
    let last_line = trimmed.rsplit('\n').next().unwrap_or("");
    if let Some(code) = last_line
        .strip_prefix("exit code: ")
        .and_then(|code| code.parse::<i64>().ok())
    {
        let body = trimmed[..trimmed.len() - last_line.len()].trim_end();
        return vec![format!("exit code {code}"), bytes(body.len())];
    }
    if is_error {
        return vec![one_line(output)];
    }
    if name == "bash" {
        return vec!["exit code 0".to_owned(), bytes(output.len())];
    }
    vec![bytes(output.len())]
}

/// `1 byte`, `412 bytes`, `12.5 KiB`, `3.2 MiB`.
fn bytes(n: usize) -> String {
    const KIB: f64 = 1024.0;
    #[allow(clippy::cast_precision_loss, reason = "a size shown to one decimal")]
    let size = n as f64;
    match n {
        1 => "1 byte".to_owned(),
        0..10_240 => format!("{n} bytes"),
        10_240..10_485_760 => format!("{:.1} KiB", size / KIB),
        _ => format!("{:.1} MiB", size / KIB / KIB),
    }
}

/// `text` on one line (line breaks as ` | `), cut at [`MAX_MESSAGE_CHARS`].
fn one_line(text: &str) -> String {
    let flat = text.trim().replace('\n', " | ");
    if flat.chars().count() <= MAX_MESSAGE_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(MAX_MESSAGE_CHARS).collect();
    format!("{cut}...")
}
