//! Group commit: one writer thread runs the pending writes of every conversation in one
//! transaction and syncs the file once for all of them.
//!
//! A write is a closure over a [`Transaction`]. [`Writer::write`] sends it to the thread and
//! awaits the answer. The thread takes every request waiting in the channel (up to
//! [`MAX_BATCH`]), opens one `BEGIN IMMEDIATE` transaction on the store's write connection and
//! runs each request inside its own `SAVEPOINT`: a request that fails (a fencing or version
//! check, a constraint) is rolled back to its savepoint alone and answered with its own error,
//! while the others go on. Then the thread commits once — one WAL fsync under
//! `synchronous=FULL` — and only after `COMMIT` returns does it answer the requests, so nothing
//! is acknowledged that a crash could lose. When the commit fails, every request that had
//! succeeded is answered with the commit's error instead.
//!
//! Requests run in the order they were sent, each seeing the writes of those before it, so a
//! batch is equivalent to running them one after another as separate transactions; it only
//! shares their fsync. While the thread waits for the disk, new requests queue up, so the batch
//! size follows the load: one request alone is committed at once.
//!
//! Each request says how it is committed ([`Commit`], decided by the store rules). A batch
//! with a [`Commit::Sync`] request commits under `synchronous=FULL` (the WAL is synced before
//! any request is answered); a batch of [`Commit::WithNext`] requests alone commits under
//! `synchronous=NORMAL`: committed and visible, safe from a process crash, and synced by the
//! next FULL commit, which syncs the whole append-only WAL and so every frame before its own.
//!
//! Requests sent with [`Writer::write_first`] (admissions: a caller waits for them) run before
//! the others of their batch, so an admission never waits for the work of a batch of appends
//! before its commit. Requests that share a batch were all waiting at once, none answered, so
//! any order of them is one a caller could have seen.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use flue_core::store::rules::Commit;
use flue_core::{FlueError, Result};

/// The most requests one transaction takes; bounds the wait of the first one in a batch.
const MAX_BATCH: usize = 512;

/// The handle to a store's writer thread; stops and joins it on drop.
pub(super) struct Writer {
    sender: Option<Sender<Box<dyn Request>>>,
    thread: Option<JoinHandle<()>>,
    counts: Arc<CommitCounts>,
}

/// How many batches the writer committed, by kind (see [`super::CommitStats`]).
#[derive(Debug, Default)]
pub(super) struct CommitCounts {
    pub(super) synced: AtomicU64,
    pub(super) unsynced: AtomicU64,
    /// The WAL file's length right after the last synced commit (0 before it).
    pub(super) synced_journal_len: AtomicU64,
}

impl Writer {
    /// Starts the writer thread on `connection` (shared with the store's other writes, which
    /// take the mutex for their own transactions).
    /// `journal` is the WAL file of a file store, whose length is noted after each synced
    /// commit.
    pub(super) fn start(
        connection: Arc<Mutex<Connection>>,
        journal: Option<PathBuf>,
    ) -> Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let counts = Arc::new(CommitCounts::default());
        let thread_counts = Arc::clone(&counts);
        let thread = std::thread::Builder::new()
            .name("flue-sqlite-writer".to_owned())
            .spawn(move || run(&connection, &receiver, &thread_counts, journal.as_deref()))
            .map_err(|err| FlueError::store("cannot start the store's writer thread", err))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
            counts,
        })
    }

    /// The batches committed so far: synced, and not synced on their own; and the WAL's
    /// length after the last synced one.
    pub(super) fn counts(&self) -> (u64, u64, u64) {
        (
            self.counts.synced.load(Ordering::Acquire),
            self.counts.unsynced.load(Ordering::Acquire),
            self.counts.synced_journal_len.load(Ordering::Acquire),
        )
    }

    /// Runs `op` in the next batch's transaction and returns its result once that transaction
    /// committed as `commit` says. An `Err` from `op` rolls back only what `op` wrote.
    pub(super) async fn write<R, F>(&self, commit: Commit, op: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<R> + Send + 'static,
    {
        self.send(op, commit, false).await
    }

    /// Like [`Writer::write`], but runs `op` before the other requests of its batch.
    pub(super) async fn write_first<R, F>(&self, commit: Commit, op: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<R> + Send + 'static,
    {
        self.send(op, commit, true).await
    }

    async fn send<R, F>(&self, op: F, commit: Commit, first: bool) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<R> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let request = Op {
            op,
            reply,
            first,
            commit,
        };
        let sent = self
            .sender
            .as_ref()
            .is_some_and(|sender| sender.send(Box::new(request)).is_ok());
        if !sent {
            return Err(writer_stopped());
        }
        answer.await.unwrap_or_else(|_| Err(writer_stopped()))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop once it answered what it has.
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn writer_stopped() -> FlueError {
    FlueError::Store {
        message: "the store's writer thread stopped; reopen the store".to_owned(),
        source: None,
    }
}

/// A queued write, type-erased.
trait Request: Send {
    /// True when it runs before the others of its batch.
    fn first(&self) -> bool;
    /// How it must be committed.
    fn commit(&self) -> Commit;
    /// Runs the write inside the batch's transaction; the answer is held until the commit.
    fn run(self: Box<Self>, tx: &Transaction<'_>) -> Box<dyn Answer>;
    /// Answers without running (the batch's transaction could not be opened or was lost).
    fn fail(self: Box<Self>, err: FlueError);
}

/// A write's result, waiting for its batch to commit.
trait Answer: Send {
    fn succeeded(&self) -> bool;
    /// Sends the result, or `commit_error` in place of a success when the commit failed.
    fn send(self: Box<Self>, commit_error: Option<&str>);
}

struct Op<F, R> {
    op: F,
    reply: oneshot::Sender<Result<R>>,
    first: bool,
    commit: Commit,
}

impl<F, R> Request for Op<F, R>
where
    R: Send + 'static,
    F: FnOnce(&Transaction<'_>) -> Result<R> + Send + 'static,
{
    fn first(&self) -> bool {
        self.first
    }

    fn commit(&self) -> Commit {
        self.commit
    }

    fn run(self: Box<Self>, tx: &Transaction<'_>) -> Box<dyn Answer> {
        let Op { op, reply, .. } = *self;
        let result = catch_unwind(AssertUnwindSafe(|| op(tx))).unwrap_or_else(|_| {
            Err(FlueError::Store {
                message: "a store write panicked; it was rolled back".to_owned(),
                source: None,
            })
        });
        Box::new(Reply { result, reply })
    }

    fn fail(self: Box<Self>, err: FlueError) {
        let _ = self.reply.send(Err(err));
    }
}

struct Reply<R> {
    result: Result<R>,
    reply: oneshot::Sender<Result<R>>,
}

impl<R: Send> Answer for Reply<R> {
    fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    fn send(self: Box<Self>, commit_error: Option<&str>) {
        let result = match (self.result, commit_error) {
            (Ok(_), Some(message)) => Err(FlueError::Store {
                message: format!("cannot commit the write: {message}"),
                source: None,
            }),
            (result, _) => result,
        };
        // The caller may have gone away (its future dropped); the write stands regardless.
        let _ = self.reply.send(result);
    }
}

/// The thread's loop: batch, run, commit, answer — until the store is dropped.
fn run(
    connection: &Mutex<Connection>,
    receiver: &Receiver<Box<dyn Request>>,
    counts: &CommitCounts,
    journal: Option<&Path>,
) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(request) => batch.push(request),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        // Stable: the first requests keep their order, and so do the others.
        batch.sort_by_key(|request| !request.first());
        let sync = batch.iter().any(|request| request.commit() == Commit::Sync);
        let mut connection = connection.lock().unwrap_or_else(PoisonError::into_inner);
        // The level cannot change inside a transaction, so it is set around the batch; the
        // store's other writes (plain appends, audit) find FULL again afterwards. A level that
        // cannot be lowered stays FULL: slower, never less durable.
        let relaxed = !sync
            && connection
                .pragma_update(None, "synchronous", "NORMAL")
                .is_ok();
        run_batch(&mut connection, batch, || {
            if relaxed {
                counts.unsynced.fetch_add(1, Ordering::AcqRel);
                return;
            }
            // Noted before any request is answered, so whoever learns of a synced write finds
            // the stats counting it.
            if let Some(len) = journal.and_then(|journal| std::fs::metadata(journal).ok()) {
                counts
                    .synced_journal_len
                    .store(len.len(), Ordering::Release);
            }
            counts.synced.fetch_add(1, Ordering::AcqRel);
        });
        if relaxed {
            restore_full(&connection);
        }
    }
}

/// Puts the connection back to `synchronous=FULL` after a batch that did not sync.
fn restore_full(connection: &Connection) {
    if connection
        .pragma_update(None, "synchronous", "FULL")
        .is_err()
    {
        // Setting a pragma outside a transaction fails only if the connection is unusable;
        // a rollback leaves it in autocommit, where a second try succeeds.
        let _ = connection.execute_batch("ROLLBACK");
        let _ = connection.pragma_update(None, "synchronous", "FULL");
    }
}

/// Runs `batch` in one transaction and answers its requests; `committed` runs between a
/// successful commit and the answers.
fn run_batch(connection: &mut Connection, batch: Vec<Box<dyn Request>>, committed: impl FnOnce()) {
    if !connection.is_autocommit() {
        // A rollback that failed on an earlier batch left a transaction open; end it, or no
        // batch could begin again.
        let _ = connection.execute_batch("ROLLBACK");
    }
    let tx = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => {
            let message = err.to_string();
            for request in batch {
                request.fail(FlueError::Store {
                    message: format!("cannot begin write transaction: {message}"),
                    source: None,
                });
            }
            return;
        }
    };
    let mut answers = Vec::with_capacity(batch.len());
    // Set when a savepoint could not be closed: what that request wrote (or failed to undo)
    // is unknown, so the whole batch is rolled back and fails.
    let mut broken = false;
    for request in batch {
        // Some errors (a full disk, an I/O error) make SQLite roll the whole transaction
        // back; what follows would then run outside it, so it is failed instead.
        if broken || tx.is_autocommit() || tx.execute_batch("SAVEPOINT request").is_err() {
            request.fail(FlueError::Store {
                message: "the write transaction was rolled back by an earlier error; retry"
                    .to_owned(),
                source: None,
            });
            continue;
        }
        let answer = request.run(&tx);
        let closed = if answer.succeeded() {
            tx.execute_batch("RELEASE request")
        } else {
            tx.execute_batch("ROLLBACK TO request; RELEASE request")
        };
        broken |= closed.is_err();
        answers.push(answer);
    }
    let commit_error = if broken {
        // Dropping the transaction rolls it back.
        drop(tx);
        Some("a savepoint could not be closed, so the batch was rolled back".to_owned())
    } else {
        tx.commit().err().map(|err| err.to_string())
    };
    if commit_error.is_none() {
        committed();
    }
    for answer in answers {
        answer.send(commit_error.as_deref());
    }
}

#[cfg(test)]
mod tests;
