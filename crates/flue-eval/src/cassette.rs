//! Cassettes: the model traffic of an eval run, kept in the workspace so that the run can be
//! played again with no key and no network.
//!
//! Recording wraps every provider of the workspace: each turn's request (what the model was
//! shown: system prompt, messages, tools, thinking level, output limit) and the turn it
//! answered are kept, the workspace's secrets redacted. Replaying answers each request with a
//! recorded turn for an equal request (equal ones in the order they were recorded) and never
//! calls the provider; a request with no recorded equal fails the turn with what differs from
//! the nearest recorded one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use flue_core::model::{ModelInfo, ModelRequest, ModelTurn, TurnSink};
use flue_core::{
    AssistantContent, BoxFuture, FlueError, ModelProvider, Redactor, StopReason, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

#[cfg(test)]
mod tests;

/// The `format` field of a cassette file.
const FORMAT: &str = "flue-cassette";
/// The version this build writes and reads.
const VERSION: u32 = 1;

/// Why a cassette could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// Replaying from a file that is not there.
    #[error("no cassette at {path}: record one first with `flue eval --record`")]
    Missing {
        /// The file.
        path: String,
    },
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a cassette this build reads.
    #[error("{path} is not a flue cassette: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Recording or replaying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Record,
    Replay,
}

/// The traffic of one eval run, recorded or replayed.
pub struct Cassette {
    path: PathBuf,
    /// How the path is shown in messages (relative to the workspace root).
    shown: String,
    mode: Mode,
    redactor: Redactor,
    entries: Mutex<Vec<Entry>>,
    /// In replay: which entries were served already.
    used: Mutex<Vec<bool>>,
}

impl std::fmt::Debug for Cassette {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cassette")
            .field("path", &self.path)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct CassetteFile {
    format: String,
    version: u32,
    entries: Vec<Entry>,
}

/// One model turn: what was asked and what came back.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    provider: String,
    model: String,
    request: Json,
    turn: RecordedTurn,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RecordedTurn {
    content: Vec<AssistantContent>,
    usage: Usage,
    stop_reason: String,
}

impl Cassette {
    /// An empty cassette that records into `path` (`shown` names it in messages); written with
    /// [`Cassette::save`]. `secrets` are redacted from what is kept.
    pub fn record(path: &Path, shown: &str, secrets: Vec<String>) -> Self {
        Self::new(path, shown, Mode::Record, secrets, Vec::new())
    }

    /// The cassette at `path`, replayed.
    pub fn replay(path: &Path, shown: &str, secrets: Vec<String>) -> Result<Self, CassetteError> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(CassetteError::Missing {
                    path: shown.to_owned(),
                });
            }
            Err(source) => {
                return Err(CassetteError::Io {
                    path: shown.to_owned(),
                    source,
                });
            }
        };
        let invalid = |message: String| CassetteError::Invalid {
            path: shown.to_owned(),
            message,
        };
        let file: CassetteFile =
            serde_json::from_slice(&text).map_err(|err| invalid(err.to_string()))?;
        if file.format != FORMAT || file.version != VERSION {
            return Err(invalid(format!(
                "format {:?} version {}; this flue reads {FORMAT:?} version {VERSION}",
                file.format, file.version
            )));
        }
        Ok(Self::new(path, shown, Mode::Replay, secrets, file.entries))
    }

    fn new(
        path: &Path,
        shown: &str,
        mode: Mode,
        secrets: Vec<String>,
        entries: Vec<Entry>,
    ) -> Self {
        let used = vec![false; entries.len()];
        Self {
            path: path.to_path_buf(),
            shown: shown.to_owned(),
            mode,
            redactor: Redactor::new(secrets).unwrap_or_default(),
            entries: Mutex::new(entries),
            used: Mutex::new(used),
        }
    }

    /// Whether this cassette records (rather than replays).
    pub fn records(&self) -> bool {
        self.mode == Mode::Record
    }

    /// `inner` with its turns recorded into, or replayed from, this cassette.
    pub fn wrap(self: &Arc<Self>, inner: Arc<dyn ModelProvider>) -> Arc<dyn ModelProvider> {
        Arc::new(CassetteProvider {
            inner,
            cassette: Arc::clone(self),
        })
    }

    /// Writes what was recorded: a temporary file beside the cassette, then a rename. Does
    /// nothing when replaying.
    pub fn save(&self) -> Result<(), CassetteError> {
        if self.mode != Mode::Record {
            return Ok(());
        }
        let file = CassetteFile {
            format: FORMAT.to_owned(),
            version: VERSION,
            entries: lock(&self.entries).clone(),
        };
        let io = |source| CassetteError::Io {
            path: self.shown.clone(),
            source,
        };
        let text = serde_json::to_vec_pretty(&file).map_err(|err| CassetteError::Invalid {
            path: self.shown.clone(),
            message: err.to_string(),
        })?;
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let temporary = self.path.with_extension("json.tmp");
        std::fs::write(&temporary, text).map_err(io)?;
        std::fs::rename(&temporary, &self.path).map_err(io)
    }

    /// The request as kept: what the model was shown, redacted, without the records' times and
    /// the bookkeeping of earlier turns.
    fn request_of(&self, request: &ModelRequest<'_>) -> Json {
        let messages: Vec<Json> = request
            .messages
            .iter()
            .map(|record| {
                let mut value = serde_json::to_value(record).unwrap_or_default();
                if let Some(fields) = value.as_object_mut() {
                    fields.retain(|key, _| !is_volatile(key));
                }
                value
            })
            .collect();
        let tools: Vec<Json> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                })
            })
            .collect();
        let value = json!({
            "system": request.system,
            "messages": messages,
            "tools": tools,
            "thinking": request.thinking,
            "max_output_tokens": request.max_output_tokens,
        });
        self.redacted(value)
    }

    fn redacted<T: Serialize + serde::de::DeserializeOwned>(&self, value: T) -> T {
        let Ok(mut text) = serde_json::to_string(&value) else {
            return value;
        };
        if !self.redactor.redact_in_place(&mut text) {
            return value;
        }
        serde_json::from_str(&text).unwrap_or(value)
    }

    fn keep(&self, provider: &str, model: &str, request: Json, turn: &ModelTurn) {
        let recorded = self.redacted(RecordedTurn {
            content: turn.content.clone(),
            usage: turn.usage,
            stop_reason: turn.stop_reason.as_str().to_owned(),
        });
        lock(&self.entries).push(Entry {
            provider: provider.to_owned(),
            model: model.to_owned(),
            request,
            turn: recorded,
        });
    }

    /// The first unserved recorded turn for an equal request, marked served; else the error
    /// that says what differs.
    fn serve(
        &self,
        provider: &str,
        model: &str,
        request: &Json,
    ) -> Result<RecordedTurn, FlueError> {
        let entries = lock(&self.entries);
        let mut used = lock(&self.used);
        let equal = entries.iter().enumerate().find(|(entry_idx, entry)| {
            !used.get(*entry_idx).copied().unwrap_or(true)
                && entry.provider == provider
                && entry.model == model
                && &entry.request == request
        });
        if let Some((entry_idx, entry)) = equal {
            if let Some(slot) = used.get_mut(entry_idx) {
                *slot = true;
            }
            return Ok(entry.turn.clone());
        }
        let same_model: Vec<&Entry> = entries
            .iter()
            .filter(|entry| entry.provider == provider && entry.model == model)
            .collect();
        let why = match nearest_difference(&same_model, request) {
            Some(difference) => difference,
            None => format!("it has no request to {provider}/{model}"),
        };
        Err(FlueError::Provider {
            provider: provider.to_owned(),
            message: format!(
                "no recorded turn in the cassette {} matches this request ({why}); the agent, \
                 its prompt or the case changed since it was recorded: record again with \
                 `flue eval --record`",
                self.shown
            ),
            status: None,
            retryable: false,
            retry_after_ms: None,
            source: None,
        })
    }
}

/// Record fields that differ between two runs of the same conversation, or that no provider
/// shows the model (the model and usage of an earlier turn).
fn is_volatile(key: &str) -> bool {
    key == "at" || key == "model" || key == "usage" || key.ends_with("_at") || key.ends_with("_ms")
}

/// What the recorded request closest to `request` (the most leading messages in common)
/// differs in.
fn nearest_difference(candidates: &[&Entry], request: &Json) -> Option<String> {
    let messages = |value: &Json| value["messages"].as_array().cloned().unwrap_or_default();
    let wanted = messages(request);
    let (nearest, common) = candidates
        .iter()
        .map(|entry| {
            let recorded = messages(&entry.request);
            let common = recorded
                .iter()
                .zip(&wanted)
                .take_while(|(a, b)| a == b)
                .count();
            (entry, common)
        })
        .max_by_key(|(_, common)| *common)?;
    let recorded = messages(&nearest.request);
    Some(if nearest.request["system"] != request["system"] {
        "the system prompt differs from the nearest recorded request's".to_owned()
    } else if nearest.request["tools"] != request["tools"] {
        "the tools differ from the nearest recorded request's".to_owned()
    } else if nearest.request["thinking"] != request["thinking"]
        || nearest.request["max_output_tokens"] != request["max_output_tokens"]
    {
        format!(
            "thinking {} with at most {} output tokens; the nearest recorded request had {} and {}",
            request["thinking"],
            request["max_output_tokens"],
            nearest.request["thinking"],
            nearest.request["max_output_tokens"]
        )
    } else if common < recorded.len().min(wanted.len()) {
        format!(
            "message {} differs from the nearest recorded request's: recorded {}, now {}",
            common + 1,
            short(&recorded[common]),
            short(&wanted[common])
        )
    } else if recorded.len() != wanted.len() {
        format!(
            "it has {} message(s), the nearest recorded request {}",
            wanted.len(),
            recorded.len()
        )
    } else {
        "an equal request was recorded, but each recorded answer was served already".to_owned()
    })
}

fn short(value: &Json) -> String {
    crate::assertion::shorten(&value.to_string(), 160)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A provider whose turns go through a cassette.
struct CassetteProvider {
    inner: Arc<dyn ModelProvider>,
    cassette: Arc<Cassette>,
}

impl ModelProvider for CassetteProvider {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn model_info(&self, model: &str) -> ModelInfo {
        self.inner.model_info(model)
    }

    fn knows_model(&self, model: &str) -> bool {
        self.inner.knows_model(model)
    }

    fn known_models(&self) -> Vec<String> {
        self.inner.known_models()
    }

    /// Replaying needs no key and no script: nothing is asked of the provider.
    fn check_model<'a>(&'a self, model: &'a str) -> BoxFuture<'a, flue_core::Result<()>> {
        if self.cassette.mode == Mode::Replay {
            return Box::pin(async { Ok(()) });
        }
        self.inner.check_model(model)
    }

    fn stream_turn<'a>(
        &'a self,
        request: ModelRequest<'a>,
        sink: &'a TurnSink,
    ) -> BoxFuture<'a, flue_core::Result<ModelTurn>> {
        Box::pin(async move {
            let kept = self.cassette.request_of(&request);
            if self.cassette.mode == Mode::Record {
                let turn = self.inner.stream_turn(request, sink).await?;
                self.cassette.keep(self.id(), request.model, kept, &turn);
                return Ok(turn);
            }
            let recorded = self.cassette.serve(self.id(), request.model, &kept)?;
            for part in &recorded.content {
                match part {
                    AssistantContent::Text { text } => sink.text_delta(text),
                    AssistantContent::Thinking { text, .. } => sink.thinking_delta(text),
                    _ => {}
                }
            }
            sink.flush();
            Ok(ModelTurn {
                content: recorded.content,
                usage: recorded.usage,
                stop_reason: StopReason::from_name(&recorded.stop_reason),
            })
        })
    }
}
