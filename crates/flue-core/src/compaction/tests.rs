//! Unit tests of compaction.
