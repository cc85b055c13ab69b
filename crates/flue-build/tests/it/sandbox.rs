//! Sandbox settings: `sandbox:` in agent files, `[sandbox]` in flue.toml, and how they layer.

use flue_build::{SandboxKind, SandboxOptions, SandboxSettings, SeedSetting};
use pretty_assertions::assert_eq;

use crate::support::{at, check_diagnostics, load};

/// flue.toml with a default model, so that agent files need none.
const DEFAULT_MODEL: &str = "[defaults]\nmodel = \"anthropic/claude-sonnet-4-6\"\n";

fn options(edit: impl FnOnce(&mut SandboxOptions)) -> SandboxOptions {
    let mut options = SandboxOptions::default();
    edit(&mut options);
    options
}

#[test]
fn a_sandbox_mapping_carries_options() {
    let workspace = load(&[
        ("flue.toml", DEFAULT_MODEL),
        (
            "agents/a.md",
            "---\nsandbox:\n  kind: virtual\n  seed: src\n  exclude: [target, .env*]\n  timeout_ms: 5000\n---\nBody",
        ),
        (
            "agents/b.md",
            "---\nsandbox: { kind: daytona, network: true, snapshot: small, sandbox_id: sb-1, api_url: \"http://127.0.0.1:1/api\" }\n---\nBody",
        ),
        (
            "agents/c.md",
            "---\nsandbox: { kind: virtual, seed: false }\n---\nBody",
        ),
    ]);
    let settings = |name: &str| {
        let agent = &workspace.agents[name];
        (agent.sandbox, agent.sandbox_options.clone())
    };
    assert_eq!(
        settings("a"),
        (
            Some(SandboxKind::Virtual),
            options(|o| {
                o.seed = Some(SeedSetting::Dir("src".into()));
                o.exclude = Some(vec!["target".into(), ".env*".into()]);
                o.timeout_ms = Some(5000);
            })
        )
    );
    assert_eq!(
        settings("b"),
        (
            Some(SandboxKind::Daytona),
            options(|o| {
                o.network = Some(true);
                o.snapshot = Some("small".into());
                o.sandbox_id = Some("sb-1".into());
                o.api_url = Some("http://127.0.0.1:1/api".into());
            })
        )
    );
    assert_eq!(
        settings("c"),
        (
            Some(SandboxKind::Virtual),
            options(|o| o.seed = Some(SeedSetting::Empty))
        )
    );
}

#[test]
fn options_that_do_not_fit_the_kind_are_all_reported_at_their_lines() {
    check_diagnostics(
        &[
            ("flue.toml", DEFAULT_MODEL),
            (
                "agents/a.md",
                "---\nsandbox:\n  kind: isolated\n  seed: .\n  snapshot: x\n  netwrok: true\n  timeout_ms: 0\n---\nBody",
            ),
            (
                "agents/b.md",
                "---\nsandbox:\n  kind: virtual\n  network: true\n---\nBody",
            ),
            (
                "agents/c.md",
                "---\nsandbox:\n  kind: local\n  network: false\n---\nBody",
            ),
            ("agents/d.md", "---\nsandbox:\n  network: true\n---\nBody"),
            ("agents/e.md", "---\nsandbox: [virtual]\n---\nBody"),
        ],
        &[
            at(
                "agents/a.md",
                4,
                "`sandbox.seed` applies to the virtual sandbox only, not to `isolated`",
            ),
            at(
                "agents/a.md",
                5,
                "`sandbox.snapshot` applies to the daytona sandbox only, not to `isolated`",
            ),
            at(
                "agents/a.md",
                6,
                "unknown key `netwrok` in `sandbox` (did you mean `network`?)",
            ),
            at(
                "agents/a.md",
                7,
                "`sandbox.timeout_ms` must be a whole number of at least 1, got 0",
            ),
            at(
                "agents/b.md",
                4,
                "the virtual sandbox has no network: use `kind: isolated` or `kind: daytona` with `network: true`",
            ),
            at(
                "agents/c.md",
                4,
                "the local sandbox cannot take the network away: use `kind: isolated` (no network by default)",
            ),
            at(
                "agents/d.md",
                2,
                "`sandbox` needs a `kind` (virtual, local, isolated or daytona) next to its options",
            ),
            at(
                "agents/e.md",
                2,
                "`sandbox` must be a kind (virtual, local, isolated, daytona) or a mapping with `kind` and options, got a list",
            ),
        ],
    );
}

#[test]
fn flue_toml_sets_the_workspace_sandbox() {
    let workspace = load(&[(
        "flue.toml",
        "[sandbox]\nkind = \"isolated\"\nnetwork = true\ntimeout_ms = 60000\n",
    )]);
    assert_eq!(
        workspace.config.sandbox,
        Some(SandboxSettings {
            kind: SandboxKind::Isolated,
            options: options(|o| {
                o.network = Some(true);
                o.timeout_ms = Some(60_000);
            }),
        })
    );
    let workspace = load(&[("flue.toml", "[sandbox]\nseed = \"docs\"\n")]);
    assert_eq!(
        workspace.config.sandbox,
        Some(SandboxSettings {
            kind: SandboxKind::Virtual,
            options: options(|o| o.seed = Some(SeedSetting::Dir("docs".into()))),
        })
    );
}

#[test]
fn bad_flue_toml_sandbox_settings_are_reported_at_their_lines() {
    check_diagnostics(
        &[(
            "flue.toml",
            "[sandbox]\nkind = \"local\"\nseed = \"src\"\nnetwork = false\n",
        )],
        &[
            at(
                "flue.toml",
                3,
                "`sandbox.seed` applies to the virtual sandbox only, not to `local`",
            ),
            // flue.toml's hints are written in TOML.
            at(
                "flue.toml",
                4,
                "the local sandbox cannot take the network away: use `kind = \"isolated\"` (no network by default)",
            ),
        ],
    );
    check_diagnostics(
        &[("flue.toml", "[sandbox]\nkind = \"docker\"\n")],
        &[at(
            "flue.toml",
            2,
            "invalid sandbox `docker`: expected one of virtual, local, isolated, daytona",
        )],
    );
    check_diagnostics(
        &[(
            "flue.toml",
            "[sandbox]\nkind = \"virtual\"\nimage = \"x\"\n",
        )],
        &[at(
            "flue.toml",
            3,
            "unknown key `image` (known keys here: kind, seed, exclude, network, timeout_ms, snapshot, sandbox_id, api_url)",
        )],
    );
}

#[test]
fn the_agent_wins_over_flue_toml() {
    let toml = SandboxSettings {
        kind: SandboxKind::Isolated,
        options: options(|o| {
            o.network = Some(true);
            o.timeout_ms = Some(1_000);
        }),
    };
    let none = SandboxOptions::default();
    // No agent setting: flue.toml's; neither: virtual with defaults.
    assert_eq!(SandboxSettings::resolve(Some(&toml), None, &none), toml);
    assert_eq!(
        SandboxSettings::resolve(None, None, &none),
        SandboxSettings::default()
    );
    assert_eq!(SandboxSettings::default().kind, SandboxKind::Virtual);
    // The same kind: options merge, the agent's first.
    let agent = options(|o| o.timeout_ms = Some(5));
    assert_eq!(
        SandboxSettings::resolve(Some(&toml), Some(SandboxKind::Isolated), &agent),
        SandboxSettings {
            kind: SandboxKind::Isolated,
            options: options(|o| {
                o.network = Some(true);
                o.timeout_ms = Some(5);
            }),
        }
    );
    // Another kind: the agent's settings alone.
    assert_eq!(
        SandboxSettings::resolve(Some(&toml), Some(SandboxKind::Local), &none),
        SandboxSettings {
            kind: SandboxKind::Local,
            options: none.clone(),
        }
    );
    // A kind chosen later (flue run --sandbox) keeps options only for the same kind.
    assert_eq!(toml.clone().with_kind(SandboxKind::Isolated), toml);
    assert_eq!(
        toml.with_kind(SandboxKind::Virtual),
        SandboxSettings::default()
    );
}

#[test]
fn a_seed_outside_the_workspace_is_refused_at_its_line() {
    let inside = "a directory inside the workspace, relative to its root (like `src`)";
    check_diagnostics(
        &[
            (
                "flue.toml",
                "[sandbox]\nseed = \"/home\"\nexclude = [\"a/b\"]\n",
            ),
            (
                "agents/a.md",
                "---\nmodel: openai/y\nsandbox:\n  kind: virtual\n  seed: /etc\n---\nBody",
            ),
            (
                "agents/b.md",
                "---\nmodel: openai/y\nsandbox: { kind: virtual, seed: ../.ssh }\n---\nBody",
            ),
            (
                "agents/c.md",
                "---\nmodel: openai/y\nsandbox:\n  kind: virtual\n  seed: src/../../..\n  exclude: [.., ok]\n---\nBody",
            ),
        ],
        &[
            at(
                "agents/a.md",
                5,
                &format!(
                    "`sandbox.seed` must be {inside}, not the absolute path \"/etc\": a sandbox \
                     never copies files from outside its workspace"
                ),
            ),
            at(
                "agents/b.md",
                3,
                &format!(
                    "`sandbox.seed` must be {inside}, without `..`: \"../.ssh\" climbs out of it"
                ),
            ),
            at(
                "agents/c.md",
                5,
                &format!(
                    "`sandbox.seed` must be {inside}, without `..`: \"src/../../..\" climbs out of it"
                ),
            ),
            at(
                "agents/c.md",
                6,
                "`sandbox.exclude` lists \"..\": each entry is one file or folder name matched \
                 at any depth (like `target` or `.env*`), not a path",
            ),
            at(
                "flue.toml",
                2,
                &format!(
                    "`sandbox.seed` must be {inside}, not the absolute path \"/home\": a sandbox \
                     never copies files from outside its workspace"
                ),
            ),
            at(
                "flue.toml",
                3,
                "`sandbox.exclude` lists \"a/b\": each entry is one file or folder name matched \
                 at any depth (like `target` or `.env*`), not a path",
            ),
        ],
    );
}
