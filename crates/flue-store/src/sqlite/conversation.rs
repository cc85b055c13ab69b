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

use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};

use crate::config::DurabilityConfig;
use crate::error::{FlueError, Result};
use crate::store::conversation::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, Fence, FencedAppend, HeadWatch,
    OwnerRegistration, ROOT_SESSION, aborted_settlement, duration_ms, instance_not_found,
    lease_lost,
};
use crate::store::{SessionKey, SqliteStore};
use crate::submission::{
    BatchBody, ConversationInfo, ConversationKey, DispatchReceipt, Offset, SendCondition,
    Settlement, StreamBatch, StreamPage, SubmissionInfo, SubmissionState, WhenBusy,
};
use crate::util::{BoxFuture, new_ulid, now_ms};

use super::{get_u64, insert_records, read_record_range, store_error};

const STATE_QUEUED: &str = "queued";
const STATE_RUNNING: &str = "running";
const STATE_SETTLED: &str = "settled";
const STATE_WAITING: &str = "waiting";

const SUBMISSION_COLUMNS: &str = "submission_id, instance_id, position, state, message, \
     accepted_at, attempts, first_started_at, input_applied, abort_requested, idempotency_key, \
     settlement, durability, admitted_offset, trace_parent";

const CONVERSATION_COLUMNS: &str = "c.agent, c.id, c.uid, c.head, c.created_at, c.owner, c.epoch, \
     (SELECT COUNT(*) FROM submissions s WHERE s.instance_id = c.instance_id \
      AND s.state NOT IN ('settled', 'waiting'))";

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

    fn register_owner_now(&self) -> Result<OwnerRegistration> {
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

    async fn admit_batched(&self, admission: &Admission) -> Result<DispatchReceipt> {
        let instance_id = admission.key.instance_id();
        let message_json = serde_json::to_string(&admission.message)
            .map_err(|err| FlueError::store("cannot serialise message", err))?;
        let admission = admission.clone();
        let (receipt, head) = self
            .writer
            .write_first(move |tx| Self::admit_in(tx, &admission, &message_json))
            .await?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(receipt)
    }

    /// Admits inside the batch's transaction; the offset to announce once it committed.
    fn admit_in(
        tx: &Transaction<'_>,
        admission: &Admission,
        message_json: &str,
    ) -> Result<(DispatchReceipt, Option<Offset>)> {
        let key = &admission.key;
        let instance_id = key.instance_id();
        let existing = tx
            .prepare_cached("SELECT uid, owner FROM conversations WHERE instance_id = ?1")
            .and_then(|mut select| {
                select
                    .query_row(params![instance_id], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?))
                    })
                    .optional()
            })
            .map_err(store_error("cannot read conversation"))?;
        match (&admission.options.condition, &existing) {
            (SendCondition::Uid(wanted), Some((uid, _))) if wanted != uid => {
                return Err(instance_not_found(key, Some(wanted)));
            }
            (SendCondition::Uid(wanted), None) => {
                return Err(instance_not_found(key, Some(wanted)));
            }
            (SendCondition::Create, Some((uid, _))) => {
                return Err(FlueError::AgentInstanceExists {
                    agent: key.agent.clone(),
                    id: key.id.clone(),
                    uid: uid.clone(),
                });
            }
            _ => {}
        }
        if let (Some(idempotency_key), Some((uid, _))) =
            (&admission.options.idempotency_key, &existing)
        {
            let earlier = tx
                .prepare_cached(
                    "SELECT submission_id, message, accepted_at, admitted_offset FROM submissions
                     WHERE instance_id = ?1 AND idempotency_key = ?2",
                )
                .and_then(|mut select| {
                    select
                        .query_row(params![instance_id, idempotency_key], |row| {
                            Ok((
                                row.get::<_, String>(0)?,
                                row.get::<_, String>(1)?,
                                get_u64(row, 2)?,
                                get_u64(row, 3)?,
                            ))
                        })
                        .optional()
                })
                .map_err(store_error("cannot read submission"))?;
            if let Some((submission_id, message, accepted_at, offset)) = earlier {
                if message != message_json {
                    return Err(FlueError::SubmissionConflict {
                        key: idempotency_key.clone(),
                        submission_id,
                    });
                }
                let receipt = DispatchReceipt {
                    submission_id,
                    accepted_at,
                    uid: uid.clone(),
                    offset: Offset(offset),
                    deduplicated: true,
                };
                return Ok((receipt, None));
            }
        }
        if admission.options.when_busy == WhenBusy::Fail
            && let Some((_, owner)) = &existing
        {
            let unsettled = count_unsettled(tx, &instance_id)?;
            if unsettled > 0 {
                return Err(FlueError::ConversationBusy {
                    agent: key.agent.clone(),
                    id: key.id.clone(),
                    owner: owner.clone(),
                    unsettled,
                });
            }
        }
        let now = sat(now_ms());
        let uid = match existing {
            Some((uid, _)) => uid,
            None => {
                tx.prepare_cached(
                    "INSERT INTO conversations
                     (instance_id, agent, id, uid, head, created_at, owner, epoch, lease_until,
                      next_position)
                     VALUES (?1, ?2, ?3, ?4, 0, ?5, NULL, 0, 0, 1)",
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
                    "INSERT INTO sessions (instance_id, session, version, created_at, updated_at)
                     VALUES (?1, ?2, 0, ?3, ?3) ON CONFLICT DO NOTHING",
                )
                .and_then(|mut insert| insert.execute(params![instance_id, ROOT_SESSION, now]))
                .map_err(store_error("cannot create the root session"))?;
                let created = BatchBody::Created {
                    uid: admission.new_uid.clone(),
                };
                push_batch(tx, &instance_id, None, &created)?;
                admission.new_uid.clone()
            }
        };
        let admitted = BatchBody::Admitted {
            submission_id: admission.submission_id.clone(),
            message: admission.message.clone(),
            accepted_at: admission.accepted_at,
        };
        let offset = push_batch(tx, &instance_id, Some(&admission.submission_id), &admitted)?;
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
             VALUES (?1, ?2, ?3, 'queued', ?4, ?5, 0, NULL, 0, 0, ?6, NULL, NULL, ?7, ?8)",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                admission.submission_id,
                instance_id,
                position,
                message_json,
                sat(admission.accepted_at),
                admission.options.idempotency_key,
                sat(offset.0),
                admission.options.trace_parent,
            ])
        })
        .map_err(store_error("cannot insert submission"))?;
        let receipt = DispatchReceipt {
            submission_id: admission.submission_id.clone(),
            accepted_at: admission.accepted_at,
            uid,
            offset,
            deduplicated: false,
        };
        Ok((receipt, Some(offset)))
    }

    fn conversation_now(&self, key: &ConversationKey) -> Result<Option<ConversationInfo>> {
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

    /// Every managed conversation of the store, oldest first (what `flue session list`
    /// shows).
    pub async fn all_conversations(&self) -> Result<Vec<ConversationInfo>> {
        self.conversations_where("1 = 1", None)
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

    fn submission_now(&self, submission_id: &str) -> Result<Option<SubmissionInfo>> {
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

    fn unsettled_now(&self, key: &ConversationKey) -> Result<Vec<SubmissionInfo>> {
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

    fn read_stream_now(
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
            .ok_or_else(|| instance_not_found(key, None))?;
        if after.0 > head {
            return Err(FlueError::OffsetOutOfRange {
                conversation: key.to_string(),
                offset: after.0,
                head,
            });
        }
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
            let body = match (row.session, row.first_idx, row.n_records, row.body) {
                (Some(session), Some(first_idx), Some(n_records), _) => {
                    let first = u64::try_from(first_idx).unwrap_or_default();
                    let count = u64::try_from(n_records).unwrap_or_default();
                    let session_key = SessionKey::new(instance_id.clone(), session.clone());
                    let records = read_record_range(&tx, &session_key, first, first + count)?;
                    BatchBody::Records {
                        session,
                        first_index: first,
                        records,
                    }
                }
                (_, _, _, Some(body)) => serde_json::from_str(&body)
                    .map_err(|err| FlueError::store("corrupt stream batch", err))?,
                _ => {
                    return Err(FlueError::Store {
                        message: format!("stream batch {} of {key} is empty", row.seq),
                        source: None,
                    });
                }
            };
            batches.push(StreamBatch {
                offset: Offset(row.seq),
                at: row.at,
                submission_id: row.submission_id,
                body,
            });
        }
        tx.commit().map_err(store_error("cannot end stream read"))?;
        let next_offset = batches.last().map_or(after, |batch| batch.offset);
        Ok(StreamPage {
            up_to_date: next_offset.0 == head,
            next_offset,
            batches,
        })
    }

    async fn request_abort_batched(&self, key: &ConversationKey) -> Result<AbortReport> {
        let instance_id = key.instance_id();
        let owned = instance_id.clone();
        let (report, head) = self
            .writer
            .write(move |tx| Self::request_abort_in(tx, &owned))
            .await?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(report)
    }

    fn request_abort_in(
        tx: &Transaction<'_>,
        instance_id: &str,
    ) -> Result<(AbortReport, Option<Offset>)> {
        let unsettled: Vec<(String, String, u32)> = tx
            .prepare_cached(
                "SELECT submission_id, state, attempts FROM submissions
                 WHERE instance_id = ?1 AND state != 'settled' ORDER BY position",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![instance_id], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })?
                    .collect()
            })
            .map_err(store_error("cannot read submissions"))?;
        if unsettled.is_empty() {
            return Ok((AbortReport::default(), None));
        }
        tx.prepare_cached(
            "UPDATE submissions SET abort_requested = 1
             WHERE instance_id = ?1 AND state != 'settled'",
        )
        .and_then(|mut update| update.execute(params![instance_id]))
        .map_err(store_error("cannot record abort request"))?;
        let requested: Vec<String> = unsettled.iter().map(|(id, _, _)| id.clone()).collect();
        let mut head = push_batch(
            tx,
            instance_id,
            None,
            &BatchBody::AbortRequested {
                submission_ids: requested.clone(),
            },
        )?;
        let mut settled = Vec::new();
        for (submission_id, state, attempts) in unsettled {
            if state == STATE_RUNNING {
                continue;
            }
            let settlement = aborted_settlement(&submission_id, attempts);
            head = settle_in(tx, instance_id, &settlement)?.unwrap_or(head);
            settled.push(submission_id);
        }
        Ok((AbortReport { requested, settled }, Some(head)))
    }

    async fn acquire_batched(
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
        if let Some(current_owner) = &current_owner
            && current_owner != owner_id
            && lease_until > now_ms()
            && self.owner_alive_now(current_owner)?
        {
            return Ok(Acquire::Held {
                owner_id: current_owner.clone(),
            });
        }
        let lease_until_new = sat(now_ms().saturating_add(duration_ms(lease)));
        let owner = owner_id.to_owned();
        let taken = self
            .writer
            .write(move |tx| {
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

    async fn renew_batched(&self, fence: &Fence, lease: Duration) -> Result<()> {
        let lease_until = sat(now_ms().saturating_add(duration_ms(lease)));
        let fence = fence.clone();
        self.writer
            .write(move |tx| Self::renew_in(tx, &fence, lease_until))
            .await
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
            return Err(lease_lost(fence, "another owner took the conversation"));
        }
        Ok(())
    }

    async fn release_batched(&self, fence: &Fence) -> Result<bool> {
        let fence = fence.clone();
        self.writer
            .write(move |tx| Self::release_in(tx, &fence))
            .await
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

    async fn claim_next_batched(
        &self,
        fence: &Fence,
        durability: &DurabilityConfig,
    ) -> Result<Option<Claim>> {
        let durability_json = serde_json::to_string(durability)
            .map_err(|err| FlueError::store("cannot serialise durability", err))?;
        let owned = fence.clone();
        let claimed = self
            .writer
            .write(move |tx| Self::claim_next_in(tx, &owned, &durability_json))
            .await?;
        let Some((submission, head)) = claimed else {
            return Ok(None);
        };
        self.heads.notify(&fence.key.instance_id(), head);
        let durability = submission
            .durability
            .clone()
            .unwrap_or_else(|| durability.clone());
        Ok(Some(Claim {
            submission,
            durability,
        }))
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
        // A waiting submission holds the line: nothing behind it runs before it is resumed.
        let Some((submission_id, STATE_QUEUED | STATE_RUNNING)) = next
            .as_ref()
            .map(|(id, state)| (id.clone(), state.as_str()))
        else {
            return Ok(None);
        };
        let now = sat(now_ms());
        let raw = tx
            .prepare_cached(&format!(
                "UPDATE submissions SET state = 'running', attempts = attempts + 1,
                    first_started_at = COALESCE(first_started_at, ?2),
                    durability = COALESCE(durability, ?3)
                 WHERE submission_id = ?1 RETURNING {SUBMISSION_COLUMNS}"
            ))
            .and_then(|mut update| {
                update.query_row(
                    params![submission_id, now, durability_json],
                    RawSubmission::from_row,
                )
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

    async fn settle_batched(&self, fence: &Fence, settlement: &Settlement) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        let fence = fence.clone();
        let settlement = settlement.clone();
        let settled = self
            .writer
            .write(move |tx| {
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

    async fn append_fenced_batched(&self, append: FencedAppend<'_>) -> Result<u64> {
        let instance_id = append.fence.key.instance_id();
        if append.session.instance_id != instance_id {
            return Err(lease_lost(
                append.fence,
                "the session belongs to another conversation",
            ));
        }
        let rows = append
            .records
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<String>, _>>()
            .map_err(|err| FlueError::store("cannot serialise record", err))?;
        let owned = OwnedAppend {
            fence: append.fence.clone(),
            session: append.session.clone(),
            expected_version: append.expected_version,
            submission_id: append.submission_id.map(str::to_owned),
            applies_input: append.applies_input,
            resumes_waiting: append.resumes_waiting,
        };
        let (version, head) = self
            .writer
            .write(move |tx| Self::append_fenced_in(tx, &owned, &rows))
            .await?;
        if let Some(head) = head {
            self.heads.notify(&instance_id, head);
        }
        Ok(version)
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
    fn admit<'a>(&'a self, admission: &'a Admission) -> BoxFuture<'a, Result<DispatchReceipt>> {
        Box::pin(self.admit_batched(admission))
    }

    fn conversation<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Option<ConversationInfo>>> {
        Box::pin(async move { self.conversation_now(key) })
    }

    fn conversations_with_id<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ConversationInfo>>> {
        Box::pin(async move { self.conversations_where("c.id = ?1", Some(id)) })
    }

    fn all_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>> {
        Box::pin(SqliteStore::all_conversations(self))
    }

    fn pending_conversations(&self) -> BoxFuture<'_, Result<Vec<ConversationInfo>>> {
        Box::pin(async move {
            self.conversations_where(
                "EXISTS (SELECT 1 FROM submissions s WHERE s.instance_id = c.instance_id \
                 AND s.state NOT IN ('settled', 'waiting'))",
                None,
            )
        })
    }

    fn submission<'a>(
        &'a self,
        submission_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SubmissionInfo>>> {
        Box::pin(async move { self.submission_now(submission_id) })
    }

    fn unsettled<'a>(
        &'a self,
        key: &'a ConversationKey,
    ) -> BoxFuture<'a, Result<Vec<SubmissionInfo>>> {
        Box::pin(async move { self.unsettled_now(key) })
    }

    fn read_stream<'a>(
        &'a self,
        key: &'a ConversationKey,
        after: Offset,
        limit: usize,
    ) -> BoxFuture<'a, Result<StreamPage>> {
        Box::pin(async move { self.read_stream_now(key, after, limit) })
    }

    fn watch_head(&self, key: &ConversationKey) -> HeadWatch {
        self.heads.watch(&key.instance_id())
    }

    fn request_abort<'a>(&'a self, key: &'a ConversationKey) -> BoxFuture<'a, Result<AbortReport>> {
        Box::pin(self.request_abort_batched(key))
    }

    fn register_owner(&self) -> BoxFuture<'_, Result<OwnerRegistration>> {
        Box::pin(async move { self.register_owner_now() })
    }

    fn owner_alive<'a>(&'a self, owner_id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { self.owner_alive_now(owner_id) })
    }

    fn acquire<'a>(
        &'a self,
        key: &'a ConversationKey,
        owner_id: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Acquire>> {
        Box::pin(self.acquire_batched(key, owner_id, lease))
    }

    fn renew<'a>(&'a self, fence: &'a Fence, lease: Duration) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.renew_batched(fence, lease))
    }

    fn release<'a>(&'a self, fence: &'a Fence) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.release_batched(fence))
    }

    fn claim_next<'a>(
        &'a self,
        fence: &'a Fence,
        durability: &'a DurabilityConfig,
    ) -> BoxFuture<'a, Result<Option<Claim>>> {
        Box::pin(self.claim_next_batched(fence, durability))
    }

    fn settle<'a>(
        &'a self,
        fence: &'a Fence,
        settlement: &'a Settlement,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.settle_batched(fence, settlement))
    }

    fn wait<'a>(
        &'a self,
        fence: &'a Fence,
        submission_id: &'a str,
        actions: &'a [String],
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let instance_id = fence.key.instance_id();
            let owned_fence = fence.clone();
            let owned_id = submission_id.to_owned();
            let owned_actions = actions.to_vec();
            let head = self
                .writer
                .write(move |tx| Self::wait_in(tx, &owned_fence, &owned_id, owned_actions))
                .await?;
            Ok(head.is_some_and(|head| {
                self.heads.notify(&instance_id, head);
                true
            }))
        })
    }

    fn append_fenced<'a>(&'a self, append: FencedAppend<'a>) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.append_fenced_batched(append))
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
        let corrupt = |what: &str, err: serde_json::Error| {
            FlueError::store(
                format!("corrupt {what} of submission {}", self.submission_id),
                err,
            )
        };
        let message = serde_json::from_str(&self.message).map_err(|err| corrupt("message", err))?;
        let settlement = self
            .settlement
            .as_deref()
            .map(serde_json::from_str::<Settlement>)
            .transpose()
            .map_err(|err| corrupt("settlement", err))?;
        let durability = self
            .durability
            .as_deref()
            .map(serde_json::from_str::<DurabilityConfig>)
            .transpose()
            .map_err(|err| corrupt("durability", err))?;
        let state = match self.state.as_str() {
            STATE_QUEUED => SubmissionState::Queued,
            STATE_RUNNING => SubmissionState::Running,
            STATE_SETTLED => SubmissionState::Settled,
            STATE_WAITING => SubmissionState::Waiting,
            other => {
                return Err(FlueError::Store {
                    message: format!(
                        "unknown state {other:?} of submission {}",
                        self.submission_id
                    ),
                    source: None,
                });
            }
        };
        let conversation =
            ConversationKey::from_instance_id(&self.instance_id).ok_or_else(|| {
                FlueError::Store {
                    message: format!("malformed instance id {:?}", self.instance_id),
                    source: None,
                }
            })?;
        Ok(SubmissionInfo {
            submission_id: self.submission_id,
            conversation,
            state,
            message,
            accepted_at: self.accepted_at,
            position: self.position,
            attempts: self.attempts,
            first_started_at: self
                .first_started_at
                .and_then(|value| u64::try_from(value).ok()),
            input_applied: self.input_applied,
            abort_requested: self.abort_requested,
            durability,
            idempotency_key: self.idempotency_key,
            trace_parent: self.trace_parent,
            settlement,
        })
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
    match current {
        None => Err(instance_not_found(&fence.key, None)),
        Some((Some(owner), epoch)) if owner == fence.owner_id && epoch == fence.epoch => Ok(()),
        Some(_) => Err(lease_lost(fence, "another owner took the conversation")),
    }
}

/// Unsettled submissions that need work (a waiting one needs a decision first).
fn count_unsettled(tx: &Transaction<'_>, instance_id: &str) -> Result<u64> {
    tx.prepare_cached(
        "SELECT COUNT(*) FROM submissions
         WHERE instance_id = ?1 AND state NOT IN ('settled', 'waiting')",
    )
    .and_then(|mut select| select.query_row(params![instance_id], |row| get_u64(row, 0)))
    .map_err(store_error("cannot count submissions"))
}

/// Takes the conversation's next sequence number.
fn next_seq(tx: &Transaction<'_>, instance_id: &str) -> Result<Offset> {
    tx.prepare_cached(
        "UPDATE conversations SET head = head + 1 WHERE instance_id = ?1 RETURNING head",
    )
    .and_then(|mut update| update.query_row(params![instance_id], |row| get_u64(row, 0)))
    .map(Offset)
    .map_err(store_error("cannot advance the stream head"))
}

/// Records a non-record batch under the next sequence number; returns its offset.
fn push_batch(
    tx: &Transaction<'_>,
    instance_id: &str,
    submission_id: Option<&str>,
    body: &BatchBody,
) -> Result<Offset> {
    let json = serde_json::to_string(body)
        .map_err(|err| FlueError::store("cannot serialise stream batch", err))?;
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
    let json = serde_json::to_string(settlement)
        .map_err(|err| FlueError::store("cannot serialise settlement", err))?;
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
