//! [`NoteStore`] for [`MemoryStore`]: notes in a list behind a lock of their own; a search
//! matches whole words, case-insensitively, and ranks by how many terms a note holds.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::{FlueError, Result};
use crate::store::MemoryStore;
use crate::store::notes::{Note, NoteLimits, NoteStore};

/// Notes and subject bindings.
#[derive(Debug, Default)]
pub(super) struct MemoryNotes {
    state: Mutex<NotesState>,
}

#[derive(Debug, Default)]
struct NotesState {
    notes: Vec<Note>,
    subjects: BTreeMap<String, String>,
}

impl MemoryNotes {
    fn state(&self) -> MutexGuard<'_, NotesState> {
        // Every critical section below completes its update or changes nothing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How many of `terms` `text` holds as words.
fn hits(text: &str, terms: &[String]) -> usize {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect();
    terms.iter().filter(|term| words.contains(term)).count()
}

impl NoteStore for MemoryStore {
    async fn put_note(&self, note: &Note, limits: &NoteLimits) -> Result<()> {
        let mut state = self.notes.state();
        if state.notes.iter().any(|n| n.id == note.id) {
            return Ok(());
        }
        let (count, bytes) = state
            .notes
            .iter()
            .filter(|n| n.agent == note.agent && n.subject == note.subject)
            .fold((0_u64, 0_u64), |(count, bytes), n| {
                (count + 1, bytes + n.text.len() as u64)
            });
        limits.check(note.text.len() as u64, count, bytes)?;
        state.notes.push(note.clone());
        Ok(())
    }

    async fn search_notes(
        &self,
        agent: &str,
        subject: &str,
        terms: &[String],
        limit: u64,
    ) -> Result<Vec<Note>> {
        let state = self.notes.state();
        let mut found: Vec<(usize, &Note)> = state
            .notes
            .iter()
            .rev()
            .filter(|n| n.agent == agent && n.subject == subject)
            .map(|n| {
                (
                    if terms.is_empty() {
                        1
                    } else {
                        hits(&n.text, terms)
                    },
                    n,
                )
            })
            .filter(|(hits, _)| *hits > 0)
            .collect();
        // Stable: among equal ranks, the newest first.
        found.sort_by_key(|(hits, _)| std::cmp::Reverse(*hits));
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(found
            .into_iter()
            .take(limit)
            .map(|(_, n)| n.clone())
            .collect())
    }

    async fn delete_note(&self, agent: &str, subject: &str, id: &str) -> Result<bool> {
        let mut state = self.notes.state();
        let before = state.notes.len();
        state
            .notes
            .retain(|n| !(n.agent == agent && n.subject == subject && n.id == id));
        Ok(state.notes.len() < before)
    }

    async fn list_notes(&self, agent: Option<&str>, subject: Option<&str>) -> Result<Vec<Note>> {
        let state = self.notes.state();
        Ok(state
            .notes
            .iter()
            .filter(|n| agent.is_none_or(|agent| n.agent == agent))
            .filter(|n| subject.is_none_or(|subject| n.subject == subject))
            .cloned()
            .collect())
    }

    async fn erase_notes(&self, agent: Option<&str>, subject: &str) -> Result<u64> {
        let mut state = self.notes.state();
        let before = state.notes.len();
        state
            .notes
            .retain(|n| !(n.subject == subject && agent.is_none_or(|agent| n.agent == agent)));
        if agent.is_none() {
            state.subjects.retain(|_, bound| bound != subject);
        }
        Ok((before - state.notes.len()) as u64)
    }

    async fn bind_subject(&self, instance_id: &str, subject: &str) -> Result<()> {
        let mut state = self.notes.state();
        match state.subjects.get(instance_id) {
            Some(bound) if bound == subject => Ok(()),
            Some(bound) => Err(FlueError::MemorySubjectConflict {
                instance_id: instance_id.to_owned(),
                bound: bound.clone(),
                given: subject.to_owned(),
            }),
            None => {
                state
                    .subjects
                    .insert(instance_id.to_owned(), subject.to_owned());
                Ok(())
            }
        }
    }

    async fn subject_of(&self, instance_id: &str) -> Result<Option<String>> {
        Ok(self.notes.state().subjects.get(instance_id).cloned())
    }
}
