//! flue-build: discovery and validation of Flue agent workspaces (placeholder).
