//! Unit tests of the namespace command lines.

use std::path::Path;

use pretty_assertions::assert_eq;

use super::{bwrap_argv, unshare_argv};

fn strings(argv: &[std::ffi::OsString]) -> Vec<String> {
    argv.iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn bwrap_binds_the_workspace_after_the_private_tmp() {
    let argv = bwrap_argv(
        Path::new("bwrap"),
        Path::new("/tmp/ws"),
        Path::new("/tmp/ws/sub"),
        "ls",
        false,
    );
    assert_eq!(
        strings(&argv),
        [
            "bwrap",
            "--die-with-parent",
            "--unshare-all",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--bind",
            "/tmp/ws",
            "/tmp/ws",
            "--chdir",
            "/tmp/ws/sub",
            "--",
            "bash",
            "-c",
            "ls"
        ]
    );
    let with_network = bwrap_argv(
        Path::new("bwrap"),
        Path::new("/ws"),
        Path::new("/ws"),
        "ls",
        true,
    );
    assert_eq!(strings(&with_network)[3], "--share-net");
}

#[test]
fn unshare_drops_the_network_namespace_only_when_asked() {
    let argv = strings(&unshare_argv(
        Path::new("unshare"),
        Path::new("/ws"),
        Path::new("/ws/sub"),
        "ls",
        false,
    ));
    assert!(argv.contains(&"--net".to_owned()), "{argv:?}");
    assert_eq!(
        argv[argv.len() - 4..],
        ["flue-isolated", "/ws", "/ws/sub", "ls"]
    );
    let with_network = strings(&unshare_argv(
        Path::new("unshare"),
        Path::new("/ws"),
        Path::new("/ws"),
        "ls",
        true,
    ));
    assert!(
        !with_network.contains(&"--net".to_owned()),
        "{with_network:?}"
    );
}
