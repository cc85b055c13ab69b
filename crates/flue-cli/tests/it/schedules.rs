//! Schedules in real processes: `flue schedules` lists them (and a bad cron line fails with its
//! file and line); `flue serve` fires every tick exactly once across SIGKILLs and restarts on
//! SQLite, and across two nodes racing on one Postgres database (one killed and restarted
//! meanwhile). Fires are counted in the store itself, per schedule and tick, from the stored
//! messages (not from the keys the nodes chose), and every wait is for a condition in the
//! store or a server's log.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::pg_server::{fresh_database, psql};
use crate::serve::Server;
use crate::{Workspace, json, stderr, stdout};

/// The interval of the test schedules, in milliseconds.
const INTERVAL_MS: u64 = 1_000;
/// Lets the servers of these tests fire every second (schedules fire at most once a minute
/// otherwise): the user's own setting, which no workspace file can make.
const EVERY_SECOND: (&str, &str) = ("FLUE_SCHEDULE_MIN_INTERVAL", "1s");
/// The longest any condition is waited for: only ends a test whose server hangs (a busy
/// machine is slow, never this slow).
const DEADLINE: Duration = Duration::from_secs(180);

/// An agent that answers at once, with two schedules every second (served with
/// [`EVERY_SECOND`]): `beat` into one fixed conversation, `fresh` into a new conversation per
/// tick.
fn ticking_workspace() -> Workspace {
    Workspace::new(&[
        (
            "agents/ticker.md",
            "---\ndescription: Notes each tick\nmodel: scripted/script.json\nschedules:\n  \
             beat:\n    every: 1s\n    conversation: ticks\n    signal: { type: beat, body: \
             \"tick {tick}\" }\n  fresh:\n    every: 1s\n    conversation: \"tick-{tick}\"\n    \
             message: \"Start the run of {tick}\"\n---\nYou note ticks.\n",
        ),
        (
            "script.json",
            r#"{"rules": [{"reply": {"text": "Noted."}}]}"#,
        ),
    ])
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Milliseconds since the epoch of an RFC 3339 instant.
fn ms(text: &str) -> u64 {
    u64::try_from(
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis(),
    )
    .unwrap()
}

/// Every stored submission as (idempotency key, message JSON).
type Rows = Vec<(Option<String>, String)>;

/// Fires per schedule and tick, and (stored key, expected key) per submission.
type Fires = (
    BTreeMap<&'static str, BTreeMap<u64, usize>>,
    Vec<(Option<String>, String)>,
);

/// Fires per schedule and tick, read from the stored messages: a signal's `schedule` and
/// `tick` attributes, a message's `Start the run of <tick>`; with each submission's key and
/// the key it should carry (`schedule:<name>:<tick>`).
fn fires(rows: &Rows) -> Fires {
    let mut fires: BTreeMap<&'static str, BTreeMap<u64, usize>> = BTreeMap::new();
    let mut keys = Vec::new();
    for (key, message) in rows {
        let message: Value = serde_json::from_str(message).unwrap();
        let (schedule, tick) = if let Some(tick) = message["attributes"]["tick"].as_str() {
            assert_eq!(message["attributes"]["schedule"], "beat", "{message}");
            ("beat", tick.to_owned())
        } else {
            let body = message["body"].as_str().unwrap();
            let tick = body
                .strip_prefix("Start the run of ")
                .unwrap_or_else(|| panic!("not a tick: {message}"));
            ("fresh", tick.to_owned())
        };
        keys.push((key.clone(), format!("schedule:{schedule}:{tick}")));
        *fires
            .entry(schedule)
            .or_default()
            .entry(ms(&tick))
            .or_default() += 1;
    }
    (fires, keys)
}

fn sqlite_rows(db: &Path) -> Rows {
    let Ok(connection) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    connection.busy_timeout(Duration::from_secs(10)).unwrap();
    // The message is in `submission_messages` since schema 6 (in the row before).
    let Ok(mut statement) = connection.prepare(
        "SELECT s.idempotency_key, COALESCE(m.message, s.message) FROM submissions s \
         LEFT JOIN submission_messages m ON m.submission_id = s.submission_id",
    ) else {
        // Not created yet.
        return Vec::new();
    };
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn postgres_rows(database: &str) -> Rows {
    let text = psql(
        database,
        "SELECT coalesce(idempotency_key, ''), message FROM flue_submissions",
    );
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (key, message) = line.split_once('|').unwrap();
            (
                (!key.is_empty()).then(|| key.to_owned()),
                message.to_owned(),
            )
        })
        .collect()
}

/// Waits until both schedules have fired a tick at or after `tick`.
fn wait_for_tick(read: &dyn Fn() -> Rows, tick: u64, what: &str) {
    let started = Instant::now();
    loop {
        let rows = read();
        let (fires, _) = fires(&rows);
        let reached = ["beat", "fresh"].iter().all(|schedule| {
            fires
                .get(schedule)
                .and_then(|ticks| ticks.keys().next_back())
                .is_some_and(|latest| *latest >= tick)
        });
        if reached {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no fire at or after {tick} ({what}); fires: {fires:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every tick once at most; and every tick between the first and the last fired, except in
/// gaps that a kill explains: a gap between fired ticks `a` and `b` needs a kill at `k` with
/// `a < k < b + interval` (run i fired `a` before dying at `k`; the next run fired `b`, the
/// latest tick at its start, as `catch_up = "once"` does). Returns the ticks per schedule.
fn check_exactly_once(rows: &Rows, kills: &[u64]) -> BTreeMap<&'static str, Vec<u64>> {
    let (fires, keys) = fires(rows);
    let mut out = BTreeMap::new();
    for (schedule, ticks) in &fires {
        let twice: Vec<_> = ticks.iter().filter(|(_, count)| **count != 1).collect();
        assert!(
            twice.is_empty(),
            "{schedule}: ticks fired more than once: {twice:?}"
        );
        let ticks: Vec<u64> = ticks.keys().copied().collect();
        let mut unexplained = Vec::new();
        let mut used = Vec::new();
        for pair in ticks.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert_eq!(a % INTERVAL_MS, 0, "{schedule}: {a} is not a tick");
            if b - a == INTERVAL_MS {
                continue;
            }
            match kills
                .iter()
                .position(|kill| a < *kill && *kill < b + INTERVAL_MS)
            {
                Some(idx) if !used.contains(&idx) => used.push(idx),
                _ => unexplained.push((a, b)),
            }
        }
        assert!(
            unexplained.is_empty(),
            "{schedule}: ticks missing between {unexplained:?} with no kill to explain them \
             (kills at {kills:?}; fired {ticks:?})"
        );
        out.insert(*schedule, ticks);
    }
    for (stored, expected) in keys {
        assert_eq!(stored.as_deref(), Some(expected.as_str()));
    }
    out
}

/// A tiny deterministic generator (no dependency for one test).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn flue_schedules_lists_next_times_and_a_bad_cron_line_fails_with_its_file_and_line() {
    let ws = Workspace::new(&[
        (
            "agents/reporter.md",
            "---\nmodel: scripted/script.json\nschedules:\n  morning:\n    cron: \"0 9 * * *\"\n    \
             timezone: Europe/Paris\n    conversation: reports\n    message: Write the report\n  \
             hourly:\n    every: 1h\n    catch_up: skip\n---\nYou report.\n",
        ),
        ("script.json", r#"{"rules": [{"reply": {"text": "ok"}}]}"#),
    ]);
    let before = now_ms();
    let listed = ws.flue(&["schedules", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed = json(&listed);
    let schedules = listed["schedules"].as_array().unwrap();
    let names: Vec<&str> = schedules
        .iter()
        .map(|schedule| schedule["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hourly", "morning"]);
    let hourly = &schedules[0];
    assert_eq!(hourly["everySeconds"], 3600);
    assert_eq!(hourly["catchUp"], "skip");
    assert_eq!(hourly["conversation"], "schedule-hourly");
    assert_eq!(hourly["origin"], "schedule:hourly");
    let next: Vec<u64> = hourly["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|time| ms(time.as_str().unwrap()))
        .collect();
    assert_eq!(next.len(), 3);
    assert!(
        next[0] > before && next[0].is_multiple_of(3_600_000),
        "{next:?}"
    );
    assert_eq!(
        [next[1] - next[0], next[2] - next[1]],
        [3_600_000, 3_600_000]
    );
    let morning = &schedules[1];
    assert_eq!(
        (
            &morning["cron"],
            &morning["timezone"],
            &morning["line"],
            &morning["file"]
        ),
        (
            &Value::from("0 9 * * *"),
            &Value::from("Europe/Paris"),
            &Value::from(4),
            &Value::from("agents/reporter.md")
        )
    );
    for time in morning["next"].as_array().unwrap() {
        let time = time.as_str().unwrap();
        assert!(
            time.ends_with("T09:00:00+01:00") || time.ends_with("T09:00:00+02:00"),
            "{time}"
        );
    }
    let table = stdout(&ws.flue(&["schedules"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("NAME     AGENT     WHEN") && lines[0].ends_with("NEXT"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("morning  reporter  cron 0 9 * * *"),
        "{table}"
    );

    std::fs::write(
        ws.root().join("agents/reporter.md"),
        "---\nmodel: scripted/script.json\nschedules:\n  morning:\n    cron: \"0 9 * * 8\"\n\
         ---\nYou report.\n",
    )
    .unwrap();
    for command in [&["schedules"][..], &["build"][..]] {
        let failed = ws.flue(command);
        assert_eq!(failed.status.code(), Some(1), "{command:?}");
        assert!(
            stderr(&failed).contains(
                "agents/reporter.md:5: `schedules.morning.cron`: invalid cron line \"0 9 * * 8\""
            ),
            "{command:?}: {}",
            stderr(&failed)
        );
    }

    // Every second is more often than schedules may fire: `flue serve` refuses to start.
    std::fs::write(
        ws.root().join("agents/reporter.md"),
        "---\nmodel: scripted/script.json\nschedules:\n  hot:\n    every: 1s\n---\nYou report.\n",
    )
    .unwrap();
    for command in [
        &["schedules"][..],
        &["build"][..],
        &["serve", "--port", "0"][..],
    ] {
        let failed = ws.flue(command);
        assert_eq!(failed.status.code(), Some(1), "{command:?}");
        assert!(
            stderr(&failed).contains(
                "agents/reporter.md:5: `schedules.hot.every` is 1s, more often than schedules \
                 may fire: at least every 1m"
            ),
            "{command:?}: {}",
            stderr(&failed)
        );
    }
}

#[test]
fn every_tick_fires_once_across_sigkills_and_restarts() {
    let ws = ticking_workspace();
    let db = ws.db();
    let read = || sqlite_rows(&db);
    let started = now_ms();
    let mut server = Server::start(ws.root(), &[], &[EVERY_SECOND]);
    // At start, `catch_up = "once"` fires the latest tick at or before it.
    wait_for_tick(&read, started / INTERVAL_MS * INTERVAL_MS, "first run");
    let mut random = Lcg(now_ms());
    let mut kills = Vec::new();
    for round in 0..4 {
        // A random instant within the next two ticks.
        std::thread::sleep(Duration::from_millis(random.below(2 * INTERVAL_MS)));
        server.kill9();
        kills.push(now_ms());
        let restart = now_ms();
        server = Server::start(ws.root(), &[], &[EVERY_SECOND]);
        wait_for_tick(
            &read,
            restart / INTERVAL_MS * INTERVAL_MS,
            &format!("catch-up after kill {round}"),
        );
    }
    // Two more ticks in the last run, then the end.
    wait_for_tick(
        &read,
        now_ms() / INTERVAL_MS * INTERVAL_MS + 2 * INTERVAL_MS,
        "last run",
    );
    server.kill9();
    let ticks = check_exactly_once(&read(), &kills);

    // `flue session list` names the schedule each conversation came from.
    let listed = json(&ws.flue(&["session", "list", "--json"]));
    let mut origins: BTreeMap<String, usize> = BTreeMap::new();
    for conversation in listed["conversations"].as_array().unwrap() {
        let id = conversation["id"].as_str().unwrap();
        let origin = conversation["origin"].as_str().unwrap_or("-");
        let expected = if id == "ticks" {
            "schedule:beat"
        } else {
            "schedule:fresh"
        };
        assert_eq!(origin, expected, "{conversation}");
        *origins.entry(origin.to_owned()).or_default() += 1;
    }
    assert_eq!(origins["schedule:beat"], 1);
    assert_eq!(origins["schedule:fresh"], ticks["fresh"].len());
    let table = stdout(&ws.flue(&["session", "list"]));
    assert!(
        table
            .lines()
            .any(|line| line.starts_with("ticks ") && line.ends_with("  schedule:beat")),
        "{table}"
    );
}

#[test]
fn catch_up_once_fires_the_latest_missed_tick_once_and_skip_fires_none() {
    // Hourly ticks: the latest is in the past when the server starts. The loop offers the
    // schedules in name order, so `a-skip` is decided before `b-once` fires.
    let ws = Workspace::new(&[
        (
            "agents/ticker.md",
            "---\nmodel: scripted/script.json\nschedules:\n  a-skip:\n    every: 1h\n    \
             catch_up: skip\n  b-once:\n    every: 1h\n---\nYou note ticks.\n",
        ),
        (
            "script.json",
            r#"{"rules": [{"reply": {"text": "Noted."}}]}"#,
        ),
    ]);
    let db = ws.db();
    let hour = 3_600_000;
    let read_signals = || -> Vec<(String, u64)> {
        sqlite_rows(&db)
            .iter()
            .map(|(_, message)| {
                let message: Value = serde_json::from_str(message).unwrap();
                let attributes = &message["attributes"];
                (
                    attributes["schedule"].as_str().unwrap().to_owned(),
                    ms(attributes["tick"].as_str().unwrap()),
                )
            })
            .collect()
    };
    // (tick, deduplicated) of the `b-once` offer in a server's log.
    let offer = |log: &str| -> Option<(u64, bool)> {
        let line = log
            .lines()
            .find(|line| line.contains("tick admitted") && line.contains("schedule=b-once"))?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|token| token.strip_prefix(name))
                .unwrap()
                .to_owned()
        };
        Some((ms(&field("tick=")), field("deduplicated=") == "true"))
    };
    let mut offered = Vec::new();
    for run in 0..2 {
        let started = now_ms();
        let mut server = Server::start(ws.root(), &[], &[]);
        let begun = Instant::now();
        let (tick, deduplicated) = loop {
            if let Some(found) = offer(&server.log()) {
                break found;
            }
            assert!(begun.elapsed() < DEADLINE, "no offer in:\n{}", server.log());
            std::thread::sleep(Duration::from_millis(50));
        };
        let ended = now_ms();
        server.kill9();
        // The latest tick at the loop's start (the hour may have turned since `started`).
        assert!(
            started / hour * hour <= tick && tick <= ended / hour * hour,
            "run {run}: {tick}"
        );
        // The second run offers the tick the first admitted: the store answers with the first
        // admission (unless the hour turned in between).
        let seen_before = offered.contains(&tick);
        assert_eq!(deduplicated, seen_before, "run {run}: {tick}");
        if !seen_before {
            offered.push(tick);
        }
        let signals = read_signals();
        let once: Vec<u64> = signals
            .iter()
            .filter(|(schedule, _)| schedule == "b-once")
            .map(|(_, tick)| *tick)
            .collect();
        assert_eq!(once, offered, "run {run}: {signals:?}");
        // `skip` fired nothing at start; only a tick that fell due while it ran (the test
        // crossing the hour) could be there.
        assert!(
            signals
                .iter()
                .all(|(schedule, tick)| schedule != "a-skip" || *tick > started),
            "run {run}: {signals:?}"
        );
    }
}

/// The store URL as an operator writes it: the password comes from the environment.
const PASSWORD_VAR: &str = "FLUE_TEST_PG_PASSWORD";
const PASSWORD: &str = "pg-secret-3f9a1c";

#[test]
fn two_nodes_on_one_postgres_fire_each_tick_once_while_one_dies_and_comes_back() {
    let ws = ticking_workspace();
    let database = fresh_database();
    let rest = database.strip_prefix("postgres://flue@").unwrap();
    let store = format!("postgres://flue:${{{PASSWORD_VAR}}}@{rest}");
    let start = || {
        Server::start(
            ws.root(),
            &["--store", &store, "--lease-ms", "3000"],
            &[(PASSWORD_VAR, PASSWORD), EVERY_SECOND],
        )
    };
    let mut first = start();
    let mut second = start();
    let both_up = now_ms();
    let read = || postgres_rows(&database);
    let tick_after = |at: u64, n: u64| at / INTERVAL_MS * INTERVAL_MS + n * INTERVAL_MS;
    // Four ticks while both nodes offer every one of them.
    wait_for_tick(&read, tick_after(both_up, 4), "two nodes");
    // The first node dies at a random instant and comes back: the second covers every tick
    // meanwhile, and the first, catching up once at its start, offers a tick already admitted.
    let mut random = Lcg(now_ms());
    std::thread::sleep(Duration::from_millis(random.below(2 * INTERVAL_MS)));
    first.kill9();
    wait_for_tick(&read, tick_after(now_ms(), 2), "the second node alone");
    let restarted = now_ms();
    let mut first = start();
    wait_for_tick(&read, tick_after(restarted, 4), "both nodes again");
    first.kill9();
    second.kill9();
    // The second node was up throughout: no tick may be missing, none fired twice.
    let ticks = check_exactly_once(&read(), &[]);
    assert!(ticks["beat"].len() >= 8, "{ticks:?}");
    // Each node offered the ticks: the one that came second was answered with the first
    // admission (the race went through the store's deduplication).
    let logs = [first.log(), second.log()];
    let deduplicated = logs
        .iter()
        .map(|log| log.matches("deduplicated=true").count())
        .sum::<usize>();
    assert!(
        deduplicated > 0,
        "no tick was offered twice:\n{}\n{}",
        logs[0],
        logs[1]
    );
}
