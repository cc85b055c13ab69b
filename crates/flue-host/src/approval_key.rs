//! The key that signs standing approvals ("always" answers): `FLUE_APPROVAL_KEY` from the
//! process environment (64 hex digits or more; the way several nodes of one server share a
//! key), else `approval.key` in the user's flue configuration directory, created readable by
//! the user alone on first use. Never from a workspace's `.env`: a cloned workspace that chose
//! the key could sign approvals into the store it ships.

use std::io::Read as _;
use std::path::Path;

use flue_core::FlueError;
use flue_core::standing::ApprovalKey;

use crate::{Env, HostError, TrustStore};

/// The variable that sets the key.
pub const APPROVAL_KEY_VAR: &str = "FLUE_APPROVAL_KEY";
/// The key file's name in the configuration directory.
const FILE_NAME: &str = "approval.key";

/// The approval key for this process: the variable's, else the configuration directory's,
/// read when first needed and created only when a rule is first granted (a process that never
/// grants one writes nothing); `None` without the variable and without a configuration
/// directory. A variable that is not a key is an error.
pub fn approval_key(env: &Env) -> Result<Option<ApprovalKey>, HostError> {
    if let Some(text) = env.process_value(APPROVAL_KEY_VAR) {
        let key = ApprovalKey::from_hex(&text).map_err(|err| {
            HostError::Core(FlueError::config(format!("{APPROVAL_KEY_VAR}: {err}")))
        })?;
        return Ok(Some(key));
    }
    let Some(store) = TrustStore::for_user(|name| env.process_value(name)) else {
        return Ok(None);
    };
    let dir = store.dir().to_path_buf();
    Ok(Some(ApprovalKey::lazy(Box::new(move |create| {
        key_in(&dir, create).map_err(|err| format!("{}: {err}", dir.join(FILE_NAME).display()))
    }))))
}

/// The key kept in `dir`, created there (0600) with `create` when there is none yet.
fn key_in(dir: &Path, create: bool) -> std::io::Result<Option<Vec<u8>>> {
    let path = dir.join(FILE_NAME);
    if !path.exists() {
        if !create {
            return Ok(None);
        }
        create_key(dir, &path)?;
    }
    let text = std::fs::read_to_string(&path)?;
    hex::decode(text.trim())
        .map(Some)
        .map_err(|err| std::io::Error::other(format!("not a hex key: {err}")))
}

/// Writes a fresh key beside the trust records. Staged then linked into place: two processes
/// starting at once keep the one that landed first, and nobody reads a half-written key.
fn create_key(dir: &Path, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let staged = dir.join(format!("{FILE_NAME}.{}", std::process::id()));
    {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staged)?;
        file.write_all(hex::encode(bytes).as_bytes())?;
        file.sync_all()?;
    }
    let linked = std::fs::hard_link(&staged, path);
    let _ = std::fs::remove_file(&staged);
    match linked {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => Err(err),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
