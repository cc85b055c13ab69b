//! The token table: per server and url, replaced on save, gone after clear and forget.

use pretty_assertions::assert_eq;

use super::*;

#[test]
fn tokens_are_kept_per_server_and_url_and_forgotten_by_server() {
    let root = tempfile::tempdir().unwrap();
    let docs = SqliteTokenStore::new(root.path(), "docs", "http://127.0.0.1:1/mcp");
    let moved = SqliteTokenStore::new(root.path(), "docs", "http://127.0.0.1:2/mcp");
    let other = SqliteTokenStore::new(root.path(), "other", "http://127.0.0.1:1/mcp");
    assert_eq!(docs.load().unwrap(), None);
    docs.save("{\"a\":1}").unwrap();
    docs.save("{\"a\":2}").unwrap();
    other.save("{\"b\":1}").unwrap();
    assert_eq!(docs.load().unwrap().as_deref(), Some("{\"a\":2}"));
    assert_eq!(moved.load().unwrap(), None);
    docs.clear().unwrap();
    assert_eq!(docs.load().unwrap(), None);
    docs.save("{\"a\":3}").unwrap();
    moved.save("{\"a\":4}").unwrap();
    assert_eq!(forget(root.path(), "docs").unwrap(), 2);
    assert_eq!(docs.load().unwrap(), None);
    assert_eq!(other.load().unwrap().as_deref(), Some("{\"b\":1}"));
}
