//! The `flue` binary (placeholder).
fn main() {}
