//! The audit log and the trash: what the file tools changed, and the content they replaced.
//!
//! Both live in the runtime's store, not in the sandbox, so nothing the agent runs (its shell
//! included) can erase them. Every modifying file-tool call, successful or not, appends one
//! [`AuditEntry`] (`apply_patch` appends one per file it changed). Content a tool deletes or
//! overwrites goes to the trash first, as a [`TrashEntry`] whose bytes are stored once per
//! sha256. Nothing is purged automatically.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::util::BoxFuture;

/// One modifying file-tool call (or one file of an `apply_patch` call), as the audit log keeps it.
///
/// Serialized with snake_case field names; unknown fields are ignored when reading, so entries
/// written by a newer flue-core stay readable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Entry id (a ULID).
    pub id: String,
    /// When the call finished, in milliseconds since the epoch.
    pub at: u64,
    /// Agent instance id.
    pub instance_id: String,
    /// Session name.
    pub session: String,
    /// Agent name.
    pub agent: String,
    /// Tool name (`write_file`, `apply_patch`, ...).
    pub tool: String,
    /// What was done: `create`, `write`, `edit`, `delete`, `restore`, `move`, and for
    /// `apply_patch` `add`, `update`, `delete` or `move` per file, `patch` for a failed call.
    pub operation: String,
    /// The file acted on (absolute sandbox path), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Where the file went (moves and restores), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_path: Option<String>,
    /// sha256 of the content before the call; `None` when the file did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256_before: Option<String>,
    /// sha256 of the content after the call; `None` when the file is gone (or the call failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256_after: Option<String>,
    /// Unified diff of the change, cut at [`AUDIT_DIFF_LIMIT`] bytes; `None` for binary content
    /// and failed calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// True when `diff` was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diff_truncated: bool,
    /// Whether the call succeeded.
    pub ok: bool,
    /// The error kind of a failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// The error message of a failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// The largest diff, in bytes, an [`AuditEntry`] keeps.
pub const AUDIT_DIFF_LIMIT: usize = 64 * 1024;

/// Why content went to the trash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TrashReason {
    /// The file left its path: `delete_file`, a patch's `*** Delete File:`, or the source of
    /// a patch's `*** Move to:`.
    #[default]
    Deleted,
    /// The file was overwritten, edited or patched in place; this is the old content.
    Overwritten,
}

/// One trashed file: where it was, when, and the sha256 of its content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrashEntry {
    /// Trash id (a ULID); `restore_file` and `flue trash restore` take it.
    pub id: String,
    /// Agent instance id.
    pub instance_id: String,
    /// Session name.
    pub session: String,
    /// Agent name.
    pub agent: String,
    /// Tool that trashed it.
    pub tool: String,
    /// The file's path: relative to the working directory of the tool call when inside it
    /// (so a virtual run's entry restores onto the real workspace), else absolute. Entries
    /// written before this rule hold the absolute sandbox path; both restore.
    pub path: String,
    /// sha256 of the content; the content is stored once per sha256.
    pub sha256: String,
    /// Content size in bytes.
    pub size: u64,
    /// When it was trashed, in milliseconds since the epoch.
    pub trashed_at: u64,
    /// Why.
    pub reason: TrashReason,
}

/// A trash entry with its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrashedFile {
    /// The entry.
    pub entry: TrashEntry,
    /// The content.
    pub content: Vec<u8>,
}

/// Durable storage of the audit log and the trash.
///
/// Called by the built-in file tools through [`ToolContext::audit`](crate::tool::ToolContext): a
/// tool puts replaced content in the trash before it changes a file (a failure there stops the
/// call before anything changes) and appends an audit entry once the call is over, whatever its
/// outcome. `flue audit` and `flue trash` read them back. Entries are never removed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an audit store",
    label = "implement `flue_core::AuditStore` for this type"
)]
pub trait AuditStore: Send + Sync {
    /// Appends one entry to the audit log.
    fn append_audit(&self, entry: &AuditEntry) -> impl Future<Output = Result<()>> + Send;

    /// The audit log of an agent instance, oldest first.
    fn list_audit(&self, instance_id: &str)
    -> impl Future<Output = Result<Vec<AuditEntry>>> + Send;

    /// Stores `content` in the trash under `entry` (whose `sha256` must be that of `content`).
    fn put_trash(
        &self,
        entry: &TrashEntry,
        content: &[u8],
    ) -> impl Future<Output = Result<()>> + Send;

    /// The trash entry `trash_id` of an agent instance with its content, or `None`.
    fn get_trash(
        &self,
        instance_id: &str,
        trash_id: &str,
    ) -> impl Future<Output = Result<Option<TrashedFile>>> + Send;

    /// The trash of an agent instance, oldest first.
    fn list_trash(&self, instance_id: &str)
    -> impl Future<Output = Result<Vec<TrashEntry>>> + Send;

    /// Every instance's audit entries, oldest first (`flue audit` over a whole store).
    fn list_all_audit(&self) -> impl Future<Output = Result<Vec<AuditEntry>>> + Send;

    /// Every instance's trash entries, by time trashed, then id (`flue trash list`).
    fn list_all_trash(&self) -> impl Future<Output = Result<Vec<TrashEntry>>> + Send;
}

/// [`AuditStore`] with boxed futures, so that it can be used as `Arc<dyn DynAuditStore>`.
///
/// Implemented for every [`AuditStore`]; implement that trait, not this one.
pub trait DynAuditStore: Send + Sync {
    /// See [`AuditStore::append_audit`].
    fn append_audit<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<()>>;
    /// See [`AuditStore::list_audit`].
    fn list_audit<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<AuditEntry>>>;
    /// See [`AuditStore::put_trash`].
    fn put_trash<'a>(
        &'a self,
        entry: &'a TrashEntry,
        content: &'a [u8],
    ) -> BoxFuture<'a, Result<()>>;
    /// See [`AuditStore::get_trash`].
    fn get_trash<'a>(
        &'a self,
        instance_id: &'a str,
        trash_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<TrashedFile>>>;
    /// See [`AuditStore::list_trash`].
    fn list_trash<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<TrashEntry>>>;
    /// See [`AuditStore::list_all_audit`].
    fn list_all_audit(&self) -> BoxFuture<'_, Result<Vec<AuditEntry>>>;
    /// See [`AuditStore::list_all_trash`].
    fn list_all_trash(&self) -> BoxFuture<'_, Result<Vec<TrashEntry>>>;
}

impl<T: AuditStore> DynAuditStore for T {
    fn append_audit<'a>(&'a self, entry: &'a AuditEntry) -> BoxFuture<'a, Result<()>> {
        Box::pin(AuditStore::append_audit(self, entry))
    }

    fn list_audit<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<AuditEntry>>> {
        Box::pin(AuditStore::list_audit(self, instance_id))
    }

    fn put_trash<'a>(
        &'a self,
        entry: &'a TrashEntry,
        content: &'a [u8],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(AuditStore::put_trash(self, entry, content))
    }

    fn get_trash<'a>(
        &'a self,
        instance_id: &'a str,
        trash_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<TrashedFile>>> {
        Box::pin(AuditStore::get_trash(self, instance_id, trash_id))
    }

    fn list_trash<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Vec<TrashEntry>>> {
        Box::pin(AuditStore::list_trash(self, instance_id))
    }

    fn list_all_audit(&self) -> BoxFuture<'_, Result<Vec<AuditEntry>>> {
        Box::pin(AuditStore::list_all_audit(self))
    }

    fn list_all_trash(&self) -> BoxFuture<'_, Result<Vec<TrashEntry>>> {
        Box::pin(AuditStore::list_all_trash(self))
    }
}
