//! Sandbox settings: the kind and its options, from agent frontmatter and flue.toml.
//!
//! In an agent file, `sandbox:` is a kind (`sandbox: isolated`) or a mapping with `kind` and
//! options (`sandbox: { kind: isolated, network: true }`); in flue.toml it is the `[sandbox]`
//! table with the same keys. Options that do not apply to the kind are errors, reported with
//! the others. [`SandboxSettings::resolve`] layers the two: the agent wins.

use std::path::{Component, Path};

use gray_matter::Pod;

use crate::fields::{self, Report};
use crate::frontmatter::describe;

/// The keys a sandbox mapping may use.
pub(crate) const SANDBOX_KEYS: &[&str] = &[
    "kind",
    "seed",
    "exclude",
    "network",
    "timeout_ms",
    "snapshot",
    "sandbox_id",
    "api_url",
];

/// The sandbox kinds by their spelling.
pub(crate) const SANDBOXES: &[(&str, SandboxKind)] = &[
    ("virtual", SandboxKind::Virtual),
    ("local", SandboxKind::Local),
    ("isolated", SandboxKind::Isolated),
    ("daytona", SandboxKind::Daytona),
];

/// Where an agent's commands and file operations run. May grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SandboxKind {
    /// `virtual`: an in-memory filesystem and bash interpreter (the default).
    #[default]
    Virtual,
    /// `local`: a host directory and real processes.
    Local,
    /// `isolated`: Linux namespaces around the workspace.
    Isolated,
    /// `daytona`: a Daytona remote sandbox.
    Daytona,
}

impl SandboxKind {
    /// The frontmatter spelling (`virtual`, `local`, ...).
    pub fn as_str(self) -> &'static str {
        SANDBOXES
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("virtual", |(name, _)| name)
    }
}

impl std::str::FromStr for SandboxKind {
    type Err = String;

    /// Parses the frontmatter spelling; the error lists the kinds.
    fn from_str(word: &str) -> Result<Self, Self::Err> {
        fields::one_of_str(word, "sandbox", SANDBOXES)
    }
}

impl std::fmt::Display for SandboxKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a virtual sandbox starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeedSetting {
    /// `seed: <dir>`: a copy of this directory, relative to the workspace root. Loading
    /// refuses absolute paths, `..` and NUL bytes, so a seed never names a directory outside
    /// the workspace (symlinks on the way are refused when the sandbox is opened).
    Dir(String),
    /// `seed: false`: an empty workspace.
    Empty,
}

/// Options of a sandbox; which ones apply depends on the kind (checked when parsed).
///
/// May grow: construct with `SandboxOptions::default()` and set fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SandboxOptions {
    /// `seed` (virtual): what the workspace starts with; `flue run` copies the workspace root
    /// when unset.
    pub seed: Option<SeedSetting>,
    /// `exclude` (virtual): names left out of the seed copy at any depth (`name*` matches a
    /// prefix).
    pub exclude: Option<Vec<String>>,
    /// `network` (isolated, daytona): whether commands may use the network (default off).
    pub network: Option<bool>,
    /// `timeout_ms` (any kind): the longest a command may run; commands that ask for less
    /// (the `bash` tool's `timeout_ms`) get less.
    pub timeout_ms: Option<u64>,
    /// `snapshot` (daytona): the snapshot a new sandbox is created from.
    pub snapshot: Option<String>,
    /// `sandbox_id` (daytona): an existing sandbox to use instead of creating one.
    pub sandbox_id: Option<String>,
    /// `api_url` (daytona): the Daytona API (default: the hosted service).
    pub api_url: Option<String>,
}

impl SandboxOptions {
    /// `self` with every option set in `over` replaced by it.
    fn overlaid(&self, over: &Self) -> Self {
        Self {
            seed: over.seed.clone().or_else(|| self.seed.clone()),
            exclude: over.exclude.clone().or_else(|| self.exclude.clone()),
            network: over.network.or(self.network),
            timeout_ms: over.timeout_ms.or(self.timeout_ms),
            snapshot: over.snapshot.clone().or_else(|| self.snapshot.clone()),
            sandbox_id: over.sandbox_id.clone().or_else(|| self.sandbox_id.clone()),
            api_url: over.api_url.clone().or_else(|| self.api_url.clone()),
        }
    }
}

/// A sandbox kind with its options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxSettings {
    /// Which sandbox.
    pub kind: SandboxKind,
    /// Its options.
    pub options: SandboxOptions,
}

impl SandboxSettings {
    /// The settings an agent runs with: flue.toml's `[sandbox]` (`workspace`), then the
    /// agent's `sandbox:` on top. When the agent names another kind than flue.toml, the
    /// agent's settings replace flue.toml's; for the same kind the agent's options override
    /// flue.toml's one by one. Without either: a virtual sandbox with default options.
    pub fn resolve(
        workspace: Option<&SandboxSettings>,
        agent_kind: Option<SandboxKind>,
        agent_options: &SandboxOptions,
    ) -> SandboxSettings {
        match (workspace, agent_kind) {
            (Some(base), Some(kind)) if base.kind == kind => SandboxSettings {
                kind,
                options: base.options.overlaid(agent_options),
            },
            (_, Some(kind)) => SandboxSettings {
                kind,
                options: agent_options.clone(),
            },
            (Some(base), None) => base.clone(),
            (None, None) => SandboxSettings::default(),
        }
    }

    /// These settings for `kind`: unchanged when it is the same kind, else `kind` with no
    /// options (options of one kind never carry over to another).
    pub fn with_kind(self, kind: SandboxKind) -> SandboxSettings {
        if self.kind == kind {
            return self;
        }
        SandboxSettings {
            kind,
            options: SandboxOptions::default(),
        }
    }
}

/// Reads an agent's `sandbox:` value: a kind, or a mapping with `kind` and options.
pub(crate) fn parse_frontmatter(
    value: &Pod,
    report: &mut Report<'_>,
) -> (Option<SandboxKind>, SandboxOptions) {
    let keys = ["sandbox"];
    if let Pod::String(_) = value {
        let kind = report.check(
            &keys,
            fields::one_of("sandbox", value, "sandbox", SANDBOXES),
        );
        return (kind, SandboxOptions::default());
    }
    let expected =
        "a kind (virtual, local, isolated, daytona) or a mapping with `kind` and options";
    let Some(entries) = report.check(&keys, fields::mapping("sandbox", value, expected)) else {
        return (None, SandboxOptions::default());
    };
    let mut kind = None;
    let mut options = SandboxOptions::default();
    let mut has_kind_key = false;
    for (key, value) in entries {
        let keys = ["sandbox", key.as_str()];
        let dotted = format!("sandbox.{key}");
        match key.as_str() {
            "kind" => {
                has_kind_key = true;
                kind = report.check(&keys, fields::one_of(&dotted, value, "sandbox", SANDBOXES));
            }
            "seed" => {
                options.seed = report.check(&keys, seed(&dotted, value));
            }
            "exclude" => {
                options.exclude = report.check(
                    &keys,
                    fields::name_list(&dotted, value)
                        .and_then(|names| check_exclude(&dotted, names)),
                );
            }
            "network" => options.network = report.check(&keys, boolean(&dotted, value)),
            "timeout_ms" => {
                options.timeout_ms = report.check(&keys, fields::u64_at_least(&dotted, value, 1));
            }
            "snapshot" => options.snapshot = report.check(&keys, fields::string(&dotted, value)),
            "sandbox_id" => {
                options.sandbox_id = report.check(&keys, fields::string(&dotted, value));
            }
            "api_url" => options.api_url = report.check(&keys, fields::string(&dotted, value)),
            _ => report.unknown_key(&keys, " in `sandbox`", SANDBOX_KEYS),
        }
    }
    if !has_kind_key {
        report.error(
            &keys,
            "`sandbox` needs a `kind` (virtual, local, isolated or daytona) next to its options",
        );
        return (None, options);
    }
    if let Some(kind) = kind {
        for (key, message) in unsupported(kind, &options, Syntax::Yaml) {
            report.error(&["sandbox", key], message);
        }
    }
    (kind, options)
}

/// Which file a hint is for: its examples are written in that file's syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// An agent file's frontmatter (`kind: isolated`).
    Yaml,
    /// flue.toml (`kind = "isolated"`).
    Toml,
}

/// The options set in `options` that `kind` does not support, with a message for each, its
/// hints written in `syntax`.
pub(crate) fn unsupported(
    kind: SandboxKind,
    options: &SandboxOptions,
    syntax: Syntax,
) -> Vec<(&'static str, String)> {
    let (isolated, daytona, network) = match syntax {
        Syntax::Yaml => ("`kind: isolated`", "`kind: daytona`", "`network: true`"),
        Syntax::Toml => (
            "`kind = \"isolated\"`",
            "`kind = \"daytona\"`",
            "`network = true`",
        ),
    };
    let only = |key: &'static str, kinds: &str| {
        (
            key,
            format!("`sandbox.{key}` applies to the {kinds} sandbox only, not to `{kind}`"),
        )
    };
    let mut problems = Vec::new();
    let is = |wanted: SandboxKind| kind == wanted;
    if options.seed.is_some() && !is(SandboxKind::Virtual) {
        problems.push(only("seed", "virtual"));
    }
    if options.exclude.is_some() && !is(SandboxKind::Virtual) {
        problems.push(only("exclude", "virtual"));
    }
    for (key, set) in [
        ("snapshot", options.snapshot.is_some()),
        ("sandbox_id", options.sandbox_id.is_some()),
        ("api_url", options.api_url.is_some()),
    ] {
        if set && !is(SandboxKind::Daytona) {
            problems.push(only(key, "daytona"));
        }
    }
    match (kind, options.network) {
        (SandboxKind::Virtual, Some(true)) => problems.push((
            "network",
            format!("the virtual sandbox has no network: use {isolated} or {daytona} with {network}"),
        )),
        (SandboxKind::Local, Some(false)) => problems.push((
            "network",
            format!("the local sandbox cannot take the network away: use {isolated} (no network by default)"),
        )),
        _ => {}
    }
    problems
}

/// A `seed` directory: relative to the workspace root and staying inside it.
pub(crate) fn seed_dir(key: &str, dir: &str) -> Result<SeedSetting, String> {
    let inside = "a directory inside the workspace, relative to its root (like `src`)";
    if dir.contains('\0') {
        return Err(format!(
            "`{key}` must be {inside}, not a path with a NUL byte"
        ));
    }
    let path = Path::new(dir);
    if path.has_root() {
        return Err(format!(
            "`{key}` must be {inside}, not the absolute path {dir:?}: a sandbox never copies \
             files from outside its workspace"
        ));
    }
    if path
        .components()
        .any(|part| !matches!(part, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "`{key}` must be {inside}, without `..`: {dir:?} climbs out of it"
        ));
    }
    Ok(SeedSetting::Dir(dir.to_owned()))
}

/// `exclude` names: matched against single entry names at any depth, so each must be one
/// name (`target`, `.env*`), not a path.
pub(crate) fn check_exclude(key: &str, names: Vec<String>) -> Result<Vec<String>, String> {
    for name in &names {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(format!(
                "`{key}` lists {name:?}: each entry is one file or folder name matched at any \
                 depth (like `target` or `.env*`), not a path"
            ));
        }
    }
    Ok(names)
}

/// `seed:` a directory path, or `false`.
fn seed(key: &str, pod: &Pod) -> Result<SeedSetting, String> {
    match pod {
        Pod::String(dir) if !dir.trim().is_empty() => seed_dir(key, dir),
        Pod::Boolean(false) => Ok(SeedSetting::Empty),
        other => Err(format!(
            "`{key}` must be a directory path or `false` (an empty workspace), got {}",
            describe(other)
        )),
    }
}

fn boolean(key: &str, pod: &Pod) -> Result<bool, String> {
    match pod {
        Pod::Boolean(flag) => Ok(*flag),
        other => Err(format!(
            "`{key}` must be true or false, got {}",
            describe(other)
        )),
    }
}
