//! Memory across conversations: notes an agent keeps about a **subject** (a user id the
//! application chooses), searchable with the store's own full-text engine.
//!
//! A note belongs to one agent and one subject. A conversation is bound to at most one subject
//! ([`NoteStore::bind_subject`], set once by the application); the memory tools of an agent
//! with `memory:` read and write the notes of their conversation's subject. Notes are bounded
//! per note and per subject ([`NoteLimits`]), and the application lists and erases them
//! (retention, erasure requests) without the agent.

use serde::{Deserialize, Serialize};

use crate::error::{FlueError, Result};
use crate::util::BoxFuture;

/// One memory note.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// Note id (a ULID; `memory_write` derives it from its call's idempotency key).
    pub id: String,
    /// The agent that keeps it.
    pub agent: String,
    /// The subject it is about.
    pub subject: String,
    /// The note (redacted before it is stored).
    pub text: String,
    /// When it was written, ms since the epoch.
    pub created_at: u64,
}

/// The bounds of an agent's memory, checked by the store as it writes (so that many writers,
/// on many nodes, cannot pass them together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteLimits {
    /// Most bytes of one note's text.
    pub max_note_bytes: u64,
    /// Most notes per agent and subject.
    pub max_notes: u64,
    /// Most bytes of all notes per agent and subject.
    pub max_subject_bytes: u64,
}

impl Default for NoteLimits {
    fn default() -> Self {
        Self {
            max_note_bytes: 2 * 1024,
            max_notes: 200,
            max_subject_bytes: 64 * 1024,
        }
    }
}

impl NoteLimits {
    /// Checks a new note of `note_bytes` against the bounds, given what the subject holds.
    pub fn check(&self, note_bytes: u64, existing_notes: u64, existing_bytes: u64) -> Result<()> {
        if note_bytes > self.max_note_bytes {
            return Err(FlueError::MemoryLimitExceeded {
                what: "note bytes".to_owned(),
                limit: self.max_note_bytes,
            });
        }
        if existing_notes >= self.max_notes {
            return Err(FlueError::MemoryLimitExceeded {
                what: "notes per subject".to_owned(),
                limit: self.max_notes,
            });
        }
        if existing_bytes.saturating_add(note_bytes) > self.max_subject_bytes {
            return Err(FlueError::MemoryLimitExceeded {
                what: "bytes per subject".to_owned(),
                limit: self.max_subject_bytes,
            });
        }
        Ok(())
    }
}

/// The most search terms a query keeps.
pub const MAX_SEARCH_TERMS: usize = 16;

/// The search terms of a query: its words (letters and digits), lowercased, at most
/// [`MAX_SEARCH_TERMS`]. A note matches when it holds any of them (as a word); stores rank by
/// their engine's relevance. Nothing of the query reaches a store's query syntax but these
/// words.
pub fn search_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
    {
        let word = word.to_lowercase();
        if !terms.contains(&word) {
            terms.push(word);
        }
        if terms.len() == MAX_SEARCH_TERMS {
            break;
        }
    }
    terms
}

/// Durable storage of memory notes and of each conversation's subject.
///
/// Called by the memory tools (`memory_write`, `memory_search`, `memory_delete`), by the
/// frontends that bind a conversation to a subject, and by `flue memory` and the HTTP routes
/// that list and erase notes. A durable store shares notes between all its processes.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a note store",
    label = "implement `flue_core::store::NoteStore` for this type"
)]
pub trait NoteStore: Send + Sync {
    /// Stores `note` if the subject's notes stay within `limits` (checked in the same
    /// transaction); else [`FlueError::MemoryLimitExceeded`] and nothing is stored. A note
    /// whose id is already stored is not stored again (and not checked): writing the same
    /// note twice, as a `memory_write` run again after a crash does, stores it once.
    fn put_note(&self, note: &Note, limits: &NoteLimits)
    -> impl Future<Output = Result<()>> + Send;

    /// The notes of `agent` about `subject` holding any of `terms` ([`search_terms`]), most
    /// relevant first, at most `limit`. No terms: the newest notes.
    fn search_notes(
        &self,
        agent: &str,
        subject: &str,
        terms: &[String],
        limit: u64,
    ) -> impl Future<Output = Result<Vec<Note>>> + Send;

    /// Deletes note `id` of `agent` about `subject`; whether it was there.
    fn delete_note(
        &self,
        agent: &str,
        subject: &str,
        id: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Every note, oldest first, of `agent` (all agents when `None`) about `subject` (all
    /// subjects when `None`).
    fn list_notes(
        &self,
        agent: Option<&str>,
        subject: Option<&str>,
    ) -> impl Future<Output = Result<Vec<Note>>> + Send;

    /// Erases every note of `agent` (all agents when `None`) about `subject`, and the
    /// bindings of conversations to that subject when no agent is named; how many notes went.
    fn erase_notes(
        &self,
        agent: Option<&str>,
        subject: &str,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Binds conversation `instance_id` to `subject`, once: binding it again to the same
    /// subject is a no-op, to another one [`FlueError::MemorySubjectConflict`].
    fn bind_subject(
        &self,
        instance_id: &str,
        subject: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The subject conversation `instance_id` is bound to, if any.
    fn subject_of(&self, instance_id: &str) -> impl Future<Output = Result<Option<String>>> + Send;
}

/// [`NoteStore`] with boxed futures, so that it can be used as `Arc<dyn DynNoteStore>`.
///
/// Implemented for every [`NoteStore`]; implement that trait, not this one.
pub trait DynNoteStore: Send + Sync {
    /// See [`NoteStore::put_note`].
    fn put_note<'a>(&'a self, note: &'a Note, limits: &'a NoteLimits) -> BoxFuture<'a, Result<()>>;
    /// See [`NoteStore::search_notes`].
    fn search_notes<'a>(
        &'a self,
        agent: &'a str,
        subject: &'a str,
        terms: &'a [String],
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<Note>>>;
    /// See [`NoteStore::delete_note`].
    fn delete_note<'a>(
        &'a self,
        agent: &'a str,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool>>;
    /// See [`NoteStore::list_notes`].
    fn list_notes<'a>(
        &'a self,
        agent: Option<&'a str>,
        subject: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Note>>>;
    /// See [`NoteStore::erase_notes`].
    fn erase_notes<'a>(
        &'a self,
        agent: Option<&'a str>,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<u64>>;
    /// See [`NoteStore::bind_subject`].
    fn bind_subject<'a>(
        &'a self,
        instance_id: &'a str,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<()>>;
    /// See [`NoteStore::subject_of`].
    fn subject_of<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Option<String>>>;
}

impl<T: NoteStore> DynNoteStore for T {
    fn put_note<'a>(&'a self, note: &'a Note, limits: &'a NoteLimits) -> BoxFuture<'a, Result<()>> {
        Box::pin(NoteStore::put_note(self, note, limits))
    }

    fn search_notes<'a>(
        &'a self,
        agent: &'a str,
        subject: &'a str,
        terms: &'a [String],
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<Note>>> {
        Box::pin(NoteStore::search_notes(self, agent, subject, terms, limit))
    }

    fn delete_note<'a>(
        &'a self,
        agent: &'a str,
        subject: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(NoteStore::delete_note(self, agent, subject, id))
    }

    fn list_notes<'a>(
        &'a self,
        agent: Option<&'a str>,
        subject: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Note>>> {
        Box::pin(NoteStore::list_notes(self, agent, subject))
    }

    fn erase_notes<'a>(
        &'a self,
        agent: Option<&'a str>,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(NoteStore::erase_notes(self, agent, subject))
    }

    fn bind_subject<'a>(
        &'a self,
        instance_id: &'a str,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(NoteStore::bind_subject(self, instance_id, subject))
    }

    fn subject_of<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(NoteStore::subject_of(self, instance_id))
    }
}

/// Checks a memory subject a caller gives: 1 to 256 characters, no control characters.
pub fn check_subject(subject: &str) -> Result<()> {
    if subject.is_empty() || subject.chars().count() > 256 || subject.chars().any(char::is_control)
    {
        return Err(FlueError::InvalidRequest {
            message: format!(
                "memory subject {subject:?} must be 1 to 256 characters without control \
                 characters (a user id)"
            ),
        });
    }
    Ok(())
}
