//! Workspace trust on the command line: the policy every loaded workspace gets (recorded
//! trust, or `--trust` / `FLUE_TRUST=1` for this process), the question asked on a terminal
//! before a command runs what an untrusted workspace declares, and `flue trust` itself.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use flue_build::Workspace;
use flue_host::{AgentSet, Env, HostError, TrustItem, TrustManifest, TrustPolicy, TrustStore};

use crate::Exit;
use crate::args::TrustArgs;
use crate::stdout::outln;
use crate::terminal::escape_controls;
use crate::workspace::resolve_root;

/// Set by `--trust`, `FLUE_TRUST=1`, or "trust for this command" at the question.
static GRANTED: AtomicBool = AtomicBool::new(false);

/// Takes `--trust` and `FLUE_TRUST` into account for the whole process (called once, first).
pub(crate) fn init(flag: bool) {
    let from_env =
        std::env::var("FLUE_TRUST").is_ok_and(|value| matches!(value.trim(), "1" | "true" | "yes"));
    GRANTED.store(flag || from_env, Ordering::Relaxed);
}

/// The policy of this process: granted by `--trust`/`FLUE_TRUST`, else the user's records.
pub(crate) fn policy() -> TrustPolicy {
    if GRANTED.load(Ordering::Relaxed) {
        return TrustPolicy::Granted;
    }
    match TrustStore::for_user(|name| std::env::var(name).ok()) {
        Some(store) => TrustPolicy::Recorded(store),
        None => TrustPolicy::Denied,
    }
}

/// The user's trust records, or an error saying how to give them a place.
fn store() -> anyhow::Result<TrustStore> {
    TrustStore::for_user(|name| std::env::var(name).ok()).ok_or_else(|| {
        anyhow::anyhow!(
            "cannot find your configuration directory to record trust in: set HOME, \
             XDG_CONFIG_HOME or FLUE_CONFIG_DIR"
        )
    })
}

/// `agents` under this process's policy.
pub(crate) fn apply(agents: AgentSet) -> AgentSet {
    agents.with_trust(policy())
}

/// Before a command runs what `agents` declares: passes when nothing needs trust or the user
/// trusts it. On a terminal an untrusted workspace is described and the user is asked once
/// (remember, this command only, or no); elsewhere it is refused with the ways to trust it.
pub(crate) fn ensure(agents: AgentSet) -> Result<AgentSet, HostError> {
    let (agents, refused) = settle(agents);
    match refused {
        Some(err) => Err(err),
        None => Ok(agents),
    }
}

/// `flue dev`'s start: as [`ensure`], but a workspace left untrusted still serves its
/// console (its agents refuse to run, saying why); the warning says so.
pub(crate) fn ensure_or_warn(agents: AgentSet) -> AgentSet {
    let (agents, refused) = settle(agents);
    if let Some(err) = refused {
        warn_untrusted(&err);
    }
    agents
}

/// Prints why the agents of an untrusted workspace will not run.
pub(crate) fn warn_untrusted(err: &HostError) {
    eprintln!(
        "flue dev: warning: {}\nflue dev: the console works; messages to the agents are \
         refused until then",
        escape_controls(&err.to_string())
    );
}

/// The agents, and the refusal when they may not run: asked on a terminal.
fn settle(agents: AgentSet) -> (AgentSet, Option<HostError>) {
    let refused = match agents.require_trust() {
        Ok(()) => return (agents, None),
        Err(err) => err,
    };
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if !interactive || !matches!(refused, HostError::Untrusted { .. }) {
        return (agents, Some(refused));
    }
    match ask(&refused) {
        Answer::Remember => {
            let recorded = store()
                .map_err(|err| HostError::TrustFile {
                    message: err.to_string(),
                })
                .and_then(|store| store.add(agents.root(), agents.trust_manifest()));
            match recorded {
                Ok(_) => {
                    eprintln!("trusted; `flue trust --revoke` takes it back");
                    (agents, None)
                }
                Err(err) => (agents, Some(err)),
            }
        }
        Answer::Once => {
            GRANTED.store(true, Ordering::Relaxed);
            (agents.with_trust(TrustPolicy::Granted), None)
        }
        Answer::No => (agents, Some(refused)),
    }
}

enum Answer {
    Remember,
    Once,
    No,
}

/// Shows what needs trust and reads the answer from the terminal.
fn ask(refused: &HostError) -> Answer {
    let HostError::Untrusted {
        root,
        changed,
        needs,
    } = refused
    else {
        return Answer::No;
    };
    let mut stderr = std::io::stderr().lock();
    let state = if *changed {
        "has changed since you trusted it"
    } else {
        "is new to flue"
    };
    let _ = writeln!(
        stderr,
        "The workspace {} {state}. Running it would:",
        escape_controls(&root.display().to_string())
    );
    for line in needs {
        let _ = writeln!(stderr, "  - {}", escape_controls(line));
    }
    let _ = write!(
        stderr,
        "Only trust workspaces you or people you trust wrote.\n\
         Trust it? [y] yes, remember  [o] only for this command  [N] no: "
    );
    let _ = stderr.flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return Answer::No;
    }
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Remember,
        "o" | "once" => Answer::Once,
        _ => Answer::No,
    }
}

/// `flue trust`: records, lists or revokes trust.
pub(crate) fn trust(args: &TrustArgs) -> anyhow::Result<Exit> {
    let store = store()?;
    if args.list {
        return list(&store, args.json);
    }
    let root = resolve_root(args.root.as_deref())?;
    if args.revoke {
        let found = store.revoke(&root)?;
        let shown = escape_controls(&root.display().to_string()).into_owned();
        if found {
            eprintln!("{shown} is no longer trusted");
        } else {
            eprintln!("{shown} was not trusted; nothing to revoke");
        }
        return Ok(Exit::Success);
    }
    let manifest = manifest_of(&root)?;
    let record = store.trust(&root, &manifest)?;
    let shown = escape_controls(&record.root.display().to_string()).into_owned();
    if args.json {
        outln!("{}", serde_json::to_string(&record)?)?;
    }
    if manifest.is_empty() {
        eprintln!(
            "trusted {shown}: it declares nothing that runs on your machine or gets a secret"
        );
    } else {
        eprintln!("trusted {shown} to:");
        print_items(manifest.items());
    }
    eprintln!(
        "a change to any of these (a new hook, command, address or variable) asks again; \
         `flue trust --revoke` takes it back"
    );
    Ok(Exit::Success)
}

fn list(store: &TrustStore, json: bool) -> anyhow::Result<Exit> {
    let records = store.records()?;
    if json {
        outln!("{}", serde_json::json!({ "workspaces": records }))?;
        return Ok(Exit::Success);
    }
    if records.is_empty() {
        eprintln!("no workspace is trusted ({})", store.path().display());
    }
    for record in &records {
        let gone = if record.root.is_dir() { "" } else { " (gone)" };
        outln!(
            "{}{gone}\t{} item(s)",
            escape_controls(&record.root.display().to_string()),
            record.items.len()
        )?;
    }
    Ok(Exit::Success)
}

fn print_items(items: &[TrustItem]) {
    for item in items {
        eprintln!("  - {}", escape_controls(&item.to_string()));
    }
}

/// What trust covers in the workspace at `root`, read without running anything.
fn manifest_of(root: &Path) -> anyhow::Result<TrustManifest> {
    let workspace = Workspace::load(root).map_err(HostError::Diagnostics)?;
    let vars = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let env = Env::for_root(vars, root, None)?;
    let known: Vec<String> = workspace.agents.keys().cloned().collect();
    let scorers = scorer_items(&workspace_cases(root, &known));
    Ok(TrustManifest::of(&workspace, &env).with(scorers))
}

/// Records trust in the workspace `flue init` just wrote at `root` (it is the user's own).
pub(crate) fn trust_created(root: &Path) -> anyhow::Result<()> {
    let manifest = manifest_of(root)?;
    store()?.trust(root, &manifest)?;
    Ok(())
}

/// The command scorers of `cases`, as items trust must cover.
pub(crate) fn scorer_items(cases: &[flue_eval::Case]) -> Vec<flue_host::TrustItem> {
    cases
        .iter()
        .flat_map(|case| {
            case.expect.scorers.iter().map(|scorer| {
                flue_host::TrustItem::eval_scorer(&case.file, &case.name, &scorer.command)
            })
        })
        .collect()
}

/// The eval cases of the workspace at `root` for agents `known`; none when they cannot be read
/// (`flue eval` reports those problems itself).
fn workspace_cases(root: &Path, known: &[String]) -> Vec<flue_eval::Case> {
    flue_eval::discover(root)
        .ok()
        .and_then(|files| flue_eval::load(root, &files, known).ok())
        .unwrap_or_default()
}
