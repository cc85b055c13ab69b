//! Agent initializers: configuration computed per agent instance (the Rust counterpart of
//! `defineAgent(initialize)`).
//!
//! An initializer is a function from [`AgentInitializerContext`] (the instance id and the
//! platform bindings the embedder supplies) to the [`AgentConfig`] to run. It runs every time a
//! harness is built for an instance, so the configuration can depend on the instance (a
//! per-customer prompt, a per-tenant tool) and on the environment; it is not a one-time
//! constructor.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::config::AgentConfig;
use crate::error::Result;

/// What an initializer knows: the instance it configures and the platform bindings.
///
/// ```
/// use flue_core::{AgentConfig, Harness};
/// struct Tenants { premium: Vec<String> }
/// let builder = Harness::initialized_by(|ctx| {
///     let premium = ctx
///         .env::<Tenants>()
///         .is_some_and(|tenants| tenants.premium.contains(&ctx.id));
///     let model = if premium { "scripted/big.json" } else { "scripted/small.json" };
///     Ok(AgentConfig::new().with_model(model))
/// })
/// .with_env(std::sync::Arc::new(Tenants { premium: vec!["acme".into()] }))
/// .with_instance_id("acme");
/// ```
pub struct AgentInitializerContext {
    /// The agent instance id the harness is built for.
    pub id: String,
    env: Option<Arc<dyn Any + Send + Sync>>,
}

impl AgentInitializerContext {
    pub(crate) fn new(id: &str, env: Option<Arc<dyn Any + Send + Sync>>) -> Self {
        Self {
            id: id.to_owned(),
            env,
        }
    }

    /// The platform bindings given with [`crate::harness::HarnessBuilder::with_env`], when they are a
    /// `T`.
    pub fn env<T: Any>(&self) -> Option<&T> {
        self.env.as_deref()?.downcast_ref::<T>()
    }
}

impl fmt::Debug for AgentInitializerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentInitializerContext")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// An initializer as the builder keeps it.
pub(crate) type Initializer =
    Arc<dyn Fn(&AgentInitializerContext) -> Result<AgentConfig> + Send + Sync>;
