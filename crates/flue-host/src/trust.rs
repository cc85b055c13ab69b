//! Workspace trust: what a workspace would run on the user's machine or send the user's
//! secrets to ([`TrustManifest`]), and whether the user trusts that ([`TrustPolicy`],
//! [`TrustStore`]).
//!
//! Agents are files, shared as git repositories. A workspace someone else wrote may declare
//! hook commands, MCP server commands, host sandboxes, schedules, and endpoints or variable
//! names that would carry the user's keys elsewhere. None of that runs, connects or is
//! expanded until the user trusts the workspace, and trust covers exactly the items listed:
//! a new or changed item needs trust again (as direnv's `allow` does for a changed `.envrc`).
//! Trust is recorded in the user's own configuration directory, never in the workspace.

mod manifest;
mod store;

#[cfg(test)]
mod tests;

pub use manifest::{TrustItem, TrustKind, TrustManifest};
pub use store::{TrustRecord, TrustStore};

use std::path::Path;

use crate::HostError;

/// Whether a workspace's items may run: how a process decides.
#[derive(Clone, Debug)]
pub enum TrustPolicy {
    /// Everything runs: the process was told to trust the workspace (`--trust`,
    /// `FLUE_TRUST=1`), or an embedder loads a workspace of its own.
    Granted,
    /// What the user recorded with `flue trust` decides, read anew at each check so that a
    /// running `flue dev` sees trust given from another terminal.
    Recorded(TrustStore),
    /// Nothing of the manifest runs (no configuration directory to read trust from).
    Denied,
}

impl TrustPolicy {
    /// What is not covered of `manifest` for the workspace at `root`: empty when it may run.
    /// A trust file that cannot be read counts as no trust (the error is the reason shown).
    pub fn uncovered<'a>(
        &self,
        root: &Path,
        manifest: &'a TrustManifest,
    ) -> Result<Vec<&'a TrustItem>, HostError> {
        if manifest.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Self::Granted => Ok(Vec::new()),
            Self::Denied => Ok(manifest.items().iter().collect()),
            Self::Recorded(store) => store.uncovered(root, manifest),
        }
    }

    /// `Ok` when every item of `manifest` may run, else [`HostError::Untrusted`] listing
    /// what needs trust.
    pub fn require(&self, root: &Path, manifest: &TrustManifest) -> Result<(), HostError> {
        let uncovered = self.uncovered(root, manifest)?;
        if uncovered.is_empty() {
            return Ok(());
        }
        let changed = match self {
            Self::Recorded(store) => store.record(root)?.is_some(),
            _ => false,
        };
        Err(HostError::Untrusted {
            root: root.to_path_buf(),
            changed,
            needs: uncovered.iter().map(ToString::to_string).collect(),
        })
    }

    /// Whether the policy trusts everything (no record is read).
    pub fn is_granted(&self) -> bool {
        matches!(self, Self::Granted)
    }
}
