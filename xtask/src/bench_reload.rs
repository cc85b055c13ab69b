//! `cargo xtask bench-reload`: how long `flue dev` takes from a file write to the new build
//! serving, on a generated workspace of 50 agents and 50 skills.
//!
//! Each round rewrites one agent file (a new description), then long-polls
//! `GET /_flue/dev/state?after=<generation>`, which answers as soon as the rebuilt agent set
//! has been swapped in, and checks that `GET /_flue/agents` lists the new description. The
//! latency includes the debounce (`--debounce-ms`, default 100): the figure that matters is
//! the time beyond it. Also reported: the server's own build time (`buildMs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const AGENTS: usize = 50;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `flue dev`, killed when dropped.
struct Dev {
    child: Child,
    addr: String,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With `flue` given, that binary is measured and nothing is built.
pub(crate) fn bench_reload(
    root: &Path,
    rounds: usize,
    debounce_ms: u64,
    flue: Option<&Path>,
) -> anyhow::Result<()> {
    let flue = match flue {
        Some(flue) => flue.to_path_buf(),
        None => {
            crate::cargo(root, &["build", "--release", "-p", "flue-cli"], &[])?;
            target_dir(root).join("release/flue")
        }
    };
    let scratch = std::env::temp_dir().join(format!("flue-bench-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    generate(&scratch)?;
    let dev = start(&flue, &scratch, debounce_ms)?;
    println!(
        "flue dev: {}  workspace: {AGENTS} agents, {AGENTS} skills  debounce {debounce_ms} ms",
        dev.addr
    );

    let mut generation = number(&get(&dev.addr, "/_flue/dev/state")?, "generation")?;
    let mut totals = Vec::with_capacity(rounds);
    let mut beyond = Vec::with_capacity(rounds);
    let mut builds = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let agent = round % AGENTS;
        let description = format!("revision {round}");
        let path = scratch.join(format!("agents/agent-{agent:02}.md"));
        let started = Instant::now();
        std::fs::write(&path, agent_file(agent, &description))?;
        let state = loop {
            let state = get(&dev.addr, &format!("/_flue/dev/state?after={generation}"))?;
            let next = number(&state, "generation")?;
            if next > generation {
                generation = next;
                if state.contains(&format!("\"description\":\"{description}\"")) {
                    break state;
                }
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("round {round}: no rebuild with the new description within 30 s");
            }
        };
        let elapsed = started.elapsed();
        if !state.contains("\"ok\":true") {
            bail!("round {round}: the rebuild failed: {state}");
        }
        let agents = get(&dev.addr, "/_flue/agents")?;
        if !agents.contains(&format!("\"description\":\"{description}\"")) {
            bail!("round {round}: /_flue/agents does not serve the new build: {agents}");
        }
        totals.push(elapsed);
        beyond.push(elapsed.saturating_sub(Duration::from_millis(debounce_ms)));
        builds.push(Duration::from_secs_f64(number(&state, "buildMs")? / 1000.0));
        // Let the watcher go quiet so each round is one rebuild.
        std::thread::sleep(Duration::from_millis(debounce_ms + 100));
    }
    report("file write -> new build serving", &mut totals);
    report("  of which beyond the debounce", &mut beyond);
    report("  of which the rebuild itself (buildMs)", &mut builds);
    drop(dev);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// 50 agents, each with its own skill and the scripted model.
fn generate(root: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join("agents"))?;
    std::fs::write(
        root.join("flue.toml"),
        "[defaults]\nmodel = \"scripted/script.json\"\n",
    )?;
    std::fs::write(
        root.join("script.json"),
        r#"{"rules": [{"reply": {"text": "{{user}}"}}]}"#,
    )?;
    for idx in 0..AGENTS {
        std::fs::write(
            root.join(format!("agents/agent-{idx:02}.md")),
            agent_file(idx, "initial"),
        )?;
        let skill = root.join(format!(".agents/skills/skill-{idx:02}"));
        std::fs::create_dir_all(&skill)?;
        std::fs::write(
            skill.join("SKILL.md"),
            format!(
                "---\nname: skill-{idx:02}\ndescription: Skill number {idx} of the benchmark\n---\n\
                 # Skill {idx}\n\n1. Read the file.\n2. Answer.\n"
            ),
        )?;
    }
    Ok(())
}

fn agent_file(idx: usize, description: &str) -> String {
    format!(
        "---\ndescription: {description}\ntools: [read_file, bash]\nskills: [skill-{idx:02}]\n---\n\
         You are agent {idx}. Load your skill, then answer.\n"
    )
}

fn start(flue: &Path, root: &Path, debounce_ms: u64) -> anyhow::Result<Dev> {
    let mut child = Command::new(flue)
        // The bench's own workspace.
        .env("FLUE_TRUST", "1")
        .args(["dev", "--port", "0", "--debounce-ms"])
        .arg(debounce_ms.to_string())
        .arg("--root")
        .arg(root)
        .env("FLUE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting flue dev")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let (ready, listening) = mpsc::channel::<String>();
    // Drains stderr for the server's whole life (one line per reload) so it never blocks.
    std::thread::spawn(move || {
        let mut ready = Some(ready);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.strip_prefix("flue dev: console at http://")
                && let Some(ready) = ready.take()
            {
                let _ = ready.send(url.trim_end_matches('/').to_owned());
            }
        }
    });
    match listening.recv_timeout(READY_TIMEOUT) {
        Ok(addr) => Ok(Dev { child, addr }),
        Err(err) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("flue dev did not print its console url within {READY_TIMEOUT:?} ({err})")
        }
    }
}

/// `GET path` on a fresh connection; the body of a 200.
fn get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(40)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no response head")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {head}");
    }
    Ok(body.to_owned())
}

/// A number field of a JSON object (the first occurrence; ours are top-level).
fn number(body: &str, name: &str) -> anyhow::Result<f64> {
    let key = format!("\"{name}\":");
    let start = body
        .find(&key)
        .with_context(|| format!("no {name} in {body}"))?
        + key.len();
    let end = body[start..]
        .find([',', '}'])
        .map_or(body.len(), |end| start + end);
    Ok(body[start..end].trim().parse()?)
}

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let pct = |p: f64| {
        let idx = ((samples.len() - 1) as f64 * p).round() as usize;
        samples[idx].as_secs_f64() * 1000.0
    };
    println!(
        "{name}: n={} p50 {:.1} ms  p90 {:.1} ms  max {:.1} ms",
        samples.len(),
        pct(0.5),
        pct(0.9),
        pct(1.0)
    );
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}
