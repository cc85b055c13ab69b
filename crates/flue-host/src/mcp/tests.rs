//! Unit tests of `${VAR}` expansion and of declarations turned into connection options.

use pretty_assertions::assert_eq;

use super::{expand, options};

fn lookup(name: &str) -> Option<String> {
    match name {
        "TOKEN" => Some("t0k".to_owned()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

#[test]
fn variables_are_replaced_and_other_dollars_kept() {
    let cases = [
        ("Bearer ${TOKEN}", "Bearer t0k"),
        ("${TOKEN}${TOKEN}", "t0kt0k"),
        ("[${EMPTY}]", "[]"),
        ("cost: $5 and $HOME", "cost: $5 and $HOME"),
        ("plain", "plain"),
    ];
    for (text, expected) in cases {
        assert_eq!(expand(text, lookup), Ok(expected.to_owned()), "{text}");
    }
}

#[test]
fn problems_name_the_variable_and_never_a_value() {
    assert_eq!(
        expand("Bearer ${MISSING}", lookup),
        Err("`${MISSING}` is not set: set MISSING in the environment or in .env".to_owned())
    );
    assert_eq!(
        expand("${TOKEN", lookup),
        Err("`${` without a closing `}`: write `${NAME}`".to_owned())
    );
    assert_eq!(
        expand("${1X}", lookup),
        Err("`${1X}` is not a variable name: use letters, digits and `_`".to_owned())
    );
}

#[test]
fn timeout_settings_reach_the_connection_options() {
    let decl = flue_build::McpServerDecl::Stdio(flue_build::StdioMcpServer {
        command: "server".to_owned(),
        args: Vec::new(),
        env: std::collections::BTreeMap::new(),
        cwd: None,
        sampling: false,
        timeout_ms: Some(2_500),
        elicitation_timeout_ms: Some(90_000),
        reset_timeout_on_progress: true,
    });
    let root = std::path::Path::new("/workspace");
    let built = options("files", &decl, root, &crate::Env::new()).unwrap();
    assert_eq!(built.timeout, std::time::Duration::from_millis(2_500));
    assert!(built.reset_timeout_on_progress);
    assert_eq!(
        built.elicitation_timeout,
        std::time::Duration::from_secs(90)
    );
    let flue_build::McpServerDecl::Stdio(mut plain) = decl else {
        unreachable!()
    };
    plain.timeout_ms = None;
    plain.elicitation_timeout_ms = None;
    plain.reset_timeout_on_progress = false;
    let built = options(
        "files",
        &flue_build::McpServerDecl::Stdio(plain),
        root,
        &crate::Env::new(),
    )
    .unwrap();
    assert_eq!(built.timeout, flue_connectors::DEFAULT_MCP_TIMEOUT);
    assert_eq!(
        built.elicitation_timeout,
        flue_connectors::DEFAULT_ELICITATION_TIMEOUT
    );
    assert!(!built.reset_timeout_on_progress);
}
