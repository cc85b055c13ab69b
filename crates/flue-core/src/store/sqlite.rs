//! SQLite session store (placeholder until the store work lands).

/// Sessions in a SQLite file.
#[derive(Debug, Default)]
pub struct SqliteStore {}
