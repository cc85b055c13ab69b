//! The built-in file tools, called through their definitions: every tool's success path and
//! error kinds, the stale-file lifecycle, the trash round trip and the audit log.
//!
//! Every test runs in each sandbox of `SANDBOXES`.

use std::sync::Arc;

use flue_core::{
    store::{AuditEntry, AuditStore, TrashReason},
    tool::builtin_tool,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::sandboxes::{FaultySandbox, Fixture, OpenSandbox, SANDBOXES, show};

fn sha(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

const NOTES: &str = "one\ntwo\nthree\nfour\nfive\n";

async fn notes_fixture(open: OpenSandbox) -> Fixture {
    Fixture::new(
        open,
        &[
            ("notes.txt", NOTES),
            ("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n"),
            (
                "src/lib.rs",
                "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
            ),
            ("docs/guide.md", "# Guide\nUse `add` to add.\n"),
        ],
    )
    .await
}

#[tokio::test]
async fn read_file_returns_the_content_its_sha256_and_counts() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx
            .call("read_file", json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({
                "path": "notes.txt", "content": NOTES, "sha256": sha(NOTES),
                "startLine": 1, "endLine": 5, "totalLines": 5, "selectedLines": 5,
                "totalBytes": NOTES.len(), "truncated": false,
            }),
            "{name}"
        );
        // Absolute and `..` paths name the same file.
        let absolute = format!("{}/notes.txt", fx.ctx.cwd);
        let again = fx
            .call("read_file", json!({"path": absolute}))
            .await
            .unwrap();
        assert_eq!(again["path"], "notes.txt", "{name}");
        let again = fx
            .call("read_file", json!({"path": "src/../notes.txt"}))
            .await
            .unwrap();
        assert_eq!(again["content"], NOTES, "{name}");
    }
}

#[tokio::test]
async fn read_file_slices_lines_and_bytes_but_hashes_the_whole_file() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let slice = |input: Value| {
            let fx = &fx;
            async move {
                let data = fx.call("read_file", input).await.unwrap();
                assert_eq!(
                    data["sha256"],
                    sha(NOTES),
                    "a slice still hashes the whole file"
                );
                (
                    data["content"].as_str().unwrap().to_owned(),
                    data["startLine"].as_u64().unwrap(),
                    data["endLine"].as_u64().unwrap(),
                    data["selectedLines"].as_u64().unwrap(),
                    data["truncated"].as_bool().unwrap(),
                )
            }
        };
        assert_eq!(
            slice(json!({"path": "notes.txt", "startLine": 2, "endLine": 3})).await,
            ("two\nthree\n".to_owned(), 2, 3, 2, false),
            "{name}"
        );
        assert_eq!(
            slice(json!({"path": "notes.txt", "startLine": 4, "endLine": 99})).await,
            ("four\nfive\n".to_owned(), 4, 5, 2, false),
            "{name}"
        );
        // maxBytes keeps whole lines and says where it stopped.
        assert_eq!(
            slice(json!({"path": "notes.txt", "maxBytes": 9})).await,
            ("one\ntwo\n".to_owned(), 1, 2, 2, true),
            "{name}"
        );
        // A line longer than maxBytes comes back cut, on a character boundary.
        let fx2 = Fixture::new(*open, &[("wide.txt", "ééééé\nx\n")]).await;
        let data = fx2
            .call("read_file", json!({"path": "wide.txt", "maxBytes": 5}))
            .await
            .unwrap();
        assert_eq!(
            (
                data["content"].clone(),
                data["endLine"].clone(),
                data["truncated"].clone()
            ),
            (json!("éé"), json!(1), json!(true)),
            "{name}"
        );
        // An empty file.
        let fx3 = Fixture::new(*open, &[("empty.txt", "")]).await;
        let data = fx3
            .call("read_file", json!({"path": "empty.txt"}))
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({
                "path": "empty.txt", "content": "", "sha256": sha(""), "startLine": 1,
                "endLine": 0, "totalLines": 0, "selectedLines": 0, "totalBytes": 0,
                "truncated": false,
            }),
            "{name}"
        );
    }
}

#[tokio::test]
async fn read_file_errors_have_kinds_and_suggested_actions() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        fx.write("image.bin", &[0x89, b'P', 0xff, 0xfe]).await;
        let cases = [
            (json!({"path": "missing.txt"}), "not_found"),
            (json!({"path": "src"}), "is_directory"),
            (json!({"path": "../outside.txt"}), "outside_workspace"),
            (json!({"path": "/etc/hostname"}), "outside_workspace"),
            (json!({"path": "image.bin"}), "invalid_input"),
            (json!({"path": ""}), "invalid_input"),
            (
                json!({"path": "notes.txt", "startLine": 6}),
                "invalid_input",
            ),
            (
                json!({"path": "notes.txt", "startLine": 3, "endLine": 2}),
                "invalid_input",
            ),
            (json!({"path": "notes.txt", "maxBytes": 0}), "invalid_input"),
            (json!({"path": "notes.txt", "offset": 2}), "invalid_input"),
        ];
        for (input, expected) in cases {
            let res = fx.call("read_file", input.clone()).await;
            assert_eq!(
                res.map_err(|err| err.kind),
                Err(expected.to_owned()),
                "{name} {input}"
            );
        }
        let err = fx
            .call("read_file", json!({"path": "missing.txt"}))
            .await
            .unwrap_err();
        assert_eq!(err.message, "missing.txt does not exist", "{name}");
        assert_eq!(
            serde_json::from_str::<Value>(&err.model_text()).unwrap(),
            json!({"ok": false, "error": {
                "kind": "not_found",
                "message": "missing.txt does not exist",
                "suggestedAction": err.suggested_action.clone().unwrap(),
            }})
        );
    }
}

#[tokio::test]
async fn files_over_the_size_limit_are_too_large() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("small.txt", "x\n")]).await;
        let big = vec![b'a'; 10 * 1024 * 1024 + 1];
        fx.write("big.log", &big).await;
        assert_eq!(
            fx.fail("read_file", json!({"path": "big.log"})).await,
            "too_large"
        );
        let big_text = "a".repeat(10 * 1024 * 1024 + 1);
        assert_eq!(
            fx.fail(
                "create_file",
                json!({"path": "new.txt", "content": big_text})
            )
            .await,
            "too_large"
        );
        assert_eq!(
            fx.fail(
                "write_file",
                json!({"path": "small.txt", "content": big_text, "expectedSha256": sha("x\n")})
            )
            .await,
            "too_large"
        );
        let tree = show(&fx.snapshot().await);
        assert_eq!(
            (tree["small.txt"].as_str(), tree.get("new.txt")),
            ("x\n", None),
            "{name}: nothing was written"
        );
    }
}

#[tokio::test]
async fn list_directory_lists_types_and_sizes_recursively_and_bounded() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx.call("list_directory", json!({})).await.unwrap();
        assert_eq!(
            data,
            json!({"path": ".", "truncated": false, "entries": [
                {"path": "docs", "type": "directory"},
                {"path": "notes.txt", "type": "file", "size": NOTES.len()},
                {"path": "src", "type": "directory"},
            ]}),
            "{name}"
        );
        let data = fx
            .call("list_directory", json!({"path": "src", "recursive": true}))
            .await
            .unwrap();
        let paths: Vec<&str> = data["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["lib.rs", "main.rs"], "{name}");
        let data = fx
            .call(
                "list_directory",
                json!({"recursive": true, "maxEntries": 3}),
            )
            .await
            .unwrap();
        let paths: Vec<&str> = data["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            (paths, data["truncated"].clone()),
            (vec!["docs", "docs/guide.md", "notes.txt"], json!(true)),
            "{name}"
        );
        assert_eq!(
            fx.fail("list_directory", json!({"path": "nope"})).await,
            "not_found"
        );
        assert_eq!(
            fx.fail("list_directory", json!({"path": "notes.txt"}))
                .await,
            "not_a_directory"
        );
    }
}

#[tokio::test]
async fn walks_respect_gitignore_files_unless_asked_not_to() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(
            *open,
            &[
                (".gitignore", "target/\n*.log\n!keep.log\n/root-only.txt\n"),
                ("target/debug/app", "binary"),
                ("app.log", "noise"),
                ("keep.log", "kept"),
                ("root-only.txt", "x"),
                ("sub/root-only.txt", "kept: the pattern is anchored"),
                ("sub/.gitignore", "local.txt\n"),
                ("sub/local.txt", "ignored below sub"),
                ("local.txt", "kept above sub"),
                (".git/HEAD", "ref: refs/heads/main"),
            ],
        )
        .await;
        let data = fx
            .call("list_directory", json!({"recursive": true}))
            .await
            .unwrap();
        let paths: Vec<&str> = data["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                ".gitignore",
                "keep.log",
                "local.txt",
                "sub",
                "sub/.gitignore",
                "sub/root-only.txt"
            ],
            "{name}"
        );
        let data = fx
            .call(
                "glob",
                json!({"pattern": "**/*.log", "includeIgnored": true}),
            )
            .await
            .unwrap();
        assert_eq!(
            data["matches"],
            json!([{"path": "app.log", "type": "file"}, {"path": "keep.log", "type": "file"}])
        );
        // Rules of the working directory apply to a walk that starts below it.
        let data = fx
            .call("search_files", json!({"pattern": "ignored", "path": "sub"}))
            .await
            .unwrap();
        assert_eq!(data["matches"], json!([]));
    }
}

#[tokio::test]
async fn glob_matches_files_and_folders() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let matches = |pattern: &'static str| {
            let fx = &fx;
            async move { fx.call("glob", json!({"pattern": pattern})).await.unwrap()["matches"].clone() }
        };
        assert_eq!(
            matches("**/*.rs").await,
            json!([{"path": "src/lib.rs", "type": "file"}, {"path": "src/main.rs", "type": "file"}]),
            "{name}"
        );
        assert_eq!(
            matches("*.txt").await,
            json!([{"path": "notes.txt", "type": "file"}])
        );
        assert_eq!(
            matches("{docs,src}").await,
            json!([{"path": "docs", "type": "directory"}, {"path": "src", "type": "directory"}])
        );
        let data = fx
            .call("glob", json!({"pattern": "**", "maxResults": 2}))
            .await
            .unwrap();
        assert_eq!(data["truncated"], json!(true));
        assert_eq!(
            fx.fail("glob", json!({"pattern": "src/[z-a]"})).await,
            "invalid_input"
        );
    }
}

#[tokio::test]
async fn search_files_finds_text_regexes_and_globs() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx
            .call("search_files", json!({"pattern": "add"}))
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({"truncated": false, "filesSearched": 4, "matches": [
                {"path": "docs/guide.md", "line": 2, "text": "Use `add` to add."},
                {"path": "src/lib.rs", "line": 1, "text": "pub fn add(a: i32, b: i32) -> i32 {"},
            ]}),
            "{name}"
        );
        let data = fx
            .call(
                "search_files",
                json!({"pattern": r"fn \w+\(", "mode": "regex", "include": "*.rs"}),
            )
            .await
            .unwrap();
        assert_eq!(
            data["matches"],
            json!([
                {"path": "src/lib.rs", "line": 1, "text": "pub fn add(a: i32, b: i32) -> i32 {"},
                {"path": "src/main.rs", "line": 1, "text": "fn main() {"},
            ])
        );
        let data = fx
            .call(
                "search_files",
                json!({"pattern": "GUIDE", "caseSensitive": false}),
            )
            .await
            .unwrap();
        assert_eq!(
            data["matches"],
            json!([{"path": "docs/guide.md", "line": 1, "text": "# Guide"}])
        );
        let data = fx
            .call("search_files", json!({"pattern": "*.md", "mode": "glob"}))
            .await
            .unwrap();
        assert_eq!(data["matches"], json!([{"path": "docs/guide.md"}]));
        let data = fx
            .call("search_files", json!({"pattern": "e", "maxResults": 2}))
            .await
            .unwrap();
        assert_eq!(
            (
                data["matches"].as_array().unwrap().len(),
                data["truncated"].clone()
            ),
            (2, json!(true))
        );
        assert_eq!(
            fx.fail("search_files", json!({"pattern": "(", "mode": "regex"}))
                .await,
            "invalid_input"
        );
        assert_eq!(
            fx.fail("search_files", json!({"pattern": ""})).await,
            "invalid_input"
        );
        assert_eq!(
            fx.fail("search_files", json!({"pattern": "x", "path": "../.."}))
                .await,
            "outside_workspace"
        );
    }
}

#[tokio::test]
async fn search_files_skips_binary_files() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("a.txt", "needle\n")]).await;
        fx.write("b.bin", b"needle\0\xff").await;
        let data = fx
            .call("search_files", json!({"pattern": "needle"}))
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({"truncated": false, "filesSearched": 1, "matches": [
                {"path": "a.txt", "line": 1, "text": "needle"}
            ]}),
            "{name}"
        );
    }
}

#[tokio::test]
async fn create_file_creates_parents_and_never_overwrites() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx
            .call(
                "create_file",
                json!({"path": "new/deep/file.txt", "content": "hello\n"}),
            )
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({"path": "new/deep/file.txt", "sha256": sha("hello\n"), "bytes": 6}),
            "{name}"
        );
        let tree = show(&fx.snapshot().await);
        assert_eq!(tree["new/deep/file.txt"], "hello\n");
        let before = fx.snapshot().await;
        let cases = [
            (
                json!({"path": "notes.txt", "content": "x"}),
                "already_exists",
            ),
            (json!({"path": "src", "content": "x"}), "already_exists"),
            (
                json!({"path": "../escape.txt", "content": "x"}),
                "outside_workspace",
            ),
            (
                json!({"path": "notes.txt/inner", "content": "x"}),
                "not_a_directory",
            ),
            (json!({"path": "x.txt"}), "invalid_input"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                fx.fail("create_file", input.clone()).await,
                expected,
                "{name} {input}"
            );
        }
        assert_eq!(
            fx.snapshot().await,
            before,
            "{name}: failed creates change nothing"
        );
    }
}

#[tokio::test]
async fn write_file_replaces_content_only_with_the_current_sha256() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx
            .call(
                "write_file",
                json!({"path": "notes.txt", "content": "new\n", "expectedSha256": sha(NOTES)}),
            )
            .await
            .unwrap();
        let trash_id = data["trashId"].as_str().unwrap().to_owned();
        assert_eq!(
            data,
            json!({"path": "notes.txt", "sha256": sha("new\n"), "previousSha256": sha(NOTES),
                   "bytes": 4, "trashId": trash_id}),
            "{name}"
        );
        // The old content is in the trash, in the store.
        let trashed = fx
            .store
            .get_trash("instance-1", &trash_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (trashed.content, trashed.entry.reason, trashed.entry.sha256),
            (
                NOTES.as_bytes().to_vec(),
                TrashReason::Overwritten,
                sha(NOTES)
            )
        );
        let cases = [
            (
                json!({"path": "notes.txt", "content": "x", "expectedSha256": sha(NOTES)}),
                "stale_file",
            ),
            (
                json!({"path": "missing.txt", "content": "x", "expectedSha256": sha("")}),
                "not_found",
            ),
            (
                json!({"path": "src", "content": "x", "expectedSha256": sha("")}),
                "is_directory",
            ),
            (
                json!({"path": "notes.txt", "content": "x"}),
                "invalid_input",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                fx.fail("write_file", input.clone()).await,
                expected,
                "{name} {input}"
            );
        }
        assert_eq!(show(&fx.snapshot().await)["notes.txt"], "new\n");
    }
}

#[tokio::test]
async fn edit_file_applies_exact_edits_in_order() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx
            .call(
                "edit_file",
                json!({"path": "notes.txt", "expectedSha256": sha(NOTES), "edits": [
                    {"oldText": "two\n", "newText": "2\n"},
                    {"oldText": "2\nthree", "newText": "2\n3"},
                    {"oldText": "o", "newText": "0", "replaceAll": true},
                ]}),
            )
            .await
            .unwrap();
        let expected = "0ne\n2\n3\nf0ur\nfive\n";
        assert_eq!(data["sha256"], sha(expected), "{name}");
        assert_eq!(data["replacements"], 4);
        assert_eq!(show(&fx.snapshot().await)["notes.txt"], expected);

        let current = sha(expected);
        let before = fx.snapshot().await;
        let cases = [
            (json!([{"oldText": "", "newText": "x"}]), "invalid_input"),
            (json!([]), "invalid_input"),
            (
                json!([{"oldText": "six", "newText": "6"}]),
                "patch_conflict",
            ),
            (json!([{"oldText": "f", "newText": "F"}]), "patch_conflict"),
            // The second edit fails: the first one is not kept either.
            (
                json!([{"oldText": "0ne", "newText": "1"}, {"oldText": "zzz", "newText": ""}]),
                "patch_conflict",
            ),
        ];
        for (edits, expected_kind) in cases {
            let input = json!({"path": "notes.txt", "expectedSha256": current, "edits": edits});
            assert_eq!(
                fx.fail("edit_file", input.clone()).await,
                expected_kind,
                "{name} {input}"
            );
        }
        let stale = json!({"path": "notes.txt", "expectedSha256": sha(NOTES),
                           "edits": [{"oldText": "f", "newText": "F", "replaceAll": true}]});
        assert_eq!(fx.fail("edit_file", stale).await, "stale_file");
        assert_eq!(
            fx.snapshot().await,
            before,
            "{name}: failed edits change nothing"
        );
    }
}

#[tokio::test]
async fn the_stale_file_lifecycle() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        // 1. Read, and keep the sha256.
        let read = fx
            .call("read_file", json!({"path": "notes.txt", "endLine": 1}))
            .await
            .unwrap();
        let seen = read["sha256"].as_str().unwrap().to_owned();
        // 2. Someone else changes the file.
        fx.ctx
            .sandbox
            .write_file(&format!("{}/notes.txt", fx.ctx.cwd), b"one\nTWO\n")
            .await
            .unwrap();
        // 3. The edit with the old sha256 is refused, with the protocol's suggested action.
        let edit = |sha256: &str| {
            json!({"path": "notes.txt", "expectedSha256": sha256,
                   "edits": [{"oldText": "one", "newText": "uno"}]})
        };
        let err = fx.call("edit_file", edit(&seen)).await.unwrap_err();
        assert_eq!(
            (err.kind.as_str(), err.suggested_action.as_deref()),
            (
                "stale_file",
                Some("Re-read the file to obtain the current sha256 and re-apply your edit.")
            ),
            "{name}"
        );
        assert!(err.message.contains(&sha("one\nTWO\n")), "{}", err.message);
        // 4. Re-read, 5. retry: it works.
        let read = fx
            .call("read_file", json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(read["content"], "one\nTWO\n");
        let data = fx
            .call("edit_file", edit(read["sha256"].as_str().unwrap()))
            .await
            .unwrap();
        assert_eq!(data["sha256"], sha("uno\nTWO\n"), "{name}");
        // The new sha256 is enough for the next change.
        fx.call(
            "write_file",
            json!({"path": "notes.txt", "content": "done\n", "expectedSha256": data["sha256"]}),
        )
        .await
        .unwrap();
        assert_eq!(show(&fx.snapshot().await)["notes.txt"], "done\n");
    }
}

#[tokio::test]
async fn delete_and_restore_round_trip_through_the_trash() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let before = fx.snapshot().await;
        let data = fx
            .call("delete_file", json!({"path": "src/lib.rs"}))
            .await
            .unwrap();
        let trash_id = data["trashId"].as_str().unwrap().to_owned();
        let lib = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";
        assert_eq!(
            data,
            json!({"path": "src/lib.rs", "sha256": sha(lib), "trashId": trash_id}),
            "{name}"
        );
        assert!(!fx.snapshot().await.contains_key("src/lib.rs"));
        // The trash is in the store: nothing new appeared in the sandbox.
        let mut expected_tree = before.clone();
        expected_tree.remove("src/lib.rs");
        assert_eq!(fx.snapshot().await, expected_tree, "{name}");
        let listed = fx.store.list_trash("instance-1").await.unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|entry| (entry.path.clone(), entry.reason))
                .collect::<Vec<_>>(),
            // Relative to the working directory, whatever the sandbox's root is.
            vec![("src/lib.rs".to_owned(), TrashReason::Deleted)]
        );

        let data = fx
            .call("restore_file", json!({"trashId": trash_id}))
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({"path": "src/lib.rs", "originalPath": "src/lib.rs", "trashId": trash_id,
                   "sha256": sha(lib)}),
            "{name}"
        );
        assert_eq!(
            fx.snapshot().await,
            before,
            "{name}: restored byte for byte"
        );

        // Occupied: already_exists. Elsewhere: fine, by original path too.
        assert_eq!(
            fx.fail("restore_file", json!({"trashId": trash_id})).await,
            "already_exists"
        );
        let data = fx
            .call(
                "restore_file",
                json!({"path": "src/lib.rs", "destination": "old/lib.rs"}),
            )
            .await
            .unwrap();
        assert_eq!(data["path"], "old/lib.rs");
        assert_eq!(show(&fx.snapshot().await)["old/lib.rs"], lib);

        let cases = [
            (json!({"trashId": "01NOPE"}), "restore_file", "not_found"),
            (
                json!({"path": "never-trashed.txt"}),
                "restore_file",
                "not_found",
            ),
            (json!({}), "restore_file", "invalid_input"),
            (
                json!({"trashId": trash_id, "destination": "../x"}),
                "restore_file",
                "outside_workspace",
            ),
            (json!({"path": "src"}), "delete_file", "is_directory"),
            (json!({"path": "gone.txt"}), "delete_file", "not_found"),
            (
                json!({"path": "notes.txt", "expectedSha256": sha("other")}),
                "delete_file",
                "stale_file",
            ),
        ];
        for (input, tool, expected) in cases {
            assert_eq!(
                fx.fail(tool, input.clone()).await,
                expected,
                "{name} {tool} {input}"
            );
        }
        // With the right sha256 the delete goes through.
        fx.call(
            "delete_file",
            json!({"path": "notes.txt", "expectedSha256": sha(NOTES)}),
        )
        .await
        .unwrap();

        // An entry stored before paths were relative (absolute in the sandbox) restores too,
        // by id and by path.
        let old = flue_core::store::TrashEntry {
            id: "01OLDABSOLUTEENTRY00000000".to_owned(),
            instance_id: "instance-1".to_owned(),
            session: "default".to_owned(),
            agent: "a".to_owned(),
            tool: "delete_file".to_owned(),
            path: format!("{}/old.txt", fx.ctx.cwd),
            sha256: sha("old\n"),
            size: 4,
            trashed_at: 1,
            reason: TrashReason::Deleted,
        };
        fx.store.put_trash(&old, b"old\n").await.unwrap();
        let data = fx
            .call("restore_file", json!({"path": "old.txt"}))
            .await
            .unwrap();
        assert_eq!(
            (data["path"].clone(), data["originalPath"].clone()),
            (json!("old.txt"), json!("old.txt")),
            "{name}"
        );
        assert_eq!(show(&fx.snapshot().await)["old.txt"], "old\n", "{name}");
    }
}

#[tokio::test]
async fn move_file_moves_and_never_overwrites() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let data = fx
            .call(
                "move_file",
                json!({"source": "notes.txt", "destination": "archive/2024/notes.txt"}),
            )
            .await
            .unwrap();
        assert_eq!(
            data,
            json!({"source": "notes.txt", "destination": "archive/2024/notes.txt", "sha256": sha(NOTES)}),
            "{name}"
        );
        let tree = show(&fx.snapshot().await);
        assert_eq!(
            (
                tree.get("notes.txt"),
                tree["archive/2024/notes.txt"].as_str()
            ),
            (None, NOTES)
        );
        let before = fx.snapshot().await;
        let cases = [
            (
                json!({"source": "src/main.rs", "destination": "src/lib.rs"}),
                "already_exists",
            ),
            (
                json!({"source": "src/main.rs", "destination": "docs"}),
                "already_exists",
            ),
            (
                json!({"source": "notes.txt", "destination": "x.txt"}),
                "not_found",
            ),
            (
                json!({"source": "src", "destination": "source"}),
                "is_directory",
            ),
            (
                json!({"source": "src/main.rs", "destination": "./src/main.rs"}),
                "invalid_input",
            ),
            (
                json!({"source": "src/main.rs", "destination": "../main.rs"}),
                "outside_workspace",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(
                fx.fail("move_file", input.clone()).await,
                expected,
                "{name} {input}"
            );
        }
        assert_eq!(
            fx.snapshot().await,
            before,
            "{name}: failed moves change nothing"
        );
    }
}

#[tokio::test]
async fn a_sandbox_that_refuses_access_gives_permission_denied() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[("secret.txt", "s"), ("open.txt", "o")]).await;
        let mut faulty = FaultySandbox::new(fx.ctx.sandbox.clone());
        faulty.deny = vec!["secret".to_owned()];
        let fx = fx.with_sandbox(Arc::new(faulty));
        let cases = [
            ("read_file", json!({"path": "secret.txt"})),
            ("delete_file", json!({"path": "secret.txt"})),
            (
                "create_file",
                json!({"path": "secret2.txt", "content": "x"}),
            ),
            (
                "write_file",
                json!({"path": "secret.txt", "content": "x", "expectedSha256": sha("s")}),
            ),
            (
                "move_file",
                json!({"source": "open.txt", "destination": "secret/open.txt"}),
            ),
        ];
        for (tool, input) in cases {
            assert_eq!(
                fx.fail(tool, input.clone()).await,
                "permission_denied",
                "{name} {tool} {input}"
            );
        }
    }
}

/// An audit entry without its id and time, for comparisons.
fn comparable(entry: &AuditEntry) -> AuditEntry {
    AuditEntry {
        id: String::new(),
        at: 0,
        ..entry.clone()
    }
}

#[tokio::test]
async fn every_modifying_call_is_audited_including_failures() {
    for (name, open) in SANDBOXES {
        let fx = notes_fixture(*open).await;
        let root = fx.ctx.cwd.clone();
        fx.call("create_file", json!({"path": "a.txt", "content": "a\n"}))
            .await
            .unwrap();
        fx.fail("create_file", json!({"path": "a.txt", "content": "again"}))
            .await;
        fx.call(
            "edit_file",
            json!({"path": "a.txt", "expectedSha256": sha("a\n"),
                                    "edits": [{"oldText": "a", "newText": "b"}]}),
        )
        .await
        .unwrap();
        fx.fail(
            "write_file",
            json!({"path": "a.txt", "content": "c", "expectedSha256": sha("a\n")}),
        )
        .await;
        fx.call(
            "move_file",
            json!({"source": "a.txt", "destination": "b.txt"}),
        )
        .await
        .unwrap();
        fx.call("delete_file", json!({"path": "b.txt"}))
            .await
            .unwrap();
        fx.fail("delete_file", json!({"path": "../b.txt"})).await;
        // Reads are not audited.
        fx.call("read_file", json!({"path": "notes.txt"}))
            .await
            .unwrap();

        let entries = fx.store.list_audit("instance-1").await.unwrap();
        let base = AuditEntry {
            instance_id: "instance-1".into(),
            session: "default".into(),
            agent: "tester".into(),
            ..AuditEntry::default()
        };
        let a = format!("{root}/a.txt");
        let b = format!("{root}/b.txt");
        let expected = vec![
            AuditEntry {
                tool: "create_file".into(),
                operation: "create".into(),
                path: Some(a.clone()),
                sha256_after: Some(sha("a\n")),
                diff: Some("--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n".into()),
                ok: true,
                ..base.clone()
            },
            AuditEntry {
                tool: "create_file".into(),
                operation: "create".into(),
                path: Some(a.clone()),
                ok: false,
                error_kind: Some("already_exists".into()),
                error_message: Some("a.txt already exists; create_file never overwrites".into()),
                ..base.clone()
            },
            AuditEntry {
                tool: "edit_file".into(),
                operation: "edit".into(),
                path: Some(a.clone()),
                sha256_before: Some(sha("a\n")),
                sha256_after: Some(sha("b\n")),
                diff: Some("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n".into()),
                ok: true,
                ..base.clone()
            },
            AuditEntry {
                tool: "write_file".into(),
                operation: "write".into(),
                path: Some(a.clone()),
                sha256_before: Some(sha("b\n")),
                ok: false,
                error_kind: Some("stale_file".into()),
                error_message: Some(format!(
                    "a.txt changed since you read it: expectedSha256 is {:?} but the file's sha256 is now {}",
                    sha("a\n"),
                    sha("b\n")
                )),
                ..base.clone()
            },
            AuditEntry {
                tool: "move_file".into(),
                operation: "move".into(),
                path: Some(a.clone()),
                destination_path: Some(b.clone()),
                sha256_before: Some(sha("b\n")),
                sha256_after: Some(sha("b\n")),
                ok: true,
                ..base.clone()
            },
            AuditEntry {
                tool: "delete_file".into(),
                operation: "delete".into(),
                path: Some(b.clone()),
                sha256_before: Some(sha("b\n")),
                diff: Some("--- a/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-b\n".into()),
                ok: true,
                ..base.clone()
            },
            AuditEntry {
                tool: "delete_file".into(),
                operation: "delete".into(),
                path: Some(format!("{}/b.txt", root.rsplit_once('/').unwrap().0)),
                ok: false,
                error_kind: Some("outside_workspace".into()),
                error_message: Some("../b.txt is outside the workspace".into()),
                ..base.clone()
            },
        ];
        assert_eq!(
            entries.iter().map(comparable).collect::<Vec<_>>(),
            expected,
            "{name}"
        );
        assert!(
            entries
                .iter()
                .all(|entry| entry.at > 0 && entry.id.len() == 26)
        );
    }
}

#[tokio::test]
async fn audit_diffs_are_cut_at_64_kib() {
    for (name, open) in SANDBOXES {
        let fx = Fixture::new(*open, &[]).await;
        let content: String = (0..20_000).map(|n| format!("line {n}\n")).collect();
        fx.call(
            "create_file",
            json!({"path": "big.txt", "content": content}),
        )
        .await
        .unwrap();
        let entries = fx.store.list_audit("instance-1").await.unwrap();
        let diff = entries[0].diff.as_deref().unwrap();
        assert_eq!(
            (diff.len(), entries[0].diff_truncated),
            (64 * 1024, true),
            "{name}"
        );
        assert!(diff.starts_with("--- /dev/null\n+++ b/big.txt\n"));
    }
}

#[test]
fn the_builtin_file_tools_have_model_facing_descriptions() {
    for name in flue_core::tool::BUILTIN_TOOL_NAMES {
        let tool = builtin_tool(name).unwrap();
        assert!(
            tool.description().len() > 200,
            "{name} needs a real description"
        );
        let schema = tool.input_schema();
        assert_eq!(schema["type"], "object", "{name}");
    }
    let write = builtin_tool("write_file").unwrap();
    assert!(write.description().contains("expectedSha256"));
    assert_eq!(
        write.input_schema()["required"],
        json!(["path", "content", "expectedSha256"])
    );
    let patch = builtin_tool("apply_patch").unwrap();
    assert!(patch.input_schema()["properties"]["expectedSha256ByPath"].is_object());
}

#[test]
fn a_custom_tool_cannot_take_a_builtin_file_tool_name() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Nothing {}
    let custom = flue_core::ToolDefinition::from_fn(
        "read_file",
        "My own reader.",
        |_: Nothing, _ctx| async { Ok::<_, flue_core::ToolError>(json!("mine")) },
    )
    .unwrap();
    let err = flue_core::tool::ToolSet::assemble([builtin_tool("read_file").unwrap(), custom])
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.to_string()),
        (
            "tool_name_collision",
            "tool name collision: \"read_file\" is defined more than once".to_owned()
        )
    );
}
