//! Unit tests of the patch parser and chunk application, including a generator-based
//! property test that neither ever panics, whatever the input.

use pretty_assertions::assert_eq;

use super::apply::apply_chunks;
use super::parse::{Chunk, ChunkLine, Patch, Section, parse_patch};

fn context(text: &str) -> ChunkLine {
    ChunkLine::Context(text.to_owned())
}
fn removed(text: &str) -> ChunkLine {
    ChunkLine::Removed(text.to_owned())
}
fn added(text: &str) -> ChunkLine {
    ChunkLine::Added(text.to_owned())
}

#[test]
fn parses_every_section_kind() {
    let text = "\n  *** Begin Patch \n\
                *** Add File: dir/new.txt\n+first\n+\n+third\n\
                \n\
                 *** Delete File:  old.txt \n\
                *** Update File: src/a.rs\n\
                *** Move to: src/b.rs\n\
                @@ fn main() {\n-    old();\n+    new();\n     keep();\n\
                @@\n\n-last\n*** End of File\n\
                *** End Patch  \n\n";
    let expected = Patch {
        sections: vec![
            Section::Add {
                path: "dir/new.txt".into(),
                content: "first\n\nthird\n".into(),
                line: 3,
            },
            Section::Delete {
                path: "old.txt".into(),
                line: 8,
            },
            Section::Update {
                path: "src/a.rs".into(),
                move_to: Some("src/b.rs".into()),
                chunks: vec![
                    Chunk {
                        context: Some("fn main() {".into()),
                        lines: vec![
                            removed("    old();"),
                            added("    new();"),
                            context("    keep();"),
                        ],
                        end_of_file: false,
                        line: 11,
                    },
                    Chunk {
                        context: None,
                        lines: vec![context(""), removed("last")],
                        end_of_file: true,
                        line: 15,
                    },
                ],
                line: 9,
            },
        ],
    };
    assert_eq!(parse_patch(text), Ok(expected));
}

#[test]
fn the_first_chunk_may_omit_its_header_and_unified_headers_lose_their_numbers() {
    let patch = parse_patch(
        "*** Begin Patch\n*** Update File: a\n-x\n+y\n@@ -3,4 +3,4 @@ impl A\n-z\n@@ -9 +9 @@\n+w\n*** End Patch",
    )
    .unwrap();
    let Section::Update { chunks, .. } = &patch.sections[0] else {
        panic!("expected an update");
    };
    let contexts: Vec<Option<&str>> = chunks
        .iter()
        .map(|chunk| chunk.context.as_deref())
        .collect();
    assert_eq!(contexts, [None, Some("impl A"), None]);
}

#[test]
fn malformed_patches_name_the_line() {
    let cases = [
        ("", 1),
        ("   \n\n", 1),
        ("*** Begin Patch", 1),
        ("x\n*** Begin Patch\n*** End Patch", 1),
        ("*** Begin Patch\n*** Add File: a\n+a\n", 3),
        ("*** Begin Patch\n*** End Patch\n*** End Patch", 2),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n-a\nzzz\n*** End Patch",
            5,
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@ x\n*** End of File\n*** End Patch",
            3,
        ),
        ("*** Begin Patch\n*** Move to: b\n*** End Patch", 2),
        ("*** Begin Patch\n*** Delete File:\n*** End Patch", 2),
    ];
    for (text, line) in cases {
        let err = parse_patch(text).unwrap_err();
        assert_eq!(err.line, line, "{text:?}: {}", err.message);
    }
}

fn chunk(context: Option<&str>, lines: Vec<ChunkLine>, end_of_file: bool) -> Chunk {
    Chunk {
        context: context.map(str::to_owned),
        lines,
        end_of_file,
        line: 1,
    }
}

#[test]
fn chunks_apply_by_content_and_keep_line_endings() {
    let swap_b = |lines| vec![chunk(None, lines, false)];
    assert_eq!(
        apply_chunks(
            "a\nb\nc\n",
            &swap_b(vec![context("a"), removed("b"), added("B")])
        ),
        Ok("a\nB\nc\n".to_owned())
    );
    assert_eq!(
        apply_chunks("a\r\nb\r\n", &swap_b(vec![removed("b"), added("B")])),
        Ok("a\r\nB\r\n".to_owned())
    );
    assert_eq!(
        apply_chunks("a\nb", &swap_b(vec![removed("b"), added("B")])),
        Ok("a\nB".to_owned())
    );
    // The trailing empty context line that stands for the final newline.
    assert_eq!(
        apply_chunks(
            "a\nb\n",
            &swap_b(vec![removed("b"), added("B"), context("")])
        ),
        Ok("a\nB\n".to_owned())
    );
    // Chunks search forward: the second `x` is found after the first chunk.
    assert_eq!(
        apply_chunks(
            "x\ny\nx\n",
            &[
                chunk(None, vec![removed("x"), added("1")], false),
                chunk(None, vec![removed("x"), added("2")], false)
            ]
        ),
        Ok("1\ny\n2\n".to_owned())
    );
    let conflict = apply_chunks("a\n", &swap_b(vec![removed("zzz")])).unwrap_err();
    assert_eq!(conflict.message, "these lines were not found: \"zzz\"");
    let conflict = apply_chunks("a\nb\n", &[chunk(None, vec![removed("a")], true)]).unwrap_err();
    assert_eq!(
        conflict.message,
        "these lines were not found at the end of the file: \"a\""
    );
}

/// A small deterministic generator (xorshift64*), so the property test needs no new crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Pieces patches are made of, plus noise: every grammar token, whitespace, unicode, CR.
const PIECES: &[&str] = &[
    "*** Begin Patch",
    "*** End Patch",
    "*** Add File: ",
    "*** Delete File: ",
    "*** Update File: ",
    "*** Move to: ",
    "*** End of File",
    "@@",
    "@@ ",
    "@@ -1,2 +1,3 @@",
    "+",
    "-",
    " ",
    "",
    "\n",
    "\r\n",
    "\r",
    "a.txt",
    "dir/b.txt",
    "../x",
    "/",
    "é",
    "✅",
    "\u{0}",
    "*",
    "***",
    "  ",
    "\t",
    "line",
    "-1,",
    "+0",
    "@",
    "fn main() {",
];

/// How generated lines start: mostly the grammar's own line shapes.
const LINE_STARTS: &[&str] = &[
    "*** Add File: a.txt",
    "*** Update File: a.txt",
    "*** Delete File: a.txt",
    "*** Move to: b.txt",
    "@@",
    "@@ line",
    "+",
    "-",
    " ",
    " ",
    "+",
    "-",
    "*** End of File",
    "",
];

/// Random lines: a grammar-shaped start, then sometimes noise.
fn random_text(rng: &mut Rng) -> String {
    let n_lines = rng.below(12);
    let mut text = String::new();
    for _ in 0..n_lines {
        text.push_str(LINE_STARTS[rng.below(LINE_STARTS.len())]);
        while rng.below(3) == 0 {
            text.push_str(PIECES[rng.below(PIECES.len())]);
        }
        text.push('\n');
    }
    text
}

#[test]
fn the_parser_and_chunk_application_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut n_parsed = 0;
    for _ in 0..20_000 {
        // Half the inputs get real markers around them, so parsing gets past the envelope.
        let body = random_text(&mut rng);
        let text = if rng.below(2) == 0 {
            format!("*** Begin Patch\n{body}\n*** End Patch\n")
        } else {
            body
        };
        let Ok(patch) = parse_patch(&text) else {
            continue;
        };
        n_parsed += 1;
        let file = random_text(&mut rng);
        for section in &patch.sections {
            if let Section::Update { chunks, .. } = section {
                let _ = apply_chunks(&file, chunks);
            }
        }
    }
    assert!(
        n_parsed > 100,
        "the generator must reach the section parser: {n_parsed}"
    );
}

#[test]
fn generated_valid_patches_round_trip() {
    let mut rng = Rng(42);
    for _ in 0..2_000 {
        let n_lines = 1 + rng.below(6);
        let lines: Vec<String> = (0..n_lines)
            .map(|idx| format!("line {idx} {}", rng.below(1000)))
            .collect();
        let original = lines
            .iter()
            .map(|line| format!("{line}\n"))
            .collect::<String>();
        let target = rng.below(n_lines);
        let mut body = String::from("*** Begin Patch\n*** Update File: f.txt\n@@\n");
        for (idx, line) in lines.iter().enumerate() {
            if idx == target {
                body.push_str(&format!("-{line}\n+changed\n"));
            } else {
                body.push_str(&format!(" {line}\n"));
            }
        }
        body.push_str("*** End Patch\n");
        let patch = parse_patch(&body).unwrap();
        let Section::Update { chunks, .. } = &patch.sections[0] else {
            panic!("expected an update");
        };
        let mut expected_lines = lines.clone();
        expected_lines[target] = "changed".to_owned();
        let expected: String = expected_lines
            .iter()
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(apply_chunks(&original, chunks), Ok(expected), "{body}");
    }
}
