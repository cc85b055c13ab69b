//! Tests: scripted.
