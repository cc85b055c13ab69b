//! Loading a workspace: discovering its files, parsing each, and checking cross-references.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::agent_file::{self, AgentFile, ParsedAgent};
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::flue_toml::{self, WorkspaceConfig};
use crate::suggest::did_you_mean;

/// A loaded and validated agent workspace.
///
/// Built by [`Workspace::load`]; every agent in it has a model (its own or the flue.toml
/// default), and its subagents and skills exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    /// The workspace directory, as given.
    pub root: PathBuf,
    /// flue.toml, or the defaults when there is none.
    pub config: WorkspaceConfig,
    /// AGENTS.md, when present and not blank: context for every agent.
    pub context: Option<String>,
    /// The agents by name.
    pub agents: BTreeMap<String, AgentFile>,
}

const AGENTS_DIR: &str = "agents";
const SKILLS_DIR: &str = ".agents/skills";
const CONTEXT_FILE: &str = "AGENTS.md";

impl Workspace {
    /// Loads the workspace at `root`: flue.toml, AGENTS.md, every `agents/*.md` (not
    /// recursive; other files and hidden files are ignored) and the names of the skills under
    /// `.agents/skills/`. Validates every file and the references between them, and returns
    /// every problem at once.
    pub fn load(root: &Path) -> Result<Self, Diagnostics> {
        let mut loader = Loader::new(root);
        loader.discover_agents();
        loader.finish()
    }

    /// Loads the workspace at `root` as [`Workspace::load`] does, plus the agent file at `file`,
    /// which may live outside `agents/` (or outside the root). The agent is named after the
    /// file stem, is checked against the workspace like any other agent, and replaces a
    /// workspace agent of the same name.
    pub fn load_with_agent_file(root: &Path, file: &Path) -> Result<Self, Diagnostics> {
        let mut loader = Loader::new(root);
        loader.discover_agents();
        let added = loader.add_agent_file(file);
        let workspace = loader.finish()?;
        if !added {
            // Every way of failing to add the file reports why, so this is only a safety net.
            let path = file.display().to_string();
            return Err(Diagnostics::one(Diagnostic::file(
                path,
                "cannot load this agent file",
            )));
        }
        Ok(workspace)
    }
}

/// Collects a workspace and its diagnostics while it is being loaded.
struct Loader {
    root: PathBuf,
    config: WorkspaceConfig,
    context: Option<String>,
    skills: BTreeSet<String>,
    agents: BTreeMap<String, ParsedAgent>,
    /// Agents whose files exist but are unusable (already reported); references to them are
    /// not reported again.
    broken: BTreeSet<String>,
    diagnostics: Vec<Diagnostic>,
}

impl Loader {
    /// Reads the root's flue.toml, AGENTS.md and skill names.
    fn new(root: &Path) -> Self {
        let mut loader = Self {
            root: root.to_path_buf(),
            config: WorkspaceConfig::default(),
            context: None,
            skills: BTreeSet::new(),
            agents: BTreeMap::new(),
            broken: BTreeSet::new(),
            diagnostics: Vec::new(),
        };
        if !root.is_dir() {
            loader.diagnostics.push(Diagnostic::file(
                root.display().to_string(),
                "workspace root is not a directory: pass the folder that holds agents/",
            ));
            return loader;
        }
        if let Some(text) = loader.read_optional(flue_toml::PATH) {
            loader.config = flue_toml::parse(&text, &mut loader.diagnostics);
        }
        loader.context = loader
            .read_optional(CONTEXT_FILE)
            .filter(|text| !text.trim().is_empty());
        loader.skills = loader.discover_skills();
        loader
    }

    /// Parses every `agents/*.md`.
    fn discover_agents(&mut self) {
        for file_name in list_dir(&self.root, AGENTS_DIR, &mut self.diagnostics) {
            let path = self.root.join(AGENTS_DIR).join(&file_name);
            let Some(stem) = file_name.strip_suffix(".md") else {
                continue;
            };
            if file_name.starts_with('.') || !path.is_file() {
                continue;
            }
            let relative = format!("{AGENTS_DIR}/{file_name}");
            self.add(stem, &relative, &path);
        }
    }

    /// Parses the agent file at `file`, which may live anywhere; true when it could be added.
    fn add_agent_file(&mut self, file: &Path) -> bool {
        let relative = self.relative_path(file);
        let Some(stem) = file.file_stem().and_then(|stem| stem.to_str()) else {
            self.diagnostics.push(Diagnostic::file(
                &relative,
                "cannot tell the agent's name from this path: name the file `<agent>.md`",
            ));
            return false;
        };
        let name = stem.to_owned();
        let own_file = format!("{AGENTS_DIR}/{name}.md");
        if relative == own_file && !name.starts_with('.') {
            // Already loaded by discovery (or already reported).
            return self.agents.contains_key(&name) || self.broken.contains(&name);
        }
        self.add(&name, &relative, file)
    }

    /// Reads, names and parses one agent file; true when it was added.
    fn add(&mut self, name: &str, relative: &str, path: &Path) -> bool {
        let name_ok = is_agent_name(name);
        if !name_ok {
            self.diagnostics.push(Diagnostic::file(
                relative,
                format!(
                    "invalid agent name `{name}`: rename the file to 1 to 64 characters of a-z, 0-9, `-` and `_`"
                ),
            ));
        }
        let parsed = read_text(path, relative, &mut self.diagnostics)
            .and_then(|text| agent_file::parse(name, relative, &text, &mut self.diagnostics));
        let Some(parsed) = parsed else {
            if name_ok {
                self.agents.remove(name);
                self.broken.insert(name.to_owned());
            }
            return false;
        };
        if name_ok {
            self.broken.remove(name);
            self.agents.insert(name.to_owned(), parsed);
        }
        name_ok
    }

    /// Checks references between files and returns the workspace, or every problem found.
    fn finish(mut self) -> Result<Workspace, Diagnostics> {
        self.check_references();
        self.check_cycles();
        Diagnostics::check(self.diagnostics)?;
        Ok(Workspace {
            root: self.root,
            config: self.config,
            context: self.context,
            agents: self
                .agents
                .into_iter()
                .map(|(name, parsed)| (name, parsed.file))
                .collect(),
        })
    }

    /// Every agent has a model, and its skills and subagents exist.
    fn check_references(&mut self) {
        let default_model = self.config.defaults.model.is_some();
        for parsed in self.agents.values() {
            let agent = &parsed.file;
            if agent.model.is_none() && !parsed.declares_model && !default_model {
                self.diagnostics.push(Diagnostic::file(
                    &agent.path,
                    "no model for this agent: set `model: <provider>/<model>` in its frontmatter, or `model` under [defaults] in flue.toml",
                ));
            }
            for skill in &agent.skills {
                if !self.skills.contains(skill) {
                    let suggestion = did_you_mean(skill, self.skills.iter().map(String::as_str));
                    self.diagnostics.push(Diagnostic::at(
                        &agent.path,
                        parsed.lines.top("skills"),
                        format!(
                            "unknown skill `{skill}`{suggestion}: add {SKILLS_DIR}/{skill}.md or {SKILLS_DIR}/{skill}/SKILL.md"
                        ),
                    ));
                }
            }
            for subagent in &agent.subagents {
                if !self.agents.contains_key(subagent) && !self.broken.contains(subagent) {
                    let suggestion = did_you_mean(subagent, self.agents.keys().map(String::as_str));
                    self.diagnostics.push(Diagnostic::at(
                        &agent.path,
                        parsed.lines.top("subagents"),
                        format!(
                            "unknown subagent `{subagent}`{suggestion}: add {AGENTS_DIR}/{subagent}.md or remove it from `subagents`"
                        ),
                    ));
                }
            }
        }
    }

    /// No agent reaches itself through `subagents`. Every group of agents that reach each other
    /// gets at least one cycle reported; each cycle found is reported once, at the `subagents`
    /// line of its alphabetically first agent.
    fn check_cycles(&mut self) {
        let mut cycles = BTreeSet::new();
        let mut done = BTreeSet::new();
        for name in self.agents.keys() {
            let mut stack = Vec::new();
            self.find_cycles(name, &mut stack, &mut done, &mut cycles);
        }
        for mut names in cycles {
            let Some(first) = names.first().cloned() else {
                continue;
            };
            let Some(parsed) = self.agents.get(&first) else {
                continue;
            };
            names.push(first);
            self.diagnostics.push(Diagnostic::at(
                &parsed.file.path,
                parsed.lines.top("subagents"),
                format!(
                    "circular subagents: {}; remove one of these references",
                    names.join(" -> ")
                ),
            ));
        }
    }

    /// Depth-first search from `name`; each edge back into `stack` closes a cycle, recorded
    /// rotated to start at its smallest name so that each is found once.
    fn find_cycles<'a>(
        &'a self,
        name: &'a str,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        cycles: &mut BTreeSet<Vec<String>>,
    ) {
        if done.contains(name) {
            return;
        }
        if let Some(start) = stack.iter().position(|entry| *entry == name) {
            let cycle = &stack[start..];
            let smallest = (0..cycle.len()).min_by_key(|idx| cycle[*idx]).unwrap_or(0);
            let rotated = cycle[smallest..].iter().chain(&cycle[..smallest]);
            cycles.insert(rotated.map(|entry| (*entry).to_owned()).collect());
            return;
        }
        let Some(parsed) = self.agents.get(name) else {
            return;
        };
        stack.push(name);
        for subagent in &parsed.file.subagents {
            self.find_cycles(subagent, stack, done, cycles);
        }
        stack.pop();
        done.insert(name);
    }

    /// Names of the skills under `.agents/skills/`: `<name>.md` files and `<name>/SKILL.md`
    /// folders.
    fn discover_skills(&mut self) -> BTreeSet<String> {
        let mut skills = BTreeSet::new();
        let dir = self.root.join(SKILLS_DIR);
        for entry_name in list_dir(&self.root, SKILLS_DIR, &mut self.diagnostics) {
            let path = dir.join(&entry_name);
            if let Some(stem) = entry_name.strip_suffix(".md") {
                if path.is_file() {
                    skills.insert(stem.to_owned());
                }
            } else if path.join("SKILL.md").is_file() {
                skills.insert(entry_name);
            }
        }
        skills
    }

    /// The text of the optional file `relative` under the root.
    fn read_optional(&mut self, relative: &str) -> Option<String> {
        let path = self.root.join(relative);
        if !path.exists() {
            return None;
        }
        read_text(&path, relative, &mut self.diagnostics)
    }

    /// `file` relative to the root with `/` separators when it is inside, else as given.
    fn relative_path(&self, file: &Path) -> String {
        let canonical_root = fs::canonicalize(&self.root);
        let canonical_file = fs::canonicalize(file);
        if let (Ok(root), Ok(file)) = (&canonical_root, &canonical_file)
            && let Ok(inside) = file.strip_prefix(root)
        {
            let parts: Vec<String> = inside
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            return parts.join("/");
        }
        file.display().to_string()
    }
}

/// The sorted UTF-8 entry names of the folder `relative` under `root`: nothing when it does
/// not exist, a diagnostic when it is not a folder or cannot be read.
fn list_dir(root: &Path, relative: &str, diagnostics: &mut Vec<Diagnostic>) -> Vec<String> {
    let dir = root.join(relative);
    if !dir.exists() {
        return Vec::new();
    }
    if !dir.is_dir() {
        diagnostics.push(Diagnostic::file(
            relative,
            "expected a folder here: move this file away",
        ));
        return Vec::new();
    }
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) => {
            diagnostics.push(Diagnostic::file(
                relative,
                format!("cannot read folder: {error}"),
            ));
            return Vec::new();
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Reads the UTF-8 file at `path`, reporting failures against `relative`.
fn read_text(path: &Path, relative: &str, diagnostics: &mut Vec<Diagnostic>) -> Option<String> {
    match fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Some(text),
            Err(_) => {
                diagnostics.push(Diagnostic::file(
                    relative,
                    "file is not valid utf-8: save it as utf-8",
                ));
                None
            }
        },
        Err(error) => {
            diagnostics.push(Diagnostic::file(
                relative,
                format!("cannot read file: {error}"),
            ));
            None
        }
    }
}

/// An agent name is 1 to 64 characters of `[a-z0-9_-]`.
fn is_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
