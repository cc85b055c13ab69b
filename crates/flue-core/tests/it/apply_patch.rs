//! `apply_patch`: the conformance scenarios, the grammar's edge cases, the stale checks,
//! atomicity (a failing section or a failing write leaves every file untouched) and the audit
//! entries, in every sandbox of `SANDBOXES`; plus a real write failure in each sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flue_core::{
    BoxFuture, Sandbox, VirtualSandbox,
    sandbox::VirtualLimits,
    store::{AuditStore, TrashReason},
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::sandboxes::{FaultySandbox, Fixture, SANDBOXES, Tree, host_tree, show};

fn sha(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apply-patch")
}

fn copy_dir(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    std::fs::create_dir_all(to).unwrap();
    for entry in entries {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

#[tokio::test]
async fn conformance_scenarios_pass_in_every_sandbox() {
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect();
    scenarios.sort();
    assert_eq!(scenarios.len(), 23, "the fixture folder lost scenarios");
    for (sandbox_name, open) in SANDBOXES {
        for scenario in &scenarios {
            let name = scenario.file_name().unwrap().to_string_lossy().into_owned();
            let dir = tempfile::tempdir().unwrap();
            copy_dir(&scenario.join("input"), dir.path());
            let fx = Fixture::open(*open, dir).await;
            let patch = std::fs::read_to_string(scenario.join("patch.txt")).unwrap();
            let res = fx.call("apply_patch", json!({"patch": patch})).await;
            let input: Tree = host_tree(&scenario.join("input"));
            let expected: Tree = host_tree(&scenario.join("expected"));
            assert_eq!(
                show(&fx.snapshot().await),
                show(&expected),
                "{sandbox_name}/{name}: {res:?}"
            );
            assert_eq!(
                res.is_ok(),
                expected != input,
                "{sandbox_name}/{name}: a patch fails exactly when it changes nothing: {res:?}"
            );
        }
    }
}

/// A patch from its body lines.
fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

#[tokio::test]
async fn a_multi_file_patch_reports_files_and_new_hashes() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "1\n2\n3\n"), ("gone.txt", "bye\n")]).await;
        let data = fx
            .call(
                "apply_patch",
                json!({"patch": patch(
                    "*** Add File: new/b.txt\n+b\n\
                     *** Update File: a.txt\n*** Move to: moved/a.txt\n@@\n 1\n-2\n+two\n\
                     *** Delete File: gone.txt\n"
                )}),
            )
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({
                "files": [
                    {"path": "new/b.txt", "operation": "add"},
                    {"path": "a.txt", "operation": "move", "destination": "moved/a.txt"},
                    {"path": "gone.txt", "operation": "delete"},
                ],
                "sha256ByPath": {"moved/a.txt": sha("1\ntwo\n3\n"), "new/b.txt": sha("b\n")},
            }),
            "{name}"
        );
        assert_eq!(
            show(&fx.snapshot().await),
            show(&Tree::from([
                ("moved".to_owned(), None),
                ("moved/a.txt".to_owned(), Some(b"1\ntwo\n3\n".to_vec())),
                ("new".to_owned(), None),
                ("new/b.txt".to_owned(), Some(b"b\n".to_vec())),
            ])),
            "{name}"
        );
        // The old contents went to the trash.
        let trashed: Vec<(String, TrashReason)> = fx
            .store
            .list_trash("instance-1")
            .await
            .unwrap()
            .into_iter()
            .map(|entry| (entry.sha256, entry.reason))
            .collect();
        assert_eq!(
            trashed,
            vec![
                (sha("1\n2\n3\n"), TrashReason::Deleted),
                (sha("bye\n"), TrashReason::Deleted)
            ]
        );
        // One audit entry per file.
        let audit: Vec<(String, String, Option<String>)> = fx
            .store
            .list_audit("instance-1")
            .await
            .unwrap()
            .into_iter()
            .map(|entry| (entry.tool, entry.operation, entry.sha256_after))
            .collect();
        assert_eq!(
            audit,
            vec![
                ("apply_patch".into(), "add".into(), Some(sha("b\n"))),
                (
                    "apply_patch".into(),
                    "move".into(),
                    Some(sha("1\ntwo\n3\n"))
                ),
                ("apply_patch".into(), "delete".into(), None),
            ]
        );
    }
}

#[tokio::test]
async fn a_failing_last_section_leaves_every_file_untouched() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(
            *open,
            &[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")],
        )
        .await;
        let before = fx.snapshot().await;
        let cases = [
            (
                "*** Update File: c.txt\n@@\n-not there\n+x\n",
                "patch_conflict",
            ),
            ("*** Update File: missing.txt\n@@\n-x\n+y\n", "not_found"),
            ("*** Delete File: missing.txt\n", "not_found"),
            ("*** Add File: c.txt\n+again\n", "already_exists"),
            (
                "*** Update File: c.txt\n*** Move to: a.txt\n@@\n-c\n+C\n",
                "already_exists",
            ),
            ("*** Add File: a.txt/inside.txt\n+x\n", "not_a_directory"),
            ("*** Delete File: ../escape.txt\n", "outside_workspace"),
        ];
        for (last, expected) in cases {
            let body = format!(
                "*** Update File: a.txt\n@@\n-a\n+A\n*** Delete File: b.txt\n\
                 *** Add File: new/d.txt\n+d\n{last}"
            );
            let kind = fx.fail("apply_patch", json!({"patch": patch(&body)})).await;
            assert_eq!(kind, expected, "{name}: {last}");
            assert_eq!(fx.snapshot().await, before, "{name}: {last}");
        }
        assert_eq!(fx.store.list_trash("instance-1").await.unwrap(), vec![]);
    }
}

#[tokio::test]
async fn a_write_that_fails_midway_is_rolled_back() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "a\n"), ("b.txt", "b\n")]).await;
        let mut faulty = FaultySandbox::new(fx.ctx.sandbox.clone());
        faulty.fail_writes = vec!["z.txt".to_owned()];
        let faulty = Arc::new(faulty);
        let fx = fx.with_sandbox(faulty.clone());
        let before = fx.snapshot().await;
        let err = fx
            .call(
                "apply_patch",
                json!({"patch": patch(
                    "*** Update File: a.txt\n@@\n-a\n+A\n*** Add File: deep/new/y.txt\n+y\n\
                     *** Delete File: b.txt\n*** Add File: deep/z.txt\n+z\n"
                )}),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind, "sandbox_error", "{name}");
        assert!(
            err.message.contains("no file was changed"),
            "{name}: {}",
            err.message
        );
        // a.txt and deep/new/y.txt were written, then put back; deep/ was removed again.
        let root = fx.ctx.cwd.clone();
        assert_eq!(
            faulty.writes.lock().unwrap().clone(),
            [
                format!("{root}/a.txt"),
                format!("{root}/deep/new/y.txt"),
                format!("{root}/deep/z.txt"),
                format!("{root}/a.txt"),
            ],
            "{name}"
        );
        assert_eq!(fx.snapshot().await, before, "{name}");
        let audit = fx.store.list_audit("instance-1").await.unwrap();
        assert_eq!(
            audit
                .iter()
                .map(|entry| (
                    entry.operation.as_str(),
                    entry.ok,
                    entry.error_kind.as_deref(),
                    entry.path.clone()
                ))
                .collect::<Vec<_>>(),
            [(
                "patch",
                false,
                Some("sandbox_error"),
                Some(format!("{root}/deep/z.txt"))
            )],
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_real_write_failure_is_rolled_back() {
    // A file name over 255 bytes passes every check and fails only when written.
    let long_name = "x".repeat(300);
    let body = format!(
        "*** Update File: a.txt\n@@\n-a\n+A\n*** Add File: fresh/ok.txt\n+ok\n\
         *** Add File: fresh/{long_name}.txt\n+too long\n"
    );
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "a\n")]).await;
        check_rolled_back(name, &fx, &body, "sandbox_error").await;
    }
}

#[tokio::test]
async fn a_write_over_a_virtual_sandbox_limit_is_rolled_back() {
    // A file over the filesystem's size limit passes every check and fails only when written.
    fn open_small(dir: PathBuf) -> BoxFuture<'static, Arc<dyn Sandbox>> {
        Box::pin(async move {
            let limits = VirtualLimits::default().with_max_file_bytes(16);
            let sandbox = VirtualSandbox::builder()
                .with_seed(dir)
                .with_limits(limits)
                .build()
                .await;
            Arc::new(sandbox.unwrap()) as Arc<dyn Sandbox>
        })
    }
    let fx = Fixture::new(open_small, &[("a.txt", "a\n")]).await;
    let body = "*** Update File: a.txt\n@@\n-a\n+A\n*** Add File: fresh/ok.txt\n+ok\n\
                *** Add File: fresh/big.txt\n+more than sixteen bytes\n";
    check_rolled_back("virtual", &fx, body, "limit_exceeded").await;
}

/// Applies `body`, which fails on a write in sandbox `name`, and checks that nothing changed.
async fn check_rolled_back(name: &str, fx: &Fixture, body: &str, expected_kind: &str) {
    let before = fx.snapshot().await;
    let err = fx
        .call("apply_patch", json!({"patch": patch(body)}))
        .await
        .unwrap_err();
    assert_eq!(
        (
            err.kind.as_str(),
            err.message.contains("no file was changed")
        ),
        (expected_kind, true),
        "{name}: {}",
        err.message
    );
    assert_eq!(fx.snapshot().await, before, "{name}");
}

#[tokio::test]
async fn stale_checks_follow_the_expected_sha256_map() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "a\n"), ("b.txt", "b\n")]).await;
        let update_a = "*** Update File: a.txt\n@@\n-a\n+A\n";
        let add_c = "*** Add File: c.txt\n+c\n";
        let body = format!("{update_a}{add_c}");
        let before = fx.snapshot().await;
        let stale_cases = [
            json!({"a.txt": sha("old")}),
            json!({"a.txt": ""}),
            json!({"c.txt": sha("c\n")}),
            json!({"./a.txt": sha("x")}),
        ];
        for map in stale_cases {
            let input = json!({"patch": patch(&body), "expectedSha256ByPath": map});
            assert_eq!(
                fx.fail("apply_patch", input).await,
                "stale_file",
                "{name} {map}"
            );
            assert_eq!(fx.snapshot().await, before, "{name} {map}");
        }
        // Right hashes, "" for the new file, and unlisted paths unchecked: applied.
        let input = json!({"patch": patch(&body), "expectedSha256ByPath": {
            "a.txt": sha("a\n").to_uppercase(), "c.txt": "", "b.txt": sha("b\n")
        }});
        fx.call("apply_patch", input).await.unwrap();
        let tree = show(&fx.snapshot().await);
        assert_eq!(
            (tree["a.txt"].as_str(), tree["c.txt"].as_str()),
            ("A\n", "c\n"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn grammar_edge_cases_apply_as_documented() {
    // (file before, patch body, file after)
    let cases: &[(&str, &str, &str)] = &[
        // No final newline: kept as it was.
        ("a\nb", "*** Update File: f.txt\n@@\n a\n-b\n+c\n", "a\nc"),
        // CRLF line endings are kept.
        (
            "a\r\nb\r\n",
            "*** Update File: f.txt\n@@\n-b\n+c\n",
            "a\r\nc\r\n",
        ),
        // `@@ context` locates the chunk below the context line.
        (
            "fn a() {\n    x\n}\nfn b() {\n    x\n}\n",
            "*** Update File: f.txt\n@@ fn b() {\n-    x\n+    y\n",
            "fn a() {\n    x\n}\nfn b() {\n    y\n}\n",
        ),
        // A pure addition after a context line, and at the end without one.
        (
            "a\nb\n",
            "*** Update File: f.txt\n@@ a\n+inserted\n",
            "a\ninserted\nb\n",
        ),
        (
            "a\nb\n",
            "*** Update File: f.txt\n@@\n+end\n",
            "a\nb\nend\n",
        ),
        // Deletions only.
        (
            "a\nb\nc\n",
            "*** Update File: f.txt\n@@\n a\n-b\n c\n",
            "a\nc\n",
        ),
        // End of File anchors the chunk at the end, even when the lines also occur earlier.
        (
            "x\nend\nx\nend\n",
            "*** Update File: f.txt\n@@\n x\n-end\n+END\n*** End of File\n",
            "x\nend\nx\nEND\n",
        ),
        // Unicode, and typographic quotes matched by their ASCII form.
        (
            "naïve “café”\n",
            "*** Update File: f.txt\n@@\n-naïve \"café\"\n+✅\n",
            "✅\n",
        ),
        // Trailing whitespace differences are tolerated in context.
        (
            "a  \nb\n",
            "*** Update File: f.txt\n@@\n a\n-b\n+B\n",
            "a  \nB\n",
        ),
        // A unified-diff header: line numbers are ignored.
        (
            "a\nb\n",
            "*** Update File: f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n",
            "a\nc\n",
        ),
        // The first chunk may omit its header; blank lines separate chunks.
        (
            "a\nb\nc\nd\n",
            "*** Update File: f.txt\n-a\n+A\n\n@@\n-d\n+D\n",
            "A\nb\nc\nD\n",
        ),
        // An empty file gets its new lines with a final newline.
        ("", "*** Update File: f.txt\n@@\n+first\n", "first\n"),
    ];
    for (name, open) in SANDBOXES {
        for (before, body, after) in cases {
            let fx = Fixture::new(*open, &[("f.txt", before)]).await;
            let res = fx.call("apply_patch", json!({"patch": patch(body)})).await;
            assert!(res.is_ok(), "{name}: {body}: {res:?}");
            assert_eq!(
                show(&fx.snapshot().await)["f.txt"],
                *after,
                "{name}: {body}"
            );
        }
    }
}

#[tokio::test]
async fn sections_chain_on_the_same_file_and_moves_can_be_pure_renames() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "1\n"), ("old.txt", "keep\n")]).await;
        let body = "*** Delete File: a.txt\n*** Add File: a.txt\n+fresh\n\
                    *** Update File: a.txt\n@@\n-fresh\n+fresher\n\
                    *** Update File: old.txt\n*** Move to: dir/new.txt\n";
        fx.call("apply_patch", json!({"patch": patch(body)}))
            .await
            .unwrap();
        let tree = show(&fx.snapshot().await);
        assert_eq!(
            tree,
            [
                ("a.txt", "fresher\n"),
                ("dir", "<dir>"),
                ("dir/new.txt", "keep\n")
            ]
            .map(|(path, content)| (path.to_owned(), content.to_owned()))
            .into_iter()
            .collect(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn malformed_patches_are_parse_errors_naming_the_line() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "a\n")]).await;
        let cases = [
            ("", "patch line 1: the patch is empty"),
            (
                "hello\n*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\n",
                "patch line 1: expected `*** Begin Patch`",
            ),
            (
                "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\ntrailing words\n",
                "patch line 4: the patch must end with `*** End Patch`",
            ),
            (
                "*** Begin Patch\n*** Delete File: a.txt\n",
                "patch line 2: the patch must end with `*** End Patch`",
            ),
            (
                "*** Begin Patch\n*** End Patch\n",
                "patch line 2: the patch has no file sections",
            ),
            (
                "*** Begin Patch\n*** Frobnicate File: a.txt\n*** End Patch\n",
                "patch line 2: expected a section header",
            ),
            (
                "*** Begin Patch\n*** Update File: a.txt\n*** End Patch\n",
                "patch line 2: `*** Update File: a.txt` has no changes",
            ),
            (
                "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\nplain text\n*** End Patch\n",
                "patch line 5: expected a `@@` chunk header",
            ),
            (
                "*** Begin Patch\n*** Add File: b.txt\n+b\nforgot the plus\n*** End Patch\n",
                "patch line 4: expected a section header",
            ),
            (
                "*** Begin Patch\n*** Add File:   \n+b\n*** End Patch\n",
                "patch line 2: `*** Add File:` needs a path",
            ),
            (
                "*** Begin Patch\n*** Update File: a.txt\n@@\n*** End Patch\n",
                "patch line 3: this chunk has no lines",
            ),
        ];
        for (text, message_start) in cases {
            let err = fx
                .call("apply_patch", json!({"patch": text}))
                .await
                .unwrap_err();
            assert_eq!(err.kind, "patch_parse_error", "{text:?}");
            assert!(
                err.message.starts_with(message_start),
                "{text:?}: {}",
                err.message
            );
        }
        assert_eq!(show(&fx.snapshot().await)["a.txt"], "a\n", "{name}");
        // Failed calls are audited too.
        let audit = fx.store.list_audit("instance-1").await.unwrap();
        assert_eq!(audit.len(), cases.len());
        assert!(audit.iter().all(|entry| !entry.ok
            && entry.error_kind.as_deref() == Some("patch_parse_error")
            && entry.operation == "patch"
            && entry.path.is_none()));
    }
}

#[tokio::test]
async fn conflicts_name_the_patch_line_and_what_was_not_found() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "one\ntwo\n")]).await;
        let err = fx
            .call(
                "apply_patch",
                json!({"patch": patch("*** Update File: a.txt\n@@ fn main\n-two\n+2\n")}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            (err.kind.as_str(), err.message.as_str()),
            (
                "patch_conflict",
                "patch line 3: cannot update a.txt: the context line \"fn main\" was not found"
            ),
            "{name}"
        );
        let err = fx
            .call(
                "apply_patch",
                json!({"patch": patch("*** Update File: a.txt\n@@\n one\n-three\n+3\n")}),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "patch line 3: cannot update a.txt: these lines were not found: \"one\", \"three\""
        );
        let value: Value = serde_json::from_str(&err.model_text()).unwrap();
        assert_eq!(value["error"]["kind"], "patch_conflict");
    }
}
