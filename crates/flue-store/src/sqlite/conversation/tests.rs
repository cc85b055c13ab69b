//! The recovery scan's cost against the number of settled conversations.

use rusqlite::{Connection, StatementStatus};

use super::*;

/// A store file holding `settled` conversations with one settled submission each (written in
/// bulk, as months of traffic would leave them) and `pending` with a queued one.
fn store_with(settled: u64, pending: u64) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let store = SqliteStore::open(&path).unwrap();
    let fill = Connection::open(&path).unwrap();
    fill.execute_batch(&format!(
        "BEGIN;
         WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {total})
         INSERT INTO conversations (instance_id, agent, id, uid, head, created_at, owner,
                                    epoch, lease_until, next_position)
             SELECT 'i' || n, 'agent', 'c' || n, 'u' || n, 1, n, NULL, 0, 0, 1 FROM k;
         WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {total})
         INSERT INTO submissions (submission_id, instance_id, position, state, message,
                                  accepted_at, attempts, input_applied, abort_requested,
                                  admitted_offset)
             SELECT 's' || n, 'i' || n, 0, CASE WHEN n > {settled} THEN 'queued' ELSE 'settled' END,
                    '{{}}', n, 1, 1, 0, 0 FROM k;
         COMMIT;",
        total = settled + pending,
    ))
    .unwrap();
    (dir, store)
}

/// Rows the recovery scan returns and the virtual-machine steps it took to find them.
fn scan(store: &SqliteStore) -> (usize, i32) {
    let connection = store.reader();
    let mut select = connection
        .prepare(&format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE {PENDING}"
        ))
        .unwrap();
    let rows = select.query_map([], |_| Ok(())).unwrap().count();
    (rows, select.get_status(StatementStatus::VmStep))
}

#[test]
fn the_recovery_scan_costs_the_same_whatever_the_number_of_settled_conversations() {
    let (_small_dir, small) = store_with(100, 3);
    let (_large_dir, large) = store_with(20_000, 3);
    let (small_rows, small_steps) = scan(&small);
    let (large_rows, large_steps) = scan(&large);
    assert_eq!((small_rows, large_rows), (3, 3));
    assert_eq!(
        small_steps, large_steps,
        "the scan read settled rows: {small_steps} steps at 100 settled conversations, \
         {large_steps} at 20,000"
    );
}

#[tokio::test]
async fn pending_conversations_finds_what_needs_work_among_settled_ones() {
    let (_dir, store) = store_with(1_000, 2);
    let pending = store.pending_conversations().await.unwrap();
    let ids: Vec<&str> = pending.iter().map(|info| info.key.id.as_str()).collect();
    assert_eq!(ids, ["c1001", "c1002"]);
    assert!(
        pending.iter().all(|info| info.unsettled == 1),
        "{pending:?}"
    );
}
