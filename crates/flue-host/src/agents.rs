//! An agent set: a validated workspace (from a folder, one agent file, or a bundle) with its
//! environment and model providers, loaded once; it opens a harness per conversation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flue_build::{AgentFile, Bundle, SandboxKind, SandboxSettings, Workspace};
use flue_connectors::McpElicitor;
use flue_core::{
    AgentConfig, AgentInfo, FlueError, Harness, HarnessBuilder, ScriptedProvider, ToolDefinition,
    permission::PermissionRule, store::DynSessionStore,
};

use crate::mcp::McpServers;
use crate::providers::Providers;
use crate::sandbox::{self, OpenSandbox};
use crate::{Env, HostError, TrustManifest, TrustPolicy};

/// The agents of one workspace or bundle, ready to open harnesses.
///
/// Loading validates everything (every problem at once, as [`HostError::Diagnostics`]) and
/// builds the model providers from flue.toml and the [`Env`]; opening a harness then only
/// opens what belongs to one conversation: its sandbox and MCP servers. An `AgentSet` is
/// immutable; a server that reloads the workspace loads a new one and swaps it in
/// ([`Host::replace_agents`](crate::Host::replace_agents)).
pub struct AgentSet {
    /// Where agents work (the sandbox seed, `local` sandboxes, MCP `cwd`) and where the store
    /// lives.
    root: PathBuf,
    /// What error messages name as the agents' origin: the root, or the bundle file.
    origin: PathBuf,
    workspace: Workspace,
    env: Env,
    providers: Providers,
    /// Per agent: its configuration with MCP tools, and the connections they use.
    mcp: tokio::sync::Mutex<BTreeMap<String, (AgentConfig, McpServers)>>,
    /// Tokens the agents' models spent answering MCP sampling requests.
    sampling_usage: Arc<std::sync::Mutex<flue_core::Usage>>,
    /// The redactor of the env's secrets, with the secrets it was built from (they grow as
    /// providers read their keys): built again only when they changed.
    redactor: std::sync::Mutex<Option<(Vec<String>, flue_core::Redactor)>>,
    /// What the workspace would run or send secrets to.
    manifest: TrustManifest,
    /// Whether that may happen.
    trust: TrustPolicy,
    /// Whether a model its built-in provider's catalog does not know is let through
    /// (`--allow-unknown-model`) rather than refused as a likely typo.
    unknown_models_allowed: bool,
}

/// Why a harness is prepared: to run (everything needs trust), or to show what it would be
/// (`--dry-run`, listings), which runs and connects nothing of an untrusted workspace.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Run,
    Preview,
}

/// What [`AgentSet::prepare`] hands over: a builder lacking only sandbox, instance id and
/// store; the settings of its sandbox; and warnings for the user.
pub(crate) struct Prepared {
    pub(crate) builder: HarnessBuilder,
    pub(crate) sandbox: SandboxSettings,
    pub(crate) warnings: Vec<String>,
}

/// Per-harness overrides of what the agent file says (the CLI's `--model`, `--sandbox`).
#[derive(Clone, Default)]
pub struct HarnessOptions {
    model: Option<String>,
    sandbox: Option<SandboxKind>,
    role: Option<String>,
    pub(crate) elicitor: Option<Arc<dyn McpElicitor>>,
    sampling_approver: Option<Arc<dyn flue_connectors::McpSamplingApprover>>,
    pub(crate) conversation_sandboxes: Option<Arc<crate::sandbox::ConversationSandboxes>>,
}

impl std::fmt::Debug for HarnessOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessOptions")
            .field("model", &self.model)
            .field("sandbox", &self.sandbox)
            .field("role", &self.role)
            .field("elicitor", &self.elicitor.is_some())
            .field("sampling_approver", &self.sampling_approver.is_some())
            .field(
                "conversation_sandboxes",
                &self.conversation_sandboxes.is_some(),
            )
            .finish()
    }
}

impl HarnessOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the agent on `model` (`<provider>/<model>`) instead of its own.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Runs every call in role `role` (from `.agents/roles/`) unless the call names another;
    /// an unknown role fails the harness build with `unknown_role`.
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// Opens a sandbox of `kind` instead of the agent's and flue.toml's.
    pub fn with_sandbox(mut self, kind: SandboxKind) -> Self {
        self.sandbox = Some(kind);
        self
    }

    /// Answers the MCP servers' elicitation requests with `elicitor` (a terminal prompt,
    /// [`AcceptDefaults`](flue_connectors::AcceptDefaults)); without one they are declined.
    /// [`PendingActionElicitor`](flue_connectors::PendingActionElicitor) makes each question a
    /// live pending action any process answers (the default of a [`Host`](crate::Host)).
    pub fn with_mcp_elicitor(mut self, elicitor: Arc<dyn McpElicitor>) -> Self {
        self.elicitor = Some(elicitor);
        self
    }

    /// Asks `approver` before running a sampling request whose permission
    /// (`mcp__<server>__sampling`) is `always_ask`; without one such requests are refused with
    /// a reason naming the rule.
    pub fn with_mcp_sampling_approver(
        mut self,
        approver: Arc<dyn flue_connectors::McpSamplingApprover>,
    ) -> Self {
        self.sampling_approver = Some(approver);
        self
    }

    /// Seeds the sandboxes of the conversations `sandboxes` names with their files before
    /// their first turn, and holds those sandboxes for reading afterwards (evals). Applies to
    /// the harnesses a [`Host`](crate::Host) builds for a runtime.
    pub fn with_conversation_sandboxes(
        mut self,
        sandboxes: Arc<crate::sandbox::ConversationSandboxes>,
    ) -> Self {
        self.conversation_sandboxes = Some(sandboxes);
        self
    }
}

impl AgentSet {
    /// The agents of the workspace folder `root` (every `agents/*.md`).
    pub fn from_workspace(root: &Path, env: Env) -> Result<Self, HostError> {
        let workspace = Workspace::load(root).map_err(HostError::Diagnostics)?;
        Self::assemble(root, root, workspace, env, &BTreeMap::new())
    }

    /// The agents of the workspace folder `root` for running agent `agent`: `agent` and the
    /// subagents it reaches, other agents' files unread. When `agent` has no file, every agent
    /// is read and broken ones are left out, each problem returned as a warning
    /// (`path:line: ...`); see [`Workspace::load_for_agent`].
    pub fn from_workspace_for_agent(
        root: &Path,
        agent: &str,
        env: Env,
    ) -> Result<(Self, Vec<String>), HostError> {
        let (workspace, problems) =
            Workspace::load_for_agent(root, agent).map_err(HostError::Diagnostics)?;
        let warnings = problems
            .iter()
            .map(|problem| format!("{problem} (that agent is left out of this run)"))
            .chain(workspace.hook_notes().iter().map(ToString::to_string))
            .collect();
        Ok((
            Self::assemble(root, root, workspace, env, &BTreeMap::new())?,
            warnings,
        ))
    }

    /// The workspace at `root` plus the agent file `file` (which may live outside
    /// `agents/`); the agent is named after the file's stem (see [`agent_name_of_file`]).
    pub fn from_agent_file(root: &Path, file: &Path, env: Env) -> Result<Self, HostError> {
        let workspace =
            Workspace::load_with_agent_file(root, file).map_err(HostError::Diagnostics)?;
        Self::assemble(root, root, workspace, env, &BTreeMap::new())
    }

    /// The agents of the bundle file `bundle` (built by `flue build`); they work in `root`,
    /// where conversations are kept too. The scripts the bundle carries join the scripted
    /// provider.
    pub fn from_bundle(bundle: &Path, root: &Path, env: Env) -> Result<Self, HostError> {
        let read = Bundle::read(bundle).map_err(HostError::Diagnostics)?;
        Self::assemble(root, bundle, read.workspace().clone(), env, read.scripts())
    }

    /// Records every model call these agents make into `recorder` (the dev console's prompt
    /// view), with the workspace's secrets redacted. Call it before the agents serve.
    pub fn record_prompts(&mut self, recorder: &flue_server::PromptRecorder) {
        let redactor = flue_core::Redactor::new(self.env.secrets()).unwrap_or_default();
        self.providers.registry = self
            .providers
            .registry
            .wrapped(|provider| recorder.wrap(provider, redactor.clone()));
    }

    /// Wraps every model provider of these agents (and of [`AgentSet::model_providers`]) in
    /// what `wrap` returns: an eval's cassette that records or replays their turns. Call it
    /// before the agents serve.
    pub fn wrap_providers(
        &mut self,
        wrap: impl Fn(Arc<dyn flue_core::ModelProvider>) -> Arc<dyn flue_core::ModelProvider>,
    ) {
        self.providers.registry = self.providers.registry.wrapped(wrap);
    }

    fn assemble(
        root: &Path,
        origin: &Path,
        workspace: Workspace,
        env: Env,
        scripts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, HostError> {
        let manifest = TrustManifest::of(&workspace, &env);
        let mut providers = Providers::load(root, &env, &workspace.config);
        if !scripts.is_empty() {
            let mut scripted = ScriptedProvider::new(root);
            for (model, source) in scripts {
                scripted = scripted.with_script(model, &String::from_utf8_lossy(source))?;
            }
            providers.registry.insert(Arc::new(scripted));
        }
        Ok(Self {
            root: root.to_path_buf(),
            origin: origin.to_path_buf(),
            workspace,
            env,
            providers,
            mcp: tokio::sync::Mutex::new(BTreeMap::new()),
            sampling_usage: Arc::new(std::sync::Mutex::new(flue_core::Usage::default())),
            redactor: std::sync::Mutex::new(None),
            manifest,
            trust: TrustPolicy::Denied,
            unknown_models_allowed: false,
        })
    }

    /// Decides with `trust` whether what the workspace declares may run (hooks, MCP servers,
    /// host sandboxes, schedules, endpoints and variables of its choosing). The default is
    /// [`TrustPolicy::Denied`]: a workspace that declares any of them runs no agent until
    /// trusted; an embedder loading a workspace of its own passes [`TrustPolicy::Granted`].
    #[must_use]
    pub fn with_trust(mut self, trust: TrustPolicy) -> Self {
        self.trust = trust;
        self
    }

    /// Adds items a frontend reads beyond the agents (an eval's command scorers) to what
    /// trust must cover.
    #[must_use]
    pub fn with_trust_items(mut self, items: impl IntoIterator<Item = crate::TrustItem>) -> Self {
        self.manifest = std::mem::take(&mut self.manifest).with(items);
        self
    }

    /// What the workspace would run on the host or send the user's secrets to.
    pub fn trust_manifest(&self) -> &TrustManifest {
        &self.manifest
    }

    /// The trust policy the set was given.
    pub fn trust_policy(&self) -> &TrustPolicy {
        &self.trust
    }

    /// `Ok` when the workspace may run its agents: it declares nothing that needs trust, or
    /// its policy trusts all of it (a recorded trust is read anew each time).
    pub fn require_trust(&self) -> Result<(), HostError> {
        self.trust.require(&self.root, &self.manifest)
    }

    /// Whether [`AgentSet::require_trust`] passes.
    pub fn is_trusted(&self) -> bool {
        self.trust
            .uncovered(&self.root, &self.manifest)
            .is_ok_and(|uncovered| uncovered.is_empty())
    }

    /// The redactor of every secret the env knows now (what each harness of these agents
    /// redacts), for a message being admitted. Built once per set of secrets: a dispatch
    /// reuses it.
    pub(crate) fn redactor(&self) -> Result<flue_core::Redactor, FlueError> {
        let secrets = self.env.secrets();
        let mut cached = self
            .redactor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((built_from, redactor)) = cached.as_ref()
            && *built_from == secrets
        {
            return Ok(redactor.clone());
        }
        let redactor = flue_core::Redactor::new(&secrets)?;
        *cached = Some((secrets, redactor.clone()));
        Ok(redactor)
    }

    /// Signs in to the remote MCP server `server` (declared in flue.toml or by an agent): runs
    /// its OAuth authorization with a loopback redirect, calling `show_url` with the url the
    /// person opens, and keeps the tokens in the workspace store for later runs. With
    /// `grant: client_credentials` no person is involved.
    pub async fn login_mcp_server(
        &self,
        server: &str,
        show_url: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(), HostError> {
        self.require_trust()?;
        let (url, oauth) = self.remote_server(server)?;
        flue_connectors::login_mcp_server(server, &url, oauth, show_url).await?;
        Ok(())
    }

    /// Forgets the stored OAuth tokens of MCP server `server`; how many sets were stored.
    pub fn logout_mcp_server(&self, server: &str) -> Result<usize, HostError> {
        self.remote_server(server)?;
        Ok(crate::tokens::forget(&self.root, server)?)
    }

    /// The url and OAuth settings of remote server `server`.
    fn remote_server(
        &self,
        server: &str,
    ) -> Result<(String, flue_connectors::McpOAuth), HostError> {
        let decl = crate::mcp::find_server(&self.workspace, server).ok_or_else(|| {
            HostError::Core(flue_core::FlueError::config(format!(
                "no mcp server `{server}` in flue.toml or any agent's `mcp` settings"
            )))
        })?;
        let flue_build::McpServerDecl::Remote(remote) = decl else {
            return Err(HostError::Core(flue_core::FlueError::config(format!(
                "mcp server `{server}` is a local process (`command`): only `url` servers sign in"
            ))));
        };
        let options = crate::mcp::options(server, decl, &self.root, &self.env)?;
        Ok((remote.url.clone(), options.oauth))
    }

    /// Where the agents work and conversations are kept.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The validated workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The environment values the set was loaded with.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// The models a message to `agent` may pick (its `model`): the agent's own first, then
    /// every model the workspace names (its agents', roles', flue.toml's
    /// `[providers.<id>.models.<model>]`), then the catalogs of the providers that have a key.
    /// Sorted after the first, without repeats.
    pub fn model_choices(&self, agent: &str) -> Vec<String> {
        let own = self.agent(agent).ok().and_then(|info| info.model);
        let workspace = &self.workspace;
        let mut others: Vec<String> = workspace
            .agents
            .values()
            .filter_map(|file| file.model.clone())
            .chain(workspace.config.defaults.model.clone())
            .chain(
                workspace
                    .roles
                    .values()
                    .filter_map(|role| role.model.clone()),
            )
            .chain(
                workspace
                    .config
                    .providers
                    .iter()
                    .flat_map(|(id, settings)| {
                        settings
                            .models
                            .keys()
                            .map(move |model| format!("{id}/{model}"))
                    }),
            )
            .chain(self.providers.offered_models())
            .filter(|model| own.as_ref() != Some(model))
            .collect();
        others.sort();
        others.dedup();
        own.into_iter().chain(others).collect()
    }

    /// Checks what a message to `agent` chooses for its run (its model, role and skill; see
    /// [`flue_core::MessageOptions`]) from the configuration alone: nothing is opened or
    /// connected. [`FlueError::InvalidRequest`] names the field.
    pub async fn check_options(
        &self,
        agent: &str,
        options: &flue_core::MessageOptions,
    ) -> Result<(), FlueError> {
        let config = self.workspace.agent_config(agent)?;
        if let Some(model) = &options.model {
            self.providers
                .check(Some(model))
                .map_err(|err| FlueError::InvalidRequest {
                    message: format!("`model`: {err}"),
                })?;
            if let Some(message) = self.refused_model(model) {
                return Err(FlueError::InvalidRequest {
                    message: format!("`model`: {message}"),
                });
            }
        }
        Harness::builder(config)
            .with_providers(self.providers.registry.clone())
            .with_workspace_skills(self.workspace.harness_skills())
            .with_roles(self.workspace.harness_roles())
            .check_message_options(options)
            .await
    }

    /// The model providers of the workspace (the scripted one, the built-in ones and
    /// flue.toml's), for a model call outside any agent, such as an eval's judge. Fails as an
    /// agent on `model` would when its provider is misconfigured.
    pub fn model_providers(&self, model: &str) -> Result<flue_core::ProviderRegistry, HostError> {
        self.providers.check(Some(model))?;
        Ok(self.providers.registry.clone())
    }

    /// Every agent, by name.
    pub fn agents(&self) -> Vec<AgentInfo> {
        self.workspace
            .agents
            .keys()
            .filter_map(|name| self.agent(name).ok())
            .collect()
    }

    /// Why `model` (`<provider>/<model>`) is most likely misspelt, with the closest model of
    /// the catalog: a built-in provider at its own URL whose catalog does not list it. `None`
    /// when the model is known, or its provider is one whose models flue cannot know (one of
    /// flue.toml's own, a built-in with a moved base URL, one without a catalog).
    pub fn unknown_model(&self, model: &str) -> Option<String> {
        self.providers.unknown_model(model)
    }

    /// Lets models their built-in provider's catalog does not know through (a model newer
    /// than this flue), in message options as in agents' files.
    #[must_use]
    pub fn allowing_unknown_models(mut self) -> Self {
        self.unknown_models_allowed = true;
        self
    }

    /// [`AgentSet::unknown_model`], unless unknown models are allowed.
    fn refused_model(&self, model: &str) -> Option<String> {
        (!self.unknown_models_allowed)
            .then(|| self.unknown_model(model))
            .flatten()
    }

    /// Every agent whose model is most likely misspelt, each as `agent `NAME`: why`; empty
    /// when unknown models are allowed.
    pub fn agents_with_unknown_models(&self) -> Vec<String> {
        self.agents()
            .into_iter()
            .filter_map(|info| {
                let why = self.refused_model(info.model.as_deref()?)?;
                Some(format!("agent `{}`: {why}", info.name))
            })
            .collect()
    }

    /// One agent, or [`HostError::UnknownAgent`] listing the others.
    pub fn agent(&self, name: &str) -> Result<AgentInfo, HostError> {
        let file = self.agent_file(name)?;
        let model = file.model.clone().or_else(|| {
            (!file.model_per_call)
                .then(|| self.workspace.config.defaults.model.clone())
                .flatten()
        });
        Ok(AgentInfo::new(name)
            .with_description(file.description.clone())
            .with_model(model)
            .with_result(file.result.clone()))
    }

    fn agent_file(&self, name: &str) -> Result<&AgentFile, HostError> {
        self.workspace
            .agents
            .get(name)
            .ok_or_else(|| HostError::UnknownAgent {
                name: name.to_owned(),
                origin: self.origin.display().to_string(),
                known: self
                    .workspace
                    .agents
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Opens agent `agent` for conversation `instance_id` on `store`: its sandbox and the
    /// harness, with the tools of its MCP servers (connected on the agent's first harness and
    /// shared by the set's later ones, until [`AgentSet::close`]). Fails before any model call
    /// when the agent is unknown, its model or provider is unusable, or the sandbox or a
    /// server cannot be opened; whatever was opened for this harness is closed again.
    pub async fn open(
        &self,
        agent: &str,
        instance_id: &str,
        store: Arc<dyn DynSessionStore>,
        options: &HarnessOptions,
    ) -> Result<AgentHarness, HostError> {
        self.open_for(Purpose::Run, agent, instance_id, store, options)
            .await
    }

    /// As [`AgentSet::open`], to show the harness rather than run it (`flue tools`,
    /// `--dry-run`): a workspace the user has not trusted opens without its hooks and MCP
    /// servers, in the virtual sandbox, with a warning saying so; nothing of it runs.
    pub async fn open_preview(
        &self,
        agent: &str,
        instance_id: &str,
        store: Arc<dyn DynSessionStore>,
        options: &HarnessOptions,
    ) -> Result<AgentHarness, HostError> {
        self.open_for(Purpose::Preview, agent, instance_id, store, options)
            .await
    }

    async fn open_for(
        &self,
        purpose: Purpose,
        agent: &str,
        instance_id: &str,
        store: Arc<dyn DynSessionStore>,
        options: &HarnessOptions,
    ) -> Result<AgentHarness, HostError> {
        let prepared = self.prepare_for(purpose, agent, options).await?;
        let sandbox = self.open_sandbox(&prepared).await?;
        let built = prepared
            .builder
            .with_sandbox(Arc::clone(&sandbox.sandbox))
            .with_instance_id(instance_id)
            .with_store(store)
            .build()
            .await;
        match built {
            Ok(harness) => Ok(AgentHarness {
                harness,
                warnings: prepared.warnings,
                sandbox: Some(sandbox),
                sampling_usage: Arc::clone(&self.sampling_usage),
            }),
            Err(err) => {
                sandbox.close().await;
                Err(err.into())
            }
        }
    }

    /// The system prompt and tools `agent` has now (no role or skill of a call), as
    /// `flue run --dry-run` prints them, the workspace's secrets redacted: its harness opened
    /// on a throwaway in-memory store, read, and closed again. Nothing is stored and no model
    /// is called.
    pub async fn assembled_prompt(
        &self,
        agent: &str,
    ) -> Result<(String, Vec<flue_core::model::ToolSchema>), HostError> {
        let store: Arc<dyn DynSessionStore> = Arc::new(flue_core::MemoryStore::new());
        let opened = self
            .open_for(
                Purpose::Preview,
                agent,
                "dry-run",
                store,
                &HarnessOptions::default(),
            )
            .await?;
        let harness = opened.harness();
        let assembled = harness
            .call_system_prompt(None, None)
            .and_then(|system| Ok((system, harness.tool_schemas()?)));
        // Closing a throwaway harness has nothing to report that the prompt view could use.
        let _ = opened.close().await;
        let (mut system, mut tools) = assembled?;
        // What the workspace's context quotes of its secrets is not shown.
        let redactor = flue_core::Redactor::new(self.env.secrets()).unwrap_or_default();
        redactor.redact_in_place(&mut system);
        for tool in &mut tools {
            redactor.redact_in_place(&mut tool.description);
        }
        Ok((system, tools))
    }

    /// Everything of a harness for `agent` but its sandbox, instance id and store: the
    /// configuration with overrides and MCP tools, providers, skills and roles; and the
    /// sandbox settings for [`AgentSet::open_sandbox`].
    pub(crate) async fn prepare(
        &self,
        agent: &str,
        options: &HarnessOptions,
    ) -> Result<Prepared, HostError> {
        self.prepare_for(Purpose::Run, agent, options).await
    }

    /// [`AgentSet::prepare`] for `purpose`: running needs trust; a preview of an untrusted
    /// workspace gets the virtual sandbox, no hooks and no MCP servers (and says so).
    async fn prepare_for(
        &self,
        purpose: Purpose,
        agent: &str,
        options: &HarnessOptions,
    ) -> Result<Prepared, HostError> {
        let agent_file = self.agent_file(agent)?;
        let untrusted_preview = match purpose {
            Purpose::Run => {
                self.require_trust()?;
                false
            }
            Purpose::Preview => !self.is_trusted(),
        };
        let mut sandbox = SandboxSettings::resolve(
            self.workspace.config.sandbox.as_ref(),
            agent_file.sandbox,
            &agent_file.sandbox_options,
        );
        if let Some(kind) = options.sandbox {
            sandbox = sandbox.with_kind(kind);
        }
        if untrusted_preview {
            sandbox = sandbox.with_kind(SandboxKind::Virtual);
        }
        let base = self.workspace.agent_config(agent)?;
        if matches!(purpose, Purpose::Run) {
            hooks_share_the_sandboxs_files(agent, sandbox.kind, &base.hooks)?;
        }
        let model = options.model.clone().or_else(|| base.model.clone());
        self.providers.check(model.as_deref())?;
        let mut warnings: Vec<String> = model
            .as_deref()
            .and_then(|model| self.providers.warning(model))
            .into_iter()
            .collect();
        let mut config = if untrusted_preview {
            warnings.push(UNTRUSTED_PREVIEW.to_owned());
            let mut base = base;
            base.hooks.clear();
            base
        } else {
            self.with_mcp_tools(agent, base, model.as_deref(), options)
                .await?
        };
        if let Some(model) = model {
            config.model = Some(model);
        }
        if let Some(role) = &options.role {
            if !self.workspace.roles.contains_key(role) {
                return Err(FlueError::UnknownRole {
                    role: role.clone(),
                    known: self.workspace.roles.keys().cloned().collect(),
                }
                .into());
            }
            config.role = Some(role.clone());
        }
        let builder = Harness::builder(config)
            .with_providers(self.providers.registry.clone())
            .with_workspace_context(self.workspace.context.clone())
            .with_workspace_skills(self.workspace.harness_skills())
            .with_roles(self.workspace.harness_roles())
            // Every value the env knows as a secret is redacted from tool output and events.
            .with_secrets(self.env.secrets());
        Ok(Prepared {
            builder,
            sandbox,
            warnings,
        })
    }

    /// The tools `agent`'s model is offered ([`Harness::offered_tools`]) and the permission
    /// rules that set their policies, for listings (the dev console's Agent tab): its harness
    /// built for a preview on a throwaway in-memory store and read. Its MCP servers connect on
    /// the agent's first use, as for a conversation, and stay connected.
    pub(crate) async fn offered_tools(
        &self,
        agent: &str,
        options: &HarnessOptions,
    ) -> Result<(Vec<ToolDefinition>, Vec<PermissionRule>), HostError> {
        let prepared = self.prepare_for(Purpose::Preview, agent, options).await?;
        // The tools do not depend on the sandbox: the listing opens none (a container or a
        // remote one would cost a start per listing).
        let harness = prepared
            .builder
            .with_sandbox(Arc::new(flue_core::VirtualSandbox::new()))
            .with_instance_id("dry-run")
            .with_store(Arc::new(flue_core::MemoryStore::new()))
            .build()
            .await?;
        let tools = harness.offered_tools()?;
        Ok((tools, harness.agent().permissions.clone()))
    }

    /// Opens the sandbox of a prepared harness.
    pub(crate) async fn open_sandbox(&self, prepared: &Prepared) -> Result<OpenSandbox, HostError> {
        Ok(sandbox::open(&prepared.sandbox, &self.root, &self.env).await?)
    }

    /// The agent's configuration with the tools of its (and its subagents') MCP servers,
    /// connecting them on the agent's first use; `base` is its configuration without them.
    async fn with_mcp_tools(
        &self,
        agent: &str,
        mut base: AgentConfig,
        model: Option<&str>,
        options: &HarnessOptions,
    ) -> Result<AgentConfig, FlueError> {
        // A tokio mutex: held while the first harness of an agent connects, so that two
        // conversations starting at once connect each server once.
        let mut connected = self.mcp.lock().await;
        if let Some((config, _)) = connected.get(agent) {
            return Ok(config.clone());
        }
        // Sampling requests run on the agent's model; their usage is the set's.
        let redactor = flue_core::Redactor::new(self.env.secrets())?;
        let sampler: Option<Arc<dyn flue_connectors::McpSampler>> = model.map(|model| {
            Arc::new(crate::sampling::ModelSampler {
                providers: self.providers.registry.clone(),
                model: model.to_owned(),
                redactor,
                usage: Arc::clone(&self.sampling_usage),
                permissions: base.permissions.clone(),
                approver: options.sampling_approver.clone(),
            }) as Arc<dyn flue_connectors::McpSampler>
        });
        let servers = McpServers::connect(
            &self.workspace,
            &self.root,
            agent,
            &self.env,
            options.elicitor.as_ref(),
            sampler,
            &mut base,
        )
        .await?;
        connected.insert(agent.to_owned(), (base.clone(), servers));
        Ok(base)
    }

    /// Tokens the agents' models spent answering MCP servers' sampling requests (servers with
    /// `sampling: true`) through this set's connections; not part of any session's usage.
    pub fn mcp_sampling_usage(&self) -> flue_core::Usage {
        *self
            .sampling_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes the MCP servers the set's harnesses connected; returns failures as warnings.
    /// Harnesses still using them see their calls fail.
    pub async fn close(&self) -> Vec<String> {
        let connected = std::mem::take(&mut *self.mcp.lock().await);
        let mut warnings = Vec::new();
        for (_, (_, servers)) in connected {
            warnings.extend(servers.close().await);
        }
        warnings
    }
}

/// The warning of a preview of a workspace the user has not trusted.
const UNTRUSTED_PREVIEW: &str = "the workspace is not trusted: this shows the agent without its \
     hooks and MCP servers, in the virtual sandbox (nothing of the workspace ran); run `flue \
     trust` to see all of it";

/// The agent name of an agent file given by path: its stem (`reviews/strict.md` -> `strict`).
pub fn agent_name_of_file(file: &Path) -> String {
    file.file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default()
        .to_owned()
}

/// An open harness and the sandbox it holds open.
///
/// Call [`close`](AgentHarness::close) when the conversation's work is done: it deletes a
/// Daytona sandbox created for it. Dropped without `close` inside a Tokio runtime, it closes
/// the sandbox in a background task (warnings are then lost). The MCP servers its tools use
/// belong to the [`AgentSet`] and close with it.
pub struct AgentHarness {
    harness: Harness,
    warnings: Vec<String>,
    sandbox: Option<OpenSandbox>,
    sampling_usage: Arc<std::sync::Mutex<flue_core::Usage>>,
}

impl AgentHarness {
    /// The harness: open sessions on it.
    pub fn harness(&self) -> &Harness {
        &self.harness
    }

    /// Warnings about the agent worth showing the user (a model that runs on conservative
    /// defaults because its provider's catalog does not know it).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Tokens the agent's model spent answering MCP servers' sampling requests (servers with
    /// `sampling: true`) by the agent set it came from (its MCP connections are shared); not part of any
    /// session's usage.
    pub fn mcp_sampling_usage(&self) -> flue_core::Usage {
        *self
            .sampling_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes the sandbox; returns a failure as a warning.
    pub async fn close(mut self) -> Vec<String> {
        match self.sandbox.take() {
            Some(sandbox) => sandbox.close().await.into_iter().collect(),
            None => Vec::new(),
        }
    }
}

impl Drop for AgentHarness {
    fn drop(&mut self) {
        if let Some(sandbox) = self.sandbox.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = sandbox.close().await;
            });
        }
    }
}

impl std::fmt::Debug for AgentHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHarness")
            .field("harness", &self.harness)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for AgentSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSet")
            .field("root", &self.root)
            .field("agents", &self.workspace.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Refuses to run the workspace's hooks beside a sandbox whose files are not the workspace's
/// (`virtual`: in memory; `daytona`: remote): hooks run on the host at the workspace root, so
/// they would change the files that sandbox leaves untouched, and not see the ones the agent
/// changed. Http hooks run nothing on the host and are not refused.
fn hooks_share_the_sandboxs_files(
    agent: &str,
    kind: SandboxKind,
    hooks: &[Arc<dyn flue_core::hook::Hook>],
) -> Result<(), HostError> {
    let host_files = matches!(kind, SandboxKind::Local | SandboxKind::Isolated);
    // An http hook runs nothing on the host: it may stand beside any sandbox.
    let names: Vec<String> = hooks
        .iter()
        .filter(|hook| hook.touches_host_files())
        .map(|hook| hook.name())
        .collect();
    if host_files || names.is_empty() {
        return Ok(());
    }
    Err(FlueError::config(format!(
        "agent `{agent}` runs in the {} sandbox, whose files are a copy the workspace's own \
         files never see, but its hooks run on the host at the workspace root, where they would \
         change the workspace's files and not see the agent's ({}): run it with `--sandbox local` \
         or `--sandbox isolated` (or set `sandbox:`) so that the agent and its hooks work on the \
         same files, or remove the hooks (docs/hooks.md, hooks and sandboxes)",
        kind.as_str(),
        names.join("; ")
    ))
    .into())
}
