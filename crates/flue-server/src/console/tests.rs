//! The console's routes as docs/dev.md lists them.

use super::CONSOLE_ROUTES;

#[test]
fn docs_dev_md_lists_every_console_route() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dev.md")).unwrap();
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|line| line.strip_prefix("### `"))
        .filter_map(|line| line.strip_suffix('`'))
        .collect();
    pretty_assertions::assert_eq!(documented, CONSOLE_ROUTES.to_vec());
}
