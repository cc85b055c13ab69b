//! The conversations of a store as one list, for `flue session list` and the dev console's
//! conversation list (`GET /_flue/dev/conversations`): agent, id, first and last message, last
//! activity, status (running, waiting for a decision, settled, failed), messages, model turns,
//! tokens and cost. Read a page at a time from the summaries the store keeps up to date as it
//! writes (`ConversationStore::list_conversations`): a listing costs its page, not the store,
//! and nothing runs.

use flue_protocol::record::{Record, Usage};
use serde::Serialize;

use crate::error::FlueError;
use crate::store::listing::{
    ListedConversation, ListedStatus, ListingCursor, ListingQuery, MAX_LISTING_LIMIT,
    SUMMARY_MESSAGE_CHARS, record_usage,
};
use crate::store::{DynConversationStore, SessionKey};

/// The most characters of a first message a row carries.
pub const FIRST_MESSAGE_CHARS: usize = SUMMARY_MESSAGE_CHARS;

/// The most rows a search returns, whatever it asks for.
pub const MAX_LIST_LIMIT: usize = MAX_LISTING_LIMIT;

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
    /// The last write to it (creation, message, records, settlement), ms since the epoch.
    pub last_activity: u64,
    /// Where it stands.
    pub status: ConversationStatus,
    /// The start of its first message (at most [`FIRST_MESSAGE_CHARS`] characters; a
    /// signal's type and body), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_message: Option<String>,
    /// The start of its last message (the last one sent, or the model's last reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_message: Option<String>,
    /// Records in its default session (messages, tool results, summaries).
    pub messages: u64,
    /// Its sessions (the default one and task sessions).
    pub sessions: usize,
    /// Submissions admitted but not settled yet (queued, running, waiting, or left by a killed
    /// run).
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
    /// The idempotency key of its first submission.
    #[serde(skip)]
    pub first_key: Option<String>,
}

impl From<ListedConversation> for ConversationSummary {
    fn from(listed: ListedConversation) -> Self {
        let summary = listed.summary;
        Self {
            id: listed.key.id,
            agent: listed.key.agent,
            created_at: listed.created_at,
            last_activity: listed.last_activity,
            status: match listed.status {
                ListedStatus::Running => ConversationStatus::Running,
                ListedStatus::Waiting => ConversationStatus::Waiting,
                ListedStatus::Failed => ConversationStatus::Failed,
                #[allow(unreachable_patterns, reason = "the statuses may grow")]
                _ => ConversationStatus::Settled,
            },
            first_message: summary.first_message,
            last_message: summary.last_message,
            messages: summary.messages,
            sessions: usize::try_from(summary.sessions).unwrap_or(usize::MAX),
            pending: listed.pending,
            usage: summary.usage,
            model_turns: summary.model_turns,
            origin: None,
            first_key: summary.first_key,
        }
    }
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
    /// Only the rows after this cursor (a page's `next`).
    pub before: Option<String>,
}

impl ConversationQuery {
    /// The `limit` most recently active conversations matching `text` (words, any order),
    /// of `agent` when given.
    pub fn new(text: Option<String>, agent: Option<String>, limit: usize) -> Self {
        Self {
            text,
            agent,
            limit,
            before: None,
        }
    }

    /// Only the rows after `cursor` (the `next` of an earlier page).
    #[must_use]
    pub fn with_before(mut self, cursor: Option<String>) -> Self {
        self.before = cursor;
        self
    }
}

/// A search's answer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ConversationPage {
    /// The matching conversations, most recently active first, at most the query's limit.
    pub conversations: Vec<ConversationSummary>,
    /// How many conversations this page holds (a listing no longer counts every match).
    pub matched: usize,
    /// How many conversations the store holds.
    pub total: usize,
    /// The cursor of the next page (less recently active), when this one is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A store's conversations a page at a time. Holds nothing: the store keeps each row's
/// summary up to date as it writes, so each search reads its page and no more.
#[derive(Debug, Default)]
pub struct ConversationIndex {}

impl ConversationIndex {
    /// An index.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many conversations there are (what a console once did as it started; nothing
    /// needs reading ahead any more).
    pub async fn warm(&self, store: &dyn DynConversationStore) -> Result<usize, FlueError> {
        let total = store.count_conversations().await?;
        Ok(usize::try_from(total).unwrap_or(usize::MAX))
    }

    /// The conversations matching `query`, most recently active first.
    pub async fn search(
        &self,
        store: &dyn DynConversationStore,
        query: &ConversationQuery,
    ) -> Result<ConversationPage, FlueError> {
        let before = query
            .before
            .as_deref()
            .filter(|cursor| !cursor.is_empty())
            .map(ListingCursor::parse)
            .transpose()?;
        let limit = query.limit.min(MAX_LIST_LIMIT);
        let listing = ListingQuery::new(limit)
            .with_agent(query.agent.clone())
            .with_text(query.text.as_deref())
            .with_before(before);
        let rows = store.list_conversations(&listing).await?;
        let next = (limit > 0 && rows.len() == limit)
            .then(|| rows.last().map(|row| row.cursor().to_text()))
            .flatten();
        let total = store.count_conversations().await?;
        let conversations: Vec<ConversationSummary> =
            rows.into_iter().map(ConversationSummary::from).collect();
        Ok(ConversationPage {
            matched: conversations.len(),
            total: usize::try_from(total).unwrap_or(usize::MAX),
            conversations,
            next,
        })
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
