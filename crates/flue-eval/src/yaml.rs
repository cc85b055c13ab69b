//! A YAML document as a tree whose every node knows its line, so that a problem deep inside a
//! case file is reported at the line it is on.
//!
//! yaml-rust2's event parser gives each event a position; this module folds the events into
//! [`Node`]s. Anchors and aliases are refused (a case file has no use for them, and an alias
//! can multiply a small file into a huge tree), and so are files over [`MAX_BYTES`] and trees
//! deeper than [`MAX_DEPTH`].

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// The largest case file read.
pub(crate) const MAX_BYTES: usize = 1024 * 1024;
/// The deepest nesting of mappings and sequences accepted.
pub(crate) const MAX_DEPTH: usize = 64;

/// One YAML value and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub(crate) line: usize,
    pub(crate) value: Value,
}

/// A YAML value. Scalars keep their text and whether they were quoted, so that `"1"` stays a
/// string and `1` becomes a number.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Scalar { text: String, quoted: bool },
    Sequence(Vec<Node>),
    Mapping(Vec<(Node, Node)>),
}

/// Why a document could not be read, with the line.
#[derive(Debug)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// Parses `text`, one YAML document (an empty document is `None`).
pub(crate) fn parse(text: &str) -> Result<Option<Node>, ParseError> {
    if text.len() > MAX_BYTES {
        return Err(ParseError {
            line: 1,
            message: format!(
                "the file is {} bytes; case files are at most {MAX_BYTES}: split it",
                text.len()
            ),
        });
    }
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, false).map_err(|err| ParseError {
        line: err.marker().line(),
        message: format!("invalid YAML: {}", err.info()),
    })?;
    if let Some(problem) = builder.problem {
        return Err(problem);
    }
    Ok(builder.root)
}

impl Node {
    /// The entry `key` of a mapping.
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        self.entries()
            .iter()
            .find(|(name, _)| name.as_str() == Some(key))
            .map(|(_, value)| value)
    }

    /// A mapping's entries (none for anything else).
    pub(crate) fn entries(&self) -> &[(Node, Node)] {
        match &self.value {
            Value::Mapping(entries) => entries,
            _ => &[],
        }
    }

    /// The text of a scalar.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// What the value is, for messages: `a string`, `a list`, `a mapping`.
    pub(crate) fn kind(&self) -> &'static str {
        match &self.value {
            Value::Scalar { .. } => match self.to_json() {
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            },
            Value::Sequence(_) => "a list",
            Value::Mapping(_) => "a mapping",
        }
    }

    /// The value as JSON, scalars typed by YAML's core schema (plain `true`, `12`, `1.5`,
    /// `null` are typed; anything quoted is a string). Mapping keys become strings.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Scalar { text, quoted } => {
                if *quoted {
                    return serde_json::Value::String(text.clone());
                }
                plain_scalar(text)
            }
            Value::Sequence(items) => items.iter().map(Node::to_json).collect(),
            Value::Mapping(entries) => entries
                .iter()
                .map(|(key, value)| {
                    let key = key
                        .as_str()
                        .map_or_else(|| key.to_json().to_string(), str::to_owned);
                    (key, value.to_json())
                })
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }
}

fn plain_scalar(text: &str) -> serde_json::Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return serde_json::Value::Null,
        "true" | "True" | "TRUE" => return serde_json::Value::Bool(true),
        "false" | "False" | "FALSE" => return serde_json::Value::Bool(false),
        _ => {}
    }
    if let Ok(int) = text.parse::<i64>() {
        return int.into();
    }
    if text.chars().any(|c| c.is_ascii_digit())
        && let Ok(float) = text.parse::<f64>()
        && let Some(number) = serde_json::Number::from_f64(float)
    {
        return serde_json::Value::Number(number);
    }
    serde_json::Value::String(text.to_owned())
}

/// Folds parser events into a tree.
#[derive(Default)]
struct Builder {
    /// Open sequences and mappings, innermost last, with the line each started on.
    open: Vec<(usize, Value)>,
    /// A mapping's key waiting for its value, per open mapping (innermost last).
    keys: Vec<Option<Node>>,
    root: Option<Node>,
    problem: Option<ParseError>,
}

impl Builder {
    fn fail(&mut self, line: usize, message: String) {
        if self.problem.is_none() {
            self.problem = Some(ParseError { line, message });
        }
    }

    fn open(&mut self, line: usize, value: Value, anchor: usize) {
        if anchor != 0 {
            self.fail(line, anchors_refused());
        }
        if self.open.len() >= MAX_DEPTH {
            self.fail(line, format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.open.push((line, value));
        self.keys.push(None);
    }

    fn close(&mut self) {
        self.keys.pop();
        if let Some((line, value)) = self.open.pop() {
            self.add(Node { line, value });
        }
    }

    /// Adds a finished node to the innermost open collection (or makes it the root).
    fn add(&mut self, node: Node) {
        let Some((_, parent)) = self.open.last_mut() else {
            self.root = Some(node);
            return;
        };
        match parent {
            Value::Sequence(items) => items.push(node),
            Value::Mapping(entries) => {
                let Some(slot) = self.keys.last_mut() else {
                    return;
                };
                match slot.take() {
                    Some(key) => entries.push((key, node)),
                    None => *slot = Some(node),
                }
            }
            Value::Scalar { .. } => {}
        }
    }
}

fn anchors_refused() -> String {
    "anchors and aliases (`&name`, `*name`) are not supported in case files: write the value \
     out"
    .to_owned()
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let line = mark.line();
        match event {
            Event::Scalar(text, style, anchor, _) => {
                if anchor != 0 {
                    self.fail(line, anchors_refused());
                }
                let quoted = !matches!(style, TScalarStyle::Plain);
                self.add(Node {
                    line,
                    value: Value::Scalar { text, quoted },
                });
            }
            Event::SequenceStart(anchor, _) => self.open(line, Value::Sequence(Vec::new()), anchor),
            Event::MappingStart(anchor, _) => self.open(line, Value::Mapping(Vec::new()), anchor),
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(_) => self.fail(line, anchors_refused()),
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}
