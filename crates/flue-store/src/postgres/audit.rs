//! [`AuditStore`] for [`PostgresStore`]: tables `flue_audit`, `flue_trash` and
//! `flue_trash_blobs` (content stored once per sha256), as in the SQLite store.

use flue_core::store::rules;
use flue_core::{
    Result,
    store::{AuditEntry, AuditStore, TrashEntry, TrashedFile},
};

use super::{PostgresStore, execute, int, pg_error, query_all, query_opt};

impl PostgresStore {
    /// The `entry` column of `sql`'s rows (no parameters), each read by `parse`.
    async fn entries<T>(
        &self,
        sql: &str,
        failed: &'static str,
        parse: fn(&str) -> Result<T>,
    ) -> Result<Vec<T>> {
        let client = self.client().await?;
        query_all(&client, sql, &[], failed)
            .await?
            .iter()
            .map(|row| parse(row.get(0)))
            .collect()
    }
}

impl AuditStore for PostgresStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let json = rules::to_json(entry, "audit entry")?;
        let client = self.client().await?;
        execute(
            &client,
            "INSERT INTO flue_audit (instance_id, at, entry) VALUES ($1, $2, $3)",
            &[&entry.instance_id, &int(entry.at), &json],
            "cannot append audit entry",
        )
        .await?;
        Ok(())
    }

    async fn list_audit(&self, instance_id: &str) -> Result<Vec<AuditEntry>> {
        let client = self.client().await?;
        query_all(
            &client,
            "SELECT entry FROM flue_audit WHERE instance_id = $1 ORDER BY seq",
            &[&instance_id],
            "cannot read the audit log",
        )
        .await?
        .iter()
        .map(|row| rules::audit_entry(row.get(0)))
        .collect()
    }

    async fn put_trash(&self, entry: &TrashEntry, content: &[u8]) -> Result<()> {
        let json = rules::to_json(entry, "trash entry")?;
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin trash transaction"))?;
        execute(
            &tx,
            "INSERT INTO flue_trash_blobs (sha256, content) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&entry.sha256, &content],
            "cannot store trashed content",
        )
        .await?;
        execute(
            &tx,
            "INSERT INTO flue_trash (instance_id, id, trashed_at, sha256, entry)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &entry.instance_id,
                &entry.id,
                &int(entry.trashed_at),
                &entry.sha256,
                &json,
            ],
            "cannot store trash entry",
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit trash entry"))
    }

    async fn get_trash(&self, instance_id: &str, trash_id: &str) -> Result<Option<TrashedFile>> {
        let client = self.client().await?;
        let Some(row) = query_opt(
            &client,
            "SELECT t.entry, b.content FROM flue_trash t
             JOIN flue_trash_blobs b ON b.sha256 = t.sha256
             WHERE t.instance_id = $1 AND t.id = $2",
            &[&instance_id, &trash_id],
            "cannot read trash entry",
        )
        .await?
        else {
            return Ok(None);
        };
        let entry = rules::trash_entry(row.get(0))?;
        Ok(Some(TrashedFile {
            entry,
            content: row.get(1),
        }))
    }

    async fn list_all_audit(&self) -> Result<Vec<AuditEntry>> {
        self.entries(
            "SELECT entry FROM flue_audit ORDER BY seq",
            "cannot read the audit log",
            rules::audit_entry,
        )
        .await
    }

    async fn list_all_trash(&self) -> Result<Vec<TrashEntry>> {
        self.entries(
            "SELECT entry FROM flue_trash ORDER BY trashed_at, id COLLATE \"C\"",
            "cannot list the trash",
            rules::trash_entry,
        )
        .await
    }

    async fn list_trash(&self, instance_id: &str) -> Result<Vec<TrashEntry>> {
        let client = self.client().await?;
        query_all(
            &client,
            "SELECT entry FROM flue_trash WHERE instance_id = $1
             ORDER BY trashed_at, id COLLATE \"C\"",
            &[&instance_id],
            "cannot list the trash",
        )
        .await?
        .iter()
        .map(|row| rules::trash_entry(row.get(0)))
        .collect()
    }
}
