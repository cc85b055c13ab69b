//! Adapted tool names: `mcp__<server>__<tool>`, sanitised, shortened, checked for duplicates.
//!
//! Each part keeps `[A-Za-z0-9_-]`; any other character becomes `_`, leading and trailing `_`
//! are trimmed, and a part left empty becomes `unnamed`. Models accept tool names of at most
//! 64 characters, so a longer name keeps its first 55 characters and ends in `_` plus eight hex
//! digits of a hash of the whole name: the same tool always gets the same name.

#[cfg(test)]
mod tests;

/// Longest tool name models accept (and flue-core allows).
pub(crate) const MAX_TOOL_NAME: usize = 64;

/// Hex digits of the hash that ends a shortened name.
const HASH_DIGITS: usize = 8;

/// The name the model sees for `tool` of `server`.
pub(crate) fn adapted_name(server: &str, tool: &str) -> String {
    let full = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    if full.len() <= MAX_TOOL_NAME {
        return full;
    }
    // Every character is ASCII after sanitising, so byte slicing stays on boundaries.
    let keep = MAX_TOOL_NAME - HASH_DIGITS - 1;
    let prefix = full.get(..keep).unwrap_or(&full);
    format!("{prefix}_{:08x}", fnv1a(&full))
}

/// One part of a name: unsupported characters become `_`, outer `_` go, empty is `unnamed`.
pub(crate) fn sanitize(part: &str) -> String {
    let replaced: String = part
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = replaced.trim_matches('_');
    if trimmed.is_empty() {
        "unnamed".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// 32-bit FNV-1a: stable across platforms and releases, unlike std's hasher.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}
