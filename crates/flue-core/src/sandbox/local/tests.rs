//! Unit tests of the local sandbox's output capture and standard input.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;

use super::{Capture, LocalSandbox, lossy_utf8_prefix};
use crate::sandbox::{ExecOptions, TIMEOUT_EXIT_CODE};

fn captured(limit: usize, chunks: &[&[u8]]) -> String {
    let mut capture = Capture::new(limit);
    for chunk in chunks {
        capture.push(chunk);
    }
    capture.finish("stdout")
}

#[test]
fn capture_keeps_everything_under_the_limit() {
    assert_eq!(captured(10, &[b"abc", b"def"]), "abcdef");
    assert_eq!(captured(6, &[b"abc", b"def"]), "abcdef");
}

#[test]
fn capture_keeps_the_first_bytes_and_notes_the_cut() {
    assert_eq!(
        captured(4, &[b"abc", b"def", b"gh"]),
        "abcd\n[stdout truncated: kept the first 4 of 8 bytes]"
    );
    assert_eq!(
        captured(0, &[b"x"]),
        "[stdout truncated: kept the first 0 of 1 bytes]"
    );
}

#[test]
fn a_character_cut_at_the_limit_is_dropped() {
    // "é" is two bytes; the limit falls between them.
    assert_eq!(
        captured(2, &["aé".as_bytes(), b"z"]),
        "a\n[stdout truncated: kept the first 2 of 4 bytes]"
    );
    assert_eq!(lossy_utf8_prefix(b"a\xffb\xc3"), "a\u{fffd}b");
}

/// 300 KB of input (over the 128 KiB one environment variable may hold) reaches the command
/// whole, with standard output kept up to the limit given.
#[tokio::test]
async fn input_of_any_size_reaches_standard_input() {
    let root = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new(root.path()).unwrap();
    let input = "x".repeat(300_000).into_bytes();
    let res = sandbox
        .exec_with_input("wc -c; cat", ExecOptions::new(), input, 1_000_000)
        .await
        .unwrap();
    let (count, echoed) = res.stdout.split_once('\n').unwrap();
    assert_eq!(count.trim(), "300000");
    assert_eq!(echoed.len(), 0, "wc read it all");
    let res = sandbox
        .exec_with_input("cat", ExecOptions::new(), b"abcdef".to_vec(), 4)
        .await
        .unwrap();
    assert_eq!(
        res.stdout,
        "abcd\n[stdout truncated: kept the first 4 of 6 bytes]"
    );
}

/// A command that never reads its input does not stall the call: one that exits at once is
/// done at once (the write ends with EPIPE), and one that runs on until its timeout is stopped
/// at that timeout, though the pipe is full.
#[tokio::test]
async fn a_command_that_does_not_read_its_input_cannot_stall_the_call() {
    let root = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new(root.path()).unwrap();
    let input = vec![b'y'; 4 * 1024 * 1024];
    let started = Instant::now();
    let res = sandbox
        .exec_with_input("echo done; exit 3", ExecOptions::new(), input.clone(), 1024)
        .await
        .unwrap();
    assert_eq!((res.stdout.as_str(), res.exit_code), ("done\n", 3));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let options = ExecOptions::new().with_timeout(Duration::from_secs(1));
    let res = sandbox
        .exec_with_input("exec sleep 60", options, input, 1024)
        .await
        .unwrap();
    assert_eq!(res.exit_code, TIMEOUT_EXIT_CODE);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}
