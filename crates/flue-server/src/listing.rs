//! The conversations of a store as one list, for `flue session list` and the dev console's
//! conversation list (`GET /_flue/dev/conversations`): agent, id, first message, last
//! activity, status (running, waiting for a decision, settled, failed), and, for the rows
//! shown, messages, model turns, tokens and cost. Read straight from the store; nothing runs.
//!
//! A row costs two small stream reads (the first batches hold the first message, the last
//! ones the last activity and the status); its usage costs reading every session of the
//! conversation, so a search computes usage only for the rows it returns. A
//! [`ConversationIndex`] keeps each row with the stream head it was read at and reads it
//! again only when the head moved, so a console asking again and again reads only what
//! changed.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use flue_core::{
    BatchBody, ConversationInfo, ConversationKey, DEFAULT_SESSION, DeliveredMessage, FlueError,
    Offset, Outcome, Record, StreamBatch, Usage,
    store::{DynConversationStore, SessionKey},
};
use serde::Serialize;

/// The most characters of a first message a row carries.
pub const FIRST_MESSAGE_CHARS: usize = 200;

/// The most rows a search returns, whatever it asks for.
pub const MAX_LIST_LIMIT: usize = 500;

/// How many batches at each end of a stream a row reads.
const EDGE_BATCHES: usize = 4;

/// Where a conversation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConversationStatus {
    /// A submission is queued or being worked on.
    Running,
    /// A submission is paused on a pending action (a confirmation, a question): someone has
    /// to decide.
    Waiting,
    /// Nothing pending; the last submission completed or was aborted (or none was sent).
    Settled,
    /// Nothing pending; the last submission failed.
    Failed,
}

/// One stored conversation as a listing shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConversationSummary {
    /// The conversation id.
    pub id: String,
    /// Its agent.
    pub agent: String,
    /// When it was created, ms since the epoch.
    pub created_at: u64,
    /// The last write to its stream or any of its sessions, ms since the epoch.
    pub last_activity: u64,
    /// Where it stands.
    pub status: ConversationStatus,
    /// The start of its first message (at most [`FIRST_MESSAGE_CHARS`] characters; a
    /// signal's type and body), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_message: Option<String>,
    /// Records in its default session (messages, tool results, summaries).
    pub messages: u64,
    /// Its sessions (the default one and task sessions).
    pub sessions: usize,
    /// Submissions admitted but not settled yet (queued, running, or left by a killed run).
    pub pending: u64,
    /// Tokens and cost of its model turns, in every session (tasks and MCP sampling
    /// included).
    pub usage: Usage,
    /// Its model turns, in every session.
    pub model_turns: u64,
    /// Where its first message came from, when a schedule sent it: `schedule:<name>` (set by
    /// the caller from [`first_key`](Self::first_key); this crate knows no schedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The idempotency key of its first submission (read by [`ConversationIndex::all`]
    /// only).
    #[serde(skip)]
    pub first_key: Option<String>,
}

/// What a search asks for.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ConversationQuery {
    /// Words every row must contain (case-insensitive) in its agent, id or first message.
    pub text: Option<String>,
    /// Only this agent's conversations.
    pub agent: Option<String>,
    /// The most rows to return (at most [`MAX_LIST_LIMIT`]).
    pub limit: usize,
}

impl ConversationQuery {
    /// The `limit` most recently active conversations matching `text` (words, any order),
    /// of `agent` when given.
    pub fn new(text: Option<String>, agent: Option<String>, limit: usize) -> Self {
        Self { text, agent, limit }
    }
}

/// A search's answer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConversationPage {
    /// The matching conversations, most recently active first, at most the query's limit.
    pub conversations: Vec<ConversationSummary>,
    /// How many conversations matched.
    pub matched: usize,
    /// How many conversations the store holds.
    pub total: usize,
}

/// A row as read last, with the stream head and uid it was read at.
#[derive(Clone, Debug)]
struct Cached {
    uid: String,
    head: Offset,
    row: ConversationSummary,
    /// Whether `row`'s messages, sessions and usage were read (at `head`).
    detailed: bool,
}

/// The rows of a store's conversations, each read again only when its stream moved. One per
/// console; `flue session list` makes one for its one listing.
#[derive(Debug, Default)]
pub struct ConversationIndex {
    rows: Mutex<HashMap<String, Cached>>,
    /// Held while the rows are brought up to date, so that searches arriving meanwhile find
    /// them read instead of reading them all again (the first pass over a large store is the
    /// slow one).
    refresh: tokio::sync::Mutex<()>,
}

impl ConversationIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every row now (no usage), so that the first search finds them read: what a
    /// console does as it starts.
    pub async fn warm(&self, store: &dyn DynConversationStore) -> Result<usize, FlueError> {
        Ok(self.rows(store).await?.len())
    }

    /// The conversations matching `query`, most recently active first: usage is read for the
    /// rows returned only.
    pub async fn search(
        &self,
        store: &dyn DynConversationStore,
        query: &ConversationQuery,
    ) -> Result<ConversationPage, FlueError> {
        let rows = self.rows(store).await?;
        let total = rows.len();
        let words: Vec<String> = query
            .text
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        let mut matching: Vec<(Option<Offset>, ConversationSummary)> = rows
            .into_iter()
            .filter(|(_, row)| query.agent.as_ref().is_none_or(|agent| &row.agent == agent))
            .filter(|(_, row)| words.is_empty() || matches_words(row, &words))
            .collect();
        matching.sort_by(|(_, a), (_, b)| {
            (b.last_activity, &b.agent, &b.id).cmp(&(a.last_activity, &a.agent, &a.id))
        });
        let matched = matching.len();
        matching.truncate(query.limit.min(MAX_LIST_LIMIT));
        let mut conversations = Vec::with_capacity(matching.len());
        for (head, row) in matching {
            conversations.push(self.detailed(store, head, row).await?);
        }
        Ok(ConversationPage {
            conversations,
            matched,
            total,
        })
    }

    /// Every conversation with its usage and the key of its first submission, least
    /// recently active first (the one to continue last).
    pub async fn all(
        &self,
        store: &dyn DynConversationStore,
    ) -> Result<Vec<ConversationSummary>, FlueError> {
        let mut out = Vec::new();
        for (head, row) in self.rows(store).await? {
            let mut row = self.detailed(store, head, row).await?;
            row.first_key = first_key(store, &ConversationKey::new(&row.agent, &row.id)).await?;
            out.push(row);
        }
        out.sort_by(|a, b| (a.last_activity, &a.id).cmp(&(b.last_activity, &b.id)));
        Ok(out)
    }

    /// Every conversation's row without usage, with the stream head it was read at:
    /// managed conversations from their streams (read again only when the head moved), and
    /// those written without the runtime (`AGENT:ID` sessions only, no head) from their
    /// sessions.
    async fn rows(
        &self,
        store: &dyn DynConversationStore,
    ) -> Result<Vec<(Option<Offset>, ConversationSummary)>, FlueError> {
        let _refreshing = self.refresh.lock().await;
        let managed = store.all_conversations().await?;
        let known: BTreeSet<String> = managed.iter().map(|info| info.key.instance_id()).collect();
        let mut out = Vec::with_capacity(managed.len());
        let mut fresh = HashMap::with_capacity(managed.len());
        for info in managed {
            let instance = info.key.instance_id();
            let cached = self
                .lock()
                .get(&instance)
                .filter(|cached| cached.uid == info.uid && cached.head == info.head)
                .cloned();
            let cached = match cached {
                Some(cached) => cached,
                None => Cached {
                    uid: info.uid.clone(),
                    head: info.head,
                    row: stream_row(store, &info).await?,
                    detailed: false,
                },
            };
            out.push((Some(cached.head), cached.row.clone()));
            fresh.insert(instance, cached);
        }
        // What was deleted leaves the index with it.
        *self.lock() = fresh;
        for instance in store.instance_ids().await? {
            if known.contains(&instance) {
                continue;
            }
            let Some((agent, id)) = instance.split_once(':') else {
                continue;
            };
            let sessions = store.list(&instance).await?;
            let last_activity = sessions.iter().map(|s| s.updated_at).max().unwrap_or(0);
            out.push((
                None,
                ConversationSummary {
                    created_at: sessions
                        .iter()
                        .map(|session| session.created_at)
                        .min()
                        .unwrap_or(last_activity),
                    first_message: first_user_text(store, &instance).await?,
                    ..empty_row(ConversationKey::new(agent, id), last_activity)
                },
            ));
        }
        Ok(out)
    }

    /// `row`, read at stream head `head`, with its messages, sessions and usage (from the
    /// index when they were read at that head).
    async fn detailed(
        &self,
        store: &dyn DynConversationStore,
        head: Option<Offset>,
        row: ConversationSummary,
    ) -> Result<ConversationSummary, FlueError> {
        let instance = ConversationKey::new(&row.agent, &row.id).instance_id();
        if let Some(cached) = self.lock().get(&instance)
            && cached.detailed
            && Some(cached.head) == head
        {
            return Ok(cached.row.clone());
        }
        let sessions = store.list(&instance).await?;
        let (usage, model_turns) = conversation_usage(store, &instance).await?;
        let last_activity = sessions
            .iter()
            .map(|session| session.updated_at)
            .max()
            .unwrap_or(0)
            .max(row.last_activity);
        let row = ConversationSummary {
            messages: sessions
                .iter()
                .find(|session| session.session == DEFAULT_SESSION)
                .map_or(0, |session| session.version),
            sessions: sessions.len(),
            usage,
            model_turns,
            last_activity,
            ..row
        };
        if let Some(cached) = self.lock().get_mut(&instance)
            && Some(cached.head) == head
        {
            cached.row = row.clone();
            cached.detailed = true;
        }
        Ok(row)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether every word is in the row's agent, id or first message.
fn matches_words(row: &ConversationSummary, words: &[String]) -> bool {
    let haystack = format!(
        "{}\n{}\n{}",
        row.agent,
        row.id,
        row.first_message.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    words.iter().all(|word| haystack.contains(word.as_str()))
}

fn empty_row(key: ConversationKey, last_activity: u64) -> ConversationSummary {
    ConversationSummary {
        id: key.id,
        agent: key.agent,
        created_at: last_activity,
        last_activity,
        status: ConversationStatus::Settled,
        first_message: None,
        messages: 0,
        sessions: 0,
        pending: 0,
        usage: Usage::default(),
        model_turns: 0,
        origin: None,
        first_key: None,
    }
}

/// A managed conversation's row from the first and last batches of its stream.
async fn stream_row(
    store: &dyn DynConversationStore,
    info: &ConversationInfo,
) -> Result<ConversationSummary, FlueError> {
    let first = store
        .read_stream(&info.key, Offset(0), EDGE_BATCHES)
        .await?
        .batches;
    let tail_from = info.head.0.saturating_sub(EDGE_BATCHES as u64);
    let last = if tail_from == 0 {
        first.clone()
    } else {
        store
            .read_stream(&info.key, Offset(tail_from), EDGE_BATCHES)
            .await?
            .batches
    };
    let last_activity = last
        .iter()
        .map(|batch| batch.at)
        .max()
        .unwrap_or(info.created_at)
        .max(info.created_at);
    let first_message = first.iter().find_map(|batch| match &batch.body {
        BatchBody::Admitted { message, .. } => Some(message_text(message)),
        _ => None,
    });
    Ok(ConversationSummary {
        created_at: info.created_at,
        status: status(info.unsettled, &last),
        first_message,
        pending: info.unsettled,
        ..empty_row(info.key.clone(), last_activity)
    })
}

/// Where a conversation with `unsettled` submissions stands (a waiting one is not counted
/// there), from its last batches: the latest pause, attempt or settlement decides.
fn status(unsettled: u64, last: &[StreamBatch]) -> ConversationStatus {
    for batch in last.iter().rev() {
        match &batch.body {
            BatchBody::Waiting { .. } => return ConversationStatus::Waiting,
            BatchBody::Started { .. } => return ConversationStatus::Running,
            BatchBody::Settled(_) if unsettled > 0 => return ConversationStatus::Running,
            BatchBody::Settled(settlement) => {
                return match settlement.outcome {
                    Outcome::Failed => ConversationStatus::Failed,
                    _ => ConversationStatus::Settled,
                };
            }
            _ => {}
        }
    }
    if unsettled > 0 {
        ConversationStatus::Running
    } else {
        ConversationStatus::Settled
    }
}

/// A message as one line of a listing: a user message's text, a signal's type and body; cut
/// at [`FIRST_MESSAGE_CHARS`].
fn message_text(message: &DeliveredMessage) -> String {
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

fn cut(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(FIRST_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}

/// The first user message of a conversation written without the runtime (its first
/// records only).
async fn first_user_text(
    store: &dyn DynConversationStore,
    instance: &str,
) -> Result<Option<String>, FlueError> {
    let Some(log) = store
        .load(&SessionKey::new(instance, DEFAULT_SESSION), 0)
        .await?
    else {
        return Ok(None);
    };
    Ok(log.records.iter().find_map(|stored| match &stored.record {
        Record::User(message) => Some(cut(&message.joined_text())),
        _ => None,
    }))
}

/// The idempotency key of the conversation's first submission, if it had one.
async fn first_key(
    store: &dyn DynConversationStore,
    key: &ConversationKey,
) -> Result<Option<String>, FlueError> {
    if store.conversation(key).await?.is_none() {
        return Ok(None);
    }
    // The first batches are the creation and the first admission.
    let page = store.read_stream(key, Offset(0), EDGE_BATCHES).await?;
    let Some(submission_id) = page.batches.iter().find_map(|batch| match &batch.body {
        BatchBody::Admitted { submission_id, .. } => Some(submission_id.clone()),
        _ => None,
    }) else {
        return Ok(None);
    };
    Ok(store
        .submission(&submission_id)
        .await?
        .and_then(|submission| submission.idempotency_key))
}

/// The usage of a model turn (a failed one included) or an MCP server's sampling stored in
/// `record`.
pub fn record_usage(record: &Record) -> Option<Usage> {
    match record {
        Record::Assistant(message) => Some(message.usage),
        Record::FailedTurn(failed) => Some(failed.usage),
        Record::Sampling(exchange) => Some(exchange.usage),
        _ => None,
    }
}

/// The usage summed over every session of conversation `instance_id`, and its model turns.
pub async fn conversation_usage(
    store: &dyn DynConversationStore,
    instance_id: &str,
) -> Result<(Usage, u64), FlueError> {
    let mut usage = Usage::default();
    let mut turns = 0;
    for session in store.list(instance_id).await? {
        let key = SessionKey::new(instance_id, &session.session);
        let Some(log) = store.load(&key, 0).await? else {
            continue;
        };
        for stored in &log.records {
            if let Some(used) = record_usage(&stored.record) {
                usage += used;
                turns += u64::from(matches!(
                    stored.record,
                    Record::Assistant(_) | Record::FailedTurn(_)
                ));
            }
        }
    }
    Ok((usage, turns))
}

#[cfg(test)]
mod tests;
