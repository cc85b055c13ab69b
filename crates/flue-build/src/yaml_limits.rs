//! Bounds on frontmatter YAML, checked on the parser's event stream before anything is built.
//!
//! YAML aliases (`*name`) repeat an anchored node, and the loader copies the node at every
//! alias: nine lines of nested aliases ("billion laughs") expand to billions of nodes. A
//! workspace or bundle is often someone else's data, so before the loader runs,
//! [`check`] walks the events of the frontmatter once, iteratively (the loader recurses, so
//! deep nesting would overflow the stack), and refuses a document that is larger, nests
//! deeper or expands to more nodes or bytes than any real frontmatter, naming the limit.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};

/// The most bytes of frontmatter read (the text between the `---` lines).
pub(crate) const MAX_FRONTMATTER_BYTES: usize = 64 * 1024;

/// The deepest nesting of mappings and sequences.
pub(crate) const MAX_NESTING: usize = 64;

/// The most nodes (scalars, mappings, sequences) the frontmatter may have once every alias
/// is expanded.
pub(crate) const MAX_EXPANDED_NODES: u64 = 10_000;

/// The most bytes of scalar text the frontmatter may hold once every alias is expanded.
pub(crate) const MAX_EXPANDED_BYTES: u64 = 1024 * 1024;

/// A limit the frontmatter exceeds: the message, and the 1-based frontmatter line where it
/// was exceeded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Exceeded {
    pub(crate) message: String,
    pub(crate) line: usize,
}

/// The size of a node with its aliases expanded.
#[derive(Clone, Copy, Default)]
struct Size {
    nodes: u64,
    bytes: u64,
}

impl Size {
    fn add(&mut self, other: Size) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// An open mapping or sequence: its anchor (0 for none) and the size of the stream when it
/// started.
struct Open {
    anchor: usize,
    start: Size,
}

/// Checks `matter`, the frontmatter text, against the limits. A syntax error stops the check
/// without a verdict: the loader reports it with its own message.
pub(crate) fn check(matter: &str) -> Result<(), Exceeded> {
    if matter.len() > MAX_FRONTMATTER_BYTES {
        return Err(Exceeded {
            message: format!(
                "frontmatter is {} bytes, more than the limit of {MAX_FRONTMATTER_BYTES}: keep \
                 the settings short and put long text in the body",
                matter.len()
            ),
            line: 1,
        });
    }
    let mut parser = Parser::new_from_str(matter);
    // Everything seen so far, aliases expanded.
    let mut total = Size::default();
    // The expanded size of each anchored node, by anchor id.
    let mut anchored: HashMap<usize, Size> = HashMap::new();
    let mut open: Vec<Open> = Vec::new();
    loop {
        let Ok((event, marker)) = parser.next_token() else {
            return Ok(());
        };
        match event {
            Event::StreamEnd => return Ok(()),
            Event::Scalar(text, _, anchor, _) => {
                let size = Size {
                    nodes: 1,
                    bytes: u64::try_from(text.len()).unwrap_or(u64::MAX),
                };
                total.add(size);
                if anchor != 0 {
                    anchored.insert(anchor, size);
                }
            }
            Event::Alias(anchor) => {
                // An alias to an unknown anchor is a syntax error the loader reports.
                if let Some(size) = anchored.get(&anchor) {
                    total.add(*size);
                }
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if open.len() >= MAX_NESTING {
                    return Err(Exceeded {
                        message: format!(
                            "frontmatter nests mappings and lists more than {MAX_NESTING} \
                             levels deep: flatten it"
                        ),
                        line: marker.line(),
                    });
                }
                total.add(Size { nodes: 1, bytes: 0 });
                open.push(Open {
                    anchor,
                    start: total,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(node) = open.pop()
                    && node.anchor != 0
                {
                    anchored.insert(
                        node.anchor,
                        Size {
                            nodes: total
                                .nodes
                                .saturating_sub(node.start.nodes)
                                .saturating_add(1),
                            bytes: total.bytes.saturating_sub(node.start.bytes),
                        },
                    );
                }
            }
            Event::Nothing | Event::StreamStart | Event::DocumentStart | Event::DocumentEnd => {}
        }
        if total.nodes > MAX_EXPANDED_NODES || total.bytes > MAX_EXPANDED_BYTES {
            return Err(Exceeded {
                message: format!(
                    "frontmatter expands to more than {MAX_EXPANDED_NODES} values or \
                     {MAX_EXPANDED_BYTES} bytes (YAML aliases `*name` repeat what they name): \
                     write the values out instead of repeating them through aliases"
                ),
                line: marker.line(),
            });
        }
    }
}
