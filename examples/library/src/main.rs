//! Library example (placeholder).
fn main() {}
