//! Redaction of known secret values from text that is stored, sent to a model or shown.
//!
//! A [`Redactor`] is built once from the secret values a frontend knows (API keys, `.env`
//! values, MCP header and environment values) and replaces every occurrence of a secret, and of
//! its common transforms, with `[redacted]`. The harness applies it where tool output becomes a
//! record or an event: tool results and tool errors (built-in, bash, MCP, custom, task results),
//! `session.shell` exchanges, and the error messages of operation, task and compaction events.
//!
//! Which values are secrets: a value is trimmed, then ignored when it is shorter than
//! [`Redactor::MIN_SECRET_CHARS`] characters, or when it is made of letters only and shorter
//! than [`Redactor::MIN_WORD_SECRET_CHARS`] (a word such as `development` or `production`
//! would otherwise be cut out of ordinary text).
//!
//! Which forms are found, all ignoring ASCII case: the value itself (so upper- and lower-cased
//! copies too), reversed, base64 (standard and URL-safe alphabets, each of the three byte
//! alignments inside a longer encoded text, with and without padding), hex, URL encoding
//! (`%XX` for reserved bytes, or for every byte), JSON string escaping, and every piece of the
//! value at least [`Redactor::FRAGMENT_CHARS`] characters long (a key cut in half or wrapped over
//! lines), except for values containing whitespace. Overlapping and adjacent matches merge into
//! one `[redacted]`. Transforms of a piece (base64 of half a key), other encodings and anything
//! a determined program computes are not found: redaction stops accidents, it cannot stop an
//! agent that sets out to leak a value it can read.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};

use crate::error::{FlueError, Result};

/// Replaces known secret values, and their common transforms, with `[redacted]`.
///
/// Cheap to clone (the matcher is shared). An empty redactor returns text unchanged.
///
/// ```
/// use flue_core::Redactor;
/// let redactor = Redactor::new(["sk-test-0123456789abcdef"])?;
/// assert_eq!(redactor.redact("key=SK-TEST-0123456789ABCDEF"), "key=[redacted]");
/// // base64 of the key, and the key cut in half over two lines
/// assert_eq!(redactor.redact("c2stdGVzdC0wMTIzNDU2Nzg5YWJjZGVm"), "[redacted]");
/// assert_eq!(redactor.redact("sk-test-0123\n456789abcdef"), "[redacted]\n[redacted]");
/// # Ok::<(), flue_core::FlueError>(())
/// ```
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Option<Arc<Matcher>>,
}

struct Matcher {
    automaton: AhoCorasick,
    n_secrets: usize,
    /// The patterns, ASCII-lowercased and sorted (for [`Redactor::releasable`]).
    lowercase: Vec<String>,
    /// The longest pattern's length in bytes.
    longest: usize,
}

impl Redactor {
    /// What a secret is replaced with.
    pub const REPLACEMENT: &'static str = "[redacted]";
    /// Values shorter than this (in characters, after trimming) are not secrets: they would
    /// cut ordinary words and numbers out of text.
    pub const MIN_SECRET_CHARS: usize = 8;
    /// Values made of letters only are secrets only from this many characters on.
    pub const MIN_WORD_SECRET_CHARS: usize = 16;
    /// The shortest piece of a secret that is redacted on its own.
    pub const FRAGMENT_CHARS: usize = 12;

    /// A redactor for `secrets` (empty values, short values and words are skipped, see the
    /// module rules). Fails only when the patterns exceed the matcher's limits (millions of
    /// secrets).
    pub fn new<I, S>(secrets: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut values: Vec<String> = secrets
            .into_iter()
            .filter_map(|secret| {
                let secret = secret.as_ref().trim();
                is_secret(secret).then(|| secret.to_owned())
            })
            .collect();
        values.sort();
        values.dedup();
        if values.is_empty() {
            return Ok(Self::default());
        }
        let mut patterns: Vec<String> = values.iter().flat_map(|value| forms(value)).collect();
        patterns.retain(|pattern| pattern.chars().count() >= Self::MIN_SECRET_CHARS);
        patterns.sort();
        patterns.dedup();
        let automaton = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .map_err(|err| {
                FlueError::config(format!(
                    "cannot build the secret redactor for {} values: {err}",
                    values.len()
                ))
            })?;
        let mut lowercase: Vec<String> = patterns
            .iter()
            .map(|pattern| pattern.to_ascii_lowercase())
            .collect();
        lowercase.sort();
        lowercase.dedup();
        let longest = lowercase.iter().map(String::len).max().unwrap_or(0);
        Ok(Self {
            matcher: Some(Arc::new(Matcher {
                automaton,
                n_secrets: values.len(),
                lowercase,
                longest,
            })),
        })
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// How many distinct secret values this redactor looks for.
    pub fn len(&self) -> usize {
        self.matcher.as_ref().map_or(0, |matcher| matcher.n_secrets)
    }

    /// `text` with every secret form replaced by [`Redactor::REPLACEMENT`]; borrowed when
    /// nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(matcher) = &self.matcher else {
            return Cow::Borrowed(text);
        };
        let Ok(found) = matcher.automaton.try_find_overlapping_iter(text) else {
            // Cannot happen with `MatchKind::Standard`; if it did, showing nothing is safe.
            return Cow::Owned(Self::REPLACEMENT.to_owned());
        };
        let mut spans: Vec<(usize, usize)> = found.map(|m| (m.start(), m.end())).collect();
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut copied_to = 0;
        let mut idx = 0;
        while idx < spans.len() {
            let (start, mut end) = spans[idx];
            idx += 1;
            while idx < spans.len() && spans[idx].0 <= end {
                end = end.max(spans[idx].1);
                idx += 1;
            }
            // Patterns and text are UTF-8, so matches start and end on character boundaries.
            out.push_str(text.get(copied_to..start).unwrap_or_default());
            out.push_str(Self::REPLACEMENT);
            copied_to = end;
        }
        out.push_str(text.get(copied_to..).unwrap_or_default());
        Cow::Owned(out)
    }

    /// For text written as it streams: how many leading bytes of `text` can be redacted and
    /// shown now, because no secret form that more text could complete starts in them. The
    /// rest (a tail that begins a secret form, or a match that runs into that tail) is held
    /// back until more text arrives or the stream ends. All of `text` when nothing is redacted.
    ///
    /// ```
    /// use flue_core::Redactor;
    /// let redactor = Redactor::new(["sk-test-0123456789abcdef"])?;
    /// let text = "the key is sk-te";
    /// let shown = &text[..redactor.releasable(text)];
    /// assert!(shown.starts_with("the key is") && !shown.contains("sk"));
    /// // Nothing here can begin a secret form: all of it goes.
    /// assert_eq!(redactor.releasable("Why?"), 4);
    /// # Ok::<(), flue_core::FlueError>(())
    /// ```
    pub fn releasable(&self, text: &str) -> usize {
        let Some(matcher) = &self.matcher else {
            return text.len();
        };
        // The earliest start of a tail that is a proper prefix of some pattern.
        let mut cut = text.len();
        for (start, _) in text.char_indices().rev() {
            if text.len() - start >= matcher.longest {
                break;
            }
            let tail = text.get(start..).unwrap_or_default().to_ascii_lowercase();
            let first = matcher
                .lowercase
                .partition_point(|pattern| pattern.as_str() < tail.as_str());
            let begins_a_pattern = matcher
                .lowercase
                .get(first..)
                .unwrap_or_default()
                .iter()
                .take_while(|pattern| pattern.starts_with(tail.as_str()))
                .any(|pattern| pattern.len() > tail.len());
            if begins_a_pattern {
                cut = start;
            }
        }
        // A complete match that runs over the cut is held back whole.
        if let Ok(found) = matcher.automaton.try_find_overlapping_iter(text) {
            let spans: Vec<(usize, usize)> = found.map(|m| (m.start(), m.end())).collect();
            loop {
                let before = cut;
                for &(start, end) in &spans {
                    if start < cut && cut < end {
                        cut = start;
                    }
                }
                if cut == before {
                    break;
                }
            }
        }
        cut
    }

    /// Redacts every string inside a JSON value in place (object keys are left alone).
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        match value {
            serde_json::Value::String(text) => {
                self.redact_in_place(text);
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    self.redact_json(item);
                }
            }
            serde_json::Value::Object(map) => {
                for item in map.values_mut() {
                    self.redact_json(item);
                }
            }
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }

    /// Redacts every string inside a serializable value (a session record) in place, through
    /// its JSON form; returns whether anything changed. A value with no secret in its JSON
    /// text is left untouched (one scan, no copy).
    pub fn redact_value<T>(&self, value: &mut T) -> bool
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        if self.is_empty() {
            return false;
        }
        let Ok(text) = serde_json::to_string(value) else {
            return false;
        };
        if matches!(self.redact(&text), Cow::Borrowed(_)) {
            return false;
        }
        let Ok(mut json) = serde_json::from_str::<serde_json::Value>(&text) else {
            return false;
        };
        let before = json.clone();
        self.redact_json(&mut json);
        if json == before {
            return false;
        }
        match serde_json::from_value(json) {
            Ok(redacted) => {
                *value = redacted;
                true
            }
            Err(_) => false,
        }
    }

    /// Redacts `text` in place; returns whether anything changed.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(redacted) => {
                *text = redacted;
                true
            }
        }
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.len())
            .finish_non_exhaustive()
    }
}

/// The module's rule for which values are secrets.
fn is_secret(value: &str) -> bool {
    let n_chars = value.chars().count();
    if n_chars < Redactor::MIN_SECRET_CHARS {
        return false;
    }
    let is_word = value.chars().all(char::is_alphabetic);
    !is_word || n_chars >= Redactor::MIN_WORD_SECRET_CHARS
}

/// Every form of `secret` that is searched for (before the length filter).
fn forms(secret: &str) -> Vec<String> {
    let bytes = secret.as_bytes();
    let mut forms = vec![
        secret.to_owned(),
        secret.to_uppercase(),
        secret.to_lowercase(),
        secret.chars().rev().collect(),
        hex::encode(bytes),
        url_encoded(bytes, |byte| !is_unreserved(byte)),
        url_encoded(bytes, |_| true),
    ];
    if let Ok(json) = serde_json::to_string(secret) {
        forms.push(json.trim_matches('"').to_owned());
    }
    for engine in [&STANDARD, &URL_SAFE] {
        for alignment in 0..3 {
            forms.extend(base64_forms(engine, bytes, alignment));
        }
    }
    if !secret.chars().any(char::is_whitespace) {
        forms.extend(fragments(secret, Redactor::FRAGMENT_CHARS));
    }
    forms
}

/// The base64 text of `bytes` when they start `alignment` bytes into a 3-byte group of a longer
/// encoded input: the characters that depend on the secret alone, plus, for a secret that ends
/// the input, the complete tail with and without padding.
fn base64_forms(
    engine: &base64::engine::GeneralPurpose,
    bytes: &[u8],
    alignment: usize,
) -> Vec<String> {
    let mut padded_input = vec![0u8; alignment];
    padded_input.extend_from_slice(bytes);
    let encoded = engine.encode(&padded_input);
    // Characters 0..skip mix in the unknown bytes before the secret.
    let skip = [0, 2, 3][alignment];
    // Character i covers bits 6i..6i+6; it is fixed by the secret when they end inside it.
    let fixed_end = padded_input.len() * 8 / 6;
    let unpadded = encoded.trim_end_matches('=');
    [
        encoded.get(skip..fixed_end),
        unpadded.get(skip..),
        encoded.get(skip..),
    ]
    .into_iter()
    .flatten()
    .map(str::to_owned)
    .collect()
}

/// Every run of `n_chars` consecutive characters of `secret`.
fn fragments(secret: &str, n_chars: usize) -> Vec<String> {
    let starts: Vec<usize> = secret
        .char_indices()
        .map(|(idx, _)| idx)
        .chain([secret.len()])
        .collect();
    if starts.len() <= n_chars + 1 {
        return Vec::new();
    }
    starts
        .windows(n_chars + 1)
        .filter_map(|window| secret.get(window[0]..window[n_chars]))
        .map(str::to_owned)
        .collect()
}

/// `%XX` for every byte `escape` selects.
fn url_encoded(bytes: &[u8], escape: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &byte in bytes {
        if escape(byte) {
            out.push('%');
            out.push_str(&hex::encode_upper([byte]));
        } else {
            out.push(char::from(byte));
        }
    }
    out
}

/// RFC 3986 unreserved characters, never percent-encoded.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~')
}

#[cfg(test)]
mod tests;
