//! [`AuditStore`] for [`SqliteStore`]: tables `audit`, `trash` and `trash_blobs` (migration v2).
//!
//! Audit entries and trash entries are stored as JSON next to the columns queries need, like
//! session records, so new fields need no migration. Trashed content sits in `trash_blobs`
//! once per sha256; putting the same content twice adds only the entry.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use flue_core::store::rules;
use flue_core::{
    Result,
    store::{AuditEntry, AuditStore, TrashEntry, TrashedFile},
};

use super::{SqliteStore, sql_int, store_error};

impl AuditStore for SqliteStore {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let json = rules::to_json(entry, "audit entry")?;
        let at = sql_int(entry.at)?;
        self.connection()
            .prepare_cached("INSERT INTO audit (instance_id, at, entry) VALUES (?1, ?2, ?3)")
            .and_then(|mut insert| insert.execute(params![entry.instance_id, at, json]))
            .map_err(store_error("cannot append audit entry"))?;
        Ok(())
    }

    async fn list_audit(&self, instance_id: &str) -> Result<Vec<AuditEntry>> {
        let rows: Vec<String> = self
            .connection()
            .prepare_cached("SELECT entry FROM audit WHERE instance_id = ?1 ORDER BY seq")
            .and_then(|mut select| {
                select
                    .query_map(params![instance_id], |row| row.get(0))?
                    .collect()
            })
            .map_err(store_error("cannot read the audit log"))?;
        rows.iter().map(|row| rules::audit_entry(row)).collect()
    }

    async fn put_trash(&self, entry: &TrashEntry, content: &[u8]) -> Result<()> {
        let json = rules::to_json(entry, "trash entry")?;
        let trashed_at = sql_int(entry.trashed_at)?;
        let mut connection = self.connection();
        let transaction = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(store_error("cannot begin trash transaction"))?;
        transaction
            .prepare_cached(
                "INSERT INTO trash_blobs (sha256, content) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            )
            .and_then(|mut insert| insert.execute(params![entry.sha256, content]))
            .map_err(store_error("cannot store trashed content"))?;
        transaction
            .prepare_cached(
                "INSERT INTO trash (instance_id, id, trashed_at, sha256, entry)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    entry.instance_id,
                    entry.id,
                    trashed_at,
                    entry.sha256,
                    json
                ])
            })
            .map_err(store_error("cannot store trash entry"))?;
        transaction
            .commit()
            .map_err(store_error("cannot commit trash entry"))
    }

    async fn get_trash(&self, instance_id: &str, trash_id: &str) -> Result<Option<TrashedFile>> {
        let row: Option<(String, Vec<u8>)> = self
            .connection()
            .prepare_cached(
                "SELECT trash.entry, trash_blobs.content FROM trash
                 JOIN trash_blobs ON trash_blobs.sha256 = trash.sha256
                 WHERE trash.instance_id = ?1 AND trash.id = ?2",
            )
            .and_then(|mut select| {
                select
                    .query_row(params![instance_id, trash_id], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })
                    .optional()
            })
            .map_err(store_error("cannot read trash entry"))?;
        let Some((json, content)) = row else {
            return Ok(None);
        };
        let entry = rules::trash_entry(&json)?;
        Ok(Some(TrashedFile { entry, content }))
    }

    async fn list_all_audit(&self) -> Result<Vec<AuditEntry>> {
        let rows: Vec<String> = self
            .connection()
            .prepare_cached("SELECT entry FROM audit ORDER BY seq")
            .and_then(|mut select| select.query_map([], |row| row.get(0))?.collect())
            .map_err(store_error("cannot read the audit log"))?;
        rows.iter().map(|row| rules::audit_entry(row)).collect()
    }

    async fn list_all_trash(&self) -> Result<Vec<TrashEntry>> {
        let rows: Vec<String> = self
            .connection()
            .prepare_cached("SELECT entry FROM trash ORDER BY trashed_at, id")
            .and_then(|mut select| select.query_map([], |row| row.get(0))?.collect())
            .map_err(store_error("cannot list the trash"))?;
        rows.iter().map(|row| rules::trash_entry(row)).collect()
    }

    async fn list_trash(&self, instance_id: &str) -> Result<Vec<TrashEntry>> {
        let rows: Vec<String> = self
            .connection()
            .prepare_cached(
                "SELECT entry FROM trash WHERE instance_id = ?1 ORDER BY trashed_at, id",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![instance_id], |row| row.get(0))?
                    .collect()
            })
            .map_err(store_error("cannot list the trash"))?;
        rows.iter().map(|row| rules::trash_entry(row)).collect()
    }
}
