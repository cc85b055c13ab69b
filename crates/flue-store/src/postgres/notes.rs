//! [`NoteStore`] for [`PostgresStore`]: tables `flue_memory_notes` (with a generated
//! `tsvector` column under a GIN index, the `simple` configuration: words lowercased, no
//! stemming, as SQLite's FTS5) and `flue_memory_subjects`. A search asks `@@` with the terms
//! joined by `|`, ranked by `ts_rank`. A note is checked against its subject's bounds under a
//! transaction-scoped advisory lock on the agent and subject, so writers on every node take
//! turns.

use flue_core::store::{Note, NoteLimits, NoteStore};
use flue_core::{FlueError, Result};
use tokio_postgres::Row;

use super::{PostgresStore, execute, int, pg_error, query_all, query_one, query_opt, uint};

/// The first key of the advisory locks on a memory subject (`'flmm'` in ASCII); the second
/// is the hash of the agent and subject.
const MEMORY_LOCK_NAMESPACE: i32 = 0x666c_6d6d;

fn note_of(row: &Row) -> Note {
    Note {
        id: row.get(0),
        agent: row.get(1),
        subject: row.get(2),
        text: row.get(3),
        created_at: uint(row.get(4)),
    }
}

/// The `to_tsquery` text of `terms`: any of them (terms are letters and digits only).
fn ts_query(terms: &[String]) -> String {
    terms.join(" | ")
}

impl NoteStore for PostgresStore {
    async fn put_note(&self, note: &Note, limits: &NoteLimits) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin memory transaction"))?;
        let scope = format!("{}\n{}", note.agent, note.subject);
        execute(
            &tx,
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&MEMORY_LOCK_NAMESPACE, &scope],
            "cannot lock the memory subject",
        )
        .await?;
        // Stored already (the same write run again): nothing to do.
        let stored = query_opt(
            &tx,
            "SELECT 1 FROM flue_memory_notes WHERE id = $1",
            &[&note.id],
            "cannot read the note",
        )
        .await?;
        if stored.is_some() {
            return Ok(());
        }
        let row = query_one(
            &tx,
            "SELECT COUNT(*)::BIGINT, COALESCE(SUM(octet_length(text)), 0)::BIGINT
             FROM flue_memory_notes WHERE agent = $1 AND subject = $2",
            &[&note.agent, &note.subject],
            "cannot read the subject's notes",
        )
        .await?;
        limits.check(note.text.len() as u64, uint(row.get(0)), uint(row.get(1)))?;
        execute(
            &tx,
            "INSERT INTO flue_memory_notes (id, agent, subject, text, created_at)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &note.id,
                &note.agent,
                &note.subject,
                &note.text,
                &int(note.created_at),
            ],
            "cannot store the note",
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit the note"))
    }

    async fn search_notes(
        &self,
        agent: &str,
        subject: &str,
        terms: &[String],
        limit: u64,
    ) -> Result<Vec<Note>> {
        let client = self.client().await?;
        let limit = int(limit);
        let rows = if terms.is_empty() {
            query_all(
                &client,
                "SELECT id, agent, subject, text, created_at FROM flue_memory_notes
                 WHERE agent = $1 AND subject = $2 ORDER BY created_at DESC, id DESC LIMIT $3",
                &[&agent, &subject, &limit],
                "cannot read the notes",
            )
            .await?
        } else {
            query_all(
                &client,
                "SELECT id, agent, subject, text, created_at FROM flue_memory_notes,
                     to_tsquery('simple', $3) AS query
                 WHERE agent = $1 AND subject = $2 AND search @@ query
                 ORDER BY ts_rank(search, query) DESC, created_at DESC LIMIT $4",
                &[&agent, &subject, &ts_query(terms), &limit],
                "cannot search the notes",
            )
            .await?
        };
        Ok(rows.iter().map(note_of).collect())
    }

    async fn delete_note(&self, agent: &str, subject: &str, id: &str) -> Result<bool> {
        let client = self.client().await?;
        let deleted = execute(
            &client,
            "DELETE FROM flue_memory_notes WHERE id = $1 AND agent = $2 AND subject = $3",
            &[&id, &agent, &subject],
            "cannot delete the note",
        )
        .await?;
        Ok(deleted > 0)
    }

    async fn list_notes(&self, agent: Option<&str>, subject: Option<&str>) -> Result<Vec<Note>> {
        let client = self.client().await?;
        let rows = query_all(
            &client,
            "SELECT id, agent, subject, text, created_at FROM flue_memory_notes
             WHERE ($1::TEXT IS NULL OR agent = $1) AND ($2::TEXT IS NULL OR subject = $2)
             ORDER BY created_at, id",
            &[&agent, &subject],
            "cannot list the notes",
        )
        .await?;
        Ok(rows.iter().map(note_of).collect())
    }

    async fn erase_notes(&self, agent: Option<&str>, subject: &str) -> Result<u64> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin memory transaction"))?;
        let erased = execute(
            &tx,
            "DELETE FROM flue_memory_notes WHERE subject = $1 AND ($2::TEXT IS NULL OR agent = $2)",
            &[&subject, &agent],
            "cannot erase the notes",
        )
        .await?;
        if agent.is_none() {
            execute(
                &tx,
                "DELETE FROM flue_memory_subjects WHERE subject = $1",
                &[&subject],
                "cannot erase the subject's conversations",
            )
            .await?;
        }
        tx.commit()
            .await
            .map_err(pg_error("cannot commit the erasure"))?;
        Ok(erased)
    }

    async fn bind_subject(&self, instance_id: &str, subject: &str) -> Result<()> {
        let client = self.client().await?;
        execute(
            &client,
            "INSERT INTO flue_memory_subjects (instance_id, subject, bound_at) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            &[&instance_id, &subject, &int(flue_core::util::now_ms())],
            "cannot bind the subject",
        )
        .await?;
        let row = query_one(
            &client,
            "SELECT subject FROM flue_memory_subjects WHERE instance_id = $1",
            &[&instance_id],
            "cannot read the subject",
        )
        .await?;
        let bound: String = row.get(0);
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
        let client = self.client().await?;
        Ok(query_opt(
            &client,
            "SELECT subject FROM flue_memory_subjects WHERE instance_id = $1",
            &[&instance_id],
            "cannot read the subject",
        )
        .await?
        .map(|row| row.get(0)))
    }
}
