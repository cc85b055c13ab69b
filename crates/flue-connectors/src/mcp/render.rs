//! A `tools/call` result as the text the model sees.
//!
//! Structured content comes first, as pretty JSON; then each content block in order: text as
//! is, images and audio as a short placeholder (the model gets no bytes), embedded resources
//! with their text (or a placeholder for binary ones), and resource links with name, uri and
//! description. Parts are separated by a blank line. The input is the result's JSON, so any
//! block type the MCP spec adds later is still shown (as its JSON).

use serde_json::Value;

#[cfg(test)]
mod tests;

/// What the model sees when a result has nothing to show.
pub(crate) const EMPTY_RESULT: &str = "(MCP tool returned no content)";

/// Renders a `tools/call` result (its JSON object) for the model.
pub(crate) fn render_result(result: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(structured) = result.get("structuredContent") {
        let pretty =
            serde_json::to_string_pretty(structured).unwrap_or_else(|_| structured.to_string());
        parts.push(format!("Structured content:\n{pretty}"));
    }
    let blocks = result.get("content").and_then(Value::as_array);
    for block in blocks.into_iter().flatten() {
        let part = render_block(block);
        if !part.is_empty() {
            parts.push(part);
        }
    }
    if parts.is_empty() {
        return EMPTY_RESULT.to_owned();
    }
    parts.join("\n\n")
}

fn render_block(block: &Value) -> String {
    let text = |key: &str| block.get(key).and_then(Value::as_str);
    match text("type") {
        Some("text") => text("text").unwrap_or_default().to_owned(),
        Some(kind @ ("image" | "audio")) => {
            let label = if kind == "image" { "Image" } else { "Audio" };
            let mime_type = text("mimeType").unwrap_or("unknown type");
            let size = text("data").map_or(0, str::len);
            format!("[{label}: {mime_type}, {size} base64 chars]")
        }
        Some("resource") => render_resource(block.get("resource").unwrap_or(&Value::Null)),
        Some("resource_link") => {
            let name = text("name").unwrap_or("unnamed");
            let uri = text("uri").unwrap_or_default();
            match text("description") {
                Some(description) => format!("[Resource link: {name} ({uri}) - {description}]"),
                None => format!("[Resource link: {name} ({uri})]"),
            }
        }
        _ => block.to_string(),
    }
}

fn render_resource(resource: &Value) -> String {
    let text = |key: &str| resource.get(key).and_then(Value::as_str);
    let uri = text("uri").unwrap_or_default();
    if let Some(body) = text("text") {
        return format!("[Resource: {uri}]\n{body}");
    }
    let size = text("blob").map_or(0, str::len);
    match text("mimeType") {
        Some(mime_type) => format!("[Resource: {uri}, {mime_type}, {size} base64 chars]"),
        None => format!("[Resource: {uri}, {size} base64 chars]"),
    }
}
