//! Scripted model provider (placeholder until the scripted provider lands).

/// Replays a script of model turns.
#[derive(Debug, Default)]
pub struct ScriptedProvider {}
