//! The conversations of a store as one list, for `flue session list` and the dev console's
//! conversation list (`GET /_flue/dev/conversations`): agent, id, first message, last
//! activity, status (running, waiting for a decision, settled, failed), messages, model
//! turns, tokens and cost. Read straight from the store; nothing runs.
//!
//! What each part costs decides when it is read: a row's last activity and counts come from
//! its session list (one small read); its first message from its first stream batches, once
//! per conversation and only for a search with words; its status (its last batches) and
//! usage (every session's records) only for the rows a search returns. A
//! [`ConversationIndex`] keeps each row with the stream head it was read at and reads it again
//! only when the head moved, so a console asking again and again reads only what changed.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use flue_core::{
    BatchBody, ConversationKey, DEFAULT_SESSION, DeliveredMessage, FlueError, Offset, Outcome,
    Record, StreamBatch, Usage,
    store::{DynConversationStore, SessionKey},
};
use serde::Serialize;

/// The most characters of a first message a row carries.
pub const FIRST_MESSAGE_CHARS: usize = 200;

/// The most rows a search returns, whatever it asks for.
pub const MAX_LIST_LIMIT: usize = 500;

/// How many of a stream's last batches a row's status is read from (and of its first ones
/// its first submission).
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
    /// The last write to any of its sessions (its creation when it has none yet), ms since
    /// the epoch.
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

/// A row as read last, with the stream head and uid it was read at (none for a conversation
/// written without the runtime).
#[derive(Clone, Debug)]
struct Cached {
    uid: String,
    head: Option<Offset>,
    row: ConversationSummary,
    /// Whether `row.first_message` was read (it never changes for one uid).
    first_read: bool,
    /// Whether `row`'s status and usage were read (at `head`).
    detailed: bool,
}

/// The rows of a store's conversations, each read again only when its stream moved. One per
/// console; `flue session list` makes one for its one listing.
///
/// A row costs one read of the conversation's session list (its last activity, messages and
/// sessions); its first message one read of its first stream batches, done once per
/// conversation and only when a search has words; its status (from its last batches) and
/// usage (every session's records) are read for the rows a search returns.
#[derive(Debug, Default)]
pub struct ConversationIndex {
    rows: Mutex<HashMap<String, Cached>>,
    /// Held while the rows are brought up to date and read, so that searches arriving
    /// meanwhile find them read instead of reading them all again (the first pass over a
    /// large store is the slow one), and never see a map being rebuilt.
    refresh: tokio::sync::Mutex<()>,
}

/// How many first messages the background pass reads before letting a search in.
const FIRSTS_PER_TURN: usize = 200;

impl ConversationIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every row now, first messages included, so that the first search finds them
    /// read: what a console does as it starts. Searches arriving meanwhile wait for at most
    /// 200 reads. Returns how many conversations there are.
    pub async fn warm(&self, store: &dyn DynConversationStore) -> Result<usize, FlueError> {
        {
            let _refreshing = self.refresh.lock().await;
            self.refresh_rows(store).await?;
        }
        loop {
            let _refreshing = self.refresh.lock().await;
            if self.read_first_messages(store, FIRSTS_PER_TURN).await? {
                break;
            }
        }
        Ok(self.lock().len())
    }

    /// The conversations matching `query`, most recently active first: status and usage are
    /// read for the rows returned only.
    pub async fn search(
        &self,
        store: &dyn DynConversationStore,
        query: &ConversationQuery,
    ) -> Result<ConversationPage, FlueError> {
        let words: Vec<String> = query
            .text
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        let (page, total, matched) = {
            let _refreshing = self.refresh.lock().await;
            self.refresh_rows(store).await?;
            if !words.is_empty() {
                self.read_first_messages(store, usize::MAX).await?;
            }
            let rows = self.lock();
            let mut matching: Vec<&Cached> = rows
                .values()
                .filter(|cached| {
                    query
                        .agent
                        .as_ref()
                        .is_none_or(|agent| &cached.row.agent == agent)
                })
                .filter(|cached| words.is_empty() || matches_words(&cached.row, &words))
                .collect();
            matching.sort_by(|a, b| {
                let (a, b) = (&a.row, &b.row);
                (b.last_activity, &b.agent, &b.id).cmp(&(a.last_activity, &a.agent, &a.id))
            });
            let matched = matching.len();
            let page: Vec<Cached> = matching
                .into_iter()
                .take(query.limit.min(MAX_LIST_LIMIT))
                .cloned()
                .collect();
            (page, rows.len(), matched)
        };
        let mut conversations = Vec::with_capacity(page.len());
        for cached in page {
            conversations.push(self.detailed(store, cached).await?);
        }
        Ok(ConversationPage {
            conversations,
            matched,
            total,
        })
    }

    /// Every conversation with its status, usage and the key of its first submission, least
    /// recently active first (the one to continue last).
    pub async fn all(
        &self,
        store: &dyn DynConversationStore,
    ) -> Result<Vec<ConversationSummary>, FlueError> {
        let rows: Vec<Cached> = {
            let _refreshing = self.refresh.lock().await;
            self.refresh_rows(store).await?;
            self.read_first_messages(store, usize::MAX).await?;
            self.lock().values().cloned().collect()
        };
        let mut out = Vec::with_capacity(rows.len());
        for cached in rows {
            let mut row = self.detailed(store, cached).await?;
            row.first_key = first_key(store, &ConversationKey::new(&row.agent, &row.id)).await?;
            out.push(row);
        }
        out.sort_by(|a, b| (a.last_activity, &a.id).cmp(&(b.last_activity, &b.id)));
        Ok(out)
    }

    /// Brings every row up to date (the caller holds `refresh`): managed conversations whose
    /// stream moved (or that are new) from their session list, those written without the
    /// runtime (`AGENT:ID` sessions only) every time; what was deleted leaves the index.
    async fn refresh_rows(&self, store: &dyn DynConversationStore) -> Result<(), FlueError> {
        let managed = store.all_conversations().await?;
        let known: BTreeSet<String> = managed.iter().map(|info| info.key.instance_id()).collect();
        let mut before = std::mem::take(&mut *self.lock());
        let mut fresh = HashMap::with_capacity(managed.len());
        let rebuilt = async {
            for info in managed {
                let instance = info.key.instance_id();
                let cached = match before.remove(&instance) {
                    Some(cached) if cached.uid == info.uid && cached.head == Some(info.head) => {
                        cached
                    }
                    before => {
                        // The first message belongs to the incarnation: kept while the uid is.
                        let first =
                            before.filter(|cached| cached.uid == info.uid && cached.first_read);
                        let mut row = session_row(store, info.key.clone(), info.created_at).await?;
                        row.pending = info.unsettled;
                        row.status = if info.unsettled > 0 {
                            ConversationStatus::Running
                        } else {
                            ConversationStatus::Settled
                        };
                        row.first_message =
                            first.as_ref().and_then(|c| c.row.first_message.clone());
                        Cached {
                            uid: info.uid.clone(),
                            head: Some(info.head),
                            row,
                            first_read: first.is_some(),
                            detailed: false,
                        }
                    }
                };
                fresh.insert(instance, cached);
            }
            for instance in store.instance_ids().await? {
                if known.contains(&instance) {
                    continue;
                }
                let Some((agent, id)) = instance.split_once(':') else {
                    continue;
                };
                let mut row = session_row(store, ConversationKey::new(agent, id), 0).await?;
                row.first_message = first_user_text(store, &instance).await?;
                fresh.insert(
                    instance,
                    Cached {
                        uid: String::new(),
                        head: None,
                        row,
                        first_read: true,
                        detailed: false,
                    },
                );
            }
            Ok::<_, FlueError>(())
        }
        .await;
        match rebuilt {
            Ok(()) => *self.lock() = fresh,
            // Nothing is lost: what was read stays for the next try.
            Err(err) => {
                before.extend(fresh);
                *self.lock() = before;
                return Err(err);
            }
        }
        Ok(())
    }

    /// Reads up to `most` first messages of rows that have not had theirs read (the caller
    /// holds `refresh`); true when none is left.
    async fn read_first_messages(
        &self,
        store: &dyn DynConversationStore,
        most: usize,
    ) -> Result<bool, FlueError> {
        let missing: Vec<(String, String, ConversationKey)> = self
            .lock()
            .iter()
            .filter(|(_, cached)| !cached.first_read)
            .take(most.saturating_add(1))
            .map(|(instance, cached)| {
                let key = ConversationKey::new(&cached.row.agent, &cached.row.id);
                (instance.clone(), cached.uid.clone(), key)
            })
            .collect();
        let done = missing.len() <= most;
        for (instance, uid, key) in missing.into_iter().take(most) {
            let first = first_message(store, &key).await?;
            if let Some(cached) = self.lock().get_mut(&instance)
                && cached.uid == uid
            {
                cached.row.first_message = first;
                cached.first_read = true;
            }
        }
        Ok(done)
    }

    /// `cached`'s row with its status and usage (kept in the index while its head has not
    /// moved).
    async fn detailed(
        &self,
        store: &dyn DynConversationStore,
        cached: Cached,
    ) -> Result<ConversationSummary, FlueError> {
        if cached.detailed {
            return Ok(cached.row);
        }
        let key = ConversationKey::new(&cached.row.agent, &cached.row.id);
        let instance = key.instance_id();
        let (usage, model_turns) = conversation_usage(store, &instance).await?;
        let mut row = ConversationSummary {
            usage,
            model_turns,
            ..cached.row
        };
        if !cached.first_read {
            row.first_message = first_message(store, &key).await?;
        }
        if let Some(head) = cached.head {
            let from = head.0.saturating_sub(EDGE_BATCHES as u64);
            match store.read_stream(&key, Offset(from), EDGE_BATCHES).await {
                Ok(page) => row.status = status(row.pending, &page.batches),
                Err(FlueError::AgentInstanceNotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        if let Some(entry) = self.lock().get_mut(&instance)
            && entry.uid == cached.uid
            && entry.head == cached.head
        {
            entry.row = row.clone();
            entry.first_read = true;
            entry.detailed = true;
        }
        Ok(row)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The start of a managed conversation's first message (its first stream batches).
async fn first_message(
    store: &dyn DynConversationStore,
    key: &ConversationKey,
) -> Result<Option<String>, FlueError> {
    match store.read_stream(key, Offset(0), 2).await {
        Ok(page) => Ok(page.batches.iter().find_map(|batch| match &batch.body {
            BatchBody::Admitted { message, .. } => Some(message_text(message)),
            _ => None,
        })),
        // Deleted meanwhile: the next refresh drops it.
        Err(FlueError::AgentInstanceNotFound { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// A conversation's row from its session list: last activity (no earlier than `created_at`),
/// messages and sessions.
async fn session_row(
    store: &dyn DynConversationStore,
    key: ConversationKey,
    created_at: u64,
) -> Result<ConversationSummary, FlueError> {
    let sessions = store.list(&key.instance_id()).await?;
    let last_activity = sessions
        .iter()
        .map(|session| session.updated_at)
        .max()
        .unwrap_or(created_at)
        .max(created_at);
    let created_at = if created_at == 0 {
        sessions
            .iter()
            .map(|session| session.created_at)
            .min()
            .unwrap_or(last_activity)
    } else {
        created_at
    };
    Ok(ConversationSummary {
        created_at,
        messages: sessions
            .iter()
            .find(|session| session.session == DEFAULT_SESSION)
            .map_or(0, |session| session.version),
        sessions: sessions.len(),
        ..empty_row(key, last_activity)
    })
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
