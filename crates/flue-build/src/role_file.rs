//! Roles under `.agents/roles/<name>.md`: a persona overlay with `description` and optional
//! `model` and `thinking`; the body is the persona text.

use flue_core::ThinkingLevel;

use crate::diagnostic::Diagnostic;
use crate::fields::{self, Report};
use crate::frontmatter;

/// A role as declared by its file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleFile {
    /// The role's name: the file stem.
    pub name: String,
    /// The file, relative to the workspace root with `/` separators.
    pub path: String,
    /// `description`: what the role is for.
    pub description: String,
    /// `model`: the model of calls in this role, when set.
    pub model: Option<String>,
    /// `thinking`: the thinking level of calls in this role, when set.
    pub thinking: Option<ThinkingLevel>,
    /// The persona text: the markdown body.
    pub instructions: String,
}

impl RoleFile {
    /// The flue-core role.
    pub fn to_role(&self) -> flue_core::Role {
        let mut role = flue_core::Role::new(&self.name, &self.description)
            .with_instructions(&self.instructions);
        role.model.clone_from(&self.model);
        role.thinking = self.thinking;
        role
    }
}

/// The frontmatter keys a role may use.
pub(crate) const ROLE_KEYS: &[&str] = &["description", "model", "thinking"];

/// Parses the role `name` from `text`, the file at `path`. Returns `None` after reporting when
/// anything is wrong.
pub(crate) fn parse(
    name: &str,
    path: &str,
    text: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<RoleFile> {
    let before = diagnostics.len();
    if text.trim().is_empty() {
        diagnostics.push(Diagnostic::file(
            path,
            "role file is empty: add frontmatter with a `description`, then the persona text",
        ));
        return None;
    }
    let document = frontmatter::parse(path, text, diagnostics)?;
    let mut role = RoleFile {
        name: name.to_owned(),
        path: path.to_owned(),
        instructions: document.body,
        ..RoleFile::default()
    };
    let mut report = Report::new(path, &document.lines, diagnostics);
    let mut description = None;
    for (key, value) in &document.fields {
        let keys = [key.as_str()];
        match key.as_str() {
            "description" => description = report.check(&keys, fields::string(key, value)),
            "model" => role.model = report.check(&keys, fields::model(key, value)),
            "thinking" => {
                let levels = fields::thinking_levels();
                role.thinking =
                    report.check(&keys, fields::one_of(key, value, "thinking level", &levels));
            }
            _ => report.unknown_key(&keys, "", ROLE_KEYS),
        }
    }
    match description {
        Some(text) => role.description = text,
        None if !document.fields.iter().any(|(key, _)| key == "description") => {
            diagnostics.push(Diagnostic::at(
                path,
                1,
                "missing `description`: add one line saying what the role is for",
            ));
        }
        None => {}
    }
    if role.instructions.is_empty() {
        diagnostics.push(Diagnostic::file(
            path,
            "the role has no persona text: write it below the frontmatter",
        ));
    }
    (diagnostics.len() == before).then_some(role)
}
