//! [`NoteStore`] for [`SqliteStore`]: tables `memory_notes` and `memory_subjects`, and the
//! FTS5 table `memory_notes_fts` (migration v7) that a search asks with `MATCH`, ranked by
//! FTS5's bm25. A note and its index row are written and deleted in one transaction, after the
//! subject's bounds are checked inside it.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use flue_core::store::{Note, NoteLimits, NoteStore};
use flue_core::{FlueError, Result};

use super::{SqliteStore, get_u64, sql_int, store_error};

/// The FTS5 query of `terms`: each a quoted word, any of them (terms are letters and digits
/// only, so nothing of the caller's text is FTS5 syntax).
fn match_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|term| format!("\"{term}\""))
        .collect::<Vec<_>>()
        .join(" OR ")
}

fn note_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Note> {
    Ok(Note {
        id: row.get(0)?,
        agent: row.get(1)?,
        subject: row.get(2)?,
        text: row.get(3)?,
        created_at: get_u64(row, 4)?,
    })
}

impl NoteStore for SqliteStore {
    async fn put_note(&self, note: &Note, limits: &NoteLimits) -> Result<()> {
        let created_at = sql_int(note.created_at)?;
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin memory transaction"))?;
        // Stored already (the same write run again): nothing to do.
        let stored = transaction
            .prepare_cached("SELECT 1 FROM memory_notes WHERE id = ?1")
            .and_then(|mut select| select.query_row(params![note.id], |_| Ok(())).optional())
            .map_err(store_error("cannot read the note"))?;
        if stored.is_some() {
            return Ok(());
        }
        let (count, bytes): (i64, i64) = transaction
            .prepare_cached(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(text AS BLOB))), 0) FROM memory_notes
                 WHERE agent = ?1 AND subject = ?2",
            )
            .and_then(|mut select| {
                select.query_row(params![note.agent, note.subject], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
            })
            .map_err(store_error("cannot read the subject's notes"))?;
        limits.check(
            note.text.len() as u64,
            u64::try_from(count).unwrap_or(0),
            u64::try_from(bytes).unwrap_or(0),
        )?;
        transaction
            .prepare_cached(
                "INSERT INTO memory_notes (id, agent, subject, text, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    note.id,
                    note.agent,
                    note.subject,
                    note.text,
                    created_at
                ])
            })
            .map_err(store_error("cannot store the note"))?;
        transaction
            .prepare_cached("INSERT INTO memory_notes_fts (text, note_id) VALUES (?1, ?2)")
            .and_then(|mut insert| insert.execute(params![note.text, note.id]))
            .map_err(store_error("cannot index the note"))?;
        transaction
            .commit()
            .map_err(store_error("cannot commit the note"))
    }

    async fn search_notes(
        &self,
        agent: &str,
        subject: &str,
        terms: &[String],
        limit: u64,
    ) -> Result<Vec<Note>> {
        let limit = sql_int(limit)?;
        let connection = self.reader();
        if terms.is_empty() {
            return connection
                .prepare_cached(
                    "SELECT id, agent, subject, text, created_at FROM memory_notes
                     WHERE agent = ?1 AND subject = ?2 ORDER BY created_at DESC, id DESC
                     LIMIT ?3",
                )
                .and_then(|mut select| {
                    select
                        .query_map(params![agent, subject, limit], note_of)?
                        .collect()
                })
                .map_err(store_error("cannot read the notes"));
        }
        connection
            .prepare_cached(
                "SELECT n.id, n.agent, n.subject, n.text, n.created_at
                 FROM memory_notes_fts f JOIN memory_notes n ON n.id = f.note_id
                 WHERE memory_notes_fts MATCH ?1 AND n.agent = ?2 AND n.subject = ?3
                 ORDER BY f.rank, n.created_at DESC LIMIT ?4",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![match_query(terms), agent, subject, limit], note_of)?
                    .collect()
            })
            .map_err(store_error("cannot search the notes"))
    }

    async fn delete_note(&self, agent: &str, subject: &str, id: &str) -> Result<bool> {
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin memory transaction"))?;
        let deleted = transaction
            .prepare_cached(
                "DELETE FROM memory_notes WHERE id = ?1 AND agent = ?2 AND subject = ?3",
            )
            .and_then(|mut delete| delete.execute(params![id, agent, subject]))
            .map_err(store_error("cannot delete the note"))?;
        if deleted > 0 {
            transaction
                .prepare_cached("DELETE FROM memory_notes_fts WHERE note_id = ?1")
                .and_then(|mut delete| delete.execute(params![id]))
                .map_err(store_error("cannot unindex the note"))?;
        }
        transaction
            .commit()
            .map_err(store_error("cannot commit the deletion"))?;
        Ok(deleted > 0)
    }

    async fn list_notes(&self, agent: Option<&str>, subject: Option<&str>) -> Result<Vec<Note>> {
        self.reader()
            .prepare_cached(
                "SELECT id, agent, subject, text, created_at FROM memory_notes
                 WHERE (?1 IS NULL OR agent = ?1) AND (?2 IS NULL OR subject = ?2)
                 ORDER BY created_at, id",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![agent, subject], note_of)?
                    .collect()
            })
            .map_err(store_error("cannot list the notes"))
    }

    async fn erase_notes(&self, agent: Option<&str>, subject: &str) -> Result<u64> {
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin memory transaction"))?;
        transaction
            .prepare_cached(
                "DELETE FROM memory_notes_fts WHERE note_id IN (
                     SELECT id FROM memory_notes WHERE subject = ?1 AND (?2 IS NULL OR agent = ?2))",
            )
            .and_then(|mut delete| delete.execute(params![subject, agent]))
            .map_err(store_error("cannot unindex the notes"))?;
        let erased = transaction
            .prepare_cached(
                "DELETE FROM memory_notes WHERE subject = ?1 AND (?2 IS NULL OR agent = ?2)",
            )
            .and_then(|mut delete| delete.execute(params![subject, agent]))
            .map_err(store_error("cannot erase the notes"))?;
        if agent.is_none() {
            transaction
                .prepare_cached("DELETE FROM memory_subjects WHERE subject = ?1")
                .and_then(|mut delete| delete.execute(params![subject]))
                .map_err(store_error("cannot erase the subject's conversations"))?;
        }
        transaction
            .commit()
            .map_err(store_error("cannot commit the erasure"))?;
        Ok(erased as u64)
    }

    async fn bind_subject(&self, instance_id: &str, subject: &str) -> Result<()> {
        let now = sql_int(flue_core::util::now_ms())?;
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin memory transaction"))?;
        transaction
            .prepare_cached(
                "INSERT INTO memory_subjects (instance_id, subject, bound_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING",
            )
            .and_then(|mut insert| insert.execute(params![instance_id, subject, now]))
            .map_err(store_error("cannot bind the subject"))?;
        let bound: String = transaction
            .prepare_cached("SELECT subject FROM memory_subjects WHERE instance_id = ?1")
            .and_then(|mut select| select.query_row(params![instance_id], |row| row.get(0)))
            .map_err(store_error("cannot read the subject"))?;
        transaction
            .commit()
            .map_err(store_error("cannot commit the subject"))?;
        if bound != subject {
            return Err(FlueError::MemorySubjectConflict {
                instance_id: instance_id.to_owned(),
                bound,
                given: subject.to_owned(),
            });
        }
        Ok(())
    }

    async fn subject_of(&self, instance_id: &str) -> Result<Option<String>> {
        self.reader()
            .prepare_cached("SELECT subject FROM memory_subjects WHERE instance_id = ?1")
            .and_then(|mut select| {
                select
                    .query_row(params![instance_id], |row| row.get(0))
                    .optional()
            })
            .map_err(store_error("cannot read the subject"))
    }
}
