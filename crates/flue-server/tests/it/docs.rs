//! docs/http-api.md documents exactly the router's routes: one `### \`METHOD path\`` heading
//! per entry of `flue_server::ROUTES`, no more, no less.

use std::collections::BTreeSet;

#[test]
fn http_api_doc_lists_exactly_the_routers_routes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/http-api.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let documented: BTreeSet<String> = doc
        .lines()
        .filter_map(|line| line.strip_prefix("### `"))
        .filter_map(|line| line.strip_suffix('`'))
        .map(str::to_owned)
        .collect();
    let routed: BTreeSet<String> = flue_server::ROUTES
        .iter()
        .map(|route| (*route).to_owned())
        .collect();
    assert_eq!(
        documented, routed,
        "docs/http-api.md headings vs flue_server::ROUTES"
    );
}
