//! Tests: sandbox_local.
