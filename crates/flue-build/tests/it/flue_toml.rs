//! flue.toml: defaults, unknown keys and syntax errors with lines.

use flue_build::{Defaults, StoreSettings, TaskSettings, WorkspaceConfig};
use flue_core::{Permission, ThinkingLevel};
use pretty_assertions::assert_eq;

use crate::support::{at, check_diagnostics, load};

#[test]
fn defaults_are_read() {
    let workspace = load(&[(
        "flue.toml",
        "# workspace settings\n[defaults]\nmodel = \"openai/gpt-5\"\nthinking = \"xhigh\"\n\
         [defaults.budget]\nmax_cost_usd = 0.5\nconversation = { max_turns = 200 }\n",
    )]);
    let expected = WorkspaceConfig {
        defaults: Defaults {
            model: Some("openai/gpt-5".to_owned()),
            thinking: Some(ThinkingLevel::Xhigh),
            permissions: Vec::new(),
            budget: Some(flue_core::Budget {
                max_cost_usd: Some(0.5),
                conversation: flue_core::BudgetLimits {
                    max_turns: Some(200),
                    ..flue_core::BudgetLimits::default()
                },
                ..flue_core::Budget::default()
            }),
        },
        ..WorkspaceConfig::default()
    };
    assert_eq!(workspace.config, expected);
}

#[test]
fn an_empty_flue_toml_is_all_defaults() {
    assert_eq!(
        load(&[("flue.toml", "")]).config,
        WorkspaceConfig::default()
    );
}

#[test]
fn an_unknown_key_is_reported_with_its_line_and_a_suggestion() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[defaults]\nthinking = \"low\"\nmodle = \"openai/gpt-5\"\n",
        )],
        &[at(
            "flue.toml",
            3,
            "unknown key `modle` (did you mean `model`?)",
        )],
    );
}

#[test]
fn an_unknown_section_is_reported() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[defaults]\nmodel = \"openai/gpt-5\"\n\n[telemetry]\nenabled = true\n",
        )],
        &[at(
            "flue.toml",
            4,
            "unknown key `telemetry` (known keys here: defaults, sandbox, mcp, providers, store, schedules, hooks, claude_code, tasks)",
        )],
    );
}

#[test]
fn a_default_outside_its_section_says_where_it_belongs() {
    check_diagnostics(
        &[("flue.toml", "model = \"openai/gpt-5\"\n")],
        &[at(
            "flue.toml",
            1,
            "unknown key `model` at the top level: put it under [defaults]",
        )],
    );
}

#[test]
fn a_syntax_error_is_reported_with_its_line() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[defaults]\nthinking = \"low\"\nmodel = openai/gpt-5\n",
        )],
        &[at(
            "flue.toml",
            3,
            "invalid flue.toml: string values must be quoted, expected literal string",
        )],
    );
}

#[test]
fn a_wrong_type_is_reported_with_its_line() {
    check_diagnostics(
        &[("flue.toml", "[defaults]\nthinking = 3\n")],
        &[at(
            "flue.toml",
            2,
            "invalid flue.toml: invalid type: integer `3`, expected a string",
        )],
    );
}

#[test]
fn bad_default_values_are_all_reported() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[defaults]\nmodel = \"gpt-5\"\nthinking = \"max\"\n",
        )],
        &[
            at(
                "flue.toml",
                2,
                "invalid model `gpt-5`: expected `<provider>/<model>`, e.g. `anthropic/claude-sonnet-4-6`",
            ),
            at(
                "flue.toml",
                3,
                "invalid thinking level `max`: expected one of off, minimal, low, medium, high, xhigh",
            ),
        ],
    );
}

#[test]
fn default_permissions_are_read_and_checked_with_lines() {
    let workspace = load(&[(
        "flue.toml",
        "[defaults.permissions]\n\"mcp__*\" = \"always_ask\"\nbash = \"always_allow\"\n",
    )]);
    assert_eq!(
        workspace.config.defaults.permissions,
        [
            ("bash".to_owned(), Permission::AlwaysAllow),
            ("mcp__*".to_owned(), Permission::AlwaysAsk),
        ]
    );
    check_diagnostics(
        &[(
            "flue.toml",
            "[defaults.permissions]\nbash = \"never\"\n\"a b\" = \"always_ask\"\n",
        )],
        &[
            at(
                "flue.toml",
                2,
                "[defaults.permissions] invalid permission `never`: expected one of always_allow, always_ask",
            ),
            at(
                "flue.toml",
                3,
                "[defaults.permissions]: the tool pattern \"a b\" contains ' '; use tool names with `*` and `?` wildcards, e.g. `mcp__*` or `bash`",
            ),
        ],
    );
}

#[test]
fn the_store_section_keeps_the_url_unexpanded() {
    let workspace = load(&[(
        "flue.toml",
        "[store]\nurl = \"postgres://flue:${PGPASSWORD}@db:5432/flue\"\nlease_ms = 4000\n",
    )]);
    assert_eq!(
        workspace.config.store,
        Some(StoreSettings {
            url: "postgres://flue:${PGPASSWORD}@db:5432/flue".to_owned(),
            lease_ms: Some(4000),
        })
    );
}

#[test]
fn a_store_that_is_not_postgres_or_has_a_tiny_lease_is_reported() {
    check_diagnostics(
        &[("flue.toml", "[store]\nurl = \"mysql://db/flue\"\n")],
        &[at(
            "flue.toml",
            2,
            "`store.url` must be a postgres:// URL (the default store, .flue/flue.db, needs no [store] section)",
        )],
    );
    check_diagnostics(
        &[(
            "flue.toml",
            "[store]\nurl = \"postgres://db/flue\"\nlease_ms = 100\n",
        )],
        &[at(
            "flue.toml",
            3,
            "`store.lease_ms = 100` is too short: use at least 500 (renewals run every third of it)",
        )],
    );
    check_diagnostics(
        &[("flue.toml", "[store]\nlease_ms = 1000\n")],
        &[at(
            "flue.toml",
            1,
            "`[store]` needs `url = \"postgres://user:${PASSWORD_VAR}@host:5432/database\"`",
        )],
    );
}

#[test]
fn background_task_limits_are_read() {
    let workspace = load(&[(
        "flue.toml",
        "[tasks]\nmax_background_per_conversation = 2\nmax_background_per_server = 8\n",
    )]);
    let expected = TaskSettings {
        max_background_per_conversation: Some(2),
        max_background_per_server: Some(8),
    };
    assert_eq!(workspace.config.tasks, expected);
}

#[test]
fn a_background_task_limit_of_zero_is_reported_at_its_line() {
    check_diagnostics(
        &[("flue.toml", "[tasks]\nmax_background_per_server = 0\n")],
        &[at(
            "flue.toml",
            2,
            "`tasks.max_background_per_server` must be at least 1",
        )],
    );
}
