//! Conversation listings that cost a page, not the store: the summary every store keeps per
//! conversation, updated in the same transaction as the write it summarizes (admission,
//! fenced append, settlement), and the query a listing asks
//! ([`ConversationStore::list_conversations`](crate::store::ConversationStore::list_conversations)).
//!
//! The rules here are the only place a summary changes, so every store summarizes alike; a
//! store keeps the summary as the JSON of [`Summary`] beside the conversation's row, with the
//! time of its last write as a column of its own for the most-recent-first index.

use flue_protocol::{
    ConversationKey, DeliveredMessage, Outcome, Record, Settlement, StoredRecord, Usage,
};
use serde::{Deserialize, Serialize};

use crate::error::{FlueError, Result};
use crate::store::rules::ROOT_SESSION;

/// The most characters of a message a summary keeps (its first and its last one).
pub const SUMMARY_MESSAGE_CHARS: usize = 200;

/// The most rows one listing returns, whatever it asks for.
pub const MAX_LISTING_LIMIT: usize = 500;

/// What a store keeps per conversation for listings, kept up to date by the writes
/// themselves. Stored as JSON: new fields need `#[serde(default)]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// Records in the root session.
    #[serde(default)]
    pub messages: u64,
    /// Sessions (the root one and task sessions).
    #[serde(default)]
    pub sessions: u64,
    /// Tokens and cost of every model turn and sampling, in every session.
    #[serde(default)]
    pub usage: Usage,
    /// Model turns (failed ones included), in every session.
    #[serde(default)]
    pub model_turns: u64,
    /// The start of its first message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_message: Option<String>,
    /// The start of its last message (admitted, or the model's reply in the root session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message: Option<String>,
    /// The idempotency key of its first submission (a schedule's names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_key: Option<String>,
    /// Whether its last settled submission failed.
    #[serde(default)]
    pub failed: bool,
}

impl Summary {
    /// The summary of a conversation just created by `message` (its root session empty).
    pub fn created(message: &DeliveredMessage, idempotency_key: Option<&str>) -> Self {
        Self::created_line(message_line(message), idempotency_key)
    }

    /// [`Summary::created`] from the message's [`message_line`] (for a writer that no longer
    /// holds the message).
    pub fn created_line(text: String, idempotency_key: Option<&str>) -> Self {
        Self {
            sessions: 1,
            first_message: Some(text.clone()),
            last_message: Some(text),
            first_key: idempotency_key.map(str::to_owned),
            ..Self::default()
        }
    }

    /// A later admission of `message`.
    pub fn admitted(&mut self, message: &DeliveredMessage) {
        self.admitted_line(message_line(message));
    }

    /// [`Summary::admitted`] from the message's [`message_line`].
    pub fn admitted_line(&mut self, text: String) {
        if self.first_message.is_none() {
            self.first_message = Some(text.clone());
        }
        self.last_message = Some(text);
    }

    /// `records` appended to `session` at `expected_version`.
    pub fn appended(&mut self, session: &str, expected_version: u64, records: &[StoredRecord]) {
        self.apply(&Appended::of(session, expected_version, records));
    }

    /// An append, as [`Appended::of`] summarized it.
    pub fn apply(&mut self, appended: &Appended) {
        if appended.count == 0 {
            return;
        }
        self.usage += appended.usage;
        self.model_turns += appended.model_turns;
        if !appended.root {
            self.sessions += u64::from(appended.expected_version == 0);
            return;
        }
        self.messages = appended.expected_version + appended.count;
        if let Some(text) = &appended.last_message {
            self.last_message = Some(text.clone());
        }
    }

    /// A submission settled.
    pub fn settled(&mut self, settlement: &Settlement) {
        self.failed = settlement.outcome == Outcome::Failed;
    }

    /// The summary as a store keeps it.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|err| FlueError::store("cannot encode a summary", err))
    }

    /// A stored summary; a corrupt one reads as empty (a listing shows less, nothing fails).
    pub fn from_json(json: &str) -> Self {
        serde_json::from_str(json).unwrap_or_default()
    }

    /// The words a search looks in: agent, id and first message, lowercased.
    pub fn search_text(&self, key: &ConversationKey) -> String {
        format!(
            "{}\n{}\n{}",
            key.agent,
            key.id,
            self.first_message.as_deref().unwrap_or_default()
        )
        .to_lowercase()
    }
}

/// What one append changes in a summary, taken from its records before they are handed to a
/// writer (so the writer needs only this, not the records).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Appended {
    root: bool,
    expected_version: u64,
    count: u64,
    usage: Usage,
    model_turns: u64,
    last_message: Option<String>,
}

impl Appended {
    /// What appending `records` to `session` at `expected_version` changes.
    pub fn of(session: &str, expected_version: u64, records: &[StoredRecord]) -> Self {
        let mut appended = Self {
            root: session == ROOT_SESSION,
            expected_version,
            count: records.len() as u64,
            ..Self::default()
        };
        for stored in records {
            if let Some(used) = record_usage(&stored.record) {
                appended.usage += used;
                appended.model_turns += u64::from(matches!(
                    stored.record,
                    Record::Assistant(_) | Record::FailedTurn(_)
                ));
            }
        }
        if appended.root {
            appended.last_message = records
                .iter()
                .rev()
                .find_map(|stored| match &stored.record {
                    Record::Assistant(message) => Some(message.text()),
                    Record::User(message) => Some(message.joined_text()),
                    _ => None,
                })
                .filter(|text| !text.trim().is_empty())
                .map(|text| cut(&text));
        }
        appended
    }
}

/// Where a listed conversation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ListedStatus {
    /// A submission is queued or being worked on.
    Running,
    /// A submission is paused on a pending action: someone has to decide.
    Waiting,
    /// Nothing pending; the last submission completed or was aborted (or none was sent).
    Settled,
    /// Nothing pending; the last submission failed.
    Failed,
}

impl ListedStatus {
    /// The status of a conversation with `waiting` paused submissions and `unsettled` ones
    /// needing work, whose last settled submission `failed` or not.
    pub fn of(waiting: u64, unsettled: u64, failed: bool) -> Self {
        if waiting > 0 {
            Self::Waiting
        } else if unsettled > 0 {
            Self::Running
        } else if failed {
            Self::Failed
        } else {
            Self::Settled
        }
    }
}

/// One conversation as a listing returns it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ListedConversation {
    /// The conversation.
    pub key: ConversationKey,
    /// When it was created, ms since the epoch.
    pub created_at: u64,
    /// Its last write (creation, admission, append, settlement), ms since the epoch.
    pub last_activity: u64,
    /// Where it stands.
    pub status: ListedStatus,
    /// Submissions admitted and not settled yet (waiting ones included).
    pub pending: u64,
    /// What the store keeps for listings.
    pub summary: Summary,
}

impl ListedConversation {
    /// A row (for store implementations).
    pub fn new(
        key: ConversationKey,
        created_at: u64,
        last_activity: u64,
        status: ListedStatus,
        pending: u64,
        summary: Summary,
    ) -> Self {
        Self {
            key,
            created_at,
            last_activity,
            status,
            pending,
            summary,
        }
    }

    /// The row of a root session no conversation manages (a fork before its first message,
    /// sessions an embedder wrote without the runtime): `instance_id` is `agent:id`, its
    /// summary only its records' count; `None` for an instance id of another form.
    pub fn unmanaged(
        instance_id: &str,
        created_at: u64,
        updated_at: u64,
        version: u64,
    ) -> Option<Self> {
        let (agent, id) = instance_id.split_once(':')?;
        Some(Self {
            key: ConversationKey::new(agent, id),
            created_at,
            last_activity: updated_at.max(created_at),
            status: ListedStatus::Settled,
            pending: 0,
            summary: Summary {
                messages: version,
                sessions: 1,
                ..Summary::default()
            },
        })
    }

    /// Where the next page starts: after this row.
    pub fn cursor(&self) -> ListingCursor {
        ListingCursor {
            last_activity: self.last_activity,
            instance_id: self.key.instance_id(),
        }
    }
}

/// A position in a listing (most recent first): the rows strictly after it are those less
/// recently active, or as recent with a smaller instance id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListingCursor {
    /// The last activity of the row the previous page ended with.
    pub last_activity: u64,
    /// Its instance id (`agent:id`).
    pub instance_id: String,
}

impl ListingCursor {
    /// The cursor as text (`<last activity>.<instance id>`), for a command line or a URL.
    pub fn to_text(&self) -> String {
        format!("{}.{}", self.last_activity, self.instance_id)
    }

    /// A cursor from [`ListingCursor::to_text`]; a bare number is a time (every row less
    /// recently active than it).
    pub fn parse(text: &str) -> Result<Self> {
        let (time, instance_id) = text.split_once('.').unwrap_or((text, ""));
        let Ok(last_activity) = time.parse::<u64>() else {
            return Err(FlueError::config(format!(
                "{text:?} is not a listing cursor: expected the `next` of an earlier page \
                 (`<ms>.<agent>:<id>`) or a time in ms since the epoch"
            )));
        };
        // A bare time (an empty instance id) starts before every row of that millisecond.
        Ok(Self {
            last_activity,
            instance_id: instance_id.to_owned(),
        })
    }

    /// Whether a row comes after this cursor (most recent first).
    pub fn admits(&self, last_activity: u64, instance_id: &str) -> bool {
        last_activity < self.last_activity
            || (last_activity == self.last_activity && instance_id < self.instance_id.as_str())
    }
}

/// What a listing asks for.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ListingQuery {
    /// Only this agent's conversations.
    pub agent: Option<String>,
    /// Words every row contains (case-insensitive) in its agent, id or first message.
    pub words: Vec<String>,
    /// Only the rows after this one.
    pub before: Option<ListingCursor>,
    /// The most rows (at most [`MAX_LISTING_LIMIT`]).
    pub limit: usize,
}

impl ListingQuery {
    /// The `limit` most recently active conversations.
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.min(MAX_LISTING_LIMIT),
            ..Self::default()
        }
    }

    /// Only `agent`'s conversations.
    #[must_use]
    pub fn with_agent(mut self, agent: Option<String>) -> Self {
        self.agent = agent;
        self
    }

    /// Only those containing every word of `text` (lowercased, any order).
    #[must_use]
    pub fn with_text(mut self, text: Option<&str>) -> Self {
        self.words = text
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        self
    }

    /// Only the rows after `cursor`.
    #[must_use]
    pub fn with_before(mut self, cursor: Option<ListingCursor>) -> Self {
        self.before = cursor;
        self
    }

    /// Whether a row passes the query's filters (agent, words, cursor); for stores that
    /// filter in memory.
    pub fn admits(&self, key: &ConversationKey, last_activity: u64, summary: &Summary) -> bool {
        if self.agent.as_ref().is_some_and(|agent| &key.agent != agent) {
            return false;
        }
        if let Some(before) = &self.before
            && !before.admits(last_activity, &key.instance_id())
        {
            return false;
        }
        if self.words.is_empty() {
            return true;
        }
        let haystack = summary.search_text(key);
        self.words
            .iter()
            .all(|word| haystack.contains(word.as_str()))
    }
}

/// `managed` and `unmanaged` rows as one page: most recent first, at most `limit`.
pub fn merge_page(
    mut managed: Vec<ListedConversation>,
    unmanaged: Vec<ListedConversation>,
    limit: usize,
) -> Vec<ListedConversation> {
    if unmanaged.is_empty() {
        return managed;
    }
    managed.extend(unmanaged);
    managed.sort_by(|a, b| {
        (b.last_activity, b.key.instance_id()).cmp(&(a.last_activity, a.key.instance_id()))
    });
    managed.truncate(limit.min(MAX_LISTING_LIMIT));
    managed
}

/// The usage of a model turn (a failed one included), an MCP server's sampling or a prompt
/// hook's judgement stored in `record`.
pub fn record_usage(record: &Record) -> Option<Usage> {
    match record {
        Record::Assistant(message) => Some(message.usage),
        Record::FailedTurn(failed) => Some(failed.usage),
        Record::Sampling(exchange) => Some(exchange.usage),
        Record::Hook(hook) => hook.usage,
        _ => None,
    }
}

/// A message as one line of a listing: a user message's text, a signal's type and body; cut
/// at [`SUMMARY_MESSAGE_CHARS`].
pub fn message_line(message: &DeliveredMessage) -> String {
    let text = match message {
        DeliveredMessage::User { body, .. } => body.clone(),
        DeliveredMessage::Signal {
            signal_type, body, ..
        } => format!("{signal_type}: {body}"),
        #[allow(unreachable_patterns, reason = "the message kinds may grow")]
        _ => String::new(),
    };
    cut(&text)
}

/// `text` on one line, cut at [`SUMMARY_MESSAGE_CHARS`].
pub fn cut(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(SUMMARY_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}
