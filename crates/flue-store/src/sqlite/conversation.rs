//! [`ConversationStore`] for [`SqliteStore`]: tables `conversations`, `stream` and
//! `submissions` (migration v3), and owner liveness through OS file locks.
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction (reads in one read transaction), so
//! processes sharing the file are serialised by SQLite's write lock. Writes are closures
//! handed to the store's writer thread (`writer.rs`), which runs those of many conversations
//! in one transaction, each inside its own savepoint, and answers them after the commit; each
//! `*_in` function here is one such write, with its checks in the same transaction as its
//! changes. A conversation row carries the
//! stream head, the owner and its fencing epoch; each write that touches the conversation
//! checks the fence (when it is an owner's), bumps the head and inserts one `stream` row.
//! A `records` stream row points at a range of the `records` table instead of copying it.
//!
//! Liveness: [`SqliteStore::register_owner`] creates `<database>.owners/<owner>.lock` and holds
//! an exclusive `flock` on it for the registration's life. The kernel drops the lock when the
//! process dies, so another process that can take the lock knows the owner is dead, at once
//! and without waiting for a lease. Stores without a file (in-memory) track owners in process.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flue_protocol::{
    BatchBody, ConversationInfo, ConversationKey, DeliveredMessage, DispatchReceipt,
    DurabilityConfig, Offset, Settlement, StreamPage, SubmissionInfo, SubmissionState,
};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::Serialize;

use flue_core::store::listing::{
    Appended, ListedConversation, ListingQuery, Summary, message_line,
};
use flue_core::store::rules::{
    self, AdmissionCheck, BatchContent, EarlierSubmission, FoundConversation, Ownership,
    ROOT_SESSION, SubmissionRow, Write, commit_of, duration_ms, instance_not_found, stale_fence,
};
use flue_core::store::txn;
use flue_core::store::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, Fence, FencedAppend, HeadWatch,
    OwnerRegistration, SessionKey, SubmissionStatus,
};
use flue_core::{
    FlueError, Result,
    util::{new_ulid, now_ms},
};

use super::{SqliteStore, get_u64, insert_records, listing, read_record_range, store_error};

/// A submission's message: in `submission_messages` (written once at admission), or in the
/// submission row itself when an older flue admitted it.
macro_rules! message_column {
    () => {
        "COALESCE((SELECT m.message FROM submission_messages m \
         WHERE m.submission_id = submissions.submission_id), submissions.message)"
    };
}

const SUBMISSION_COLUMNS: &str = concat!(
    "submission_id, instance_id, position, state, ",
    message_column!(),
    ", accepted_at, attempts, first_started_at, input_applied, abort_requested, \
     idempotency_key, settlement, durability, admitted_offset, trace_parent"
);

// A submission needs work when it is neither settled nor waiting for a decision. The test is
// spelled as two `!=` so the planner sees that it implies the partial index's
// `state != 'settled'` and reads only unsettled rows (with `NOT IN`, SQLite scanned every
// submission once per conversation).
const CONVERSATION_COLUMNS: &str = concat!(
    "c.agent, c.id, c.uid, c.head, c.created_at, c.owner, c.epoch, ",
    "(SELECT COUNT(*) FROM submissions s WHERE s.instance_id = c.instance_id ",
    "AND s.state != 'settled' AND s.state != 'waiting')"
);

/// Conversations with a submission that needs work, found from the unsettled rows alone, so
/// the cost follows what is pending, not how many conversations the store holds.
const PENDING: &str = concat!(
    "c.instance_id IN (SELECT s.instance_id FROM submissions s ",
    "WHERE s.state != 'settled' AND s.state != 'waiting')"
);

/// Holds an owner's lock file; unlocks and removes it on drop.
struct OwnerLock {
    file: File,
    path: PathBuf,
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        // Remove first, while still locked, so nobody mistakes the file for a dead owner's.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

impl SqliteStore {
    fn owners_dir(path: &Path) -> PathBuf {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".owners");
        path.with_file_name(name)
    }

    fn owner_alive_now(&self, owner_id: &str) -> Result<bool> {
        let Some(path) = self.path() else {
            return Ok(self.local_owners.alive(owner_id));
        };
        if owner_id.contains(['/', '\\']) || owner_id.starts_with('.') {
            return Ok(false);
        }
        let lock_path = Self::owners_dir(path).join(format!("{owner_id}.lock"));
        let file = match OpenOptions::new().write(true).open(&lock_path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(err) => {
                return Err(FlueError::store(
                    format!("cannot open {}", lock_path.display()),
                    err,
                ));
            }
        };
        match file.try_lock() {
            Ok(()) => {
                // The owner died; clean its file up while holding the lock.
                let _ = std::fs::remove_file(&lock_path);
                let _ = file.unlock();
                Ok(false)
            }
            Err(TryLockError::WouldBlock) => Ok(true),
            Err(TryLockError::Error(err)) => Err(FlueError::store(
                format!("cannot probe {}", lock_path.display()),
                err,
            )),
        }
    }

    /// Admits inside the batch's transaction; the offset to announce once it committed.
    fn admit_in(
        tx: &Transaction<'_>,
        admission: &Admission,
        message_json: &str,
        line: &str,
    ) -> Result<(DispatchReceipt, Option<Offset>)> {
        let key = &admission.key;
        let instance_id = key.instance_id();
        let found = tx
            .prepare_cached("SELECT uid, owner FROM conversations WHERE instance_id = ?1")
            .and_then(|mut select| {
                select
                    .query_row(params![instance_id], |row| {
                        Ok(FoundConversation {
                            uid: row.get(0)?,
                            owner: row.get(1)?,
                        })
                    })
                    .optional()
            })
            .map_err(store_error("cannot read conversation"))?;
        let check = AdmissionCheck::new(admission, message_json, found)?;
        if let Some(idempotency_key) = check.idempotency_key() {
            let earlier = tx
                .prepare_cached(concat!(
                    "SELECT submission_id, ",
                    message_column!(),
                    ", accepted_at, admitted_offset FROM submissions
                         WHERE instance_id = ?1 AND idempotency_key = ?2"
                ))
                .and_then(|mut select| {
                    select
                        .query_row(params![instance_id, idempotency_key], |row| {
                            Ok(EarlierSubmission {
                                submission_id: row.get(0)?,
                                message_json: row.get(1)?,
                                accepted_at: get_u64(row, 2)?,
                                admitted_offset: Offset(get_u64(row, 3)?),
                            })
                        })
                        .optional()
                })
                .map_err(store_error("cannot read submission"))?;
            if let Some(receipt) = check.deduplicate(earlier)? {
                return Ok((receipt, None));
            }
        }
        if check.checks_busy() {
            check.check_busy(count_unsettled(tx, &instance_id)?)?;
        }
        let now = sat(now_ms());
        if let Some(created) = check.created_batch() {
            tx.prepare_cached(
                "INSERT INTO conversations
                 (instance_id, agent, id, uid, head, created_at, owner, epoch, lease_until,
                  next_position, last_activity)
                 VALUES (?1, ?2, ?3, ?4, 0, ?5, NULL, 0, 0, 1, ?5)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    instance_id,
                    key.agent,
                    key.id,
                    admission.new_uid,
                    now
                ])
            })
            .map_err(store_error("cannot create conversation"))?;
            tx.prepare_cached(
                "INSERT INTO sessions (instance_id, session, version, created_at, updated_at,
                                       managed)
                 VALUES (?1, ?2, 0, ?3, ?3, 1) ON CONFLICT DO UPDATE SET managed = 1",
            )
            .and_then(|mut insert| insert.execute(params![instance_id, ROOT_SESSION, now]))
            .map_err(store_error("cannot create the root session"))?;
            push_batch(tx, &instance_id, None, &created)?;
            listing::created(
                tx,
                key,
                &Summary::created_line(
                    line.to_owned(),
                    admission.options.idempotency_key.as_deref(),
                ),
            )?;
        } else {
            listing::update(tx, &instance_id, |summary| {
                summary.admitted_line(line.to_owned());
            })?;
        }
        let offset = push_batch(
            tx,
            &instance_id,
            Some(&admission.submission_id),
            &check.admitted_batch(),
        )?;
        let position: i64 = tx
            .prepare_cached(
                "UPDATE conversations SET next_position = next_position + 1
                 WHERE instance_id = ?1 RETURNING next_position - 1",
            )
            .and_then(|mut update| update.query_row(params![instance_id], |row| row.get(0)))
            .map_err(store_error("cannot number submission"))?;
        tx.prepare_cached(
            "INSERT INTO submissions
             (submission_id, instance_id, position, state, message, accepted_at, attempts,
              first_started_at, input_applied, abort_requested, idempotency_key, settlement,
              durability, admitted_offset, trace_parent)
             VALUES (?1, ?2, ?3, 'queued', '', ?4, 0, NULL, 0, 0, ?5, NULL, NULL, ?6, ?7)",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                admission.submission_id,
                instance_id,
                position,
                sat(admission.accepted_at),
                admission.options.idempotency_key,
                sat(offset.0),
                admission.options.trace_parent,
            ])
        })
        .map_err(store_error("cannot insert submission"))?;
        tx.prepare_cached(
            "INSERT INTO submission_messages (submission_id, message) VALUES (?1, ?2)",
        )
        .and_then(|mut insert| insert.execute(params![admission.submission_id, message_json]))
        .map_err(store_error("cannot insert the submission's message"))?;
        Ok((check.receipt(offset), Some(offset)))
    }

    fn conversations_where(
        &self,
        filter: &str,
        param: Option<&str>,
    ) -> Result<Vec<ConversationInfo>> {
        let connection = self.reader();
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE {filter}
             ORDER BY c.created_at, c.instance_id"
        );
        connection
            .prepare_cached(&sql)
            .and_then(|mut select| match param {
                Some(param) => select
                    .query_map(params![param], conversation_from_row)?
                    .collect(),
                None => select.query_map([], conversation_from_row)?.collect(),
            })
            .map_err(store_error("cannot list conversations"))
    }

    fn request_abort_in(
        tx: &Transaction<'_>,
        instance_id: &str,
    ) -> Result<(AbortReport, Option<Offset>)> {
        txn::run_ready(txn::request_abort(&mut SqliteAbort { tx, instance_id }))?
    }

    /// Compare-and-set of the owner inside the batch's transaction; `Err` names the holder
    /// when a racing contender got there first.
    fn take_over_in(
        tx: &Transaction<'_>,
        instance_id: &str,
        owner_id: &str,
        lease_until_new: i64,
        epoch: u64,
        current_owner: Option<&str>,
    ) -> Result<std::result::Result<(), String>> {
        // Compare-and-set on what we observed: a racing contender that got there first wins.
        let changed = tx
            .prepare_cached(
                "UPDATE conversations SET owner = ?2, epoch = epoch + 1, lease_until = ?3
                 WHERE instance_id = ?1 AND epoch = ?4 AND owner IS ?5",
            )
            .and_then(|mut update| {
                update.execute(params![
                    instance_id,
                    owner_id,
                    lease_until_new,
                    sat(epoch),
                    current_owner
                ])
            })
            .map_err(store_error("cannot take ownership"))?;
        if changed == 0 {
            let holder: Option<String> = tx
                .prepare_cached("SELECT owner FROM conversations WHERE instance_id = ?1")
                .and_then(|mut select| select.query_row(params![instance_id], |row| row.get(0)))
                .map_err(store_error("cannot read conversation"))?;
            return Ok(Err(holder.unwrap_or_default()));
        }
        Ok(Ok(()))
    }

    fn renew_in(tx: &Transaction<'_>, fence: &Fence, lease_until: i64) -> Result<()> {
        let changed = tx
            .prepare_cached(
                "UPDATE conversations SET lease_until = ?4
                 WHERE instance_id = ?1 AND owner = ?2 AND epoch = ?3",
            )
            .and_then(|mut update| {
                update.execute(params![
                    fence.key.instance_id(),
                    fence.owner_id,
                    sat(fence.epoch),
                    lease_until
                ])
            })
            .map_err(store_error("cannot renew lease"))?;
        if changed == 0 {
            return Err(stale_fence(fence));
        }
        Ok(())
    }

    fn release_in(tx: &Transaction<'_>, fence: &Fence) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        check_fence(tx, fence)?;
        if count_unsettled(tx, &instance_id)? > 0 {
            return Ok(false);
        }
        tx.prepare_cached(
            "UPDATE conversations SET owner = NULL, lease_until = 0 WHERE instance_id = ?1",
        )
        .and_then(|mut update| update.execute(params![instance_id]))
        .map_err(store_error("cannot release ownership"))?;
        Ok(true)
    }

    fn claim_next_in(
        tx: &Transaction<'_>,
        fence: &Fence,
        durability_json: &str,
    ) -> Result<Option<(SubmissionInfo, Offset)>> {
        let instance_id = fence.key.instance_id();
        check_fence(tx, fence)?;
        let next: Option<(String, String)> = tx
            .prepare_cached(
                "SELECT submission_id, state FROM submissions
                 WHERE instance_id = ?1 AND state != 'settled' ORDER BY position LIMIT 1",
            )
            .and_then(|mut select| {
                select
                    .query_row(params![instance_id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(store_error("cannot read submissions"))?;
        let Some(submission_id) = next
            .filter(|(_, state)| rules::claimable(rules::stored_state(state)))
            .map(|(id, _)| id)
        else {
            return Ok(None);
        };
        let now = sat(now_ms());
        tx.prepare_cached(
            "UPDATE submissions SET state = 'running', attempts = attempts + 1,
                first_started_at = COALESCE(first_started_at, ?2),
                durability = COALESCE(durability, ?3)
             WHERE submission_id = ?1",
        )
        .and_then(|mut update| update.execute(params![submission_id, now, durability_json]))
        .map_err(store_error("cannot claim submission"))?;
        let raw = tx
            .prepare_cached(&format!(
                "SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE submission_id = ?1"
            ))
            .and_then(|mut select| {
                select.query_row(params![submission_id], RawSubmission::from_row)
            })
            .map_err(store_error("cannot claim submission"))?;
        let submission = raw.into_info()?;
        let head = push_batch(
            tx,
            &instance_id,
            Some(&submission_id),
            &BatchBody::Started {
                submission_id: submission_id.clone(),
                attempt: submission.attempts,
            },
        )?;
        Ok(Some((submission, head)))
    }

    fn wait_in(
        tx: &Transaction<'_>,
        fence: &Fence,
        submission_id: &str,
        actions: Vec<String>,
    ) -> Result<Option<Offset>> {
        let instance_id = fence.key.instance_id();
        check_fence(tx, fence)?;
        let changed = tx
            .prepare_cached(
                "UPDATE submissions SET state = 'waiting', waiting_since = ?3
                 WHERE submission_id = ?1 AND instance_id = ?2 AND state = 'running'",
            )
            .and_then(|mut update| {
                update.execute(params![submission_id, instance_id, sat(now_ms())])
            })
            .map_err(store_error("cannot pause submission"))?;
        if changed == 0 {
            return Ok(None);
        }
        push_batch(
            tx,
            &instance_id,
            Some(submission_id),
            &BatchBody::Waiting {
                submission_id: submission_id.to_owned(),
                actions,
            },
        )
        .map(Some)
    }

    fn append_fenced_in(
        tx: &Transaction<'_>,
        append: &OwnedAppend,
        rows: &[String],
    ) -> Result<(u64, Option<Offset>)> {
        let instance_id = append.fence.key.instance_id();
        check_fence(tx, &append.fence)?;
        let version = insert_records(tx, &append.session, append.expected_version, rows)?;
        if rows.is_empty() {
            return Ok((version, None));
        }
        let head = next_seq(tx, &instance_id)?;
        listing::update(tx, &instance_id, |summary| summary.apply(&append.appended))?;
        tx.prepare_cached(
            "INSERT INTO stream (instance_id, seq, at, submission_id, session, first_idx,
                                 n_records, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                instance_id,
                sat(head.0),
                sat(now_ms()),
                append.submission_id,
                append.session.session,
                sat(append.expected_version),
                sat(rows.len() as u64),
            ])
        })
        .map_err(store_error("cannot insert stream batch"))?;
        if append.resumes_waiting {
            tx.prepare_cached(
                "UPDATE submissions SET state = 'queued',
                    attempts = MAX(attempts - 1, 0),
                    first_started_at = first_started_at + MAX(?2 - COALESCE(waiting_since, ?2), 0),
                    waiting_since = NULL
                 WHERE instance_id = ?1 AND state = 'waiting'",
            )
            .and_then(|mut update| update.execute(params![instance_id, sat(now_ms())]))
            .map_err(store_error("cannot resume the waiting submission"))?;
        }
        if append.applies_input
            && let Some(submission_id) = &append.submission_id
        {
            tx.prepare_cached(
                "UPDATE submissions SET input_applied = 1
                 WHERE submission_id = ?1 AND state = 'running'",
            )
            .and_then(|mut update| update.execute(params![submission_id]))
            .map_err(store_error("cannot mark input applied"))?;
        }
        Ok((version, Some(head)))
    }
}

impl ConversationStore for SqliteStore {
    async fn admit(&self, admission: &Admission) -> Result<DispatchReceipt> {
        let instance_id = admission.key.instance_id();
        let message_json = rules::message_json(admission)?;
        let line = message_line(&admission.message);
        // The writer thread needs its own admission. The message goes there as its JSON
        // alone: the rules read an admission's message only through `message_json`, so the
        // copy leaves it out rather than holding a second copy of a large message.
        let admission = Admission {
            key: admission.key.clone(),
            submission_id: admission.submission_id.clone(),
            new_uid: admission.new_uid.clone(),
            message: DeliveredMessage::user(String::new()),
            accepted_at: admission.accepted_at,
            options: admission.options.clone(),
        };
        let (receipt, head) = self
            .writer
            .write_first(commit_of(Write::Admit), move |tx| {
                Self::admit_in(tx, &admission, &message_json, &line)
            })
            .await?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(receipt)
    }

    async fn conversation(&self, key: &ConversationKey) -> Result<Option<ConversationInfo>> {
        let connection = self.reader();
        connection
            .prepare_cached(&format!(
                "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.instance_id = ?1"
            ))
            .and_then(|mut select| {
                select
                    .query_row(params![key.instance_id()], conversation_from_row)
                    .optional()
            })
            .map_err(store_error("cannot read conversation"))
    }

    async fn conversations_with_id(&self, id: &str) -> Result<Vec<ConversationInfo>> {
        self.conversations_where("c.id = ?1", Some(id))
    }

    async fn list_conversations(&self, query: &ListingQuery) -> Result<Vec<ListedConversation>> {
        self.list_page(query)
    }

    async fn count_conversations(&self) -> Result<u64> {
        self.count()
    }

    async fn all_conversations(&self) -> Result<Vec<ConversationInfo>> {
        self.conversations_where("1 = 1", None)
    }

    async fn pending_conversations(&self) -> Result<Vec<ConversationInfo>> {
        self.conversations_where(PENDING, None)
    }

    async fn submission(&self, submission_id: &str) -> Result<Option<SubmissionInfo>> {
        let connection = self.reader();
        let row = connection
            .prepare_cached(&format!(
                "SELECT {SUBMISSION_COLUMNS} FROM submissions WHERE submission_id = ?1"
            ))
            .and_then(|mut select| {
                select
                    .query_row(params![submission_id], RawSubmission::from_row)
                    .optional()
            })
            .map_err(store_error("cannot read submission"))?;
        row.map(RawSubmission::into_info).transpose()
    }

    async fn submission_status(&self, submission_id: &str) -> Result<Option<SubmissionStatus>> {
        let connection = self.reader();
        let row = connection
            .prepare_cached(
                "SELECT instance_id, state, abort_requested, settlement FROM submissions
                 WHERE submission_id = ?1",
            )
            .and_then(|mut select| {
                select
                    .query_row(params![submission_id], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, bool>(2)?,
                            row.get::<_, Option<String>>(3)?,
                        ))
                    })
                    .optional()
            })
            .map_err(store_error("cannot read submission"))?;
        row.map(|(instance_id, state, abort_requested, settlement)| {
            rules::submission_status(
                submission_id,
                &instance_id,
                &state,
                abort_requested,
                settlement.as_deref(),
            )
        })
        .transpose()
    }

    async fn unsettled(&self, key: &ConversationKey) -> Result<Vec<SubmissionInfo>> {
        let connection = self.reader();
        let rows = connection
            .prepare_cached(&format!(
                "SELECT {SUBMISSION_COLUMNS} FROM submissions
                 WHERE instance_id = ?1 AND state != 'settled' ORDER BY position"
            ))
            .and_then(|mut select| {
                select
                    .query_map(params![key.instance_id()], RawSubmission::from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(store_error("cannot read submissions"))?;
        rows.into_iter().map(RawSubmission::into_info).collect()
    }

    async fn read_stream(
        &self,
        key: &ConversationKey,
        after: Offset,
        limit: usize,
    ) -> Result<StreamPage> {
        let instance_id = key.instance_id();
        let mut connection = self.reader();
        // One read transaction: the head and the batches come from the same snapshot.
        let tx = connection
            .transaction()
            .map_err(store_error("cannot begin stream read"))?;
        let head = tx
            .prepare_cached("SELECT head FROM conversations WHERE instance_id = ?1")
            .and_then(|mut select| {
                select
                    .query_row(params![instance_id], |row| get_u64(row, 0))
                    .optional()
            })
            .map_err(store_error("cannot read conversation"))?
            .map(Offset)
            .ok_or_else(|| instance_not_found(key, None))?;
        rules::check_offset(key, after, head)?;
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let rows = tx
            .prepare_cached(
                "SELECT seq, at, submission_id, session, first_idx, n_records, body FROM stream
                 WHERE instance_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![instance_id, sat(after.0), limit], |row| {
                        Ok(RawBatch {
                            seq: get_u64(row, 0)?,
                            at: get_u64(row, 1)?,
                            submission_id: row.get(2)?,
                            session: row.get(3)?,
                            first_idx: row.get::<_, Option<i64>>(4)?,
                            n_records: row.get::<_, Option<i64>>(5)?,
                            body: row.get(6)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(store_error("cannot read stream"))?;
        let mut batches = Vec::with_capacity(rows.len());
        for row in rows {
            let stored = rules::stored_batch(
                key,
                row.seq,
                row.session,
                row.first_idx,
                row.n_records,
                row.body.as_deref(),
            )?;
            let content =
                if let Some((session_key, from, until)) = stored.record_range(&instance_id) {
                    BatchContent::Records(read_record_range(&tx, &session_key, from, until)?)
                } else if let Some(admitted) = stored.admitted_submission() {
                    BatchContent::Message(read_message(&tx, &instance_id, admitted)?)
                } else {
                    BatchContent::Nothing
                };
            batches.push(stored.into_batch(
                key,
                Offset(row.seq),
                row.at,
                row.submission_id,
                content,
            )?);
        }
        tx.commit().map_err(store_error("cannot end stream read"))?;
        Ok(rules::stream_page(after, head, batches))
    }

    fn watch_head(&self, key: &ConversationKey) -> HeadWatch {
        self.heads.watch(&key.instance_id())
    }

    async fn request_abort(&self, key: &ConversationKey) -> Result<AbortReport> {
        let instance_id = key.instance_id();
        let owned = instance_id.clone();
        let (report, head) = self
            .writer
            .write(commit_of(Write::RequestAbort), move |tx| {
                Self::request_abort_in(tx, &owned)
            })
            .await?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(report)
    }

    async fn delete_conversation(&self, key: &ConversationKey) -> Result<bool> {
        let instance_id = key.instance_id();
        // Synced: the caller is told the conversation is gone.
        self.writer
            .write(rules::Commit::Sync, move |tx| {
                delete_conversation_in(tx, &instance_id)
            })
            .await
    }

    async fn register_owner(&self) -> Result<OwnerRegistration> {
        let Some(path) = self.path() else {
            return Ok(self.local_owners.register());
        };
        let dir = Self::owners_dir(path);
        std::fs::create_dir_all(&dir).map_err(|err| {
            FlueError::store(format!("cannot create directory {}", dir.display()), err)
        })?;
        let owner_id = new_ulid();
        let lock_path = dir.join(format!("{owner_id}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|err| {
                FlueError::store(format!("cannot create {}", lock_path.display()), err)
            })?;
        file.try_lock()
            .map_err(|err| FlueError::store(format!("cannot lock {}", lock_path.display()), err))?;
        Ok(OwnerRegistration::new(
            owner_id,
            OwnerLock {
                file,
                path: lock_path,
            },
        ))
    }

    async fn owner_alive(&self, owner_id: &str) -> Result<bool> {
        self.owner_alive_now(owner_id)
    }

    async fn acquire(
        &self,
        key: &ConversationKey,
        owner_id: &str,
        lease: Duration,
    ) -> Result<Acquire> {
        let instance_id = key.instance_id();
        let current = {
            let connection = self.connection();
            connection
                .prepare_cached(
                    "SELECT owner, epoch, lease_until FROM conversations WHERE instance_id = ?1",
                )
                .and_then(|mut select| {
                    select
                        .query_row(params![instance_id], |row| {
                            Ok((
                                row.get::<_, Option<String>>(0)?,
                                get_u64(row, 1)?,
                                get_u64(row, 2)?,
                            ))
                        })
                        .optional()
                })
                .map_err(store_error("cannot read conversation"))?
                .ok_or_else(|| instance_not_found(key, None))?
        };
        let (current_owner, epoch, lease_until) = current;
        // The same owner taking its conversation again (an earlier driver of its own stopped
        // without releasing) gets a new epoch too, fencing off anything that driver left.
        // The liveness probe touches the file system: outside the connection lock.
        let leased = lease_until > now_ms();
        if let Some(holder) = rules::contender(current_owner.as_deref(), owner_id, leased)
            && self.owner_alive_now(holder)?
        {
            return Ok(Acquire::Held {
                owner_id: holder.to_owned(),
            });
        }
        let lease_until_new = sat(now_ms().saturating_add(duration_ms(lease)));
        let owner = owner_id.to_owned();
        let taken = self
            .writer
            .write(commit_of(Write::Acquire), move |tx| {
                Self::take_over_in(
                    tx,
                    &instance_id,
                    &owner,
                    lease_until_new,
                    epoch,
                    current_owner.as_deref(),
                )
            })
            .await?;
        Ok(match taken {
            Ok(()) => Acquire::Owned(Fence {
                key: key.clone(),
                owner_id: owner_id.to_owned(),
                epoch: epoch + 1,
            }),
            Err(owner_id) => Acquire::Held { owner_id },
        })
    }

    async fn renew(&self, fence: &Fence, lease: Duration) -> Result<()> {
        let lease_until = sat(now_ms().saturating_add(duration_ms(lease)));
        let fence = fence.clone();
        self.writer
            .write(commit_of(Write::Renew), move |tx| {
                Self::renew_in(tx, &fence, lease_until)
            })
            .await
    }

    async fn release(&self, fence: &Fence) -> Result<bool> {
        let fence = fence.clone();
        self.writer
            .write(commit_of(Write::Release), move |tx| {
                Self::release_in(tx, &fence)
            })
            .await
    }

    async fn claim_next(
        &self,
        fence: &Fence,
        durability: &DurabilityConfig,
    ) -> Result<Option<Claim>> {
        let durability_json = rules::to_json(durability, "durability")?;
        let owned = fence.clone();
        let claimed = self
            .writer
            .write(commit_of(Write::Claim), move |tx| {
                Self::claim_next_in(tx, &owned, &durability_json)
            })
            .await?;
        let Some((submission, head)) = claimed else {
            return Ok(None);
        };
        self.heads.notify(&fence.key.instance_id(), head);
        Ok(Some(rules::claim(submission, durability)))
    }

    async fn settle(&self, fence: &Fence, settlement: &Settlement) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        let fence = fence.clone();
        let settlement = settlement.clone();
        let settled = self
            .writer
            .write(commit_of(Write::Settle), move |tx| {
                check_fence(tx, &fence)?;
                settle_in(tx, &fence.key.instance_id(), &settlement)
            })
            .await?;
        let Some(head) = settled else {
            return Ok(false);
        };
        self.heads.notify(&instance_id, head);
        Ok(true)
    }

    async fn wait(&self, fence: &Fence, submission_id: &str, actions: &[String]) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        let owned_fence = fence.clone();
        let owned_id = submission_id.to_owned();
        let owned_actions = actions.to_vec();
        let head = self
            .writer
            .write(commit_of(Write::Wait), move |tx| {
                Self::wait_in(tx, &owned_fence, &owned_id, owned_actions)
            })
            .await?;
        Ok(head.is_some_and(|head| {
            self.heads.notify(&instance_id, head);
            true
        }))
    }

    async fn append_fenced(&self, append: FencedAppend<'_>) -> Result<u64> {
        rules::check_fenced_session(&append)?;
        let instance_id = append.fence.key.instance_id();
        let rows = rules::records_json(append.records)?;
        let commit = commit_of(Write::Append(&append));
        let owned = OwnedAppend {
            fence: append.fence.clone(),
            session: append.session.clone(),
            expected_version: append.expected_version,
            submission_id: append.submission_id.map(str::to_owned),
            applies_input: append.applies_input,
            resumes_waiting: append.resumes_waiting,
            appended: Appended::of(
                &append.session.session,
                append.expected_version,
                append.records,
            ),
        };
        let (version, head) = self
            .writer
            .write(commit, move |tx| Self::append_fenced_in(tx, &owned, &rows))
            .await?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(version)
    }
}

/// A [`FencedAppend`] with owned parts, for the writer thread.
struct OwnedAppend {
    fence: Fence,
    session: SessionKey,
    expected_version: u64,
    submission_id: Option<String>,
    applies_input: bool,
    resumes_waiting: bool,
    /// What the append changes in the conversation's summary.
    appended: Appended,
}

/// The delete rule for the sessions of `instance_id` ([`rules::check_delete`]), read in the
/// caller's write transaction so that no admission slips in between.
pub(crate) fn check_delete(connection: &Connection, instance_id: &str) -> Result<()> {
    let found: Option<(String, String, Option<String>)> = connection
        .prepare_cached("SELECT agent, id, owner FROM conversations WHERE instance_id = ?1")
        .and_then(|mut select| {
            select
                .query_row(params![instance_id], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()
        })
        .map_err(store_error("cannot read conversation"))?;
    let Some((agent, id, owner)) = found else {
        return Ok(());
    };
    let unsettled = connection
        .prepare_cached(
            "SELECT COUNT(*) FROM submissions WHERE instance_id = ?1 AND state != 'settled'",
        )
        .and_then(|mut select| select.query_row(params![instance_id], |row| get_u64(row, 0)))
        .map_err(store_error("cannot read submissions"))?;
    rules::check_delete(&ConversationKey::new(agent, id), owner, unsettled)
}

/// Deletes a conversation's row (its stream and submissions go with it through `ON DELETE
/// CASCADE`) and every session of its instance, after [`check_delete`]; whether anything was
/// there.
fn delete_conversation_in(tx: &Transaction<'_>, instance_id: &str) -> Result<bool> {
    check_delete(tx, instance_id)?;
    listing::deleted(tx, instance_id)?;
    let sessions = tx
        .prepare_cached("DELETE FROM sessions WHERE instance_id = ?1")
        .and_then(|mut delete| delete.execute(params![instance_id]))
        .map_err(store_error("cannot delete sessions"))?;
    let conversations = tx
        .prepare_cached("DELETE FROM conversations WHERE instance_id = ?1")
        .and_then(|mut delete| delete.execute(params![instance_id]))
        .map_err(store_error("cannot delete conversation"))?;
    Ok(sessions + conversations > 0)
}

/// Whether `instance_id` belongs to a conversation managed by the submission runtime.
pub(crate) fn is_managed(connection: &Connection, instance_id: &str) -> Result<bool> {
    connection
        .prepare_cached("SELECT 1 FROM conversations WHERE instance_id = ?1")
        .and_then(|mut select| select.exists(params![instance_id]))
        .map_err(store_error("cannot read conversation"))
}

struct RawBatch {
    seq: u64,
    at: u64,
    submission_id: Option<String>,
    session: Option<String>,
    first_idx: Option<i64>,
    n_records: Option<i64>,
    body: Option<String>,
}

struct RawSubmission {
    submission_id: String,
    instance_id: String,
    position: u64,
    state: String,
    message: String,
    accepted_at: u64,
    attempts: u32,
    first_started_at: Option<i64>,
    input_applied: bool,
    abort_requested: bool,
    idempotency_key: Option<String>,
    settlement: Option<String>,
    durability: Option<String>,
    trace_parent: Option<String>,
}

impl RawSubmission {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            submission_id: row.get(0)?,
            instance_id: row.get(1)?,
            position: get_u64(row, 2)?,
            state: row.get(3)?,
            message: row.get(4)?,
            accepted_at: get_u64(row, 5)?,
            attempts: row.get(6)?,
            first_started_at: row.get(7)?,
            input_applied: row.get(8)?,
            abort_requested: row.get(9)?,
            idempotency_key: row.get(10)?,
            settlement: row.get(11)?,
            durability: row.get(12)?,
            trace_parent: row.get(14)?,
        })
    }

    fn into_info(self) -> Result<SubmissionInfo> {
        SubmissionRow {
            submission_id: self.submission_id,
            instance_id: &self.instance_id,
            position: self.position,
            state: &self.state,
            message: &self.message,
            accepted_at: self.accepted_at,
            attempts: self.attempts,
            first_started_at: self
                .first_started_at
                .and_then(|value| u64::try_from(value).ok()),
            input_applied: self.input_applied,
            abort_requested: self.abort_requested,
            idempotency_key: self.idempotency_key,
            settlement: self.settlement.as_deref(),
            durability: self.durability.as_deref(),
            trace_parent: self.trace_parent,
        }
        .into_info()
    }
}

fn conversation_from_row(row: &Row<'_>) -> rusqlite::Result<ConversationInfo> {
    Ok(ConversationInfo {
        key: ConversationKey::new(row.get::<_, String>(0)?, row.get::<_, String>(1)?),
        uid: row.get(2)?,
        head: Offset(get_u64(row, 3)?),
        created_at: get_u64(row, 4)?,
        owner: row.get(5)?,
        epoch: get_u64(row, 6)?,
        unsettled: get_u64(row, 7)?,
    })
}

/// Fails with [`FlueError::LeaseLost`] unless `fence` is the conversation's current owner.
fn check_fence(tx: &Transaction<'_>, fence: &Fence) -> Result<()> {
    let current = tx
        .prepare_cached("SELECT owner, epoch FROM conversations WHERE instance_id = ?1")
        .and_then(|mut select| {
            select
                .query_row(params![fence.key.instance_id()], |row| {
                    Ok((row.get::<_, Option<String>>(0)?, get_u64(row, 1)?))
                })
                .optional()
        })
        .map_err(store_error("cannot read conversation"))?;
    rules::check_fence(
        fence,
        current.as_ref().map(|(owner, epoch)| Ownership {
            owner: owner.as_deref(),
            epoch: *epoch,
        }),
    )
}

/// Unsettled submissions that need work (a waiting one needs a decision first).
fn count_unsettled(tx: &Transaction<'_>, instance_id: &str) -> Result<u64> {
    tx.prepare_cached(
        "SELECT COUNT(*) FROM submissions
         WHERE instance_id = ?1 AND state != 'settled' AND state != 'waiting'",
    )
    .and_then(|mut select| select.query_row(params![instance_id], |row| get_u64(row, 0)))
    .map_err(store_error("cannot count submissions"))
}

/// The message of submission `submission_id` of conversation `instance_id`, for its
/// `admitted` batch; `None` when there is no such submission.
fn read_message(
    tx: &Transaction<'_>,
    instance_id: &str,
    submission_id: &str,
) -> Result<Option<DeliveredMessage>> {
    let json: Option<String> = tx
        .prepare_cached(concat!(
            "SELECT ",
            message_column!(),
            " FROM submissions WHERE submission_id = ?1 AND instance_id = ?2"
        ))
        .and_then(|mut select| {
            select
                .query_row(params![submission_id, instance_id], |row| row.get(0))
                .optional()
        })
        .map_err(store_error("cannot read submission"))?;
    json.map(|json| rules::parse_message(submission_id, &json))
        .transpose()
}

/// Takes the conversation's next sequence number.
fn next_seq(tx: &Transaction<'_>, instance_id: &str) -> Result<Offset> {
    tx.prepare_cached(
        "UPDATE conversations SET head = head + 1, last_activity = MAX(last_activity, ?2)
         WHERE instance_id = ?1 RETURNING head",
    )
    .and_then(|mut update| {
        update.query_row(params![instance_id, sat(now_ms())], |row| get_u64(row, 0))
    })
    .map(Offset)
    .map_err(store_error("cannot advance the stream head"))
}

/// An abort request's transaction on SQLite, on the writer thread.
struct SqliteAbort<'a> {
    tx: &'a Transaction<'a>,
    instance_id: &'a str,
}

impl txn::AbortTransaction for SqliteAbort<'_> {
    async fn unsettled(&mut self) -> Result<Vec<(String, SubmissionState, u32)>> {
        let rows: Vec<(String, String, u32)> = self
            .tx
            .prepare_cached(
                "SELECT submission_id, state, attempts FROM submissions
                 WHERE instance_id = ?1 AND state != 'settled' ORDER BY position",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![self.instance_id], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })?
                    .collect()
            })
            .map_err(store_error("cannot read submissions"))?;
        Ok(rows
            .into_iter()
            .map(|(id, state, attempts)| (id, rules::stored_state(&state), attempts))
            .collect())
    }

    async fn mark_abort_requested(&mut self) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE submissions SET abort_requested = 1
                 WHERE instance_id = ?1 AND state != 'settled'",
            )
            .and_then(|mut update| update.execute(params![self.instance_id]))
            .map_err(store_error("cannot record abort request"))?;
        Ok(())
    }

    async fn push_batch(&mut self, body: &BatchBody) -> Result<Offset> {
        push_batch(self.tx, self.instance_id, None, body)
    }

    async fn settle(&mut self, settlement: &Settlement) -> Result<Option<Offset>> {
        settle_in(self.tx, self.instance_id, settlement)
    }
}

/// Records a non-record batch under the next sequence number; returns its offset.
fn push_batch(
    tx: &Transaction<'_>,
    instance_id: &str,
    submission_id: Option<&str>,
    body: &(impl Serialize + ?Sized),
) -> Result<Offset> {
    let json = rules::to_json(body, "stream batch")?;
    let offset = next_seq(tx, instance_id)?;
    tx.prepare_cached(
        "INSERT INTO stream (instance_id, seq, at, submission_id, session, first_idx, n_records,
                             body)
         VALUES (?1, ?2, ?3, ?4, NULL, NULL, NULL, ?5)",
    )
    .and_then(|mut insert| {
        insert.execute(params![
            instance_id,
            sat(offset.0),
            sat(now_ms()),
            submission_id,
            json
        ])
    })
    .map_err(store_error("cannot insert stream batch"))?;
    Ok(offset)
}

/// Settles an unsettled submission and records the batch; `None` when already settled.
fn settle_in(
    tx: &Transaction<'_>,
    instance_id: &str,
    settlement: &Settlement,
) -> Result<Option<Offset>> {
    let json = rules::to_json(settlement, "settlement")?;
    let changed = tx
        .prepare_cached(
            "UPDATE submissions SET state = 'settled', settlement = ?3
             WHERE submission_id = ?1 AND instance_id = ?2 AND state != 'settled'",
        )
        .and_then(|mut update| update.execute(params![settlement.submission_id, instance_id, json]))
        .map_err(store_error("cannot settle submission"))?;
    if changed == 0 {
        return Ok(None);
    }
    listing::update(tx, instance_id, |summary| summary.settled(settlement))?;
    push_batch(
        tx,
        instance_id,
        Some(&settlement.submission_id),
        &BatchBody::Settled(settlement.clone()),
    )
    .map(Some)
}

/// A counter or timestamp as a SQLite integer; none of ours comes near `i64::MAX`.
fn sat(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
