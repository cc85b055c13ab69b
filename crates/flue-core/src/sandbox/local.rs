//! Local sandbox (placeholder until the sandbox work lands).

/// A host directory as a sandbox.
#[derive(Debug, Default)]
pub struct LocalSandbox {}
