//! [`ConversationStore`] for [`PostgresStore`]: conversations, their streams and submissions,
//! ownership with fencing, and owner liveness through advisory locks.
//!
//! Every write is one `READ COMMITTED` transaction that starts by locking the conversation row
//! (`SELECT ... FOR UPDATE`). Writes of one conversation therefore run one at a time across all
//! nodes, and each sees the latest committed row after its lock is granted: the fence check
//! (owner and epoch equal to the writer's [`Fence`]) and the head bump cannot race with a
//! takeover. A takeover ([`ConversationStore::acquire`]) takes the same lock, so it cannot
//! double-claim: two contenders queue on the row and the second sees the first's owner.
//!
//! Leases are on the database clock: `lease_until` is a `timestamptz` set from `now()` and
//! compared with `now()`, so the nodes' clocks never matter. Writes that move the head send
//! `pg_notify` in the same transaction (see `heads.rs`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Transaction};
use flue_core::store::listing::{Appended, ListedConversation, ListingQuery, Summary};
use flue_core::store::rules::{
    self, AdmissionCheck, BatchContent, Commit, EarlierSubmission, FoundConversation, Ownership,
    ROOT_SESSION, SubmissionRow, Write, commit_of_server, instance_not_found, stale_fence,
};
use flue_core::store::txn;
use flue_core::store::{
    AbortReport, Acquire, Admission, Claim, ConversationStore, Fence, FencedAppend, HeadWatch,
    OwnerRegistration, SubmissionStatus,
};
use flue_core::{
    BatchBody, ConversationKey, DeliveredMessage, DurabilityConfig, Offset, Result, Settlement,
    submission::ConversationInfo,
    submission::DispatchReceipt,
    submission::SendCondition,
    submission::StreamPage,
    submission::SubmissionInfo,
    submission::SubmissionState,
    util::{new_ulid, now_ms},
};
use serde::Serialize;
use tokio_postgres::Row;

use super::heads::payload;
use super::listing;
use super::{
    LOCK_NAMESPACE, NOTIFY_CHANNEL, PostgresStore, execute, insert_records, int, pg_error,
    query_all, query_one, query_opt, read_record_range, uint,
};

const SUBMISSION_COLUMNS: &str = "submission_id, instance_id, position, state, message, \
     accepted_at, attempts, first_started_at, input_applied, abort_requested, idempotency_key, \
     settlement, durability, trace_parent";

// A submission needs work when it is neither settled nor waiting for a decision. The test is
// spelled as two `!=` so the planner sees that it implies the partial index's
// `state != 'settled'` and reads only unsettled rows (with `NOT IN`, SQLite scanned every
// submission once per conversation).
const CONVERSATION_COLUMNS: &str = concat!(
    "c.agent, c.id, c.uid, c.head, c.created_at, c.owner, c.epoch, ",
    "(SELECT COUNT(*) FROM flue_submissions s WHERE s.instance_id = c.instance_id ",
    "AND s.state != 'settled' AND s.state != 'waiting')"
);

/// Conversations with a submission that needs work, found from the unsettled rows alone, so
/// the cost follows what is pending, not how many conversations the store holds.
const PENDING: &str = concat!(
    "c.instance_id IN (SELECT s.instance_id FROM flue_submissions s ",
    "WHERE s.state != 'settled' AND s.state != 'waiting')"
);

/// What a writer learnt by locking a conversation row.
struct Locked {
    uid: String,
    owner: Option<String>,
    epoch: u64,
    /// `lease_until > now()`.
    leased: bool,
}

impl PostgresStore {
    /// Announces the conversation's new `head` in `tx`, commits it (`what` names the write in
    /// an error) and wakes this node's own readers; other nodes hear of it from the commit.
    async fn commit_moved(
        &self,
        tx: Transaction<'_>,
        instance_id: &str,
        head: Offset,
        what: &'static str,
    ) -> Result<()> {
        announce(&tx, instance_id, head).await?;
        tx.commit().await.map_err(pg_error(what))?;
        self.heads.notify(instance_id, head);
        Ok(())
    }

    /// Begins a write committed as `commit` says: a [`Commit::WithNext`] one with
    /// `synchronous_commit` off, so its commit does not wait for the WAL flush (it is visible
    /// at once, and Postgres flushes its WAL in order, so the next synchronous commit on the
    /// server makes it durable too).
    async fn begin<'a>(
        &self,
        client: &'a mut deadpool_postgres::Object,
        commit: Commit,
    ) -> Result<Transaction<'a>> {
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("cannot begin transaction"))?;
        if commit == Commit::WithNext {
            tx.batch_execute("SET LOCAL synchronous_commit TO OFF")
                .await
                .map_err(pg_error("cannot set the commit mode"))?;
        }
        Ok(tx)
    }

    async fn conversations_where(
        &self,
        filter: &str,
        param: Option<&str>,
    ) -> Result<Vec<ConversationInfo>> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM flue_conversations c WHERE {filter}
             ORDER BY c.created_at, c.instance_id COLLATE \"C\""
        );
        let rows = match &param {
            Some(param) => query_all(&client, &sql, &[param], "cannot list conversations").await,
            None => query_all(&client, &sql, &[], "cannot list conversations").await,
        }?;
        rows.iter().map(conversation_from_row).collect()
    }

    /// Whether this process dropped the registration of `owner_id` (its connection may still
    /// be closing; the database will see it dead in a moment).
    fn released_here(&self, owner_id: &str) -> bool {
        self.released_owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(owner_id)
    }
}

impl PostgresStore {}

/// Keeps an owner's advisory lock: dropping it closes the connection, which releases the
/// lock, and marks the owner dead for this process at once.
struct OwnerGuard {
    _client: tokio_postgres::Client,
    owner_id: String,
    released: Arc<Mutex<HashSet<String>>>,
}

impl Drop for OwnerGuard {
    fn drop(&mut self) {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(std::mem::take(&mut self.owner_id));
    }
}

impl ConversationStore for PostgresStore {
    async fn admit(&self, admission: &Admission) -> Result<DispatchReceipt> {
        let message_json = rules::message_json(admission)?;
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Admit))
            .await?;
        let receipt = admit_in(&tx, admission, &message_json).await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit admission"))?;
        if !receipt.deduplicated {
            self.heads
                .notify(&admission.key.instance_id(), receipt.offset);
        }
        Ok(receipt)
    }

    async fn conversation(&self, key: &ConversationKey) -> Result<Option<ConversationInfo>> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM flue_conversations c WHERE c.instance_id = $1"
        );
        query_opt(
            &client,
            &sql,
            &[&key.instance_id()],
            "cannot read conversation",
        )
        .await?
        .as_ref()
        .map(conversation_from_row)
        .transpose()
    }

    async fn conversations_with_id(&self, id: &str) -> Result<Vec<ConversationInfo>> {
        self.conversations_where("c.id = $1", Some(id)).await
    }

    async fn list_conversations(&self, query: &ListingQuery) -> Result<Vec<ListedConversation>> {
        self.list_page(query).await
    }

    async fn count_conversations(&self) -> Result<u64> {
        self.count().await
    }

    async fn all_conversations(&self) -> Result<Vec<ConversationInfo>> {
        self.conversations_where("TRUE", None).await
    }

    async fn pending_conversations(&self) -> Result<Vec<ConversationInfo>> {
        self.conversations_where(PENDING, None).await
    }

    async fn orphaned_conversations(&self, owner_id: &str) -> Result<Vec<ConversationInfo>> {
        let client = self.client().await?;
        let sql = format!(
            "WITH live AS (
                 SELECT objid::TEXT::BIGINT AS key FROM pg_locks
                 WHERE locktype = 'advisory' AND granted AND objsubid = 2
                   AND classid::TEXT::BIGINT = {namespace}
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
             )
             SELECT {CONVERSATION_COLUMNS} FROM flue_conversations c
             WHERE {PENDING}
               AND (c.owner IS NULL OR c.owner = $1 OR c.lease_until <= now()
                    OR NOT EXISTS (SELECT 1 FROM live
                                   WHERE live.key::TEXT = split_part(c.owner, '-', 2)))
             ORDER BY c.created_at, c.instance_id COLLATE \"C\"",
            namespace = i64::from(LOCK_NAMESPACE)
        );
        query_all(
            &client,
            &sql,
            &[&owner_id],
            "cannot list orphaned conversations",
        )
        .await?
        .iter()
        .map(conversation_from_row)
        .collect()
    }

    async fn submission(&self, submission_id: &str) -> Result<Option<SubmissionInfo>> {
        let client = self.client().await?;
        let sql =
            format!("SELECT {SUBMISSION_COLUMNS} FROM flue_submissions WHERE submission_id = $1");
        query_opt(&client, &sql, &[&submission_id], "cannot read submission")
            .await?
            .as_ref()
            .map(submission_from_row)
            .transpose()
    }

    async fn submission_status(&self, submission_id: &str) -> Result<Option<SubmissionStatus>> {
        let client = self.client().await?;
        let row = query_opt(
            &client,
            "SELECT instance_id, state, abort_requested, settlement FROM flue_submissions
             WHERE submission_id = $1",
            &[&submission_id],
            "cannot read submission",
        )
        .await?;
        row.map(|row| {
            rules::submission_status(
                submission_id,
                row.get(0),
                row.get(1),
                row.get(2),
                row.get(3),
            )
        })
        .transpose()
    }

    async fn unsettled(&self, key: &ConversationKey) -> Result<Vec<SubmissionInfo>> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {SUBMISSION_COLUMNS} FROM flue_submissions
             WHERE instance_id = $1 AND state <> 'settled' ORDER BY position"
        );
        query_all(
            &client,
            &sql,
            &[&key.instance_id()],
            "cannot read submissions",
        )
        .await?
        .iter()
        .map(submission_from_row)
        .collect()
    }

    async fn read_stream(
        &self,
        key: &ConversationKey,
        after: Offset,
        limit: usize,
    ) -> Result<StreamPage> {
        let instance_id = key.instance_id();
        let mut client = self.client().await?;
        // One snapshot: the head and the batches agree.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("cannot begin stream read"))?;
        let head = query_opt(
            &tx,
            "SELECT head FROM flue_conversations WHERE instance_id = $1",
            &[&instance_id],
            "cannot read conversation",
        )
        .await?
        .map(|row| Offset(uint(row.get(0))))
        .ok_or_else(|| instance_not_found(key, None))?;
        rules::check_offset(key, after, head)?;
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let rows = query_all(
            &tx,
            "SELECT seq, at, submission_id, session, first_idx, n_records, body FROM flue_stream
             WHERE instance_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            &[&instance_id, &int(after.0), &limit],
            "cannot read stream",
        )
        .await?;
        let mut batches = Vec::with_capacity(rows.len());
        for row in rows {
            let seq = uint(row.get(0));
            let stored =
                rules::stored_batch(key, seq, row.get(3), row.get(4), row.get(5), row.get(6))?;
            let content =
                if let Some((session_key, from, until)) = stored.record_range(&instance_id) {
                    BatchContent::Records(read_record_range(&tx, &session_key, from, until).await?)
                } else if let Some(admitted) = stored.admitted_submission() {
                    BatchContent::Message(read_message(&tx, &instance_id, admitted).await?)
                } else {
                    BatchContent::Nothing
                };
            batches.push(stored.into_batch(
                key,
                Offset(seq),
                uint(row.get(1)),
                row.get(2),
                content,
            )?);
        }
        tx.commit()
            .await
            .map_err(pg_error("cannot end stream read"))?;
        Ok(rules::stream_page(after, head, batches))
    }

    fn watch_head(&self, key: &ConversationKey) -> HeadWatch {
        self.heads.watch(&key.instance_id())
    }

    async fn delete_conversation(&self, key: &ConversationKey) -> Result<bool> {
        let instance_id = key.instance_id();
        let mut client = self.client().await?;
        let tx = self.begin(&mut client, Commit::Sync).await?;
        check_delete(&tx, &instance_id).await?;
        // The records go with their sessions, the stream and submissions with the
        // conversation (`ON DELETE CASCADE`).
        let sessions = execute(
            &tx,
            "DELETE FROM flue_sessions WHERE instance_id = $1",
            &[&instance_id],
            "cannot delete sessions",
        )
        .await?;
        let conversations = execute(
            &tx,
            "DELETE FROM flue_conversations WHERE instance_id = $1",
            &[&instance_id],
            "cannot delete conversation",
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit delete"))?;
        Ok(sessions + conversations > 0)
    }

    async fn request_abort(&self, key: &ConversationKey) -> Result<AbortReport> {
        let instance_id = key.instance_id();
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::RequestAbort))
            .await?;
        if lock(&tx, &instance_id).await?.is_none() {
            return Ok(AbortReport::default());
        }
        let mut abort = PostgresAbort {
            tx: &tx,
            instance_id: &instance_id,
        };
        let (report, Some(head)) = txn::request_abort(&mut abort).await? else {
            return Ok(AbortReport::default());
        };
        self.commit_moved(tx, &instance_id, head, "cannot commit abort")
            .await?;
        Ok(report)
    }

    async fn register_owner(&self) -> Result<OwnerRegistration> {
        let key: i32 = {
            let client = self.client().await?;
            query_one(
                &client,
                "SELECT nextval('flue_owner_keys')::INT",
                &[],
                "cannot number the owner",
            )
            .await?
            .get(0)
        };
        // A dedicated connection: the lock lives exactly as long as it does.
        let (client, connection) = self.config.connect(self.tls.clone()).await.map_err(|err| {
            super::tls::connect_failure(
                "cannot open the owner connection to",
                self.database(),
                &self.tls_settings,
                &err,
            )
        })?;
        // Ends (closing the socket, which releases the lock) once the client is dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
            .execute("SELECT pg_advisory_lock($1, $2)", &[&LOCK_NAMESPACE, &key])
            .await
            .map_err(pg_error("cannot take the owner lock"))?;
        let owner_id = format!("{}-{key}", new_ulid());
        Ok(OwnerRegistration::new(
            owner_id.clone(),
            OwnerGuard {
                _client: client,
                owner_id,
                released: Arc::clone(&self.released_owners),
            },
        ))
    }

    async fn owner_alive(&self, owner_id: &str) -> Result<bool> {
        if self.released_here(owner_id) {
            return Ok(false);
        }
        let client = self.client().await?;
        owner_alive_in(&client, owner_id).await
    }

    async fn acquire(
        &self,
        key: &ConversationKey,
        owner_id: &str,
        lease: Duration,
    ) -> Result<Acquire> {
        let instance_id = key.instance_id();
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Acquire))
            .await?;
        let current = lock(&tx, &instance_id)
            .await?
            .ok_or_else(|| instance_not_found(key, None))?;
        // The same owner taking its conversation again (a driver of its own stopped without
        // releasing) gets a new epoch too, fencing off anything that driver left.
        if let Some(holder) = rules::contender(current.owner.as_deref(), owner_id, current.leased)
            && !self.released_here(holder)
            && owner_alive_in(&tx, holder).await?
        {
            return Ok(Acquire::Held {
                owner_id: holder.to_owned(),
            });
        }
        let row = query_one(
            &tx,
            "UPDATE flue_conversations
             SET owner = $2, epoch = epoch + 1, lease_until = now() + $3 * INTERVAL '1 millisecond'
             WHERE instance_id = $1 RETURNING epoch",
            &[&instance_id, &owner_id, &lease_ms(lease)],
            "cannot take ownership",
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit ownership"))?;
        Ok(Acquire::Owned(Fence {
            key: key.clone(),
            owner_id: owner_id.to_owned(),
            epoch: uint(row.get(0)),
        }))
    }

    async fn renew(&self, fence: &Fence, lease: Duration) -> Result<()> {
        // The schedule lets a renewal ride with the next synced commit; it is one statement,
        // sent every third of a lease, so it keeps its own commit rather than take three round
        // trips for a transaction that could turn the flush off.
        let client = self.client().await?;
        let changed = execute(
            &client,
            "UPDATE flue_conversations
             SET lease_until = now() + $4 * INTERVAL '1 millisecond'
             WHERE instance_id = $1 AND owner = $2 AND epoch = $3",
            &[
                &fence.key.instance_id(),
                &fence.owner_id,
                &int(fence.epoch),
                &lease_ms(lease),
            ],
            "cannot renew lease",
        )
        .await?;
        if changed == 0 {
            return Err(stale_fence(fence));
        }
        Ok(())
    }

    async fn release(&self, fence: &Fence) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Release))
            .await?;
        check_fence(&tx, fence).await?;
        if count_unsettled(&tx, &instance_id).await? > 0 {
            return Ok(false);
        }
        execute(
            &tx,
            "UPDATE flue_conversations SET owner = NULL, lease_until = '-infinity'
             WHERE instance_id = $1",
            &[&instance_id],
            "cannot release ownership",
        )
        .await?;
        tx.commit()
            .await
            .map_err(pg_error("cannot commit release"))?;
        Ok(true)
    }

    async fn claim_next(
        &self,
        fence: &Fence,
        durability: &DurabilityConfig,
    ) -> Result<Option<Claim>> {
        let durability_json = rules::to_json(durability, "durability")?;
        let instance_id = fence.key.instance_id();
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Claim))
            .await?;
        check_fence(&tx, fence).await?;
        let next = query_opt(
            &tx,
            "SELECT submission_id, state FROM flue_submissions
             WHERE instance_id = $1 AND state <> 'settled' ORDER BY position LIMIT 1",
            &[&instance_id],
            "cannot read submissions",
        )
        .await?;
        let Some(next) = next else {
            return Ok(None);
        };
        if !rules::claimable(rules::stored_state(next.get(1))) {
            return Ok(None);
        }
        let submission_id: String = next.get(0);
        let row = query_one(
            &tx,
            &format!(
                "UPDATE flue_submissions SET state = 'running', attempts = attempts + 1,
                    first_started_at = COALESCE(first_started_at, $2),
                    durability = COALESCE(durability, $3)
                 WHERE submission_id = $1 RETURNING {SUBMISSION_COLUMNS}"
            ),
            &[&submission_id, &int(now_ms()), &durability_json],
            "cannot claim submission",
        )
        .await?;
        let submission = submission_from_row(&row)?;
        let head = push_batch(
            &tx,
            &instance_id,
            Some(&submission_id),
            &BatchBody::Started {
                submission_id: submission_id.clone(),
                attempt: submission.attempts,
            },
        )
        .await?;
        self.commit_moved(tx, &instance_id, head, "cannot commit claim")
            .await?;
        Ok(Some(rules::claim(submission, durability)))
    }

    async fn settle(&self, fence: &Fence, settlement: &Settlement) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Settle))
            .await?;
        check_fence(&tx, fence).await?;
        let Some(head) = settle_in(&tx, &instance_id, settlement).await? else {
            return Ok(false);
        };
        self.commit_moved(tx, &instance_id, head, "cannot commit settlement")
            .await?;
        Ok(true)
    }

    async fn append_fenced(&self, append: FencedAppend<'_>) -> Result<u64> {
        rules::check_fenced_session(&append)?;
        let instance_id = append.fence.key.instance_id();
        let rows = rules::records_json(append.records)?;
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Append(&append)))
            .await?;
        check_fence(&tx, append.fence).await?;
        let version = insert_records(&tx, append.session, append.expected_version, &rows).await?;
        if rows.is_empty() {
            tx.commit()
                .await
                .map_err(pg_error("cannot commit append"))?;
            return Ok(version);
        }
        let head = next_seq(&tx, &instance_id).await?;
        let appended = Appended::of(
            &append.session.session,
            append.expected_version,
            append.records,
        );
        listing::update(&tx, &instance_id, |summary| summary.apply(&appended)).await?;
        execute(
            &tx,
            "INSERT INTO flue_stream (instance_id, seq, at, submission_id, session, first_idx,
                                      n_records, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
            &[
                &instance_id,
                &int(head.0),
                &int(now_ms()),
                &append.submission_id,
                &append.session.session,
                &int(append.expected_version),
                &int(rows.len() as u64),
            ],
            "cannot insert stream batch",
        )
        .await?;
        if append.resumes_waiting {
            execute(
                &tx,
                "UPDATE flue_submissions SET state = 'queued',
                    attempts = GREATEST(attempts - 1, 0),
                    first_started_at = first_started_at
                        + GREATEST($2 - COALESCE(waiting_since, $2), 0),
                    waiting_since = NULL
                 WHERE instance_id = $1 AND state = 'waiting'",
                &[&instance_id, &int(now_ms())],
                "cannot resume the waiting submission",
            )
            .await?;
        }
        if append.applies_input
            && let Some(submission_id) = append.submission_id
        {
            execute(
                &tx,
                "UPDATE flue_submissions SET input_applied = TRUE
                 WHERE submission_id = $1 AND state = 'running'",
                &[&submission_id],
                "cannot mark input applied",
            )
            .await?;
        }
        self.commit_moved(tx, &instance_id, head, "cannot commit append")
            .await?;
        Ok(version)
    }

    async fn wait(&self, fence: &Fence, submission_id: &str, actions: &[String]) -> Result<bool> {
        let instance_id = fence.key.instance_id();
        let mut client = self.client().await?;
        let tx = self
            .begin(&mut client, commit_of_server(Write::Wait))
            .await?;
        check_fence(&tx, fence).await?;
        let changed = execute(
            &tx,
            "UPDATE flue_submissions SET state = 'waiting', waiting_since = $3
             WHERE submission_id = $1 AND instance_id = $2 AND state = 'running'",
            &[&submission_id, &instance_id, &int(now_ms())],
            "cannot pause submission",
        )
        .await?;
        if changed == 0 {
            return Ok(false);
        }
        let head = push_batch(
            &tx,
            &instance_id,
            Some(submission_id),
            &BatchBody::Waiting {
                submission_id: submission_id.to_owned(),
                actions: actions.to_vec(),
            },
        )
        .await?;
        self.commit_moved(tx, &instance_id, head, "cannot commit pause")
            .await?;
        Ok(true)
    }
}

/// Admits inside the caller's transaction (see [`ConversationStore::admit`]).
async fn admit_in(
    tx: &Transaction<'_>,
    admission: &Admission,
    message_json: &str,
) -> Result<DispatchReceipt> {
    let key = &admission.key;
    let instance_id = key.instance_id();
    let mut existing = lock(tx, &instance_id).await?;
    let mut created = false;
    if existing.is_none() && !matches!(admission.options.condition, SendCondition::Uid(_)) {
        // A racing admission may create it first: then ours inserts nothing and we lock theirs.
        let now = int(now_ms());
        let inserted = execute(
            tx,
            "INSERT INTO flue_conversations
             (instance_id, agent, id, uid, head, created_at, owner, epoch, next_position,
              last_activity)
             VALUES ($1, $2, $3, $4, 0, $5, NULL, 0, 1, $5) ON CONFLICT DO NOTHING",
            &[&instance_id, &key.agent, &key.id, &admission.new_uid, &now],
            "cannot create conversation",
        )
        .await?;
        existing = lock(tx, &instance_id).await?;
        created = inserted == 1;
    }
    // Created here: the conversation as the admission found it is none.
    let found = existing
        .as_ref()
        .filter(|_| !created)
        .map(|current| FoundConversation {
            uid: current.uid.clone(),
            owner: current.owner.clone(),
        });
    let check = AdmissionCheck::new(admission, message_json, found)?;
    if existing.is_none() {
        return Err(instance_not_found(key, None));
    }
    if let Some(idempotency_key) = check.idempotency_key() {
        let earlier = query_opt(
            tx,
            "SELECT submission_id, message, accepted_at, admitted_offset FROM flue_submissions
             WHERE instance_id = $1 AND idempotency_key = $2",
            &[&instance_id, &idempotency_key],
            "cannot read submission",
        )
        .await?
        .map(|earlier| EarlierSubmission {
            submission_id: earlier.get(0),
            message_json: earlier.get(1),
            accepted_at: uint(earlier.get(2)),
            admitted_offset: Offset(uint(earlier.get(3))),
        });
        if let Some(receipt) = check.deduplicate(earlier)? {
            return Ok(receipt);
        }
    }
    if check.checks_busy() {
        check.check_busy(count_unsettled(tx, &instance_id).await?)?;
    }
    if let Some(created) = check.created_batch() {
        let now = int(now_ms());
        execute(
            tx,
            "INSERT INTO flue_sessions (instance_id, session, version, created_at, updated_at,
                                        managed)
             VALUES ($1, $2, 0, $3, $3, TRUE)
             ON CONFLICT (instance_id, session) DO UPDATE SET managed = TRUE",
            &[&instance_id, &ROOT_SESSION, &now],
            "cannot create the root session",
        )
        .await?;
        push_batch(tx, &instance_id, None, &created).await?;
        let summary = Summary::created(
            &admission.message,
            admission.options.idempotency_key.as_deref(),
        );
        listing::created(tx, key, &summary).await?;
    } else {
        listing::update(tx, &instance_id, |summary| {
            summary.admitted(&admission.message);
        })
        .await?;
    }
    let offset = push_batch(
        tx,
        &instance_id,
        Some(&admission.submission_id),
        &check.admitted_batch(),
    )
    .await?;
    let position: i64 = query_one(
        tx,
        "UPDATE flue_conversations SET next_position = next_position + 1
         WHERE instance_id = $1 RETURNING next_position - 1",
        &[&instance_id],
        "cannot number submission",
    )
    .await?
    .get(0);
    execute(
        tx,
        "INSERT INTO flue_submissions
         (submission_id, instance_id, position, state, message, accepted_at, attempts,
          first_started_at, input_applied, abort_requested, idempotency_key, settlement,
          durability, admitted_offset, trace_parent)
         VALUES ($1, $2, $3, 'queued', $4, $5, 0, NULL, FALSE, FALSE, $6, NULL, NULL, $7, $8)",
        &[
            &admission.submission_id,
            &instance_id,
            &position,
            &message_json,
            &int(admission.accepted_at),
            &admission.options.idempotency_key,
            &int(offset.0),
            &admission.options.trace_parent,
        ],
        "cannot insert submission",
    )
    .await?;
    announce(tx, &instance_id, offset).await?;
    Ok(check.receipt(offset))
}

/// Locks the conversation row for the rest of the transaction; `None` when it does not exist.
async fn lock(tx: &Transaction<'_>, instance_id: &str) -> Result<Option<Locked>> {
    Ok(query_opt(
        tx,
        "SELECT uid, owner, epoch, lease_until > now() FROM flue_conversations
         WHERE instance_id = $1 FOR UPDATE",
        &[&instance_id],
        "cannot lock conversation",
    )
    .await?
    .map(|row| Locked {
        uid: row.get(0),
        owner: row.get(1),
        epoch: uint(row.get(2)),
        leased: row.get(3),
    }))
}

/// The delete rule for the sessions of `instance_id` ([`rules::check_delete`]), inside the
/// caller's transaction: the conversation row is locked, so no admission slips in between.
pub(crate) async fn check_delete(tx: &Transaction<'_>, instance_id: &str) -> Result<()> {
    let Some(row) = query_opt(
        tx,
        "SELECT agent, id, owner FROM flue_conversations WHERE instance_id = $1 FOR UPDATE",
        &[&instance_id],
        "cannot lock conversation",
    )
    .await?
    else {
        return Ok(());
    };
    let unsettled = query_one(
        tx,
        "SELECT COUNT(*) FROM flue_submissions WHERE instance_id = $1 AND state <> 'settled'",
        &[&instance_id],
        "cannot read submissions",
    )
    .await?;
    rules::check_delete(
        &ConversationKey::new(row.get::<_, String>(0), row.get::<_, String>(1)),
        row.get(2),
        uint(unsettled.get(0)),
    )
}

/// Locks the conversation row and fails with [`FlueError::LeaseLost`] unless `fence` is its
/// current owner.
async fn check_fence(tx: &Transaction<'_>, fence: &Fence) -> Result<()> {
    let current = lock(tx, &fence.key.instance_id()).await?;
    rules::check_fence(
        fence,
        current.as_ref().map(|locked| Ownership {
            owner: locked.owner.as_deref(),
            epoch: locked.epoch,
        }),
    )
}

/// Whether the owner's advisory lock is held (by its live connection), on any node.
async fn owner_alive_in<C: GenericClient + Sync>(client: &C, owner_id: &str) -> Result<bool> {
    let Some(key) = owner_id
        .rsplit_once('-')
        .and_then(|(_, key)| key.parse::<i32>().ok())
    else {
        return Ok(false);
    };
    let key = i64::from(key);
    let namespace = i64::from(LOCK_NAMESPACE);
    Ok(query_one(
        client,
        "SELECT EXISTS (SELECT 1 FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND objsubid = 2
               AND classid::TEXT::BIGINT = $1 AND objid::TEXT::BIGINT = $2
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
        &[&namespace, &key],
        "cannot probe owner liveness",
    )
    .await?
    .get(0))
}

async fn count_unsettled(tx: &Transaction<'_>, instance_id: &str) -> Result<u64> {
    Ok(uint(
        query_one(
            tx,
            "SELECT COUNT(*) FROM flue_submissions
             WHERE instance_id = $1 AND state != 'settled' AND state != 'waiting'",
            &[&instance_id],
            "cannot count submissions",
        )
        .await?
        .get(0),
    ))
}

/// Takes the conversation's next sequence number (the row is locked already).
async fn next_seq(tx: &Transaction<'_>, instance_id: &str) -> Result<Offset> {
    Ok(Offset(uint(
        query_one(
            tx,
            "UPDATE flue_conversations SET head = head + 1,
                last_activity = GREATEST(last_activity, $2)
             WHERE instance_id = $1 RETURNING head",
            &[&instance_id, &int(now_ms())],
            "cannot advance the stream head",
        )
        .await?
        .get(0),
    )))
}

/// An abort request's transaction on Postgres, the conversation's row locked.
struct PostgresAbort<'a> {
    tx: &'a Transaction<'a>,
    instance_id: &'a str,
}

impl txn::AbortTransaction for PostgresAbort<'_> {
    async fn unsettled(&mut self) -> Result<Vec<(String, SubmissionState, u32)>> {
        let rows = query_all(
            self.tx,
            "SELECT submission_id, state, attempts FROM flue_submissions
             WHERE instance_id = $1 AND state <> 'settled' ORDER BY position",
            &[&self.instance_id],
            "cannot read submissions",
        )
        .await?;
        Ok(rows
            .iter()
            .map(|row| {
                (
                    row.get::<_, String>(0),
                    rules::stored_state(row.get(1)),
                    u32::try_from(row.get::<_, i64>(2)).unwrap_or(0),
                )
            })
            .collect())
    }

    async fn mark_abort_requested(&mut self) -> Result<()> {
        execute(
            self.tx,
            "UPDATE flue_submissions SET abort_requested = TRUE
             WHERE instance_id = $1 AND state <> 'settled'",
            &[&self.instance_id],
            "cannot record abort request",
        )
        .await?;
        Ok(())
    }

    async fn push_batch(&mut self, body: &BatchBody) -> Result<Offset> {
        push_batch(self.tx, self.instance_id, None, body).await
    }

    async fn settle(&mut self, settlement: &Settlement) -> Result<Option<Offset>> {
        settle_in(self.tx, self.instance_id, settlement).await
    }
}

/// Records a non-record batch under the next sequence number; returns its offset.
async fn push_batch(
    tx: &Transaction<'_>,
    instance_id: &str,
    submission_id: Option<&str>,
    body: &(impl Serialize + Sync + ?Sized),
) -> Result<Offset> {
    let json = rules::to_json(body, "stream batch")?;
    let offset = next_seq(tx, instance_id).await?;
    execute(
        tx,
        "INSERT INTO flue_stream (instance_id, seq, at, submission_id, session, first_idx,
                                  n_records, body)
         VALUES ($1, $2, $3, $4, NULL, NULL, NULL, $5)",
        &[
            &instance_id,
            &int(offset.0),
            &int(now_ms()),
            &submission_id,
            &json,
        ],
        "cannot insert stream batch",
    )
    .await?;
    Ok(offset)
}

/// The message of submission `submission_id` of conversation `instance_id`, for its
/// `admitted` batch; `None` when there is no such submission.
async fn read_message(
    tx: &Transaction<'_>,
    instance_id: &str,
    submission_id: &str,
) -> Result<Option<DeliveredMessage>> {
    let row = query_opt(
        tx,
        "SELECT message FROM flue_submissions WHERE submission_id = $1 AND instance_id = $2",
        &[&submission_id, &instance_id],
        "cannot read submission",
    )
    .await?;
    row.map(|row| rules::parse_message(submission_id, row.get(0)))
        .transpose()
}

/// Queues the head notification; Postgres sends it when the transaction commits.
async fn announce(tx: &Transaction<'_>, instance_id: &str, head: Offset) -> Result<()> {
    execute(
        tx,
        "SELECT pg_notify($1, $2)",
        &[&NOTIFY_CHANNEL, &payload(instance_id, head)],
        "cannot notify the stream head",
    )
    .await?;
    Ok(())
}

/// Settles an unsettled submission and records the batch; `None` when already settled.
async fn settle_in(
    tx: &Transaction<'_>,
    instance_id: &str,
    settlement: &Settlement,
) -> Result<Option<Offset>> {
    let json = rules::to_json(settlement, "settlement")?;
    let changed = execute(
        tx,
        "UPDATE flue_submissions SET state = 'settled', settlement = $3
         WHERE submission_id = $1 AND instance_id = $2 AND state <> 'settled'",
        &[&settlement.submission_id, &instance_id, &json],
        "cannot settle submission",
    )
    .await?;
    if changed == 0 {
        return Ok(None);
    }
    listing::update(tx, instance_id, |summary| summary.settled(settlement)).await?;
    push_batch(
        tx,
        instance_id,
        Some(&settlement.submission_id),
        &BatchBody::Settled(settlement.clone()),
    )
    .await
    .map(Some)
}

fn submission_from_row(row: &Row) -> Result<SubmissionInfo> {
    SubmissionRow {
        submission_id: row.get(0),
        instance_id: row.get(1),
        position: uint(row.get(2)),
        state: row.get(3),
        message: row.get(4),
        accepted_at: uint(row.get(5)),
        attempts: u32::try_from(row.get::<_, i64>(6)).unwrap_or(u32::MAX),
        first_started_at: row.get::<_, Option<i64>>(7).map(uint),
        input_applied: row.get(8),
        abort_requested: row.get(9),
        idempotency_key: row.get(10),
        settlement: row.get(11),
        durability: row.get(12),
        trace_parent: row.get(13),
    }
    .into_info()
}

fn conversation_from_row(row: &Row) -> Result<ConversationInfo> {
    Ok(ConversationInfo {
        key: ConversationKey::new(row.get::<_, String>(0), row.get::<_, String>(1)),
        uid: row.get(2),
        head: Offset(uint(row.get(3))),
        created_at: uint(row.get(4)),
        owner: row.get(5),
        epoch: uint(row.get(6)),
        unsettled: uint(row.get(7)),
    })
}

fn lease_ms(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}
