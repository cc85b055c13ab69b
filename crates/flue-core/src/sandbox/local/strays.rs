//! The processes a command left running outside its process group, found by a tag in their
//! environment and killed.
//!
//! Killing a command's process group misses whatever left the group: a `setsid` daemon, a job
//! a shell with job control put in a group of its own, a double fork into a new session. So
//! every command of a [`LocalSandbox`](super::LocalSandbox) starts with [`TAG_VAR`] set to a
//! value of its own, which its descendants inherit wherever they move. Once the group is
//! killed, [`kill_tagged`] walks `/proc` for the processes started since the command (pids
//! above its shell's, or all after the pids wrapped around) whose environment, as it was when
//! they started, holds the tag, and kills them; a few rounds, for children forked in between.
//! Each is opened as a `/proc/<pid>` handle first, read and signalled through that handle, so a
//! pid reused meanwhile is never hit. The watchdog does the same in bash when flue dies.
//!
//! Not found: a process that cleared its environment (`env -i`) or runs as another user
//! (`sudo`), and anything another program started on the command's behalf (`systemd-run`, `at`,
//! a tmux server that was already running). This is cleanup, not containment.

use std::fs::File;
use std::io::Read;

use rustix::fs::{Mode, OFlags};
use rustix::process::Signal;

/// The environment variable holding a command's tag.
pub(crate) const TAG_VAR: &str = "FLUE_COMMAND_TAG";

/// Rounds of [`kill_tagged`]: a process forked between a scan and its parent's death is found
/// by the next scan.
const ROUNDS: usize = 8;

/// The most of one process's environment read while looking for the tag.
const MAX_ENVIRON_BYTES: u64 = 1024 * 1024;

/// A new tag (unique: time and random bits).
pub(crate) fn new_tag() -> String {
    crate::util::new_uuid()
}

/// Kills every process started after `shell_pid` whose environment holds `TAG_VAR=tag`;
/// returns how many were killed. Blocking (reads `/proc`): call it off the async runtime.
pub(crate) fn kill_tagged(tag: &str, shell_pid: i32) -> usize {
    let entry = format!("{TAG_VAR}={tag}");
    let own_pid = i32::try_from(std::process::id()).unwrap_or(0);
    let mut killed = 0;
    for _ in 0..ROUNDS {
        let wrapped = last_pid().is_none_or(|last| last < shell_pid);
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return killed;
        };
        let mut found = 0;
        for dir_entry in entries.flatten() {
            let Some(pid) = dir_entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == own_pid || (pid <= shell_pid && !wrapped) {
                continue;
            }
            if kill_if_tagged(pid, entry.as_bytes()) {
                found += 1;
            }
        }
        killed += found;
        if found == 0 {
            break;
        }
    }
    killed
}

/// The last pid handed out in this pid namespace; `None` when the kernel does not say.
fn last_pid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Kills process `pid` when its environment holds `entry`; whether it did.
fn kill_if_tagged(pid: i32, entry: &[u8]) -> bool {
    // The handle pins the process: reads through it fail once it has gone, and the signal
    // sent through it reaches it or nothing, never a process that reused its pid.
    let Ok(dir) = rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(environ) = rustix::fs::openat(
        &dir,
        "environ",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut bytes = Vec::new();
    if File::from(environ)
        .take(MAX_ENVIRON_BYTES)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return false;
    }
    if !bytes.split(|byte| *byte == 0).any(|var| var == entry) {
        return false;
    }
    match rustix::process::pidfd_send_signal(&dir, Signal::KILL) {
        Ok(()) => true,
        // Kernels before 5.1: by pid, which was this process's a moment ago.
        Err(rustix::io::Errno::NOSYS) => nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .is_ok(),
        Err(_) => false,
    }
}
