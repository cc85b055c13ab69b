//! Skill references: a skill packaged into the program (a `SKILL.md` compiled in with
//! `include_str!`) that `session.skill` runs as well as a registered skill's name.
//!
//! [`Skill::from_skill_md`] reads the Agent Skills frontmatter (`name`, `description`; other
//! keys are left to the workspace loader) and keeps the body. A reference whose name is also
//! a registered or workspace-discovered skill must be that same skill: two different skills
//! under one name are refused, the rule registration applies between registered and
//! discovered skills.

use std::sync::Arc;

use crate::config::Skill;
use crate::error::{FlueError, Result};
use crate::skill::SkillCatalog;

/// What `session.skill` runs: a registered skill by name, or a packaged skill.
///
/// ```
/// use flue_core::{Skill, SkillRef};
/// let by_name: SkillRef<'_> = "triage".into();
/// let packaged = Skill::from_skill_md(
///     "---\nname: triage\ndescription: Sorts issues\n---\nLabel each issue.\n",
/// )
/// .unwrap();
/// let by_reference: SkillRef<'_> = (&packaged).into();
/// # let _ = (by_name, by_reference);
/// ```
#[derive(Clone, Copy, Debug)]
pub enum SkillRef<'a> {
    /// A skill registered on the agent or discovered in the workspace.
    Name(&'a str),
    /// A packaged skill, run as given.
    Packaged(&'a Skill),
}

impl<'a> From<&'a str> for SkillRef<'a> {
    fn from(name: &'a str) -> Self {
        Self::Name(name)
    }
}

impl<'a> From<&'a String> for SkillRef<'a> {
    fn from(name: &'a String) -> Self {
        Self::Name(name)
    }
}

impl<'a> From<&'a Skill> for SkillRef<'a> {
    fn from(skill: &'a Skill) -> Self {
        Self::Packaged(skill)
    }
}

impl SkillRef<'_> {
    /// The skill to run, looked up in (or checked against) `catalog`.
    pub(crate) fn resolve(&self, catalog: &SkillCatalog) -> Result<Arc<Skill>> {
        match self {
            Self::Name(name) => catalog.get(name),
            Self::Packaged(skill) => match catalog.get(&skill.name) {
                Ok(registered) if registered.body == skill.body => Ok(registered),
                Ok(_) => Err(FlueError::config(format!(
                    "the packaged skill {:?} has the name of a different registered or \
                     workspace skill; rename one of them",
                    skill.name
                ))),
                Err(_) => {
                    if let Err(reason) = crate::util::check_name(&skill.name) {
                        return Err(FlueError::config(format!(
                            "packaged skill name {:?} {reason}",
                            skill.name
                        )));
                    }
                    Ok(Arc::new((*skill).clone()))
                }
            },
        }
    }
}

impl Skill {
    /// A skill from the text of a `SKILL.md` (for example `include_str!("skills/triage/SKILL.md")`):
    /// `name` and `description` from its frontmatter (plain or quoted one-line values), the
    /// rest of the file as its body. Other frontmatter keys are ignored. A missing frontmatter,
    /// name or description is [`FlueError::InvalidConfig`].
    pub fn from_skill_md(text: &str) -> Result<Self> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text.split_inclusive('\n');
        if lines.next().map(str::trim_end) != Some("---") {
            return Err(FlueError::config(
                "SKILL.md must open with `---` frontmatter holding `name` and `description`",
            ));
        }
        let (mut name, mut description) = (None, None);
        let mut closed = false;
        for line in lines.by_ref() {
            if line.trim_end() == "---" {
                closed = true;
                break;
            }
            if line.starts_with([' ', '\t']) {
                continue;
            }
            if let Some((key, value)) = line.split_once(':') {
                let value = unquote(value.trim());
                match key.trim() {
                    "name" => name = Some(value),
                    "description" => description = Some(value),
                    _ => {}
                }
            }
        }
        if !closed {
            return Err(FlueError::config(
                "SKILL.md frontmatter is not closed: add a `---` line after the last key",
            ));
        }
        let body: String = lines.collect();
        let (Some(name), Some(description)) = (name, description) else {
            return Err(FlueError::config(
                "SKILL.md frontmatter needs `name` and `description`",
            ));
        };
        if name.is_empty() || description.is_empty() || description == ">" || description == "|" {
            return Err(FlueError::config(
                "SKILL.md `name` and `description` must be one-line values",
            ));
        }
        let body = body.trim();
        let skill = Self::new(name, description);
        Ok(if body.is_empty() {
            skill
        } else {
            skill.with_body(body)
        })
    }
}

fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
        {
            return inner.to_owned();
        }
    }
    value.to_owned()
}
