//! Unit tests of the group-commit writer: a failing write rolls back alone, later writes in a
//! batch see earlier ones, first writes run before the others of their batch, a batch of
//! writes that ride along commits without a sync and leaves `synchronous=FULL` behind.

use std::pin::Pin;
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Waker};
use std::time::Duration;

use rusqlite::{Connection, params};

use super::Writer;
use flue_core::FlueError;
use flue_core::store::rules::Commit;

fn table() -> Arc<Mutex<Connection>> {
    let connection = Connection::open_in_memory().unwrap();
    connection
        .execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY)")
        .unwrap();
    Arc::new(Mutex::new(connection))
}

fn stored(connection: &Mutex<Connection>) -> Vec<i64> {
    let connection = connection.lock().unwrap();
    let mut select = connection.prepare("SELECT n FROM t ORDER BY n").unwrap();
    select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_write_in_a_batch_rolls_back_alone() {
    let connection = table();
    let writer = Arc::new(Writer::start(Arc::clone(&connection), None).unwrap());
    // Holding the connection keeps the thread from committing, so the writes queue up and
    // run in one transaction.
    let held = connection.lock().unwrap();
    let mut writes = Vec::new();
    for n in 0..20_i64 {
        let writer = Arc::clone(&writer);
        writes.push(tokio::spawn(async move {
            writer
                .write(Commit::Sync, move |tx| {
                    tx.execute("INSERT INTO t (n) VALUES (?1), (?2)", params![n, n + 100])
                        .map_err(|err| FlueError::store("insert", err))?;
                    if n % 2 == 1 {
                        return Err(FlueError::Store {
                            message: format!("write {n} refused"),
                            source: None,
                        });
                    }
                    Ok(n)
                })
                .await
        }));
    }
    // Blocking this worker is fine: the writes run on the other one.
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    for (n, write) in (0..20_i64).zip(writes) {
        match write.await.unwrap() {
            Ok(value) => assert_eq!((n % 2, value), (0, n)),
            Err(err) => {
                assert_eq!(n % 2, 1);
                assert_eq!(err.to_string(), format!("store error: write {n} refused"));
            }
        }
    }
    let even: Vec<i64> = (0..20).filter(|n| n % 2 == 0).collect();
    let expected: Vec<i64> = even
        .iter()
        .copied()
        .chain(even.iter().map(|n| n + 100))
        .collect();
    assert_eq!(stored(&connection), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_in_one_batch_see_those_before_them() {
    let connection = table();
    let writer = Arc::new(Writer::start(Arc::clone(&connection), None).unwrap());
    let held = connection.lock().unwrap();
    let mut writes = Vec::new();
    for _ in 0..10 {
        let writer = Arc::clone(&writer);
        writes.push(tokio::spawn(async move {
            writer
                .write(Commit::Sync, |tx| {
                    tx.query_row(
                        "INSERT INTO t (n) SELECT COALESCE(MAX(n), 0) + 1 FROM t RETURNING n",
                        [],
                        |row| row.get::<_, i64>(0),
                    )
                    .map_err(|err| FlueError::store("insert", err))
                })
                .await
        }));
    }
    // Blocking this worker is fine: the writes run on the other one.
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    let mut numbers = Vec::new();
    for write in writes {
        numbers.push(write.await.unwrap().unwrap());
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=10).collect::<Vec<i64>>());
    assert_eq!(stored(&connection), (1..=10).collect::<Vec<i64>>());
}

/// `future` after its first poll: a write's request is in the writer's channel once polled.
fn sent<F: Future>(future: F) -> Pin<Box<F>> {
    let mut future = Box::pin(future);
    let mut context = Context::from_waker(Waker::noop());
    assert!(future.as_mut().poll(&mut context).is_pending());
    future
}

#[tokio::test]
async fn a_first_write_runs_before_the_others_of_its_batch() {
    let connection = table();
    let writer = Writer::start(Arc::clone(&connection), None).unwrap();
    let next = |tx: &rusqlite::Transaction<'_>| {
        tx.query_row(
            "INSERT INTO t (n) SELECT COALESCE(MAX(n), 0) + 1 FROM t RETURNING n",
            [],
            |row| row.get::<_, i64>(0),
        )
        .map_err(|err| FlueError::store("insert", err))
    };
    // The thread takes this one alone and holds its batch open until released; the next
    // three queue behind it meanwhile and make up the second batch.
    let (running, is_running) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let alone = sent(writer.write(Commit::Sync, move |tx| {
        running.send(()).unwrap();
        released.recv().unwrap();
        next(tx)
    }));
    is_running.recv().unwrap();
    let ordinary = [
        sent(writer.write(Commit::Sync, next)),
        sent(writer.write(Commit::Sync, next)),
    ];
    let first = sent(writer.write_first(Commit::Sync, next));
    release.send(()).unwrap();
    assert_eq!(alone.await.unwrap(), 1);
    assert_eq!(first.await.unwrap(), 2);
    let mut others = Vec::new();
    for write in ordinary {
        others.push(write.await.unwrap());
    }
    assert_eq!(others, [3, 4]);
}

#[tokio::test]
async fn a_batch_of_writes_that_ride_along_commits_unsynced_and_restores_full() {
    let connection = table();
    let synchronous = |connection: &Mutex<Connection>| -> i64 {
        connection
            .lock()
            .unwrap()
            .pragma_query_value(None, "synchronous", |row| row.get(0))
            .unwrap()
    };
    // 2 is FULL, 1 NORMAL.
    connection
        .lock()
        .unwrap()
        .pragma_update(None, "synchronous", "FULL")
        .unwrap();
    let writer = Writer::start(Arc::clone(&connection), None).unwrap();
    let insert = |n: i64| {
        move |tx: &rusqlite::Transaction<'_>| {
            // The level in force while the batch runs.
            let level: i64 = tx
                .pragma_query_value(None, "synchronous", |row| row.get(0))
                .map_err(|err| FlueError::store("pragma", err))?;
            tx.execute("INSERT INTO t (n) VALUES (?1)", params![n])
                .map_err(|err| FlueError::store("insert", err))?;
            Ok(level)
        }
    };
    assert_eq!(writer.write(Commit::WithNext, insert(1)).await.unwrap(), 1);
    assert_eq!(synchronous(&connection), 2);
    assert_eq!(writer.write(Commit::Sync, insert(2)).await.unwrap(), 2);
    assert_eq!(writer.counts().0, 1, "synced batches");
    assert_eq!(writer.counts().1, 1, "unsynced batches");
    assert_eq!(stored(&connection), [1, 2]);
}
