//! A conversation's stored transcript: a session's records with its task sessions nested, as
//! the dev console reads it (`GET /_flue/dev/transcript/...`) and `flue session show` prints
//! it. Read straight from the store; nothing runs.

use std::collections::BTreeMap;

use flue_protocol::record::{Record, StoredRecord};
use flue_protocol::{DEFAULT_SESSION, task_session_parent};
use serde_json::{Value, json};

use crate::error::FlueError;
use crate::store::{DynConversationStore, SessionKey};
use crate::util::BoxFuture;

/// One stored session and, when the tree was asked for, its task sessions.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Transcript {
    /// The session's name.
    pub session: String,
    /// Its version (record count).
    pub version: u64,
    /// Its records, in order.
    pub records: Vec<StoredRecord>,
    /// Its task sessions, in creation order (empty unless the tree was asked for).
    pub tasks: Vec<Transcript>,
}

impl Transcript {
    /// Session `session` of conversation `instance_id` and, with `tree`, its task sessions
    /// recursively. A missing conversation or session is an error naming what exists.
    pub async fn load(
        store: &dyn DynConversationStore,
        instance_id: &str,
        session: &str,
        tree: bool,
    ) -> Result<Self, FlueError> {
        let tasks = if tree {
            task_tree(store, instance_id).await?
        } else {
            BTreeMap::new()
        };
        load(store, instance_id, session, &tasks).await
    }

    /// The session's state document as stored (its latest `state` record), with its version;
    /// `None` while nothing wrote it.
    pub fn state(&self) -> Option<(&Value, u64)> {
        self.records
            .iter()
            .rev()
            .find_map(|stored| match &stored.record {
                Record::State(change) => Some((&change.value, change.version)),
                _ => None,
            })
    }

    /// The transcript as JSON: `{session, version, messages, tasks}`, each message a stored
    /// record's fields plus its `role` (`state` and `tool_attempt` records included), a user
    /// record's `turn` (1, 2, ... in the session: the number `flue session fork --at` and
    /// `flue rewind --to` take), and `state` (`{value, version}`) when the session's state was
    /// written.
    pub fn to_json(&self) -> Value {
        let mut turn = 0_u64;
        let messages: Vec<Value> = self
            .records
            .iter()
            .map(|stored| {
                let mut message = message_json(stored);
                // Turns are numbered by their `User` record (what fork and rewind take).
                if matches!(stored.record, Record::User(_))
                    && let Value::Object(map) = &mut message
                {
                    turn += 1;
                    map.insert("turn".into(), Value::from(turn));
                }
                message
            })
            .collect();
        let tasks: Vec<Value> = self.tasks.iter().map(Transcript::to_json).collect();
        let mut shown = json!({
            "session": self.session,
            "version": self.version,
            "messages": messages,
            "tasks": tasks,
        });
        if let (Some((value, version)), Value::Object(map)) = (self.state(), &mut shown) {
            map.insert(
                "state".into(),
                json!({ "value": value, "version": version }),
            );
        }
        shown
    }
}

/// The stored transcript of conversation `instance_id`: its root session with the task
/// sessions nested, as `flue session show --json --tree` prints it (the dev console reads it).
/// `None` when the conversation has no sessions.
pub async fn transcript_tree(
    store: &dyn DynConversationStore,
    instance_id: &str,
) -> Result<Option<Value>, FlueError> {
    if store.list(instance_id).await?.is_empty() {
        return Ok(None);
    }
    let shown = Transcript::load(store, instance_id, DEFAULT_SESSION, true).await?;
    Ok(Some(shown.to_json()))
}

/// Loads `session` and, recursively, the task sessions `tasks` lists under it.
fn load<'a>(
    store: &'a dyn DynConversationStore,
    id: &'a str,
    session: &'a str,
    tasks: &'a BTreeMap<String, Vec<String>>,
) -> BoxFuture<'a, Result<Transcript, FlueError>> {
    Box::pin(async move {
        let key = SessionKey::new(id, session);
        let Some(log) = store.load(&key, 0).await? else {
            let sessions = store.list(id).await?;
            if sessions.is_empty() {
                return Err(FlueError::config(format!(
                    "conversation {:?} does not exist; `flue session list` shows the stored ones",
                    conversation_of(id)
                )));
            }
            let names: Vec<&str> = sessions.iter().map(|s| s.session.as_str()).collect();
            return Err(FlueError::config(format!(
                "conversation {:?} has no session {session:?}; its sessions: {}",
                conversation_of(id),
                names.join(", ")
            )));
        };
        let mut children = Vec::new();
        for child in tasks.get(session).into_iter().flatten() {
            children.push(load(store, id, child, tasks).await?);
        }
        Ok(Transcript {
            session: session.to_owned(),
            version: log.version,
            records: log.records,
            tasks: children,
        })
    })
}

/// Task sessions by parent, each list in creation order.
async fn task_tree(
    store: &dyn DynConversationStore,
    id: &str,
) -> Result<BTreeMap<String, Vec<String>>, FlueError> {
    let mut sessions = store.list(id).await?;
    sessions.sort_by(|a, b| (a.created_at, &a.session).cmp(&(b.created_at, &b.session)));
    let mut tree: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for summary in sessions {
        if let Some(parent) = task_session_parent(&summary.session) {
            tree.entry(parent.to_owned())
                .or_default()
                .push(summary.session.clone());
        }
    }
    Ok(tree)
}

/// One stored record as a transcript message: the record's own fields plus a `role`.
fn message_json(stored: &StoredRecord) -> Value {
    let role = match &stored.record {
        Record::Assistant(_) => "assistant",
        Record::ToolResult(_) => "tool",
        Record::Sampling(_) => "sampling",
        Record::FailedTurn(_) => "failed_turn",
        Record::Hook(_) => "hook",
        Record::State(_) => "state",
        Record::ToolAttempt(_) => "tool_attempt",
        Record::Rule(_) => "rule",
        _ => "user",
    };
    // Stored records always serialize (they were read from their JSON); `null` otherwise.
    let mut value = serde_json::to_value(stored).unwrap_or_default();
    if let Value::Object(map) = &mut value {
        map.insert("role".into(), Value::String(role.into()));
    }
    value
}

/// The conversation id of a harness instance id (`agent:id` for conversations `flue run` and
/// `flue serve` keep).
fn conversation_of(instance_id: &str) -> &str {
    instance_id
        .split_once(':')
        .map_or(instance_id, |(_, id)| id)
}
