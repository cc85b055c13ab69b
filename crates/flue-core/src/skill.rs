//! Skills at run time: the catalog, the prompt text a skill adds, and the built-in `load_skill`
//! tool. (`session.skill`'s options, [`crate::operation::SkillOptions`], are the shared call options.)
//!
//! A session's skills form a [`SkillCatalog`]. The system prompt lists them (name and
//! description). `session.skill(name, ...)` records a short user message naming the skill and
//! its arguments, and puts the skill's body into the system prompt of that one call. The model
//! can also pull a skill in on its own with `load_skill`, which returns the body, or one of a
//! folder skill's resource files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use flue_protocol::record::{Image, UserMessage};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::config::Skill;
use crate::error::{FlueError, Result};
use crate::operation::user_message;
use crate::tool::{Ownership, ToolContext, ToolDefinition, ToolError, ToolMeta};

/// Name of the built-in tool that loads a skill's instructions or resource files.
pub const LOAD_SKILL_TOOL: &str = "load_skill";

/// The skills one session can run, by name.
#[derive(Clone, Debug, Default)]
pub(crate) struct SkillCatalog {
    skills: BTreeMap<String, Arc<Skill>>,
}

impl SkillCatalog {
    /// Indexes `skills`; a repeated name is an [`FlueError::InvalidConfig`].
    pub(crate) fn new(skills: impl IntoIterator<Item = Skill>) -> Result<Self> {
        let mut by_name = BTreeMap::new();
        let mut duplicates = Vec::new();
        for skill in skills {
            let name = skill.name.clone();
            if by_name.insert(name.clone(), Arc::new(skill)).is_some() {
                duplicates.push(format!("duplicate skill {name:?}: rename one of them"));
            }
        }
        if !duplicates.is_empty() {
            return Err(FlueError::config(duplicates.join("; ")));
        }
        Ok(Self { skills: by_name })
    }

    /// The skill called `name`, or [`FlueError::SkillNotRegistered`] listing what exists.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<Skill>> {
        self.skills
            .get(name)
            .cloned()
            .ok_or_else(|| FlueError::SkillNotRegistered {
                skill: name.to_owned(),
                available: self.names(),
            })
    }

    /// The skill names, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        self.skills.keys().cloned().collect()
    }

    /// True when the session has no skills.
    pub(crate) fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skills, sorted by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values().map(AsRef::as_ref)
    }
}

/// The user message recorded for `session.skill`: the skill's name and its arguments.
pub(crate) fn skill_message(
    skill: &Skill,
    args: &BTreeMap<String, Value>,
    images: &[Image],
) -> UserMessage {
    let mut text = format!("Run the skill \"{}\"", skill.name);
    if args.is_empty() {
        text.push('.');
    } else {
        let rendered = serde_json::to_string_pretty(args).unwrap_or_else(|_| "{}".to_owned());
        // Writing to a String cannot fail.
        let _ = write!(text, " with these arguments:\n{rendered}");
    }
    user_message(text, images)
}

/// The user message of a submission that runs `skill` (a message's `skill` option): the
/// skill's instruction and arguments as [`skill_message`] writes them, then the message's own
/// text when it has any, and its images.
pub(crate) fn skill_submission_message(
    skill: &Skill,
    args: &BTreeMap<String, Value>,
    message: UserMessage,
) -> UserMessage {
    let mut text = skill_message(skill, args, &[]).joined_text();
    let mut images = Vec::new();
    for part in message.content {
        match part {
            flue_protocol::record::UserContent::Text { text: extra }
                if !extra.trim().is_empty() =>
            {
                text.push_str("\n\n");
                text.push_str(&extra);
            }
            flue_protocol::record::UserContent::Image(image) => images.push(image),
            _ => {}
        }
    }
    user_message(text, &images)
}

/// The system-prompt section listing the available skills, when there are any.
pub(crate) fn catalog_section(catalog: &SkillCatalog) -> Option<String> {
    if catalog.is_empty() {
        return None;
    }
    let mut text = format!(
        "# Skills\n\nThese skills are available. When one fits the task, load its instructions \
         with the `{LOAD_SKILL_TOOL}` tool before you start.\n"
    );
    for skill in catalog.iter() {
        let _ = write!(text, "\n- {}: {}", skill.name, one_line(&skill.description));
    }
    Some(text)
}

/// The system-prompt section of a skill run with `session.skill` (for that call only).
pub(crate) fn skill_section(skill: &Skill) -> String {
    let mut text = format!(
        "# Skill: {}\n\nThe user asked you to run this skill. Follow its instructions.\n\n{}",
        skill.name,
        skill_text(skill)
    );
    if !skill.resources.is_empty() {
        let _ = write!(
            text,
            "\n\nThis skill's resource files can be read with the `{LOAD_SKILL_TOOL}` tool (give \
             `resource`)."
        );
    }
    text
}

/// A skill's instructions as the model reads them: description, body, resource list.
fn skill_text(skill: &Skill) -> String {
    let mut text = skill.description.trim().to_owned();
    match skill.body.as_deref().map(str::trim) {
        Some(body) if !body.is_empty() => {
            let _ = write!(text, "\n\n{body}");
        }
        _ => {}
    }
    if !skill.resources.is_empty() {
        let paths: Vec<&str> = skill.resources.keys().map(String::as_str).collect();
        let _ = write!(text, "\n\nResource files: {}", paths.join(", "));
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Input of `load_skill`.
#[derive(Debug, Deserialize, JsonSchema)]
struct LoadSkillInput {
    /// The skill's name, as listed in the system prompt.
    name: String,
    /// A resource file of the skill to read instead of its instructions, by its path relative
    /// to the skill folder (as listed with the instructions).
    resource: Option<String>,
}

/// The `load_skill` tool over `catalog`.
pub(crate) fn load_skill_tool(catalog: SkillCatalog) -> Result<ToolDefinition> {
    let catalog = Arc::new(catalog);
    let description = "Load the instructions of one of your skills (listed in the system prompt \
                       under Skills) so you can follow them, or read one of a skill's resource \
                       files by giving `resource` as well. Returns the text.";
    let tool = ToolDefinition::from_fn(
        LOAD_SKILL_TOOL,
        description,
        move |input: LoadSkillInput, _ctx: ToolContext| {
            let catalog = Arc::clone(&catalog);
            async move { load_skill(&catalog, &input).map(Value::String) }
        },
    )?;
    Ok(tool
        .with_meta(ToolMeta {
            ownership: Ownership::Managed,
            read_only: true,
            ..ToolMeta::default()
        })
        .with_origin(crate::tool::ToolOrigin::Skills))
}

fn load_skill(catalog: &SkillCatalog, input: &LoadSkillInput) -> Result<String, ToolError> {
    let skill = catalog.get(&input.name)?;
    let Some(resource) = &input.resource else {
        return Ok(format!("# Skill: {}\n\n{}", skill.name, skill_text(&skill)));
    };
    let Some(bytes) = skill.resources.get(resource.trim_start_matches("./")) else {
        let known: Vec<&str> = skill.resources.keys().map(String::as_str).collect();
        return Err(ToolError::new(
            "not_found",
            format!(
                "skill {:?} has no resource file {resource:?} (its resource files: {})",
                skill.name,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        ));
    };
    String::from_utf8(bytes.clone()).map_err(|_| {
        ToolError::invalid_input(format!(
            "resource {resource:?} of skill {:?} is not text; only text resources can be read",
            skill.name
        ))
    })
}

#[cfg(test)]
mod tests;
