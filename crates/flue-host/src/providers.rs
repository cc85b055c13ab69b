//! The model providers a workspace offers: the scripted provider, the built-in remote providers
//! (adjusted by flue.toml) and flue.toml's own `[providers.<id>]`, with keys and base URLs read
//! from the environment and `.env`.
//!
//! Resolution per provider: the built-in configuration (or a new one from flue.toml), then
//! flue.toml's settings over it, then the base-URL variable (`ANTHROPIC_BASE_URL`,
//! `OPENAI_BASE_URL`) over that; the key comes from the provider's `api_key_env` variable. A
//! provider whose configuration is broken (say, a malformed base-URL variable) is left out and
//! reported only when an agent uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use flue_build::{ProviderSettings, WorkspaceConfig};
use flue_core::{FlueError, ProviderRegistry, ScriptedProvider, model::ModelSpec};
use flue_providers::{ApiKey, BuiltinProvider, ProviderConfig};

use crate::Env;

/// The registry, and the providers that could not be built.
#[derive(Clone)]
pub(crate) struct Providers {
    pub(crate) registry: ProviderRegistry,
    /// Configurations whose build failed, with the variable their URL came from; rebuilt to
    /// report the error when an agent uses them.
    broken: BTreeMap<String, (ProviderConfig, Option<&'static str>)>,
    /// The providers built with an API key: their catalogs are the models a message may pick.
    keyed: Vec<String>,
    /// The built-in providers whose base URL was moved (flue.toml or the URL variable): another
    /// server answers there, whose models their catalog does not know.
    moved: BTreeSet<String>,
}

impl Providers {
    /// Every provider the workspace can use.
    pub(crate) fn load(root: &Path, env: &Env, workspace: &WorkspaceConfig) -> Self {
        let mut providers = Self {
            registry: ProviderRegistry::new().with_provider(Arc::new(ScriptedProvider::new(root))),
            broken: BTreeMap::new(),
            keyed: Vec::new(),
            moved: BTreeSet::new(),
        };
        for builtin in BuiltinProvider::ALL {
            let mut config = workspace
                .providers
                .get(builtin.id)
                .map_or_else(|| builtin.config(), ProviderSettings::to_config);
            let mut url_var = None;
            if let Some(var) = builtin.base_url_env
                && let Some(url) = env.get(var).filter(|url| !url.trim().is_empty())
            {
                config.base_url = url.trim().to_owned();
                url_var = Some(var);
            }
            if config.base_url != builtin.config().base_url {
                providers.moved.insert(builtin.id.to_owned());
            }
            // A key is optional for some built-ins (vllm): sent when its variable is set.
            let mut key_var = config
                .api_key_env
                .clone()
                .or_else(|| builtin.api_key_env.map(str::to_owned));
            // Google's key goes by two names: the second is read when the first is unset.
            if let Some(alt) = builtin.api_key_env_alt
                && key_var.as_deref() == builtin.api_key_env
                && !is_set(env, key_var.as_deref())
                && is_set(env, Some(alt))
            {
                key_var = Some(alt.to_owned());
            }
            providers.add(config, key_var.as_deref(), env, url_var);
        }
        for (id, settings) in &workspace.providers {
            if BuiltinProvider::find(id).is_none() {
                let config = settings.to_config();
                let key_var = config.api_key_env.clone();
                providers.add(config, key_var.as_deref(), env, None);
            }
        }
        providers
    }

    /// The configuration error of the provider `model` names, if it is broken.
    pub(crate) fn check(&self, model: Option<&str>) -> Result<(), FlueError> {
        let Some(spec) = model.and_then(|model| ModelSpec::parse(model).ok()) else {
            return Ok(());
        };
        match self.broken.get(&spec.provider) {
            Some((config, url_var)) => match config.clone().build() {
                Ok(_) => Ok(()),
                Err(err) => Err(with_url_var(err, *url_var)),
            },
            None => Ok(()),
        }
    }

    /// The models of the catalogs of the providers that have a key, as `<provider>/<model>`:
    /// what a message may pick besides the workspace's own models.
    pub(crate) fn offered_models(&self) -> Vec<String> {
        let mut models = Vec::new();
        for id in &self.keyed {
            if let Some(provider) = self.registry.get(id) {
                models.extend(
                    provider
                        .known_models()
                        .into_iter()
                        .map(|model| format!("{id}/{model}")),
                );
            }
        }
        models
    }

    /// Why `model` is most likely a typo: a built-in provider at its own URL with a catalog
    /// that does not list it (and flue.toml does not describe it). `None` for every other
    /// provider (flue.toml's own, a moved built-in, one without a catalog): their servers
    /// answer for models flue cannot know.
    pub(crate) fn unknown_model(&self, model: &str) -> Option<String> {
        let (provider, spec) = self.registry.resolve(model).ok()?;
        BuiltinProvider::find(&spec.provider)?;
        let known = provider.known_models();
        if self.moved.contains(&spec.provider)
            || known.is_empty()
            || provider.knows_model(&spec.model)
        {
            return None;
        }
        let suggestion = flue_build::suggest_name(&spec.model, known.iter().map(String::as_str))
            .map(|model| format!(" (did you mean `{}/{model}`?)", spec.provider))
            .unwrap_or_default();
        Some(format!(
            "model {:?} is not in the catalog of provider {:?}{suggestion}; fix the name, or if \
             the provider does serve it, pass --allow-unknown-model or describe it under \
             [providers.{}.models.\"{}\"] in flue.toml",
            spec.model, spec.provider, spec.provider, spec.model
        ))
    }

    /// A warning when `model` is unknown to its provider and runs on conservative defaults.
    pub(crate) fn warning(&self, model: &str) -> Option<String> {
        let (provider, spec) = self.registry.resolve(model).ok()?;
        if provider.knows_model(&spec.model) {
            return None;
        }
        let info = provider.model_info(&spec.model);
        let known = provider.known_models();
        let suggestion = flue_build::suggest_name(&spec.model, known.iter().map(String::as_str))
            .map(|model| format!(" (did you mean `{}/{model}`?)", spec.provider))
            .unwrap_or_default();
        Some(format!(
            "model {:?} is not in the catalog of provider {:?}{suggestion}; using conservative \
             defaults ({} tokens of context, {} output tokens, no reasoning, no images, no \
             price); describe it under [providers.{}.models.\"{}\"] in flue.toml",
            spec.model,
            spec.provider,
            info.context_window,
            info.max_output_tokens,
            spec.provider,
            spec.model
        ))
    }

    fn add(
        &mut self,
        mut config: ProviderConfig,
        key_var: Option<&str>,
        env: &Env,
        url_var: Option<&'static str>,
    ) {
        if let Some(key) = key_var
            .and_then(|var| env.secret(var))
            .filter(|key| !key.trim().is_empty())
        {
            config = config.with_api_key(ApiKey::new(key.trim()));
        }
        let id = config.id.clone();
        let keyed = config.api_key.is_some();
        match config.clone().build() {
            Ok(provider) => {
                if keyed {
                    self.keyed.push(id);
                }
                self.registry.insert(provider);
            }
            Err(_) => {
                self.broken.insert(id, (config, url_var));
            }
        }
    }
}

/// A provider's build error, naming the variable its URL came from.
fn with_url_var(err: FlueError, url_var: Option<&str>) -> FlueError {
    match url_var {
        Some(var) => FlueError::config(format!("{err} (the URL comes from {var})")),
        None => err,
    }
}

/// Whether the variable `var` holds a non-blank value (environment or `.env`).
fn is_set(env: &Env, var: Option<&str>) -> bool {
    var.and_then(|var| env.secret(var))
        .is_some_and(|value| !value.trim().is_empty())
}
