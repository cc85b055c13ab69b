//! Skills under `.agents/skills/`: the Agent Skills frontmatter rules and resource files.
//!
//! A skill is a flat file `.agents/skills/<name>.md` or a folder `.agents/skills/<name>/` with
//! a `SKILL.md` and any resource files next to it. Its frontmatter follows the Agent Skills
//! convention: `name` (required, at most 64 characters of `a-z`, `0-9` and `-`, no leading,
//! trailing or double hyphen, equal to the folder name or file stem), `description` (required,
//! at most 1024 characters), and optional `license`, `compatibility` (at most 500 characters),
//! `metadata` (a map of strings) and `allowed-tools`. Keys other agents add to the format
//! (Claude Code's `argument-hint`, `disable-model-invocation`, `user-invocable`, `model`, ...;
//! [`VENDOR_KEYS`]) are accepted and ignored, each with a note, so skills written for those
//! agents load unchanged; any other key is an error. Resource files are read with the skill;
//! symbolic links and sensitive files (private keys, `.env` files, credentials) are refused.

use std::collections::BTreeMap;

use gray_matter::Pod;

use crate::diagnostic::Diagnostic;
use crate::fields::{self, Report};
use crate::frontmatter::{self, describe};
use crate::source::{Source, join, read_text, unreadable};
use flue_core::util::workspace_file::{MAX_MARKDOWN_BYTES, MAX_RESOURCE_BYTES};

/// A skill as declared by its files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkillFile {
    /// The skill's name (its folder name, or its file stem).
    pub name: String,
    /// `SKILL.md` or the flat file, relative to the workspace root with `/` separators.
    pub path: String,
    /// `description`: what the skill does and when to use it.
    pub description: String,
    /// `license`, when given.
    pub license: Option<String>,
    /// `compatibility`: environment requirements, when given.
    pub compatibility: Option<String>,
    /// `metadata`: extra string properties.
    pub metadata: BTreeMap<String, String>,
    /// `allowed-tools`: tools the skill expects to use (informational).
    pub allowed_tools: Vec<String>,
    /// The instructions: the markdown body.
    pub body: String,
    /// Resource files of a folder skill, by path relative to the folder (`/` separators).
    pub resources: BTreeMap<String, Vec<u8>>,
    /// `result`: the JSON Schema of the structured result of running this skill (inline, or
    /// read from the file it names relative to the skill file), checked.
    pub result: Option<serde_json::Value>,
    /// One note per frontmatter key of another agent's extension of the format
    /// ([`VENDOR_KEYS`]), which Flue accepts and ignores; shown by `flue build`.
    pub notes: Vec<Diagnostic>,
}

impl SkillFile {
    /// The flue-core skill: name, description, body and resources.
    pub fn to_skill(&self) -> flue_core::Skill {
        let mut skill = flue_core::Skill::new(&self.name, &self.description);
        if !self.body.is_empty() {
            skill = skill.with_body(&self.body);
        }
        skill.resources.clone_from(&self.resources);
        skill.result.clone_from(&self.result);
        skill
    }
}

/// The frontmatter keys a skill may use.
pub(crate) const SKILL_KEYS: &[&str] = &[
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "result",
];

/// Frontmatter keys other agents add to the Agent Skills format, with the agent that reads
/// each: accepted in a skill and ignored (with a note), since they configure that agent's user
/// interface or runtime rather than the skill's instructions.
pub const VENDOR_KEYS: &[(&str, &str)] = &[
    ("argument-hint", "Claude Code"),
    ("disable-model-invocation", "Claude Code"),
    ("user-invocable", "Claude Code"),
    ("model", "Claude Code"),
    ("effort", "Claude Code"),
    ("context", "Claude Code"),
    ("agent", "Claude Code"),
    ("hooks", "Claude Code"),
    ("version", "several agents"),
];

const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 1024;
const MAX_COMPATIBILITY_CHARS: usize = 500;

/// Which form a skill takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Form {
    /// `<name>.md`.
    Flat,
    /// `<name>/SKILL.md`.
    Folder,
}

/// Checks a skill name against the Agent Skills rules; the error says what is wrong.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.chars().count() > MAX_NAME_CHARS {
        "is longer than 64 characters"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        "may only contain lowercase letters a-z, digits and `-`"
    } else if name.starts_with('-') || name.ends_with('-') {
        "must not start or end with `-`"
    } else if name.contains("--") {
        "must not contain `--`"
    } else {
        return Ok(());
    };
    Err(problem.to_owned())
}

/// Reads and checks the skill `name` in `form` at `path` (its markdown file), with its
/// resources when it is a folder. Returns `None` after reporting when anything is wrong.
pub(crate) fn load(
    source: &dyn Source,
    name: &str,
    form: Form,
    path: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<SkillFile> {
    let before = diagnostics.len();
    if let Err(problem) = check_name(name) {
        let what = match form {
            Form::Flat => "file",
            Form::Folder => "folder",
        };
        diagnostics.push(Diagnostic::file(
            path,
            format!("invalid skill name `{name}`: it {problem}; rename the {what}"),
        ));
    }
    let text = read_text(source, path, MAX_MARKDOWN_BYTES, diagnostics)?;
    let resources = match form {
        Form::Flat => BTreeMap::new(),
        Form::Folder => {
            let folder = path.strip_suffix("/SKILL.md").unwrap_or(path);
            let mut resources = BTreeMap::new();
            collect_resources(source, folder, "", &mut resources, diagnostics);
            resources
        }
    };
    let skill = parse(source, name, form, path, &text, resources, diagnostics)?;
    (diagnostics.len() == before).then_some(skill)
}

fn parse(
    source: &dyn Source,
    name: &str,
    form: Form,
    path: &str,
    text: &str,
    resources: BTreeMap<String, Vec<u8>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<SkillFile> {
    if text.trim().is_empty() {
        diagnostics.push(Diagnostic::file(
            path,
            format!(
                "skill file is empty: add frontmatter with `name: {name}` and a `description`, \
                 then the instructions"
            ),
        ));
        return None;
    }
    let document = frontmatter::parse(path, text, diagnostics)?;
    let mut skill = SkillFile {
        name: name.to_owned(),
        path: path.to_owned(),
        body: document.body,
        resources,
        ..SkillFile::default()
    };
    let mut report = Report::new(path, &document.lines, diagnostics);
    let mut declared_name = None;
    let mut description = None;
    let mut ignored: Vec<(String, &str)> = Vec::new();
    for (key, value) in &document.fields {
        let keys = [key.as_str()];
        match key.as_str() {
            "name" => declared_name = report.check(&keys, fields::string(key, value)),
            "description" => {
                description = report.check(&keys, bounded(key, value, MAX_DESCRIPTION_CHARS));
            }
            "license" => skill.license = report.check(&keys, fields::string(key, value)),
            "compatibility" => {
                skill.compatibility =
                    report.check(&keys, bounded(key, value, MAX_COMPATIBILITY_CHARS));
            }
            "metadata" => {
                skill.metadata = report
                    .check(&keys, fields::string_map(key, value))
                    .unwrap_or_default();
            }
            "allowed-tools" => {
                skill.allowed_tools = report
                    .check(&keys, allowed_tools(value))
                    .unwrap_or_default();
            }
            "result" => {
                let schema = crate::result_schema::parse(value).and_then(|decl| match decl {
                    crate::result_schema::ResultDecl::Inline(schema) => Ok(schema),
                    crate::result_schema::ResultDecl::File(file) => {
                        crate::result_schema::load(source, path, &file, true)
                    }
                });
                skill.result = report.check(&keys, schema);
            }
            _ => {
                if let Some((_, agent)) = VENDOR_KEYS.iter().find(|(vendor, _)| vendor == key) {
                    ignored.push((key.clone(), *agent));
                } else {
                    // A near miss of an ignored key is suggested too; the list of known
                    // keys names only the format's own.
                    let with_vendor: Vec<&str> = SKILL_KEYS
                        .iter()
                        .copied()
                        .chain(VENDOR_KEYS.iter().map(|(vendor, _)| *vendor))
                        .collect();
                    let near_miss =
                        !crate::suggest::did_you_mean(key, with_vendor.iter().copied()).is_empty();
                    let known = if near_miss {
                        &with_vendor[..]
                    } else {
                        SKILL_KEYS
                    };
                    report.unknown_key(&keys, "", known);
                }
            }
        }
    }
    for (key, agent) in ignored {
        skill.notes.push(Diagnostic::at(
            path,
            document.lines.top(&key),
            format!("`{key}` is an extension of the skill format read by {agent}; Flue ignores it"),
        ));
    }
    if let Some(declared) = declared_name
        && declared != name
    {
        let actual = match form {
            Form::Flat => format!("the file is `{name}.md`"),
            Form::Folder => format!("the folder is `{name}`"),
        };
        report.error(
            &["name"],
            format!("`name` is `{declared}` but {actual}: they must match; rename one"),
        );
    }
    let declares = |key: &str| document.fields.iter().any(|(field, _)| field == key);
    if !declares("name") {
        diagnostics.push(Diagnostic::at(
            path,
            1,
            format!("missing `name`: add `name: {name}` to the frontmatter"),
        ));
    }
    if !declares("description") {
        diagnostics.push(Diagnostic::at(
            path,
            1,
            "missing `description`: add one line saying what the skill does and when to use it",
        ));
    }
    skill.description = description.unwrap_or_default();
    Some(skill)
}

/// A non-empty string of at most `max` characters.
fn bounded(key: &str, pod: &Pod, max: usize) -> Result<String, String> {
    let text = fields::string(key, pod)?;
    let n_chars = text.chars().count();
    if text.trim().is_empty() {
        return Err(format!("`{key}` must not be empty"));
    }
    if n_chars > max {
        return Err(format!(
            "`{key}` is {n_chars} characters long; at most {max} are allowed"
        ));
    }
    Ok(text)
}

/// `allowed-tools`: a space-separated string (the Agent Skills form) or a list of strings.
fn allowed_tools(pod: &Pod) -> Result<Vec<String>, String> {
    match pod {
        Pod::String(text) => Ok(text.split_whitespace().map(str::to_owned).collect()),
        Pod::Array(_) => fields::string_list("allowed-tools", pod),
        other => Err(format!(
            "`allowed-tools` must be a space-separated string or a list of tool names, got {}",
            describe(other)
        )),
    }
}

/// Reads every file under the skill folder `folder` (except its `SKILL.md`) into `resources`,
/// refusing symbolic links and sensitive files. Stricter than the workspace file rule (which
/// allows links inside the root): a resource is judged by its name (`.env`, keys), so a link
/// named `notes.txt` must not bring in the workspace's `.env`.
fn collect_resources(
    source: &dyn Source,
    folder: &str,
    within: &str,
    resources: &mut BTreeMap<String, Vec<u8>>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let dir = join(folder, within);
    let names = match source.list(&dir) {
        Ok(names) => names,
        Err(error) => {
            diagnostics.push(Diagnostic::file(
                &dir,
                format!("cannot read folder: {error}"),
            ));
            return;
        }
    };
    for name in names {
        let inner = join(within, &name);
        let full = join(folder, &inner);
        if inner == "SKILL.md" {
            continue;
        }
        if source.is_symlink(&full) {
            diagnostics.push(Diagnostic::file(
                &full,
                "skill resources may not be symbolic links: copy the file into the skill folder \
                 instead",
            ));
            continue;
        }
        if source.is_dir(&full) {
            collect_resources(source, folder, &inner, resources, diagnostics);
            continue;
        }
        if let Some(reason) = sensitive_name(&name) {
            diagnostics.push(refused(&full, reason));
            continue;
        }
        match source.read(&full, MAX_RESOURCE_BYTES) {
            Ok(bytes) if holds_private_key(&bytes) => {
                diagnostics.push(refused(&full, "it holds a private key"));
            }
            Ok(bytes) => {
                resources.insert(inner, bytes);
            }
            Err(error) => diagnostics.push(unreadable(&full, &error)),
        }
    }
}

fn refused(path: &str, reason: &str) -> Diagnostic {
    Diagnostic::file(
        path,
        format!(
            "refusing to include this file in a skill: {reason}; remove it from the skill folder \
             (secrets belong in the environment, not in skills)"
        ),
    )
}

/// Why a file name looks like it holds secrets, if it does.
fn sensitive_name(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    const KEY_FILES: &[&str] = &["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"];
    const KEY_EXTENSIONS: &[&str] = &[".pem", ".key", ".p12", ".pfx", ".jks", ".keystore"];
    const CREDENTIAL_FILES: &[&str] = &[
        ".netrc",
        ".pgpass",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
        ".htpasswd",
    ];
    if lower == ".env" || lower.starts_with(".env.") {
        Some("`.env` files hold secrets")
    } else if KEY_FILES.contains(&lower.as_str())
        || KEY_EXTENSIONS.iter().any(|ext| lower.ends_with(ext))
    {
        Some("it looks like a private key or certificate store")
    } else if CREDENTIAL_FILES.contains(&lower.as_str()) || lower.starts_with("credentials") {
        Some("it looks like a credentials file")
    } else {
        None
    }
}

/// Whether `bytes` hold a PEM or OpenSSH private key.
fn holds_private_key(bytes: &[u8]) -> bool {
    let needle = b"PRIVATE KEY-----";
    bytes.windows(needle.len()).any(|window| window == needle)
}
