//! The token table: per server and url, replaced on save, gone after clear and forget, and
//! readable from a file written with the table's original schema.

use pretty_assertions::assert_eq;
use rusqlite::{Connection, params};

use super::*;

#[test]
fn tokens_are_kept_per_server_and_url_and_forgotten_by_server() {
    let root = tempfile::tempdir().unwrap();
    let tokens = McpTokenTable::new(&root.path().join(".flue/flue.db"));
    let (docs, moved, other) = (
        ("docs", "http://127.0.0.1:1/mcp"),
        ("docs", "http://127.0.0.1:2/mcp"),
        ("other", "http://127.0.0.1:1/mcp"),
    );
    assert_eq!(tokens.load(docs.0, docs.1).unwrap(), None);
    tokens.save(docs.0, docs.1, "{\"a\":1}").unwrap();
    tokens.save(docs.0, docs.1, "{\"a\":2}").unwrap();
    tokens.save(other.0, other.1, "{\"b\":1}").unwrap();
    assert_eq!(
        tokens.load(docs.0, docs.1).unwrap().as_deref(),
        Some("{\"a\":2}")
    );
    assert_eq!(tokens.load(moved.0, moved.1).unwrap(), None);
    tokens.clear(docs.0, docs.1).unwrap();
    assert_eq!(tokens.load(docs.0, docs.1).unwrap(), None);
    tokens.save(docs.0, docs.1, "{\"a\":3}").unwrap();
    tokens.save(moved.0, moved.1, "{\"a\":4}").unwrap();
    assert_eq!(tokens.forget("docs").unwrap(), 2);
    assert_eq!(tokens.load(docs.0, docs.1).unwrap(), None);
    assert_eq!(
        tokens.load(other.0, other.1).unwrap().as_deref(),
        Some("{\"b\":1}")
    );
}

#[test]
fn forgetting_in_a_workspace_without_a_store_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join(".flue/flue.db");
    assert_eq!(McpTokenTable::new(&path).forget("docs").unwrap(), 0);
    assert!(!path.exists());
}

#[test]
fn tokens_written_by_earlier_releases_stay_readable() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("flue.db");
    // The table as releases before this module wrote it, from their own connection.
    let connection = Connection::open(&path).unwrap();
    connection
        .execute_batch(
            "CREATE TABLE mcp_oauth_tokens (
                server TEXT NOT NULL,
                url TEXT NOT NULL,
                document TEXT NOT NULL,
                updated_at INTEGER NOT NULL,
                PRIMARY KEY (server, url)
            )",
        )
        .unwrap();
    connection
        .execute(
            "INSERT INTO mcp_oauth_tokens VALUES (?1, ?2, ?3, 1)",
            params![
                "docs",
                "https://mcp.example/mcp",
                "{\"access_token\":\"old\"}"
            ],
        )
        .unwrap();
    drop(connection);
    let tokens = McpTokenTable::new(&path);
    assert_eq!(
        tokens
            .load("docs", "https://mcp.example/mcp")
            .unwrap()
            .as_deref(),
        Some("{\"access_token\":\"old\"}")
    );
}
