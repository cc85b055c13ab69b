//! Project automation, in plain Rust: `cargo xtask ci` and `cargo xtask bench`.
//!
//! - `ci`: fmt check, clippy with warnings as errors, all tests (with a throwaway Postgres server
//!   named by `FLUE_TEST_POSTGRES_URL`), rustdoc with warnings as errors.
//! - `bench`: `flue run` wall time and peak RSS on examples/hello-world (release build), then
//!   the in-process benchmarks of flue-core (the agent loop, durable submissions) and the
//!   per-command latency of each sandbox.
//! - `bench-providers`: `flue run` over HTTP against the fake OpenAI server, optionally side by
//!   side with the TypeScript Flue (see `bench_providers.rs`).
//! - `bench-long`: `flue serve`'s CPU per message as one conversation grows to N messages,
//!   against the fake OpenAI server (see `bench_long.rs`).
//! - `bench-serve --model http`: `flue serve` against an in-process Rust fake OpenAI model:
//!   throughput, CPU per settled message, RSS (see `bench_http.rs`, `fake_model.rs`).
//! - `bench-serve`: `flue serve` over loopback HTTP: admission latency, settled submissions per
//!   second, first streamed content, memory per idle SSE stream (see `bench_serve.rs`).
//! - `bench-postgres`: several `flue serve` nodes on one Postgres database: settled/s on 1, 2
//!   and 4 nodes, admission latency, takeover after SIGKILL / SIGSTOP, cross-node stream
//!   latency (see `bench_postgres.rs`).
//! - `bench-reload`: `flue dev` reload latency, file write to new build serving, on 50 agents
//!   and 50 skills (see `bench_reload.rs`).
//! - `dist`: the release archive of `flue` for one target and its checksum (see `dist.rs`).

mod bench_http;
mod bench_long;
mod bench_postgres;
mod bench_providers;
mod bench_reload;
mod bench_serve;
mod dist;
mod fake_model;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const USAGE: &str = "usage: cargo xtask <ci|bench|bench-providers|bench-serve|bench-long|bench-reload|bench-postgres|dist> [--runs N] [--peer DIR --flue BIN ... (bench-providers)] [--streams N --seconds S --idle-seconds S --workspace DIR --flue BIN --model http (bench-serve)] [--flue BIN ... --turns N --window W (bench-long)] [--runs N --debounce-ms MS --flue BIN (bench-reload)] [--seconds S --flue BIN --postgres URL (bench-postgres)] [--target TRIPLE --profile NAME --binary BIN --out DIR (dist)]";
/// Internal: runs a command and prints its peak RSS in KiB and its CPU time (user + system)
/// in microseconds, on one line (see `peak_rss_kib_of`).
const MEASURE_RSS: &str = "measure-rss";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root()?;
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("bench") => {
            let runs = match args.iter().position(|arg| arg == "--runs") {
                Some(idx) => args
                    .get(idx + 1)
                    .context("--runs needs a number")?
                    .parse()?,
                None => 20,
            };
            bench(&root, runs)
        }
        Some("bench-providers") => {
            let runs = match args.iter().position(|arg| arg == "--runs") {
                Some(idx) => args
                    .get(idx + 1)
                    .context("--runs needs a number")?
                    .parse()?,
                None => 10,
            };
            let peer = match args.iter().position(|arg| arg == "--peer") {
                Some(idx) => Some(PathBuf::from(
                    args.get(idx + 1).context("--peer needs a directory")?,
                )),
                None => None,
            };
            let binaries: Vec<PathBuf> = args
                .iter()
                .enumerate()
                .filter(|(_, arg)| *arg == "--flue")
                .map(|(idx, _)| args.get(idx + 1).map(PathBuf::from))
                .collect::<Option<_>>()
                .context("--flue needs a binary")?;
            bench_providers::bench_providers(&root, runs, peer.as_deref(), &binaries)
        }
        Some("bench-serve") => {
            let streams = match args.iter().position(|arg| arg == "--streams") {
                Some(idx) => args
                    .get(idx + 1)
                    .context("--streams needs a number")?
                    .parse()?,
                None => 10_000,
            };
            let seconds = match args.iter().position(|arg| arg == "--seconds") {
                Some(idx) => args
                    .get(idx + 1)
                    .context("--seconds needs a number")?
                    .parse()?,
                None => 10,
            };
            let idle_seconds = match args.iter().position(|arg| arg == "--idle-seconds") {
                Some(idx) => args
                    .get(idx + 1)
                    .context("--idle-seconds needs a number")?
                    .parse()?,
                None => 30,
            };
            let path_of = |flag: &str, what: &str| -> anyhow::Result<Option<PathBuf>> {
                match args.iter().position(|arg| arg == flag) {
                    Some(idx) => Ok(Some(PathBuf::from(
                        args.get(idx + 1)
                            .with_context(|| format!("{flag} needs {what}"))?,
                    ))),
                    None => Ok(None),
                }
            };
            let flue = path_of("--flue", "a binary")?;
            let workspace = path_of("--workspace", "a directory")?;
            if path_of("--model", "`http`")?.is_some_and(|model| model == Path::new("http")) {
                let flue = flue.context("bench-serve --model http needs --flue BIN")?;
                return bench_http::bench_http(&flue, seconds);
            }
            bench_serve::bench_serve(
                &root,
                &bench_serve::ServeBench {
                    streams,
                    seconds,
                    idle_seconds,
                    workspace: workspace.as_deref(),
                    flue: flue.as_deref(),
                },
            )
        }
        Some("bench-long") => {
            let number = |flag: &str, default: usize| -> anyhow::Result<usize> {
                match args.iter().position(|arg| arg == flag) {
                    Some(idx) => Ok(args
                        .get(idx + 1)
                        .with_context(|| format!("{flag} needs a number"))?
                        .parse()?),
                    None => Ok(default),
                }
            };
            let binaries: Vec<PathBuf> = args
                .iter()
                .enumerate()
                .filter(|(_, arg)| *arg == "--flue")
                .map(|(idx, _)| args.get(idx + 1).map(PathBuf::from))
                .collect::<Option<_>>()
                .context("--flue needs a binary")?;
            if binaries.is_empty() {
                anyhow::bail!("bench-long needs --flue BIN (one or more)");
            }
            bench_long::bench_long(
                &root,
                &bench_long::LongBench {
                    binaries,
                    turns: number("--turns", 1_000)?,
                    window: number("--window", 100)?.max(1),
                },
            )
        }
        Some("bench-postgres") => {
            let value = |flag: &str| -> anyhow::Result<Option<&String>> {
                match args.iter().position(|arg| arg == flag) {
                    Some(idx) => Ok(Some(
                        args.get(idx + 1)
                            .with_context(|| format!("{flag} needs a value"))?,
                    )),
                    None => Ok(None),
                }
            };
            let seconds = value("--seconds")?.map_or(Ok(10), |value| value.parse())?;
            let flue = value("--flue")?.map(PathBuf::from);
            let postgres = value("--postgres")?.cloned();
            bench_postgres::bench_postgres(&root, seconds, flue.as_deref(), postgres.as_deref())
        }
        Some("bench-reload") => {
            let number = |flag: &str, default: u64| -> anyhow::Result<u64> {
                match args.iter().position(|arg| arg == flag) {
                    Some(idx) => Ok(args
                        .get(idx + 1)
                        .with_context(|| format!("{flag} needs a number"))?
                        .parse()?),
                    None => Ok(default),
                }
            };
            let runs = usize::try_from(number("--runs", 30)?)?;
            let debounce_ms = number("--debounce-ms", 100)?;
            let flue = match args.iter().position(|arg| arg == "--flue") {
                Some(idx) => Some(PathBuf::from(
                    args.get(idx + 1).context("--flue needs a binary")?,
                )),
                None => None,
            };
            bench_reload::bench_reload(&root, runs, debounce_ms, flue.as_deref())
        }
        Some("dist") => {
            let value = |flag: &str| -> anyhow::Result<Option<String>> {
                match args.iter().position(|arg| arg == flag) {
                    Some(idx) => Ok(Some(
                        args.get(idx + 1)
                            .with_context(|| format!("{flag} needs a value"))?
                            .clone(),
                    )),
                    None => Ok(None),
                }
            };
            let options = dist::DistOptions {
                target: value("--target")?,
                profile: value("--profile")?.unwrap_or_else(|| "dist".to_owned()),
                binary: value("--binary")?.map(PathBuf::from),
                out: value("--out")?.map(PathBuf::from),
            };
            dist::dist(&root, &options)
        }
        Some(MEASURE_RSS) => measure_rss(&args[1..]),
        _ => bail!("{USAGE}"),
    }
}

fn ci(root: &Path) -> anyhow::Result<()> {
    install_test_peers(root)?;
    // One Postgres server for every test binary (each test makes its own database in it).
    let postgres = TestPostgres::start(root)?;
    cargo(root, &["fmt", "--all", "--", "--check"], &[])?;
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        root,
        &["test", "--workspace"],
        &[("FLUE_TEST_POSTGRES_URL", postgres.url.as_str())],
    )?;
    drop(postgres);
    cargo(
        root,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    eprintln!("xtask ci: all checks passed");
    Ok(())
}

/// Installs what the tests talk to (bubblewrap, the MCP servers, ...) where it is missing, so
/// that `cargo xtask ci` passes on a fresh machine; the script says what it installs.
fn install_test_peers(root: &Path) -> anyhow::Result<()> {
    let script = root.join("tests/peers/install.sh");
    eprintln!("$ bash tests/peers/install.sh");
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("tests/peers/install.sh failed: the tests need what it names");
    }
    Ok(())
}

/// A throwaway Postgres server for the tests (tests/peers/postgres.sh), stopped and deleted
/// on drop.
struct TestPostgres {
    url: String,
    dir: PathBuf,
    script: PathBuf,
}

impl TestPostgres {
    fn start(root: &Path) -> anyhow::Result<Self> {
        let script = root.join("tests/peers/postgres.sh");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("flue-ci-postgres-{}", std::process::id()));
        eprintln!(
            "$ bash tests/peers/postgres.sh start {} {port}",
            dir.display()
        );
        let output = Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(&dir)
            .arg(port.to_string())
            .stderr(Stdio::inherit())
            .output()
            .context("running tests/peers/postgres.sh")?;
        if !output.status.success() {
            bail!("tests/peers/postgres.sh could not start Postgres");
        }
        let url = String::from_utf8(output.stdout)?.trim().to_owned();
        Ok(Self { url, dir, script })
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn bench(root: &Path, runs: u32) -> anyhow::Result<()> {
    cargo(root, &["build", "--release", "-p", "flue-cli"], &[])?;
    let flue = bench_providers::target_dir(root).join("release/flue");
    let workspace = tempfile_copy_of_example(root)?;
    let mut walls = Vec::new();
    let mut peak_rss_kib = 0u32;
    for run_idx in 0..=runs {
        let started = Instant::now();
        let output = Command::new(&flue)
            .args(["run", "hello", "--root"])
            .arg(&workspace)
            .args(["-m", "What does the greeting file say?", "--id", "bench"])
            .stdin(Stdio::null())
            .output()
            .context("running flue")?;
        let wall = started.elapsed();
        if !output.status.success() {
            bail!(
                "flue run failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        // The first run creates the database; it is a warm-up and not counted.
        if run_idx > 0 {
            walls.push(wall);
        }
    }
    for _ in 0..5 {
        peak_rss_kib = peak_rss_kib.max(peak_rss_kib_of(&flue, &workspace)?);
    }
    walls.sort();
    println!(
        "flue run hello (scripted model, 1 tool round trip, --id continuing): median {:.1} ms, \
         min {:.1} ms, max {:.1} ms over {runs} runs; peak RSS {:.1} MiB",
        ms(walls[walls.len() / 2]),
        ms(walls[0]),
        ms(walls[walls.len() - 1]),
        f64::from(peak_rss_kib) / 1024.0,
    );
    let _ = std::fs::remove_dir_all(&workspace);
    cargo(
        root,
        &["bench", "-p", "flue-core", "--bench", "runtime"],
        &[],
    )?;
    cargo(
        root,
        &["bench", "-p", "flue-core", "--bench", "submissions"],
        &[],
    )?;
    cargo(
        root,
        &["bench", "-p", "flue-connectors", "--bench", "sandboxes"],
        &[],
    )?;
    Ok(())
}

/// A scratch copy of examples/hello-world so benchmark runs leave the example untouched.
fn tempfile_copy_of_example(root: &Path) -> anyhow::Result<PathBuf> {
    let target = std::env::temp_dir().join(format!("flue-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&target);
    copy_dir(&root.join("examples/hello-world"), &target)?;
    let _ = std::fs::remove_dir_all(target.join(".flue"));
    Ok(target)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), dest)?;
        }
    }
    Ok(())
}

/// Peak RSS of one `flue run`, measured in a fresh xtask process whose only child is flue,
/// because `getrusage(RUSAGE_CHILDREN)` reports the largest child ever waited for (here that
/// would be cargo).
fn peak_rss_kib_of(flue: &Path, workspace: &Path) -> anyhow::Result<u32> {
    let output = Command::new(std::env::current_exe()?)
        .arg(MEASURE_RSS)
        .arg(flue)
        .args(["run", "hello", "--root"])
        .arg(workspace)
        .args(["-m", "What does the greeting file say?", "--id", "bench"])
        .stderr(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().unwrap_or_default();
    last.split_whitespace()
        .next()
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("unexpected measure-rss output {text:?}"))
}

fn measure_rss(command: &[String]) -> anyhow::Result<()> {
    let (program, args) = command
        .split_first()
        .context("measure-rss needs a command")?;
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("{program} failed");
    }
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?;
    let micros = |time: nix::sys::time::TimeVal| time.tv_sec() * 1_000_000 + time.tv_usec();
    // ru_maxrss is in KiB on Linux.
    println!(
        "{} {}",
        usage.max_rss(),
        micros(usage.user_time()) + micros(usage.system_time())
    );
    Ok(())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn cargo(root: &Path, args: &[&str], envs: &[(&str, &str)]) -> anyhow::Result<()> {
    eprintln!("$ cargo {}", args.join(" "));
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // `cargo run` gives this process the xtask package's metadata variables; build scripts
    // that watch them (ring's does) would see them change and rebuild the whole tree in the
    // nested cargo, so they are removed (the nested cargo sets each package's own).
    for (key, _) in std::env::vars_os() {
        let nested = key.to_str().is_some_and(|key| {
            key.starts_with("CARGO_PKG_")
                || matches!(
                    key,
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_BIN_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                )
        });
        if nested {
            command.env_remove(&key);
        }
    }
    let status = command
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed", args.join(" "));
    }
    Ok(())
}

fn workspace_root() -> anyhow::Result<PathBuf> {
    // `cargo run` sets the variable at run time too; prefer it, so that a binary shared
    // through one target directory by several checkouts still works on the one that ran it.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .context("xtask lives one level below the root")
}
