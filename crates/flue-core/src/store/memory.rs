//! In-memory session store (placeholder until the store work lands).

/// Sessions kept in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {}
