//! Unit tests of tool sources: where their tools go, which are left out, when the list is new.

use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;
use serde_json::json;

use super::{LiveTools, ToolSource, merge};
use crate::tool::ToolDefinition;

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition::custom(name, format!("the {name} tool"), json!({"type": "object"})).unwrap()
}

fn names(tools: &[ToolDefinition]) -> Vec<&str> {
    tools.iter().map(ToolDefinition::name).collect()
}

/// A source whose list a test replaces.
struct Swappable {
    label: &'static str,
    tools: Mutex<Vec<ToolDefinition>>,
}

impl Swappable {
    fn new(label: &'static str, tools: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            label,
            tools: Mutex::new(tools.iter().map(|name| tool(name)).collect()),
        })
    }

    fn set(&self, tools: &[&str]) {
        *self.tools.lock().unwrap() = tools.iter().map(|name| tool(name)).collect();
    }
}

impl ToolSource for Swappable {
    fn label(&self) -> String {
        self.label.to_owned()
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.tools.lock().unwrap().clone()
    }
}

#[test]
fn sources_come_between_fixed_tools_and_lose_every_name_clash() {
    let first = [tool("read"), tool("shared"), tool("mcp__a__x")];
    let second = [
        tool("mcp__a__x"),
        tool("finish"),
        tool("mcp__b__y"),
        tool("late"),
    ];
    let (tools, dropped) = merge(
        &[tool("read")],
        [
            ("source one".to_owned(), first.as_slice()),
            ("source two".to_owned(), second.as_slice()),
        ],
        &[tool("late")],
        &["finish".to_owned()],
    );
    assert_eq!(
        names(&tools),
        ["read", "shared", "mcp__a__x", "mcp__b__y", "late"]
    );
    assert_eq!(
        dropped,
        [
            "tool `read` of source one is left out: another tool of the agent already has that \
             name; rename one of them",
            "tool `mcp__a__x` of source two is left out: another tool of the agent already has \
             that name; rename one of them",
            "tool `finish` of source two is left out: another tool of the agent already has \
             that name; rename one of them",
            "tool `late` of source two is left out: another tool of the agent already has that \
             name; rename one of them",
        ]
    );
}

#[test]
fn the_merged_list_is_new_only_when_a_source_changed() {
    let source = Swappable::new("swappable", &["one"]);
    let mut live = LiveTools::new(
        vec![tool("fixed")],
        vec![source.clone() as Arc<dyn ToolSource>],
        Vec::new(),
        &[],
    );
    assert!(live.is_live());
    assert_eq!(names(&live.merged()), ["fixed", "one"]);
    assert!(live.changed().is_none(), "nothing changed");
    source.set(&["one", "two"]);
    assert_eq!(
        live.changed().as_deref().map(names),
        Some(vec!["fixed", "one", "two"])
    );
    assert!(live.changed().is_none(), "reported once");
    // A list of new definitions with the same names is a change too (a new description).
    source.set(&["one", "two"]);
    assert_eq!(
        live.changed().as_deref().map(names),
        Some(vec!["fixed", "one", "two"])
    );
    source.set(&[]);
    assert_eq!(live.changed().as_deref().map(names), Some(vec!["fixed"]));
}

#[test]
fn without_sources_the_list_is_fixed() {
    let mut live = LiveTools::new(vec![tool("a")], Vec::new(), vec![tool("b")], &[]);
    assert!(!live.is_live());
    assert_eq!(names(&live.merged()), ["a", "b"]);
    assert!(live.changed().is_none());
}
