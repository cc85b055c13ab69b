//! Unit tests of the namespace command lines.

use std::path::Path;

use pretty_assertions::assert_eq;

use super::{Mask, bwrap_argv, masks, unshare_argv};

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
        &[],
    );
    assert_eq!(
        strings(&argv),
        [
            "bwrap",
            "--die-with-parent",
            "--unshare-all",
            "--cap-drop",
            "ALL",
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
        &[],
    );
    assert_eq!(strings(&with_network)[5], "--share-net");
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
        argv[argv.len() - 5..],
        ["flue-isolated", "/ws", "/ws/sub", "ls", "unshare"]
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

#[test]
fn bwrap_covers_the_store_and_the_secrets_after_binding_the_workspace() {
    let masks = [
        Mask {
            path: "/ws/.env".into(),
            is_dir: false,
        },
        Mask {
            path: "/ws/.flue".into(),
            is_dir: true,
        },
    ];
    let argv = strings(&bwrap_argv(
        Path::new("bwrap"),
        Path::new("/ws"),
        Path::new("/ws"),
        "ls",
        false,
        &masks,
    ));
    let bind = argv.iter().position(|arg| arg == "--bind").unwrap();
    assert_eq!(
        argv[bind..bind + 11],
        [
            "--bind",
            "/ws",
            "/ws",
            "--ro-bind",
            "/dev/null",
            "/ws/.env",
            "--tmpfs",
            "/ws/.flue",
            "--remount-ro",
            "/ws/.flue",
            "--chdir"
        ]
    );
}

#[test]
fn the_masks_are_the_protected_entries_of_the_root() {
    let root = tempfile::tempdir().unwrap();
    for dir in [".flue", ".envs", "src"] {
        std::fs::create_dir(root.path().join(dir)).unwrap();
    }
    for file in [".env", ".env.local", ".envrc", "README.md", "src/.env"] {
        std::fs::write(root.path().join(file), "x").unwrap();
    }
    std::os::unix::fs::symlink("/nonexistent", root.path().join(".env.dangling")).unwrap();
    let found: Vec<(String, bool)> = masks(root.path())
        .into_iter()
        .map(|mask| {
            let name = mask
                .path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, mask.is_dir)
        })
        .collect();
    assert_eq!(
        found,
        [
            (".env".to_owned(), false),
            (".env.local".to_owned(), false),
            (".envrc".to_owned(), false),
            (".envs".to_owned(), true),
            (".flue".to_owned(), true),
        ]
    );
}
