//! Loading a workspace: discovering its files, parsing each, and checking cross-references.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use flue_core::FlueError;

use crate::agent_file::{self, AgentFile, ParsedAgent};
use crate::claude_settings;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::flue_toml::{self, WorkspaceConfig};
use crate::mcp::McpServerDecl;
use crate::role_file::{self, RoleFile};
use crate::skill_file::{self, Form, SkillFile};
use crate::source::{Disk, Source, join, read_path, read_text};
use crate::suggest::did_you_mean;
use crate::toml_span;
use flue_core::util::workspace_file::{MAX_CONFIG_BYTES, MAX_MARKDOWN_BYTES};

/// A loaded and validated agent workspace.
///
/// Built by [`Workspace::load`] (or from a bundle); every agent in it has a model (its own or
/// the flue.toml default), and the skills, roles and subagents it names exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    /// The workspace directory, as given (the bundle file for a workspace read from a bundle).
    pub root: PathBuf,
    /// flue.toml, or the defaults when there is none.
    pub config: WorkspaceConfig,
    /// AGENTS.md, when present and not blank: context for every agent.
    pub context: Option<String>,
    /// The agents by name.
    pub agents: BTreeMap<String, AgentFile>,
    /// The skills under `.agents/skills/`, by name.
    pub skills: BTreeMap<String, SkillFile>,
    /// The roles under `.agents/roles/`, by name.
    pub roles: BTreeMap<String, RoleFile>,
}

pub(crate) const AGENTS_DIR: &str = "agents";
pub(crate) const SKILLS_DIR: &str = ".agents/skills";
pub(crate) const ROLES_DIR: &str = ".agents/roles";
const CONTEXT_FILE: &str = "AGENTS.md";

impl Workspace {
    /// Every schedule (agent files' and flue.toml's), by agent then name.
    pub fn schedules(&self) -> Vec<&crate::Schedule> {
        let mut schedules: Vec<&crate::Schedule> = self
            .agents
            .values()
            .flat_map(|agent| &agent.schedules)
            .chain(&self.config.schedules)
            .collect();
        schedules.sort_by(|a, b| (&a.agent, &a.name).cmp(&(&b.agent, &b.name)));
        schedules
    }

    /// Notes that are not problems, sorted by file and line: the keys of other agents'
    /// extensions of the skill format that the skills use and Flue ignores, and the hook
    /// events and keys flue skips (see [`Workspace::hook_notes`]).
    pub fn notes(&self) -> Vec<Diagnostic> {
        let mut notes: Vec<Diagnostic> = self
            .skills
            .values()
            .flat_map(|skill| skill.notes.iter().cloned())
            .chain(self.hook_notes())
            .collect();
        notes.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
        notes
    }

    /// What the workspace's hook declarations hold that flue skips, sorted by file and line:
    /// events it has no point for, keys it does not read, and (in `.claude/settings*.json`,
    /// which are Claude Code's) hooks it cannot run. Warnings a command prints before running.
    pub fn hook_notes(&self) -> Vec<Diagnostic> {
        let mut notes: Vec<Diagnostic> = self
            .config
            .notes
            .iter()
            .chain(self.agents.values().flat_map(|agent| &agent.notes))
            .cloned()
            .collect();
        notes.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
        notes
    }

    /// The MCP servers of agent `name` by server name: the `[mcp.*]` servers of flue.toml, plus
    /// the agent's own `mcp` entries, which replace a flue.toml server of the same name.
    ///
    /// Fails with [`FlueError::InvalidConfig`] when there is no such agent.
    pub fn mcp_servers(&self, name: &str) -> Result<BTreeMap<String, McpServerDecl>, FlueError> {
        let Some(agent) = self.agents.get(name) else {
            return Err(FlueError::config(format!(
                "unknown agent `{name}`: there is no agents/{name}.md"
            )));
        };
        let mut servers = self.config.mcp.clone();
        servers.extend(agent.mcp.clone());
        Ok(servers)
    }

    /// Loads the workspace at `root`: flue.toml, AGENTS.md, every `agents/*.md` (not
    /// recursive; other files and hidden files are ignored) and the names of the skills under
    /// `.agents/skills/`. Validates every file and the references between them, and returns
    /// every problem at once.
    pub fn load(root: &Path) -> Result<Self, Diagnostics> {
        let disk = Disk::new(root);
        let mut loader = Loader::new(root, &disk);
        loader.discover_agents();
        loader.finish()
    }

    /// flue.toml of the workspace at `root` alone (the defaults when there is none), checked as
    /// [`Workspace::load`] checks it: for commands that need the settings but not the agents
    /// (the inspection commands finding the configured store).
    pub fn load_config(root: &Path) -> Result<WorkspaceConfig, Diagnostics> {
        let disk = Disk::new(root);
        let mut diagnostics = Vec::new();
        let config = if disk.exists(toml_span::PATH) {
            read_text(&disk, toml_span::PATH, MAX_CONFIG_BYTES, &mut diagnostics)
                .map(|text| flue_toml::parse(&text, &mut diagnostics))
                .unwrap_or_default()
        } else {
            WorkspaceConfig::default()
        };
        Diagnostics::check(diagnostics)?;
        Ok(config)
    }

    /// [`Workspace::load`] for running agent `agent` alone: reads flue.toml, AGENTS.md, the
    /// skills and roles (every agent sees them all) and, of `agents/`, only `agent`'s file and
    /// those of the subagents it reaches. Other agents' files are not read, so their problems
    /// neither stop nor slow the run (`flue build` reports them). Problems in `agent`'s file,
    /// in shared files or in a subagent it reaches fail, with every problem found, as
    /// [`Workspace::load`] reports them.
    ///
    /// When `agent` has no file, every agent is read (the caller's unknown-agent error lists
    /// them), and problems confined to other agents' files set those agents aside, coming back
    /// as warnings with the workspace.
    pub fn load_for_agent(
        root: &Path,
        agent: &str,
    ) -> Result<(Self, Vec<Diagnostic>), Diagnostics> {
        let disk = Disk::new(root);
        let own_file = join(AGENTS_DIR, &format!("{agent}.md"));
        let targeted = is_agent_name(agent) && disk.is_file(&own_file);
        let mut set_aside: BTreeSet<String> = BTreeSet::new();
        let mut warnings: Vec<Diagnostic> = Vec::new();
        loop {
            let mut loader = Loader::new(root, &disk);
            if targeted {
                loader.discover_agents_reached_from(agent);
            } else {
                loader.discover_agents();
            }
            for name in &set_aside {
                // Still known as broken: references to it are not reported again here, but
                // checked below.
                loader.agents.remove(name);
                loader.broken.insert(name.clone());
            }
            loader.diagnostics.retain(|diagnostic| {
                !agent_of_file(&diagnostic.path).is_some_and(|name| set_aside.contains(name))
            });
            let diagnostics = match loader.finish() {
                Ok(mut workspace) => {
                    // Agents that need a set-aside agent as a subagent go too, and so on.
                    loop {
                        let needing: Vec<(String, String, String)> = workspace
                            .agents
                            .iter()
                            .filter_map(|(name, file)| {
                                let missing =
                                    file.subagents.iter().find(|sub| set_aside.contains(*sub))?;
                                Some((name.clone(), file.path.clone(), missing.clone()))
                            })
                            .collect();
                        if needing.is_empty() {
                            return Ok((workspace, warnings));
                        }
                        for (name, path, missing) in needing {
                            warnings.push(Diagnostic::file(
                                path,
                                format!("subagent `{missing}` cannot be loaded (see its problems)"),
                            ));
                            if name == agent {
                                return Err(Diagnostics::check(warnings).err().unwrap_or_else(
                                    || Diagnostics::one(Diagnostic::file(AGENTS_DIR, "")),
                                ));
                            }
                            workspace.agents.remove(&name);
                            set_aside.insert(name);
                        }
                    }
                }
                Err(diagnostics) => diagnostics,
            };
            let others: Option<BTreeSet<String>> = diagnostics
                .as_slice()
                .iter()
                .map(|diagnostic| {
                    agent_of_file(&diagnostic.path)
                        .filter(|name| *name != agent && !set_aside.contains(*name))
                        .map(str::to_owned)
                })
                .collect();
            match others {
                Some(names) if !names.is_empty() => {
                    warnings.extend(diagnostics.into_vec());
                    set_aside.extend(names);
                }
                _ => {
                    let mut all = warnings;
                    all.extend(diagnostics.into_vec());
                    return Err(Diagnostics::check(all).err().unwrap_or_else(|| {
                        Diagnostics::one(Diagnostic::file(AGENTS_DIR, "cannot load the agents"))
                    }));
                }
            }
        }
    }

    /// [`Workspace::load`], also returning every file it read, by path relative to the root.
    pub(crate) fn load_recording(
        root: &Path,
    ) -> Result<(Self, BTreeMap<String, Vec<u8>>), Diagnostics> {
        let disk = Disk::recording(root);
        let mut loader = Loader::new(root, &disk);
        loader.discover_agents();
        let workspace = loader.finish()?;
        Ok((workspace, disk.files_read()))
    }

    /// Loads a workspace from files held in memory (a bundle's), named as `root`.
    pub(crate) fn load_files(
        root: &Path,
        files: BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, Diagnostics> {
        let memory = crate::source::Memory::new(files);
        let mut loader = Loader::new(root, &memory);
        loader.discover_agents();
        loader.finish()
    }

    /// Loads the workspace at `root` as [`Workspace::load`] does, plus the agent file at `file`,
    /// which may live outside `agents/` (or outside the root). The agent is named after the
    /// file stem, is checked against the workspace like any other agent, and replaces a
    /// workspace agent of the same name.
    pub fn load_with_agent_file(root: &Path, file: &Path) -> Result<Self, Diagnostics> {
        let disk = Disk::new(root);
        let mut loader = Loader::new(root, &disk);
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
struct Loader<'s> {
    root: PathBuf,
    source: &'s dyn Source,
    config: WorkspaceConfig,
    context: Option<String>,
    skills: BTreeMap<String, SkillFile>,
    roles: BTreeMap<String, RoleFile>,
    agents: BTreeMap<String, ParsedAgent>,
    /// Agents, skills and roles whose files exist but are unusable (already reported);
    /// references to them are not reported again.
    broken: BTreeSet<String>,
    broken_skills: BTreeSet<String>,
    broken_roles: BTreeSet<String>,
    /// Only some agents were read ([`Loader::discover_agents_reached_from`]): the names
    /// suggested for an unknown subagent come from the folder's file names.
    partial: bool,
    diagnostics: Vec<Diagnostic>,
}

impl<'s> Loader<'s> {
    /// Reads the root's flue.toml, AGENTS.md, skills and roles.
    fn new(root: &Path, source: &'s dyn Source) -> Self {
        let mut loader = Self {
            root: root.to_path_buf(),
            source,
            config: WorkspaceConfig::default(),
            context: None,
            skills: BTreeMap::new(),
            roles: BTreeMap::new(),
            agents: BTreeMap::new(),
            broken: BTreeSet::new(),
            broken_skills: BTreeSet::new(),
            broken_roles: BTreeSet::new(),
            partial: false,
            diagnostics: Vec::new(),
        };
        if !source.is_dir("") {
            loader.diagnostics.push(Diagnostic::file(
                root.display().to_string(),
                "workspace root is not a directory: pass the folder that holds agents/",
            ));
            return loader;
        }
        if let Some(text) = loader.read_optional(toml_span::PATH, MAX_CONFIG_BYTES) {
            loader.config = flue_toml::parse(&text, &mut loader.diagnostics);
        }
        if !loader.config.ignore_claude_settings {
            loader.read_claude_settings();
        }
        loader.context = loader
            .read_optional(CONTEXT_FILE, MAX_MARKDOWN_BYTES)
            .filter(|text| !text.trim().is_empty());
        loader.discover_skills();
        loader.discover_roles();
        loader
    }

    /// Adds the hooks of Claude Code's settings files to flue.toml's. What cannot be read
    /// is a note, as everything else about these files: they are Claude Code's.
    fn read_claude_settings(&mut self) {
        for path in claude_settings::SETTINGS_FILES {
            if !self.source.exists(path) {
                continue;
            }
            let mut unreadable = Vec::new();
            let Some(text) = read_text(self.source, path, MAX_CONFIG_BYTES, &mut unreadable) else {
                self.config.notes.extend(unreadable);
                continue;
            };
            let (hooks, notes) = claude_settings::hooks(path, &text);
            self.config.hooks.extend(hooks);
            self.config.notes.extend(notes);
        }
    }

    /// Parses every `agents/*.md`.
    fn discover_agents(&mut self) {
        for file_name in list_dir(self.source, AGENTS_DIR, &mut self.diagnostics) {
            let relative = join(AGENTS_DIR, &file_name);
            let Some(stem) = file_name.strip_suffix(".md") else {
                continue;
            };
            if file_name.starts_with('.') || !self.source.is_file(&relative) {
                continue;
            }
            let text = read_text(
                self.source,
                &relative,
                MAX_MARKDOWN_BYTES,
                &mut self.diagnostics,
            );
            self.add(stem, &relative, text);
        }
    }

    /// Parses `agents/<agent>.md` and, following `subagents`, the files of every agent it
    /// reaches; no other agent file is read. A subagent without a file is reported by
    /// [`Loader::finish`] as unknown, as in a full load.
    fn discover_agents_reached_from(&mut self, agent: &str) {
        self.partial = true;
        let mut queue = vec![agent.to_owned()];
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some(name) = queue.pop() {
            if !seen.insert(name.clone()) || !is_agent_name(&name) {
                continue;
            }
            let relative = join(AGENTS_DIR, &format!("{name}.md"));
            if !self.source.is_file(&relative) {
                continue;
            }
            let text = read_text(
                self.source,
                &relative,
                MAX_MARKDOWN_BYTES,
                &mut self.diagnostics,
            );
            if self.add(&name, &relative, text)
                && let Some(parsed) = self.agents.get(&name)
            {
                queue.extend(parsed.file.subagents.iter().rev().cloned());
            }
        }
    }

    /// The names of the agent files under `agents/` (for suggestions, without reading them).
    fn agent_file_names(&self) -> Vec<String> {
        let mut ignored = Vec::new();
        list_dir(self.source, AGENTS_DIR, &mut ignored)
            .into_iter()
            .filter_map(|file_name| {
                let stem = file_name.strip_suffix(".md")?;
                let relative = join(AGENTS_DIR, &file_name);
                (is_agent_name(stem) && self.source.is_file(&relative)).then(|| stem.to_owned())
            })
            .collect()
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
        // Inside the root, the file is read like every workspace file (a link in it may not
        // lead out); a file the user named outside the root is read as named.
        let text = if self.is_inside(file) {
            read_text(
                self.source,
                &relative,
                MAX_MARKDOWN_BYTES,
                &mut self.diagnostics,
            )
        } else {
            read_path(file, &relative, MAX_MARKDOWN_BYTES, &mut self.diagnostics)
        };
        self.add(&name, &relative, text)
    }

    /// Names and parses one agent file (`None` when it could not be read, already reported);
    /// true when it was added.
    fn add(&mut self, name: &str, relative: &str, text: Option<String>) -> bool {
        let name_ok = is_agent_name(name);
        if !name_ok {
            self.diagnostics.push(Diagnostic::file(
                relative,
                format!(
                    "invalid agent name `{name}`: rename the file to 1 to 64 characters of a-z, 0-9, `-` and `_`"
                ),
            ));
        }
        let parsed =
            text.and_then(|text| agent_file::parse(name, relative, &text, &mut self.diagnostics));
        let parsed = parsed.map(|parsed| self.read_result_file(parsed));
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

    /// Reads the schema file an agent's `result:` names (relative to the agent file), reporting
    /// at the `result` key when it cannot be read or is not a usable schema.
    fn read_result_file(&mut self, mut parsed: ParsedAgent) -> ParsedAgent {
        let Some(file) = parsed.result_file.take() else {
            return parsed;
        };
        let declaring = parsed.file.path.clone();
        let inside = !Path::new(&declaring).is_absolute() && !declaring.starts_with("..");
        match crate::result_schema::load(self.source, &declaring, &file, inside) {
            Ok(schema) => parsed.file.result = Some(schema),
            Err(message) => {
                let mut report =
                    crate::fields::Report::new(&declaring, &parsed.lines, &mut self.diagnostics);
                report.error(&["result"], message);
            }
        }
        parsed
    }

    /// Checks references between files and returns the workspace, or every problem found.
    fn finish(mut self) -> Result<Workspace, Diagnostics> {
        self.check_references();
        self.check_subagent_durability();
        self.check_schedule_names();
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
            skills: self.skills,
            roles: self.roles,
        })
    }

    /// Every agent has a model, and its skills, role and subagents exist.
    fn check_references(&mut self) {
        let default_model = self.config.defaults.model.is_some();
        let providers = self.config.provider_ids();
        let known_agents: Vec<String> = if self.partial {
            self.agent_file_names()
        } else {
            self.agents.keys().cloned().collect()
        };
        if let Some(model) = &self.config.defaults.model
            && let Some(message) = unknown_provider(model, &providers)
        {
            self.diagnostics.push(Diagnostic::file(
                toml_span::PATH,
                format!("[defaults] {message}"),
            ));
        }
        for parsed in self.agents.values() {
            let agent = &parsed.file;
            if let Some(model) = &agent.model
                && let Some(message) = unknown_provider(model, &providers)
            {
                self.diagnostics.push(Diagnostic::at(
                    &agent.path,
                    parsed.lines.top("model"),
                    message,
                ));
            }
            if agent.model.is_none() && !parsed.declares_model && !default_model {
                self.diagnostics.push(Diagnostic::file(
                    &agent.path,
                    "no model for this agent: set `model: <provider>/<model>` in its frontmatter, `model` under [defaults] in flue.toml, or `model: false` to choose it per call (`flue run --model`)",
                ));
            }
            if let Some(role) = &agent.role
                && !self.roles.contains_key(role)
                && !self.broken_roles.contains(role)
            {
                let suggestion = did_you_mean(role, self.roles.keys().map(String::as_str));
                self.diagnostics.push(Diagnostic::at(
                    &agent.path,
                    parsed.lines.top("role"),
                    format!("unknown role `{role}`{suggestion}: add {ROLES_DIR}/{role}.md"),
                ));
            }
            for skill in &agent.skills {
                if !self.skills.contains_key(skill) && !self.broken_skills.contains(skill) {
                    let suggestion = did_you_mean(skill, self.skills.keys().map(String::as_str));
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
                    let suggestion =
                        did_you_mean(subagent, known_agents.iter().map(String::as_str));
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

    /// Schedule names are unique in the workspace (a tick's origin and key name the schedule
    /// alone); each repeat is reported at its line, naming the first.
    fn check_schedule_names(&mut self) {
        let mut first: BTreeMap<&str, &crate::Schedule> = BTreeMap::new();
        let declared = self
            .agents
            .values()
            .flat_map(|parsed| &parsed.file.schedules)
            .chain(&self.config.schedules);
        for schedule in &self.config.schedules {
            if !schedule.agent.is_empty()
                && !self.agents.contains_key(&schedule.agent)
                && !self.broken.contains(&schedule.agent)
            {
                let known: Vec<&str> = self.agents.keys().map(String::as_str).collect();
                self.diagnostics.push(Diagnostic::at(
                    &schedule.path,
                    schedule.line,
                    format!(
                        "schedule `{}` names unknown agent `{}`{}: add {AGENTS_DIR}/{}.md or \
                         fix `agent`",
                        schedule.name,
                        schedule.agent,
                        did_you_mean(&schedule.agent, known.iter().copied()),
                        schedule.agent
                    ),
                ));
            }
        }
        for schedule in declared {
            match first.get(schedule.name.as_str()) {
                Some(earlier) => self.diagnostics.push(Diagnostic::at(
                    &schedule.path,
                    schedule.line,
                    format!(
                        "schedule `{}` is declared already in {}:{}: schedule names are \
                         unique in the workspace; rename one",
                        schedule.name, earlier.path, earlier.line
                    ),
                )),
                None => {
                    first.insert(&schedule.name, schedule);
                }
            }
        }
    }

    /// An agent used as a subagent declares no `durability` (durable submissions belong to
    /// the root agent); reported once per such agent, naming the first agent that lists it.
    fn check_subagent_durability(&mut self) {
        let mut users: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, parsed) in &self.agents {
            for subagent in &parsed.file.subagents {
                users.entry(subagent.as_str()).or_insert(name.as_str());
            }
        }
        for (subagent, user) in users {
            let Some(parsed) = self.agents.get(subagent) else {
                continue;
            };
            if parsed.file.durability.is_some() {
                self.diagnostics.push(Diagnostic::at(
                    &parsed.file.path,
                    parsed.lines.top("durability"),
                    format!(
                        "`durability` is not allowed on an agent used as a subagent (`{user}` \
                         lists it in `subagents`): remove it"
                    ),
                ));
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

    /// The skills under `.agents/skills/`: `<name>.md` files and `<name>/SKILL.md` folders.
    fn discover_skills(&mut self) {
        let mut found: BTreeMap<String, Vec<(Form, String)>> = BTreeMap::new();
        for entry in list_dir(self.source, SKILLS_DIR, &mut self.diagnostics) {
            let relative = join(SKILLS_DIR, &entry);
            if entry.starts_with('.') {
                continue;
            }
            if let Some(stem) = entry.strip_suffix(".md") {
                if self.source.is_file(&relative) {
                    found
                        .entry(stem.to_owned())
                        .or_default()
                        .push((Form::Flat, relative));
                }
            } else if self.source.is_file(&join(&relative, "SKILL.md")) {
                found
                    .entry(entry)
                    .or_default()
                    .push((Form::Folder, join(&relative, "SKILL.md")));
            }
        }
        for (name, mut forms) in found {
            forms.sort();
            if let [(_, first), (_, second), ..] = forms.as_slice() {
                self.diagnostics.push(Diagnostic::file(
                    first,
                    format!("skill `{name}` is defined twice, here and in {second}: keep one"),
                ));
                self.broken_skills.insert(name);
                continue;
            }
            let Some((form, path)) = forms.into_iter().next() else {
                continue;
            };
            match skill_file::load(self.source, &name, form, &path, &mut self.diagnostics) {
                Some(skill) => {
                    self.skills.insert(name, skill);
                }
                None => {
                    self.broken_skills.insert(name);
                }
            }
        }
    }

    /// The roles under `.agents/roles/`: `<name>.md` files.
    fn discover_roles(&mut self) {
        for entry in list_dir(self.source, ROLES_DIR, &mut self.diagnostics) {
            let relative = join(ROLES_DIR, &entry);
            let Some(name) = entry.strip_suffix(".md") else {
                continue;
            };
            if entry.starts_with('.') || !self.source.is_file(&relative) {
                continue;
            }
            if !is_agent_name(name) {
                self.diagnostics.push(Diagnostic::file(
                    &relative,
                    format!(
                        "invalid role name `{name}`: rename the file to 1 to 64 characters of a-z, 0-9, `-` and `_`"
                    ),
                ));
                continue;
            }
            let role = read_text(
                self.source,
                &relative,
                MAX_MARKDOWN_BYTES,
                &mut self.diagnostics,
            )
            .and_then(|text| role_file::parse(name, &relative, &text, &mut self.diagnostics));
            match role {
                Some(role) => {
                    self.roles.insert(name.to_owned(), role);
                }
                None => {
                    self.broken_roles.insert(name.to_owned());
                }
            }
        }
    }

    /// The text of the optional file `relative` under the root.
    fn read_optional(&mut self, relative: &str, limit: u64) -> Option<String> {
        if !self.source.exists(relative) {
            return None;
        }
        read_text(self.source, relative, limit, &mut self.diagnostics)
    }

    /// Whether the folder of `file` lies inside the root (the file itself, when a link, is
    /// not followed: reading it checks where it leads).
    fn is_inside(&self, file: &Path) -> bool {
        self.inside_part(file).is_some()
    }

    /// `file` below the root (when something is there): its folder resolved, its own name
    /// kept.
    fn inside_part(&self, file: &Path) -> Option<PathBuf> {
        file.symlink_metadata().ok()?;
        let root = fs::canonicalize(&self.root).ok()?;
        let name = file.file_name()?;
        let parent = match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let folder = fs::canonicalize(parent).ok()?;
        folder
            .join(name)
            .strip_prefix(&root)
            .ok()
            .map(Path::to_path_buf)
    }

    /// `file` relative to the root with `/` separators when it is inside, else as given.
    fn relative_path(&self, file: &Path) -> String {
        if let Some(inside) = self.inside_part(file) {
            let parts: Vec<String> = inside
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            return parts.join("/");
        }
        file.display().to_string()
    }
}

/// The sorted UTF-8 entry names of the folder `relative`: nothing when it does not exist, a
/// diagnostic when it is not a folder or cannot be read.
fn list_dir(source: &dyn Source, relative: &str, diagnostics: &mut Vec<Diagnostic>) -> Vec<String> {
    if !source.exists(relative) {
        return Vec::new();
    }
    if !source.is_dir(relative) {
        diagnostics.push(Diagnostic::file(
            relative,
            "expected a folder here: move this file away",
        ));
        return Vec::new();
    }
    match source.list(relative) {
        Ok(names) => names,
        Err(error) => {
            diagnostics.push(Diagnostic::file(
                relative,
                format!("cannot read folder: {error}"),
            ));
            Vec::new()
        }
    }
}

/// An agent name is 1 to 64 characters of `[a-z0-9_-]`.
/// The agent an `agents/<name>.md` path belongs to.
fn agent_of_file(path: &str) -> Option<&str> {
    let name = path.strip_prefix("agents/")?.strip_suffix(".md")?;
    (!name.contains('/')).then_some(name)
}

/// The problem with `model` when its provider is none of `providers`.
fn unknown_provider(model: &str, providers: &[String]) -> Option<String> {
    let (provider, _) = model.split_once('/')?;
    if providers.iter().any(|known| known == provider) {
        return None;
    }
    let known: Vec<&str> = providers.iter().map(String::as_str).collect();
    let suggestion = crate::suggest::suggest_model(model, &known)
        .map(|spec| format!(" (did you mean `{spec}`?)"))
        .unwrap_or_default();
    Some(format!(
        "unknown provider `{provider}` in model `{model}`{suggestion}: use one of {}, or declare \
         it under [providers.{provider}] in flue.toml",
        known.join(", ")
    ))
}

fn is_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
