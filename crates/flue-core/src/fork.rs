//! Forking a conversation: a new conversation that starts from an earlier point of an existing
//! one. Works on any session store, from any process, with nothing running.
//!
//! A conversation's **turns** are the `User` records of its root session, numbered from 1 in
//! log order (the `user (turn N):` lines of `flue session show`, the `turn` field of its `--json`
//! messages). Forking at turn `N` copies the root session's records before turn `N`'s `User`
//! record (turns `1..N`, so the fork's next message becomes its turn `N`), and the records of
//! its task sessions written before that instant. The copies are the fork's own: the original
//! and the fork share no session, submission, pending action, audit entry or memory binding.
//! `N` may be one past the last turn (copy everything); a point where a decision is still
//! pending is refused, and calls a crash left unanswered are answered `interrupted` in the fork.
//! Standing approvals (`Record::Rule`) are copied whatever turn granted or revoked them.
//! The fork's sessions are written in one store call ([`SessionStore::create_sessions`]): on
//! the memory, SQLite and Postgres stores a crash leaves the whole fork or nothing of it.
//!
//! [`SessionStore::create_sessions`]: crate::store::SessionStore::create_sessions

use flue_protocol::record::{Record, StoredRecord};
use flue_protocol::{DEFAULT_SESSION, TASK_SESSION_PREFIX};
use serde::{Deserialize, Serialize};

use crate::error::{FlueError, Result};
use crate::steps::{pending_actions, results_before_input};
use crate::store::{DynSessionStore, SessionKey};
use crate::util::now_ms;

/// What a fork copied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkReport {
    /// The instance id forked from.
    pub from: String,
    /// The new conversation's instance id.
    pub to: String,
    /// The turn forked at: the fork holds the turns before it.
    pub at: u64,
    /// How many turns the original has.
    pub turns: u64,
    /// Records copied into the fork's root session (closing results included).
    pub records: u64,
    /// Task sessions copied, by name.
    pub tasks: Vec<String>,
}

/// The indexes of the `User` records of `records`: turn `n` starts at `turn_starts[n - 1]`.
pub fn turn_starts(records: &[StoredRecord]) -> Vec<usize> {
    records
        .iter()
        .enumerate()
        .filter(|(_, stored)| matches!(stored.record, Record::User(_)))
        .map(|(idx, _)| idx)
        .collect()
}

/// Forks conversation `from` (an instance id) at turn `at` into the new instance `to`.
///
/// Errors: `invalid_request` when `at` is 0 or more than one past the last turn, or when a
/// decision is pending at that point; `session_not_found` when `from` has no root session;
/// `session_already_exists` when `to` already holds sessions (nothing is written then).
pub async fn fork_conversation(
    store: &dyn DynSessionStore,
    from: &str,
    at: u64,
    to: &str,
) -> Result<ForkReport> {
    let root_key = SessionKey::new(from, DEFAULT_SESSION);
    let Some(log) = store.load(&root_key, 0).await? else {
        return Err(FlueError::SessionNotFound {
            session: format!("{from}/{DEFAULT_SESSION}"),
        });
    };
    let starts = turn_starts(&log.records);
    let turns = starts.len() as u64;
    if at == 0 || at > turns + 1 {
        return Err(FlueError::InvalidRequest {
            message: format!(
                "cannot fork at turn {at}: conversation {from:?} has {turns} turn(s); pass --at \
                 1 to {} (the fork keeps the turns before it)",
                turns + 1
            ),
        });
    }
    let cut = usize::try_from(at - 1)
        .ok()
        .and_then(|idx| starts.get(idx).copied())
        .unwrap_or(log.records.len());
    let cut_at = log.records.get(cut).map_or(u64::MAX, |stored| stored.at);
    let mut copied: Vec<StoredRecord> = log.records[..cut].to_vec();
    let plain: Vec<Record> = copied.iter().map(|stored| stored.record.clone()).collect();
    let pending = pending_actions(&plain);
    if !pending.is_empty() {
        let ids: Vec<&str> = pending.iter().map(|a| a.action_id.as_str()).collect();
        return Err(FlueError::InvalidRequest {
            message: format!(
                "cannot fork at turn {at}: the turn before it waits for a decision ({}); \
                 resolve it first, or fork at an earlier turn",
                ids.join(", ")
            ),
        });
    }
    let now = now_ms();
    copied.extend(
        results_before_input(&plain)
            .into_iter()
            .map(|result| StoredRecord::new(Record::ToolResult(result), now)),
    );
    // Standing approvals are the conversation's, not a turn's: the fork keeps them all.
    copied.extend(
        log.records[cut..]
            .iter()
            .filter(|stored| matches!(stored.record, Record::Rule(_)))
            .cloned(),
    );
    if !store.list(to).await?.is_empty() {
        return Err(FlueError::SessionAlreadyExists {
            session: format!("{to}/{DEFAULT_SESSION}"),
        });
    }
    // Everything the fork holds is gathered first and written in one store call, all or
    // nothing: a crash leaves either the whole fork or no trace of it.
    let mut sessions = vec![(SessionKey::new(to, DEFAULT_SESSION), Vec::new())];
    let mut tasks = Vec::new();
    for summary in store.list(from).await? {
        if !summary.session.starts_with(TASK_SESSION_PREFIX) || summary.created_at >= cut_at {
            continue;
        }
        let key = SessionKey::new(from, summary.session.as_str());
        let Some(task_log) = store.load(&key, 0).await? else {
            continue;
        };
        let kept: Vec<StoredRecord> = task_log
            .records
            .into_iter()
            .filter(|stored| stored.at < cut_at)
            .collect();
        sessions.push((SessionKey::new(to, summary.session.as_str()), kept));
        tasks.push(summary.session);
    }
    let records = copied.len() as u64;
    if let Some((_, root)) = sessions.first_mut() {
        *root = copied;
    }
    store
        .create_sessions(&sessions)
        .await
        .map_err(|err| match err {
            FlueError::SessionAlreadyExists { .. } => FlueError::SessionAlreadyExists {
                session: format!("{to}/{DEFAULT_SESSION}"),
            },
            other => other,
        })?;
    Ok(ForkReport {
        from: from.to_owned(),
        to: to.to_owned(),
        at,
        turns,
        records,
        tasks,
    })
}
