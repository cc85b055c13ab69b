//! Rewinding files: putting the workspace back as it was before a turn of a conversation, from
//! the audit log and the trash alone, so it works from any process after any restart.
//!
//! The changes undone are the audit entries of the conversation (every session of it, tasks
//! included) made at or after the start of turn `N` (the `at` of its `User` record; turns as
//! [`crate::fork::turn_starts`] numbers them). Per file, the rewind restores the content the first of
//! those changes found (`sha256_before`: from the trash, or from another file of the plan
//! holding it; none means the file did not exist, so it is deleted), and only if the file still
//! holds what the last of them wrote (`sha256_after`): a file changed outside the agent since
//! is a **conflict**, and a plan with a conflict writes nothing. A file already holding its
//! target is left alone, so a rewind cut off by a crash completes when run again.
//!
//! A rewind is itself audited: each file it changes gets an entry with tool `rewind` in the
//! session `rewind:<id>`, and the content it replaces goes to the trash first. Undoing a rewind
//! is a rewind of those entries ([`RewindTarget::Undo`]). The entry is written before the
//! change is made, so a rewind cut off by a crash has an entry for every file it touched; the
//! next rewind of such a file accepts it as the crash left it (as before, or holding a prefix
//! of what was being written) rather than calling it a conflict.
//!
//! Only files inside the workspace root are rewound: entries of a virtual or remote sandbox
//! (paths outside the root) are listed as skipped. Changes made by shell commands are not in
//! the audit log and are not rewound.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use flue_protocol::DEFAULT_SESSION;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{FlueError, Result};
use crate::fork::turn_starts;
use crate::sandbox::{RmOptions, Sandbox};
use crate::store::{
    AuditEntry, DynAuditStore, DynSessionStore, SessionKey, TrashEntry, TrashReason,
};
use crate::util::{new_ulid, now_ms};

/// The tool name rewinds record in the audit log.
pub const REWIND_TOOL: &str = "rewind";

/// The session name prefix of a rewind's audit entries: `rewind:<id>`.
pub const REWIND_SESSION_PREFIX: &str = "rewind:";

/// What to rewind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RewindTarget {
    /// The workspace as it was before turn `turn` (1-based) of the conversation.
    Turn {
        /// The turn.
        turn: u64,
    },
    /// Undo the rewind `id` (put back what it replaced).
    Undo {
        /// The rewind's id.
        id: String,
    },
}

/// What a rewind does to one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RewindAction {
    /// Write the earlier content back (the file was changed or deleted).
    Restore,
    /// Delete the file (the agent created it).
    Delete,
    /// Nothing: the file already holds its earlier content.
    Unchanged,
    /// Refused: the file was changed outside the agent since (or its earlier content is no
    /// longer in the trash).
    Conflict,
}

/// One file of a rewind plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindFile {
    /// The file, relative to the workspace root.
    pub path: String,
    /// What the rewind does.
    pub action: RewindAction,
    /// sha256 the agent last wrote there (`None`: it left no file).
    pub expected_sha256: Option<String>,
    /// sha256 there now (`None`: no file).
    pub current_sha256: Option<String>,
    /// sha256 the rewind puts back (`None`: no file).
    pub target_sha256: Option<String>,
    /// Why a conflict is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A rewind: what it will do (a dry run) or did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindPlan {
    /// The rewind's id (its audit entries' session is `rewind:<id>`).
    pub id: String,
    /// The conversation's instance id.
    pub instance_id: String,
    /// What was asked.
    pub target: RewindTarget,
    /// Audit entries undone.
    pub entries: usize,
    /// One per file, by path.
    pub files: Vec<RewindFile>,
    /// Paths outside the workspace root (a virtual or remote sandbox's files), not rewound.
    pub skipped: Vec<String>,
    /// Whether the changes were made (false for a dry run and for a refused plan).
    pub applied: bool,
}

impl RewindPlan {
    /// The files in conflict.
    pub fn conflicts(&self) -> impl Iterator<Item = &RewindFile> {
        self.files
            .iter()
            .filter(|file| file.action == RewindAction::Conflict)
    }

    /// The plan as lines: one per file, then the skipped paths.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let short = |sha: Option<&String>| {
            sha.map_or_else(|| "-".to_owned(), |sha| sha.chars().take(12).collect())
        };
        for file in &self.files {
            let action = match file.action {
                RewindAction::Restore => "restore",
                RewindAction::Delete => "delete",
                RewindAction::Unchanged => "unchanged",
                RewindAction::Conflict => "conflict",
            };
            // Writing to a String cannot fail.
            let _ = write!(
                out,
                "{action:<9}  {}  ({} -> {})",
                file.path,
                short(file.current_sha256.as_ref()),
                short(file.target_sha256.as_ref())
            );
            if let Some(reason) = &file.reason {
                let _ = write!(out, ": {reason}");
            }
            out.push('\n');
        }
        for path in &self.skipped {
            let _ = writeln!(out, "skipped    {path}  (not in the workspace)");
        }
        out
    }
}

/// The workspace a rewind writes to, and who it is recorded as.
pub struct RewindWorkspace<'a> {
    /// The workspace: a sandbox whose `cwd` is the workspace root, as the agent's local
    /// sandbox sees it (a `LocalSandbox` at the root).
    pub sandbox: &'a dyn Sandbox,
    /// The store holding the conversation's sessions.
    pub sessions: &'a dyn DynSessionStore,
    /// Its audit log and trash.
    pub audit: &'a dyn DynAuditStore,
    /// The agent name the audit entries carry.
    pub agent: &'a str,
}

/// Plans a rewind of conversation `instance_id` and, unless `dry_run` or a file is in
/// conflict, makes it. Returns the plan (`applied` says whether it was made).
///
/// Errors: `invalid_request` for a turn out of range or an unknown rewind id;
/// `session_not_found` for a conversation without a root session; store and sandbox errors.
/// Conflicts are not errors: they are in the plan, which is then not applied.
pub async fn rewind(
    workspace: &RewindWorkspace<'_>,
    instance_id: &str,
    target: RewindTarget,
    dry_run: bool,
) -> Result<RewindPlan> {
    let all = workspace.audit.list_audit(instance_id).await?;
    let selected: Vec<&AuditEntry> = match &target {
        RewindTarget::Turn { turn } => {
            let since = turn_start(workspace.sessions, instance_id, *turn).await?;
            all.iter().filter(|entry| entry.at >= since).collect()
        }
        RewindTarget::Undo { id } => {
            let session = format!("{REWIND_SESSION_PREFIX}{id}");
            let of_it: Vec<&AuditEntry> = all
                .iter()
                .filter(|entry| entry.tool == REWIND_TOOL && entry.session == session)
                .collect();
            if of_it.is_empty() {
                return Err(FlueError::InvalidRequest {
                    message: format!(
                        "conversation {instance_id:?} has no rewind {id:?}; `flue audit --id` \
                         lists rewinds (tool `rewind`, session `rewind:<id>`)"
                    ),
                });
            }
            of_it
        }
    };
    let root = workspace.sandbox.cwd().trim_end_matches('/').to_owned();
    let mut skipped = Vec::new();
    // Per path: (content before the first change, content after the last).
    let mut changes: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    // Per path whose last change is a rewind's: (its before, its after). A rewind records a
    // change before making it, so a crash may have left the file on either side of it, or
    // (cut off inside the write) holding a prefix of its after.
    let mut in_flight: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    let entries = selected.iter().filter(|entry| entry.ok).count();
    for entry in selected.iter().filter(|entry| entry.ok) {
        for (path, before, after) in file_changes(entry) {
            let Some(relative) = inside(&root, &path) else {
                if !skipped.contains(&path) {
                    skipped.push(path);
                }
                continue;
            };
            if entry.tool == REWIND_TOOL {
                in_flight.insert(relative.clone(), (before.clone(), after.clone()));
            } else {
                in_flight.remove(&relative);
            }
            changes
                .entry(relative)
                .and_modify(|change| change.1.clone_from(&after))
                .or_insert((before, after));
        }
    }
    // Current contents, by path and by sha256 (a content a plan restores may be another
    // file's current one: a moved file).
    let mut current: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    for relative in changes.keys() {
        let abs = format!("{root}/{relative}");
        let content = match workspace.sandbox.read_file_bytes(&abs).await {
            Ok(bytes) => Some(bytes),
            Err(err) if err.kind() == "not_found" => None,
            Err(err) => return Err(err),
        };
        current.insert(relative.clone(), content);
    }
    let trash = workspace.audit.list_trash(instance_id).await?;
    let mut files = Vec::new();
    let mut contents: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (relative, (target_sha, expected_sha)) in &changes {
        let now = current.get(relative).cloned().flatten();
        let current_sha = now.as_deref().map(sha256_hex);
        let mut file = RewindFile {
            path: relative.clone(),
            action: RewindAction::Unchanged,
            expected_sha256: expected_sha.clone(),
            current_sha256: current_sha.clone(),
            target_sha256: target_sha.clone(),
            reason: None,
        };
        if current_sha == *target_sha {
            files.push(file);
            continue;
        }
        if current_sha != *expected_sha
            && !cut_off_rewind(
                workspace.audit,
                instance_id,
                &trash,
                in_flight.get(relative),
                now.as_deref(),
            )
            .await?
        {
            file.action = RewindAction::Conflict;
            file.reason = Some(match &current_sha {
                Some(_) => "changed outside the agent since its last write".to_owned(),
                None => "deleted outside the agent since its last write".to_owned(),
            });
            files.push(file);
            continue;
        }
        match target_sha {
            None => file.action = RewindAction::Delete,
            Some(sha) => {
                let found = match find_content(workspace.audit, instance_id, &trash, sha).await? {
                    Some(content) => Some(content),
                    None => current
                        .values()
                        .flatten()
                        .find(|content| sha256_hex(content) == *sha)
                        .cloned(),
                };
                match found {
                    Some(content) => {
                        contents.insert(relative.clone(), content);
                        file.action = RewindAction::Restore;
                    }
                    None => {
                        file.action = RewindAction::Conflict;
                        file.reason = Some(format!(
                            "its earlier content (sha256 {sha}) is not in the trash"
                        ));
                    }
                }
            }
        }
        files.push(file);
    }
    let mut plan = RewindPlan {
        id: new_ulid(),
        instance_id: instance_id.to_owned(),
        target,
        entries,
        files,
        skipped,
        applied: false,
    };
    if dry_run || plan.conflicts().next().is_some() {
        return Ok(plan);
    }
    for file in &plan.files {
        apply(workspace, &plan, &root, file, &current, &contents).await?;
    }
    plan.applied = true;
    Ok(plan)
}

/// The `at` of turn `turn`'s `User` record in the root session.
async fn turn_start(store: &dyn DynSessionStore, instance_id: &str, turn: u64) -> Result<u64> {
    let Some(log) = store
        .load(&SessionKey::new(instance_id, DEFAULT_SESSION), 0)
        .await?
    else {
        return Err(FlueError::SessionNotFound {
            session: format!("{instance_id}/{DEFAULT_SESSION}"),
        });
    };
    let starts = turn_starts(&log.records);
    let found = usize::try_from(turn.saturating_sub(1))
        .ok()
        .filter(|_| turn > 0)
        .and_then(|idx| starts.get(idx))
        .and_then(|idx| log.records.get(*idx));
    match found {
        Some(stored) => Ok(stored.at),
        None => Err(FlueError::InvalidRequest {
            message: format!(
                "cannot rewind to turn {turn}: conversation {instance_id:?} has {} turn(s); pass \
                 --to 1 to {} (`flue session show` numbers them)",
                starts.len(),
                starts.len()
            ),
        }),
    }
}

/// Whether `current` is what a rewind cut off by a crash left: the last change of the file is
/// that rewind's `(before, after)` (recorded before it was made) and the file holds its
/// `before` (the write never happened) or a prefix of its `after` (the write was cut short;
/// the earlier content is in the trash, so nothing is lost by rewinding over it).
async fn cut_off_rewind(
    audit: &dyn DynAuditStore,
    instance_id: &str,
    trash: &[TrashEntry],
    last: Option<&(Option<String>, Option<String>)>,
    current: Option<&[u8]>,
) -> Result<bool> {
    let Some((before, after)) = last else {
        return Ok(false);
    };
    if current.map(sha256_hex) == *before {
        return Ok(true);
    }
    let (Some(current), Some(after)) = (current, after) else {
        return Ok(false);
    };
    Ok(find_content(audit, instance_id, trash, after)
        .await?
        .is_some_and(|content| content.starts_with(current)))
}

/// The files one audit entry changed: (absolute path, sha256 before, sha256 after).
fn file_changes(entry: &AuditEntry) -> Vec<(String, Option<String>, Option<String>)> {
    match (&entry.path, &entry.destination_path) {
        // A restore names its trash entry's path; the file it made is the destination.
        (_, Some(destination)) if entry.operation == "restore" => {
            vec![(destination.clone(), None, entry.sha256_after.clone())]
        }
        (Some(path), Some(destination)) => vec![
            (path.clone(), entry.sha256_before.clone(), None),
            (destination.clone(), None, entry.sha256_after.clone()),
        ],
        (Some(path), None) => vec![(
            path.clone(),
            entry.sha256_before.clone(),
            entry.sha256_after.clone(),
        )],
        (None, _) => Vec::new(),
    }
}

/// `path` relative to `root` when it lies below it.
fn inside(root: &str, path: &str) -> Option<String> {
    let rest = path.strip_prefix(root)?.strip_prefix('/')?;
    (!rest.is_empty()).then(|| rest.to_owned())
}

/// Content with sha256 `sha` from the conversation's trash, newest first.
async fn find_content(
    audit: &dyn DynAuditStore,
    instance_id: &str,
    trash: &[TrashEntry],
    sha: &str,
) -> Result<Option<Vec<u8>>> {
    for entry in trash.iter().rev().filter(|entry| entry.sha256 == sha) {
        if let Some(found) = audit.get_trash(instance_id, &entry.id).await? {
            return Ok(Some(found.content));
        }
    }
    Ok(None)
}

/// Makes one file's change: the replaced content to the trash, the write, its audit entry.
async fn apply(
    workspace: &RewindWorkspace<'_>,
    plan: &RewindPlan,
    root: &str,
    file: &RewindFile,
    current: &BTreeMap<String, Option<Vec<u8>>>,
    contents: &BTreeMap<String, Vec<u8>>,
) -> Result<()> {
    let session = format!("{REWIND_SESSION_PREFIX}{}", plan.id);
    let abs = format!("{root}/{}", file.path);
    let replaced = current.get(&file.path).cloned().flatten();
    let operation = match (&file.action, &replaced) {
        (RewindAction::Delete, _) => "delete",
        (RewindAction::Restore, Some(_)) => "write",
        (RewindAction::Restore, None) => "create",
        (RewindAction::Unchanged | RewindAction::Conflict, _) => return Ok(()),
    };
    if let Some(old) = &replaced {
        let reason = if file.action == RewindAction::Delete {
            TrashReason::Deleted
        } else {
            TrashReason::Overwritten
        };
        let entry = TrashEntry {
            id: new_ulid(),
            instance_id: plan.instance_id.clone(),
            session: session.clone(),
            agent: workspace.agent.to_owned(),
            tool: REWIND_TOOL.to_owned(),
            path: file.path.clone(),
            sha256: sha256_hex(old),
            size: old.len() as u64,
            trashed_at: now_ms(),
            reason,
        };
        workspace.audit.put_trash(&entry, old).await?;
    }
    // The entry goes first: a crash after it leaves the file as before, or (inside the write)
    // holding a prefix of its new content, and the next rewind of the file recognises both
    // (`cut_off_rewind`); a crash before it leaves only a trash entry.
    let entry = AuditEntry {
        id: new_ulid(),
        at: now_ms(),
        instance_id: plan.instance_id.clone(),
        session,
        agent: workspace.agent.to_owned(),
        tool: REWIND_TOOL.to_owned(),
        operation: operation.to_owned(),
        path: Some(abs.clone()),
        sha256_before: file.current_sha256.clone(),
        sha256_after: file.target_sha256.clone(),
        ok: true,
        ..AuditEntry::default()
    };
    workspace.audit.append_audit(&entry).await?;
    match file.action {
        RewindAction::Delete => {
            workspace
                .sandbox
                .rm(
                    &abs,
                    RmOptions {
                        recursive: false,
                        force: true,
                    },
                )
                .await
        }
        _ => {
            let content = contents.get(&file.path).map_or(&[][..], Vec::as_slice);
            // Renamed over the file: a crash leaves the old content or the new.
            workspace.sandbox.replace_file(&abs, content).await
        }
    }
}

/// Lowercase hex sha256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}
