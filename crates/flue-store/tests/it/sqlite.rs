//! SQLite only: durability across reopening, the WAL kept between opens, two stores on one
//! file, migrations (from every released schema version, and a newer one refused), damaged
//! files, corrupt records.

use std::sync::Arc;

use flue_core::{
    store::{DynAuditStore, DynSessionStore},
    util::now_ms,
};
use flue_store::SqliteStore;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::audit_contract::{entry, trash_entry};
use crate::store_contract::{
    AGENT, conflict, every_record_kind, key, outcome, race_at, records, user,
};

#[tokio::test]
async fn sqlite_data_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep/er/flue.db");
    let first_log = {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.path(), Some(path.as_path()));
        store.create(&key("chat")).await.unwrap();
        store.create(&key("empty")).await.unwrap();
        store
            .append(&key("chat"), 0, &every_record_kind())
            .await
            .unwrap();
        store.load(&key("chat"), 0).await.unwrap()
    };
    assert!(path.is_file());

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), first_log);
    let names: Vec<String> = store
        .list(AGENT)
        .await
        .unwrap()
        .into_iter()
        .map(|summary| summary.session)
        .collect();
    assert_eq!(names, ["chat", "empty"]);
    assert_eq!(
        outcome(store.append(&key("chat"), 7, &[user("more")]).await),
        "ok 8"
    );
}

/// Closing the store leaves the WAL in place (no checkpoint, no delete: the five fsyncs of
/// removing it and creating it again on the next run), and the next open reads it.
#[tokio::test]
async fn sqlite_keeps_its_journal_between_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let journal = dir.path().join("flue.db-wal");
    let first_log = {
        let store = SqliteStore::open(&path).unwrap();
        store.create(&key("chat")).await.unwrap();
        store
            .append(&key("chat"), 0, &every_record_kind())
            .await
            .unwrap();
        store.load(&key("chat"), 0).await.unwrap()
    };
    let kept = std::fs::metadata(&journal).map_or(0, |meta| meta.len());
    assert!(kept > 0, "the WAL was removed at close");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load(&key("chat"), 0).await.unwrap(), first_log);
    drop(store);
    // Reused, not truncated and grown again.
    assert!(std::fs::metadata(&journal).unwrap().len() >= kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_stores_on_one_file_never_interleave() {
    const N_ROUNDS: u64 = 100;
    const N_WRITERS: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let stores: [Arc<dyn DynSessionStore>; 2] = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    stores[0].create(&key("chat")).await.unwrap();
    assert_eq!(
        outcome(stores[1].create(&key("chat")).await),
        "session_already_exists chat"
    );

    // Each round every writer appends two records at the same version; one wins, the rest
    // conflict, and the log grows by exactly the winner's two records.
    let mut expected = Vec::new();
    for round in 0..N_ROUNDS {
        let version = round * 2;
        let outcomes = race_at(N_WRITERS, version, |writer| Arc::clone(&stores[writer % 2])).await;
        let winners: Vec<usize> = (0..N_WRITERS)
            .filter(|&writer| outcomes[writer] == format!("ok {}", version + 2))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:#?}");
        let expected_loser = conflict("chat", version, version + 2);
        for (writer, outcome) in outcomes.iter().enumerate() {
            if writer != winners[0] {
                assert_eq!(*outcome, expected_loser, "round {round}, writer {writer}");
            }
        }
        expected.extend([user(&format!("writer {}", winners[0])), user("again")]);
    }

    for store in &stores {
        assert_eq!(
            records(&**store, &key("chat")).await,
            Some((N_ROUNDS * 2, expected.clone()))
        );
    }
}

/// What migration v8 added (listings), dropped to bring a database back to version 7.
const UNDO_V8: &str = "DROP INDEX conversations_by_activity;
    DROP INDEX conversations_by_agent_activity;
    DROP TABLE conversations_fts;
    ALTER TABLE conversations DROP COLUMN last_activity;
    ALTER TABLE conversations DROP COLUMN summary;
    ALTER TABLE conversations DROP COLUMN search_rowid;
    DROP INDEX sessions_unmanaged_roots;
    ALTER TABLE sessions DROP COLUMN managed;";

/// A database as a version-7 flue left it (before listing summaries): migration v8 computes
/// each conversation's summary from its rows, so it lists, pages and searches as a new one.
#[tokio::test]
async fn a_version_7_database_gets_its_listing_summaries_from_its_rows() {
    use flue_core::store::listing::{ListedStatus, ListingQuery};
    use flue_core::store::{Acquire, Admission, ConversationStore, FencedAppend, SessionKey};
    use flue_core::{
        AssistantContent, AssistantMessage, ConversationKey, DeliveredMessage, DispatchOptions,
        DurabilityConfig, ModelRef, Outcome, Record, Settlement, StopReason, StoredRecord, Usage,
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let admission = |id: &str, text: &str| Admission {
        key: ConversationKey::new("agent", id),
        submission_id: flue_core::util::new_ulid(),
        new_uid: flue_core::util::new_ulid(),
        message: DeliveredMessage::user(text),
        accepted_at: now_ms(),
        options: DispatchOptions::default(),
    };
    {
        let store = SqliteStore::open(&path).unwrap();
        let receipt = store
            .admit(&admission("old", "Plan the invoice export"))
            .await
            .unwrap();
        let owner = store.register_owner().await.unwrap();
        let key = ConversationKey::new("agent", "old");
        let Acquire::Owned(fence) = store
            .acquire(&key, owner.owner_id(), std::time::Duration::from_secs(30))
            .await
            .unwrap()
        else {
            panic!("not owned");
        };
        store
            .claim_next(&fence, &DurabilityConfig::default())
            .await
            .unwrap();
        let reply = Record::Assistant(AssistantMessage {
            content: vec![AssistantContent::Text { text: "ok".into() }],
            interrupted: false,
            model: ModelRef {
                provider: "p".into(),
                id: "m".into(),
            },
            usage: Usage {
                input_tokens: 11,
                output_tokens: 5,
                cost_usd: Some(0.5),
                ..Usage::default()
            },
            stop_reason: StopReason::EndTurn,
        });
        store
            .append_fenced(FencedAppend {
                fence: &fence,
                submission_id: Some(&receipt.submission_id),
                applies_input: true,
                resumes_waiting: false,
                session: &SessionKey::new(key.instance_id(), "default"),
                expected_version: 0,
                records: &[
                    user("Plan the invoice export"),
                    StoredRecord::new(reply, now_ms()),
                ],
            })
            .await
            .unwrap();
        let settlement = Settlement {
            submission_id: receipt.submission_id,
            outcome: Outcome::Failed,
            text: None,
            data: None,
            error: None,
            attempts: 1,
            settled_at: now_ms(),
        };
        assert!(store.settle(&fence, &settlement).await.unwrap());
        let next = now_ms();
        while now_ms() == next {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        store
            .admit(&admission("later", "hello there"))
            .await
            .unwrap();
    }
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(&format!("{UNDO_V8} PRAGMA user_version = 7;"))
        .unwrap();
    drop(raw);

    let store = SqliteStore::open(&path).unwrap();
    let rows = store
        .list_conversations(&ListingQuery::new(10))
        .await
        .unwrap();
    let seen: Vec<_> = rows
        .iter()
        .map(|row| {
            (
                row.key.id.as_str(),
                row.status,
                row.summary.messages,
                row.summary.usage.input_tokens,
                row.summary.usage.cost_usd,
                row.summary.first_message.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "later",
                ListedStatus::Running,
                0,
                0,
                None,
                Some("hello there")
            ),
            (
                "old",
                ListedStatus::Failed,
                2,
                11,
                Some(0.5),
                Some("Plan the invoice export")
            ),
        ]
    );
    assert!(rows[0].last_activity > rows[1].last_activity && rows[1].last_activity > 0);
    let found = store
        .list_conversations(&ListingQuery::new(10).with_text(Some("INVOICE")))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key.id, "old");
    // Written after the migration, it is summarized by the write.
    store.admit(&admission("old", "and now?")).await.unwrap();
    let rows = store
        .list_conversations(&ListingQuery::new(1))
        .await
        .unwrap();
    assert_eq!(
        (
            rows[0].key.id.as_str(),
            rows[0].summary.last_message.as_deref()
        ),
        ("old", Some("and now?"))
    );
}

#[tokio::test]
async fn sqlite_migration_sets_user_version_and_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    drop(SqliteStore::open(&path).unwrap());

    let raw = rusqlite::Connection::open(&path).unwrap();
    let user_version: i64 = raw
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    let journal_mode: String = raw
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    let mut select = raw
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let tables: Vec<String> = select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        (user_version, journal_mode.as_str(), tables),
        (
            8,
            "wal",
            [
                "audit",
                "conversations",
                "conversations_fts",
                "conversations_fts_config",
                "conversations_fts_content",
                "conversations_fts_data",
                "conversations_fts_docsize",
                "conversations_fts_idx",
                "memory_notes",
                "memory_notes_fts",
                "memory_notes_fts_config",
                "memory_notes_fts_content",
                "memory_notes_fts_data",
                "memory_notes_fts_docsize",
                "memory_notes_fts_idx",
                "memory_subjects",
                "records",
                "sessions",
                "stream",
                "submission_messages",
                "submissions",
                "trash",
                "trash_blobs"
            ]
            .map(str::to_owned)
            .to_vec()
        )
    );
}

#[tokio::test]
async fn a_version_4_database_keeps_its_submissions_with_no_trace_parent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let key = flue_core::ConversationKey::new("agent", "old");
    let admitted = {
        let store = SqliteStore::open(&path).unwrap();
        flue_core::store::ConversationStore::admit(
            &store,
            &flue_core::store::Admission {
                key: key.clone(),
                submission_id: flue_core::util::new_ulid(),
                new_uid: flue_core::util::new_ulid(),
                message: flue_core::DeliveredMessage::user("from before"),
                accepted_at: now_ms(),
                options: flue_core::DispatchOptions::default(),
            },
        )
        .await
        .unwrap()
    };
    // Back to the version-4 schema, as an older flue left it.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(
        "UPDATE submissions SET message = (SELECT m.message FROM submission_messages m
             WHERE m.submission_id = submissions.submission_id);
         DROP TABLE submission_messages;
         ALTER TABLE submissions DROP COLUMN trace_parent;
         DROP INDEX conversations_by_activity;
         DROP INDEX conversations_by_agent_activity;
         DROP TABLE conversations_fts;
         ALTER TABLE conversations DROP COLUMN last_activity;
         ALTER TABLE conversations DROP COLUMN summary;
         ALTER TABLE conversations DROP COLUMN search_rowid;
         DROP INDEX sessions_unmanaged_roots;
         ALTER TABLE sessions DROP COLUMN managed;
         DROP TABLE memory_notes_fts;
         DROP TABLE memory_notes;
         DROP TABLE memory_subjects;
         PRAGMA user_version = 4;",
    )
    .unwrap();
    drop(raw);

    let store = SqliteStore::open(&path).unwrap();
    let info = flue_core::store::ConversationStore::submission(&store, &admitted.submission_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (info.message, info.trace_parent),
        (flue_core::DeliveredMessage::user("from before"), None)
    );
    let user_version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, 8);
}

/// A database as a version-6 flue left it (before memory notes): its conversations stay, it
/// is migrated to version 7, and notes are written and found with FTS5 on it.
#[tokio::test]
async fn a_version_6_database_gets_memory_notes_and_keeps_its_sessions() {
    use flue_core::store::{NoteLimits, NoteStore, search_terms};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let key = flue_core::store::SessionKey::new("helper:c1", "default");
    {
        let store = SqliteStore::open(&path).unwrap();
        flue_core::store::SessionStore::create(&store, &key)
            .await
            .unwrap();
        flue_core::store::SessionStore::append(&store, &key, 0, &[user("kept")])
            .await
            .unwrap();
    }
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(&format!(
        "{UNDO_V8}
             DROP TABLE memory_notes_fts;
             DROP TABLE memory_notes;
             DROP TABLE memory_subjects;
             PRAGMA user_version = 6;"
    ))
    .unwrap();
    drop(raw);

    let store = SqliteStore::open(&path).unwrap();
    let log = flue_core::store::SessionStore::load(&store, &key, 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(log.records, vec![user("kept")]);
    store.bind_subject("helper:c1", "alice").await.unwrap();
    let note = flue_core::store::Note {
        id: "n1".into(),
        agent: "helper".into(),
        subject: "alice".into(),
        text: "Prefers tea over coffee".into(),
        created_at: 1,
    };
    store.put_note(&note, &NoteLimits::default()).await.unwrap();
    drop(store);
    // Another process opening the file finds both.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.subject_of("helper:c1").await.unwrap().as_deref(),
        Some("alice")
    );
    assert_eq!(
        store
            .search_notes("helper", "alice", &search_terms("tea"), 5)
            .await
            .unwrap(),
        vec![note]
    );
    let user_version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, 8);
}

#[tokio::test]
async fn sqlite_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    drop(SqliteStore::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();

    let err = SqliteStore::open(&path).unwrap_err();
    let shown = path.display();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "store_error",
            format!(
                "store error: cannot open the conversation store {shown}: database schema \
                 version 99 is newer than this flue-core supports (8); upgrade flue to read it, \
                 or move it aside (`mv {shown} {shown}.damaged`) and run again to start an \
                 empty store"
            )
        )
    );
}

#[tokio::test]
async fn sqlite_a_damaged_or_unusable_file_is_named_with_its_cause_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let shown = path.display();
    std::fs::write(&path, "not a database, just text\n".repeat(200)).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "store_error",
            format!(
                "store error: cannot open the conversation store {shown}: cannot set the journal \
                 mode: file is not a database; the file is damaged or is not a flue store: move \
                 it aside (`mv {shown} {shown}.damaged`) and run again to start an empty store"
            )
        )
    );

    // A real store whose pages were cut off is damaged too.
    std::fs::remove_file(&path).unwrap();
    {
        let store = SqliteStore::open(&path).unwrap();
        for idx in 0..50 {
            let key = key(&format!("s{idx}"));
            store.create(&key).await.unwrap();
            store
                .append(&key, 0, &[user(&"x".repeat(2000))])
                .await
                .unwrap();
        }
    }
    // The WAL stays after the store closes: move its pages into the file first.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let _ = std::fs::remove_file(dir.path().join("flue.db-wal"));
    let _ = std::fs::remove_file(dir.path().join("flue.db-shm"));
    match SqliteStore::open(&path) {
        Err(err) => {
            assert!(
                err.to_string().contains(&format!("{shown}: ")) && err.to_string().contains("mv "),
                "{err}"
            );
        }
        // SQLite only reads the pages it needs: opening may work, reading then fails.
        Ok(store) => {
            let mut failed = 0;
            for idx in 0..50 {
                failed += usize::from(store.load(&key(&format!("s{idx}")), 0).await.is_err());
            }
            assert!(failed > 0, "a store cut to a third still read back whole");
        }
    }

    // A folder where the file should be.
    let folder = dir.path().join("folder.db");
    std::fs::create_dir(&folder).unwrap();
    let err = SqliteStore::open(&folder).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "store error: cannot open the conversation store {}: ",
            folder.display()
        )) && message.ends_with(
            "check that this user can read and write the file and its folder (and that the \
             folder is on a writable disk)"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn sqlite_corrupt_record_is_reported_with_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let store = SqliteStore::open(&path).unwrap();
    store.create(&key("chat")).await.unwrap();
    store
        .append(&key("chat"), 0, &[user("1"), user("2")])
        .await
        .unwrap();

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "INSERT INTO records (instance_id, session, idx, record) VALUES (?1, 'chat', 2, '{oops')",
        [AGENT],
    )
    .unwrap();
    raw.execute("UPDATE sessions SET version = 3 WHERE session = 'chat'", [])
        .unwrap();

    assert_eq!(
        outcome(store.load(&key("chat"), 0).await),
        "corrupt_record chat #2"
    );
    assert_eq!(
        outcome(store.load(&key("chat"), 2).await),
        "corrupt_record chat #2"
    );
    // Loading only what comes after the bad record still works.
    let head = store.load(&key("chat"), 3).await.unwrap().unwrap();
    assert_eq!((head.version, head.records), (3, vec![]));

    // A record of an unknown type is corrupt too, not a panic.
    raw.execute(
        "UPDATE records SET record = ?1 WHERE idx = 2",
        [json!({"v": 1, "at": 1, "type": "hologram"}).to_string()],
    )
    .unwrap();
    assert_eq!(
        outcome(store.load(&key("chat"), 1).await),
        "corrupt_record chat #2"
    );

    // A record written by a newer format is refused rather than misread.
    raw.execute(
        "UPDATE records SET record = ?1 WHERE idx = 2",
        [json!({"v": 99, "at": 1, "type": "user", "content": []}).to_string()],
    )
    .unwrap();
    let err = store.load(&key("chat"), 2).await.unwrap_err();
    assert!(
        err.to_string().contains("newer than this flue supports"),
        "{err}"
    );
}

#[tokio::test]
async fn sqlite_in_memory_store_has_no_path() {
    let store = SqliteStore::open_in_memory().unwrap();
    assert_eq!(store.path(), None);
    assert_eq!(format!("{store:?}"), "SqliteStore { path: None, .. }");
    let dir = tempfile::tempdir().unwrap();
    let on_disk = SqliteStore::open(&dir.path().join("x.db")).unwrap();
    assert_eq!(
        format!("{on_disk:?}"),
        format!(
            "SqliteStore {{ path: Some({:?}), .. }}",
            dir.path().join("x.db")
        )
    );
}

#[tokio::test]
async fn sqlite_keeps_the_audit_log_and_trash_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.append_audit(&entry("a", "i1", true)).await.unwrap();
        store
            .put_trash(&trash_entry("t", "i1", b"x"), b"x")
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.list_audit("i1").await.unwrap(),
        vec![entry("a", "i1", true)]
    );
    assert_eq!(
        store
            .get_trash("i1", "t")
            .await
            .unwrap()
            .map(|found| found.content),
        Some(b"x".to_vec())
    );
}

#[tokio::test]
async fn a_version_1_database_is_migrated_without_losing_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    {
        // The v1 schema, as a database written before the audit log existed.
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute_batch(
            "CREATE TABLE sessions (instance_id TEXT NOT NULL, session TEXT NOT NULL,
                version INTEGER NOT NULL, created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL, PRIMARY KEY (instance_id, session)) WITHOUT ROWID;
             CREATE TABLE records (instance_id TEXT NOT NULL, session TEXT NOT NULL,
                idx INTEGER NOT NULL, record TEXT NOT NULL,
                PRIMARY KEY (instance_id, session, idx),
                FOREIGN KEY (instance_id, session) REFERENCES sessions (instance_id, session)
                    ON DELETE CASCADE) WITHOUT ROWID;
             INSERT INTO sessions VALUES ('i1', 'chat', 0, 1, 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store
            .list("i1")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.session)
            .collect::<Vec<_>>(),
        ["chat"]
    );
    store.append_audit(&entry("a", "i1", true)).await.unwrap();
    assert_eq!(store.list_audit("i1").await.unwrap().len(), 1);
}

/// An admitted message is stored once, in a row of its own that is never rewritten: the
/// `admitted` batch refers to its submission and the submission's updates leave the message
/// alone; a stream read puts the message back. A version-5 database (the message in the
/// submission row and in the batch, as an older flue wrote both) still reads the same.
#[tokio::test]
async fn an_admitted_message_is_stored_once_and_an_older_database_still_reads() {
    use flue_core::store::{Admission, ConversationStore};
    use flue_core::{BatchBody, DeliveredMessage, DispatchOptions, Offset};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flue.db");
    let key = flue_core::ConversationKey::new("agent", "once");
    let text = "a message stored once ".repeat(1000);
    let message = DeliveredMessage::user(text.clone());
    let store = SqliteStore::open(&path).unwrap();
    let receipt = store
        .admit(&Admission {
            key: key.clone(),
            submission_id: flue_core::util::new_ulid(),
            new_uid: flue_core::util::new_ulid(),
            message: message.clone(),
            accepted_at: now_ms(),
            options: DispatchOptions::default(),
        })
        .await
        .unwrap();
    let page = store.read_stream(&key, Offset::START, 10).await.unwrap();
    let admitted = page
        .batches
        .iter()
        .find(|batch| batch.offset == receipt.offset)
        .unwrap()
        .clone();
    let BatchBody::Admitted {
        message: read_back,
        submission_id,
        accepted_at,
    } = &admitted.body
    else {
        panic!("not an admitted batch: {admitted:?}");
    };
    assert_eq!(
        (read_back, submission_id),
        (&message, &receipt.submission_id)
    );
    let info = store.submission(submission_id).await.unwrap().unwrap();
    assert_eq!(info.message, message);

    let raw = rusqlite::Connection::open(&path).unwrap();
    let holding: Vec<String> = raw
        .prepare(
            "SELECT 'stream' FROM stream WHERE instr(body, ?1) > 0
             UNION ALL SELECT 'submissions' FROM submissions WHERE instr(message, ?1) > 0
             UNION ALL SELECT 'submission_messages' FROM submission_messages
                 WHERE instr(message, ?1) > 0",
        )
        .unwrap()
        .query_map([&text], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        holding,
        ["submission_messages"],
        "where the message is stored"
    );

    // Back to version 5, as an older flue left it: the message in the submission row and in
    // the admitted batch.
    let old_batch = serde_json::to_string(&BatchBody::Admitted {
        submission_id: submission_id.clone(),
        message: message.clone(),
        accepted_at: *accepted_at,
    })
    .unwrap();
    raw.execute(
        "UPDATE stream SET body = ?1 WHERE seq = ?2",
        rusqlite::params![old_batch, i64::try_from(receipt.offset.0).unwrap()],
    )
    .unwrap();
    raw.execute(
        "UPDATE submissions SET message = ?1",
        [serde_json::to_string(&message).unwrap()],
    )
    .unwrap();
    raw.execute_batch(&format!(
        "{UNDO_V8} DROP TABLE submission_messages; DROP TABLE memory_notes_fts;
             DROP TABLE memory_notes; DROP TABLE memory_subjects; PRAGMA user_version = 5;"
    ))
    .unwrap();
    drop(raw);
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.read_stream(&key, Offset::START, 10).await.unwrap(),
        page
    );
    assert_eq!(
        store.submission(submission_id).await.unwrap().unwrap(),
        info
    );
}
