//! Bundles: one self-contained, reproducible file holding a validated workspace.
//!
//! [`Bundle::build`] loads and validates a workspace, then packs every file loading read
//! (flue.toml, AGENTS.md, agent files, skills with their resource files, roles) together with
//! the scripts its `scripted/...` models replay. [`Bundle::read`] checks the content hashes,
//! loads the workspace back from the packed files with the same loader (so a bundle can never
//! hold a workspace validation would reject) and checks the index against it. Running from a
//! bundle needs nothing of the source tree.
//!
//! The format is JSON, documented for users in `docs/bundle-format.md`:
//!
//! ```text
//! {
//!   "format": "flue-bundle", "version": 1,
//!   "digest": "sha256:<hex>",      // of the compact JSON, keys sorted, with "digest": ""
//!   "agents":  {"<name>": {"file", "description"?, "model"?, "thinking"?, "tools", "skills",
//!                          "subagents", "role"?, "sandbox"?}},
//!   "skills":  {"<name>": {"file", "description", "resources"}},
//!   "roles":   {"<name>": {"file", "description", "model"?, "thinking"?}},
//!   "config":  {"defaults": {"model"?, "thinking"?}},
//!   "files":   {"<path>": {"sha256", "text" | "hex"}},
//!   "scripts": {"<model id>": {"sha256", "text" | "hex"}}
//! }
//! ```
//!
//! Every map is sorted by key and nothing depends on time or on where the workspace lives, so
//! the same inputs give the same bytes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use flue_core::ThinkingLevel;
use flue_core::util::workspace_file::{
    MAX_BUNDLE_BYTES, MAX_SCRIPT_BYTES, WorkspaceFileError, WorkspaceFiles, read_file_at_most,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::workspace::Workspace;

/// The `format` field of every bundle.
pub const BUNDLE_FORMAT: &str = "flue-bundle";

/// The bundle format version this crate writes and reads.
pub const BUNDLE_VERSION: u32 = 1;

/// The file name `flue build` writes in its output folder.
pub const BUNDLE_FILE_NAME: &str = "flue-bundle.json";

/// A built workspace: its files, the scripts of its scripted models, and the workspace loaded
/// from them.
///
/// ```
/// use flue_build::Bundle;
///
/// let dir = tempfile::tempdir()?;
/// std::fs::create_dir(dir.path().join("agents"))?;
/// std::fs::write(dir.path().join("agents/greeter.md"), "---\nmodel: openai/b\n---\nSay hello.\n")?;
///
/// let bundle = Bundle::build(dir.path())?;
/// let again = Bundle::from_slice(bundle.as_bytes(), "flue-bundle.json")?;
/// assert_eq!(again.as_bytes(), bundle.as_bytes());
/// assert!(again.workspace().agents.contains_key("greeter"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    workspace: Workspace,
    scripts: BTreeMap<String, Vec<u8>>,
    bytes: Vec<u8>,
    digest: String,
}

/// The bundle as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format: String,
    version: u32,
    digest: String,
    agents: Value,
    skills: Value,
    roles: Value,
    config: Value,
    files: BTreeMap<String, WireFile>,
    scripts: BTreeMap<String, WireFile>,
}

/// One packed file: its hash and its content, as text when it is UTF-8, else as hex.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFile {
    sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

impl Bundle {
    /// Discovers and validates the workspace at `root` and packs it, with the scripts its
    /// `scripted/...` models name. Every problem is reported at once.
    pub fn build(root: &Path) -> Result<Self, Diagnostics> {
        let (workspace, files) = Workspace::load_recording(root)?;
        let scripts = read_scripts(root, &workspace)?;
        let mut wire = Wire {
            format: BUNDLE_FORMAT.to_owned(),
            version: BUNDLE_VERSION,
            digest: String::new(),
            agents: Value::Null,
            skills: Value::Null,
            roles: Value::Null,
            config: Value::Null,
            files: files
                .iter()
                .map(|(path, bytes)| (path.clone(), WireFile::new(bytes)))
                .collect(),
            scripts: scripts
                .iter()
                .map(|(model, bytes)| (model.clone(), WireFile::new(bytes)))
                .collect(),
        };
        set_index(&mut wire, &workspace);
        let digest = digest_of(&mut wire, root)?;
        wire.digest.clone_from(&digest);
        let mut bytes = serde_json::to_vec_pretty(&wire)
            .map_err(|err| bundle_error(root, format!("cannot encode the bundle: {err}")))?;
        bytes.push(b'\n');
        Ok(Self {
            workspace,
            scripts,
            bytes,
            digest,
        })
    }

    /// Reads and checks the bundle file at `path`.
    pub fn read(path: &Path) -> Result<Self, Diagnostics> {
        let bytes = read_file_at_most(path, MAX_BUNDLE_BYTES)
            .map_err(|err| bundle_error(path, format!("cannot read the bundle: {err}")))?;
        Self::from_slice(&bytes, &path.display().to_string())
    }

    /// Parses and checks a bundle; `shown` names it in messages and becomes the workspace's
    /// root. Fails when the format or version is not this crate's, a hash does not match its
    /// content, the packed workspace does not validate, or the index does not match it.
    pub fn from_slice(bytes: &[u8], shown: &str) -> Result<Self, Diagnostics> {
        let root = Path::new(shown);
        let mut wire: Wire = serde_json::from_slice(bytes).map_err(|err| {
            bundle_error(
                root,
                format!("not a flue bundle ({err}); build one with `flue build`"),
            )
        })?;
        if wire.format != BUNDLE_FORMAT {
            return Err(bundle_error(
                root,
                format!(
                    "not a flue bundle: its format is {:?}; build one with `flue build`",
                    wire.format
                ),
            ));
        }
        if wire.version != BUNDLE_VERSION {
            return Err(bundle_error(
                root,
                format!(
                    "bundle format version {} is not supported (this flue reads version \
                     {BUNDLE_VERSION}); rebuild it with this version of flue",
                    wire.version
                ),
            ));
        }
        let claimed = std::mem::take(&mut wire.digest);
        let digest = digest_of(&mut wire, root)?;
        if claimed != digest {
            return Err(bundle_error(
                root,
                "the bundle's digest does not match its content (it was changed after it was \
                 built); rebuild it with `flue build`",
            ));
        }
        let mut problems = Vec::new();
        let files = unpack(&wire.files, "file", &mut problems);
        let scripts = unpack(&wire.scripts, "script", &mut problems);
        if !problems.is_empty() {
            return Err(Diagnostics::from_vec(
                problems
                    .into_iter()
                    .map(|problem| Diagnostic::file(shown, problem))
                    .collect(),
            ));
        }
        let workspace = Workspace::load_files(root, files)?;
        let stored = (
            wire.agents.clone(),
            wire.skills.clone(),
            wire.roles.clone(),
            wire.config.clone(),
        );
        set_index(&mut wire, &workspace);
        if stored != (wire.agents, wire.skills, wire.roles, wire.config) {
            return Err(bundle_error(
                root,
                "the bundle's index does not match its files; rebuild it with `flue build`",
            ));
        }
        Ok(Self {
            workspace,
            scripts,
            bytes: bytes.to_vec(),
            digest,
        })
    }

    /// Writes the bundle as [`BUNDLE_FILE_NAME`] in `out_dir` (created if missing), replacing
    /// any earlier one atomically. Returns the file's path.
    pub fn write(&self, out_dir: &Path) -> std::io::Result<PathBuf> {
        fs::create_dir_all(out_dir)?;
        let path = out_dir.join(BUNDLE_FILE_NAME);
        let partial = out_dir.join(format!(".{BUNDLE_FILE_NAME}.partial"));
        fs::write(&partial, &self.bytes)?;
        fs::rename(&partial, &path)?;
        Ok(path)
    }

    /// The bundle's bytes, as written.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `sha256:<hex>` over the bundle's content.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The workspace the bundle holds.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The scripts of the scripted models, by model id (`scripted/<id>`): give each to
    /// `flue_core::ScriptedProvider::with_script`.
    pub fn scripts(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.scripts
    }
}

impl WireFile {
    fn new(bytes: &[u8]) -> Self {
        let sha256 = hex::encode(Sha256::digest(bytes));
        match std::str::from_utf8(bytes) {
            Ok(text) => Self {
                sha256,
                text: Some(text.to_owned()),
                hex: None,
            },
            Err(_) => Self {
                sha256,
                text: None,
                hex: Some(hex::encode(bytes)),
            },
        }
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.text, &self.hex) {
            (Some(text), None) => Ok(text.as_bytes().to_vec()),
            (None, Some(hex)) => hex::decode(hex).map_err(|err| format!("invalid hex: {err}")),
            _ => Err("needs exactly one of `text` and `hex`".to_owned()),
        }
    }
}

/// The content of packed files whose hashes match, reporting the others.
fn unpack(
    packed: &BTreeMap<String, WireFile>,
    what: &str,
    problems: &mut Vec<String>,
) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for (path, file) in packed {
        match file.bytes() {
            Ok(bytes) if hex::encode(Sha256::digest(&bytes)) == file.sha256 => {
                files.insert(path.clone(), bytes);
            }
            Ok(_) => problems.push(format!(
                "{what} `{path}` does not match its sha256 (the bundle was changed after it was \
                 built); rebuild it with `flue build`"
            )),
            Err(problem) => problems.push(format!("{what} `{path}`: {problem}")),
        }
    }
    files
}

/// `sha256:<hex>` of the canonical JSON of `wire` with an empty digest: compact, with the
/// keys of every object sorted.
fn digest_of(wire: &mut Wire, root: &Path) -> Result<String, Diagnostics> {
    let saved = std::mem::take(&mut wire.digest);
    let value = serde_json::to_value(&*wire);
    wire.digest = saved;
    let value =
        value.map_err(|err| bundle_error(root, format!("cannot encode the bundle: {err}")))?;
    let mut encoded = String::new();
    canonical(&value, &mut encoded);
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(encoded.as_bytes()))
    ))
}

/// Compact JSON with object keys sorted, whatever order the map keeps.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (idx, (key, item)) in entries.into_iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Fills the index sections (agents, skills, roles, config) from `workspace`.
fn set_index(wire: &mut Wire, workspace: &Workspace) {
    let defaults = &workspace.config.defaults;
    let agents: Map<String, Value> = workspace
        .agents
        .values()
        .map(|agent| {
            let mut entry = Map::new();
            entry.insert("file".into(), json!(agent.path));
            insert_some(&mut entry, "description", agent.description.as_deref());
            insert_some(
                &mut entry,
                "model",
                agent.model.as_deref().or(if agent.model_per_call {
                    None
                } else {
                    defaults.model.as_deref()
                }),
            );
            insert_some(
                &mut entry,
                "thinking",
                agent
                    .thinking
                    .or(defaults.thinking)
                    .map(ThinkingLevel::as_str),
            );
            entry.insert("tools".into(), json!(agent.tools));
            entry.insert("skills".into(), json!(agent.skills));
            entry.insert("subagents".into(), json!(agent.subagents));
            insert_some(&mut entry, "role", agent.role.as_deref());
            insert_some(
                &mut entry,
                "sandbox",
                agent.sandbox.map(crate::SandboxKind::as_str),
            );
            (agent.name.clone(), Value::Object(entry))
        })
        .collect();
    let skills: Map<String, Value> = workspace
        .skills
        .values()
        .map(|skill| {
            let resources: Vec<&String> = skill.resources.keys().collect();
            let entry = json!({
                "file": skill.path,
                "description": skill.description,
                "resources": resources,
            });
            (skill.name.clone(), entry)
        })
        .collect();
    let roles: Map<String, Value> = workspace
        .roles
        .values()
        .map(|role| {
            let mut entry = Map::new();
            entry.insert("file".into(), json!(role.path));
            entry.insert("description".into(), json!(role.description));
            insert_some(&mut entry, "model", role.model.as_deref());
            insert_some(
                &mut entry,
                "thinking",
                role.thinking.map(ThinkingLevel::as_str),
            );
            (role.name.clone(), Value::Object(entry))
        })
        .collect();
    let mut config_defaults = Map::new();
    insert_some(&mut config_defaults, "model", defaults.model.as_deref());
    insert_some(
        &mut config_defaults,
        "thinking",
        defaults.thinking.map(ThinkingLevel::as_str),
    );
    wire.agents = Value::Object(agents);
    wire.skills = Value::Object(skills);
    wire.roles = Value::Object(roles);
    wire.config = json!({ "defaults": config_defaults });
}

fn insert_some(map: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), json!(value));
    }
}

/// The scripts named by `scripted/<path>` models anywhere in the workspace, read from under
/// `root`, by model id.
fn read_scripts(
    root: &Path,
    workspace: &Workspace,
) -> Result<BTreeMap<String, Vec<u8>>, Diagnostics> {
    let mut users: BTreeMap<&str, &str> = BTreeMap::new();
    let defaults = workspace
        .config
        .defaults
        .model
        .iter()
        .map(|model| (model, "flue.toml"));
    let agents = workspace.agents.values().flat_map(|agent| {
        let compaction = match &agent.compaction {
            Some(flue_core::config::Compaction::Enabled(config)) => config.model.as_ref(),
            _ => None,
        };
        agent
            .model
            .iter()
            .chain(compaction)
            .map(move |model| (model, agent.path.as_str()))
    });
    let roles = workspace.roles.values().flat_map(|role| {
        role.model
            .iter()
            .map(move |model| (model, role.path.as_str()))
    });
    for (model, file) in defaults.chain(agents).chain(roles) {
        if let Some(id) = model.strip_prefix("scripted/") {
            users.entry(id).or_insert(file);
        }
    }
    let mut scripts = BTreeMap::new();
    let mut problems = Vec::new();
    for (id, file) in users {
        if !Path::new(id)
            .components()
            .all(|part| matches!(part, Component::Normal(_) | Component::CurDir))
        {
            problems.push(Diagnostic::file(
                file,
                format!(
                    "model `scripted/{id}`: script paths must stay inside the workspace (no \
                     absolute paths or `..`)"
                ),
            ));
            continue;
        }
        let read = WorkspaceFiles::open(root)
            .map_err(WorkspaceFileError::Io)
            .and_then(|files| files.read(id, MAX_SCRIPT_BYTES));
        match read {
            Ok(bytes) => {
                scripts.insert(id.to_owned(), bytes);
            }
            Err(err) => problems.push(Diagnostic::file(
                file,
                format!("model `scripted/{id}`: cannot read the script {id}: {err}"),
            )),
        }
    }
    if problems.is_empty() {
        Ok(scripts)
    } else {
        Err(Diagnostics::from_vec(problems))
    }
}

fn bundle_error(path: &Path, message: impl Into<String>) -> Diagnostics {
    Diagnostics::from_vec(vec![Diagnostic::file(path.display().to_string(), message)])
}
