//! Tests: tools_builtin.
