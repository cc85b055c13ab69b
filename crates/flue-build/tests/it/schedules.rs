//! `schedules:` in agent files: both timings, what a tick sends, the tick arithmetic every node
//! agrees on, and every problem at its file and line.

use std::collections::BTreeMap;

use flue_build::{CatchUp, Schedule, ScheduleMessage, Timing, schedule_of_key};
use flue_core::DeliveredMessage;
use pretty_assertions::assert_eq;

use crate::support::{MODEL, at, check_diagnostics, load};

fn agent_with(extra: &str) -> String {
    format!("---\nmodel: {MODEL}\n{extra}---\nBody\n")
}

fn check_errors(extra: &str, expected: &[(usize, &str)]) {
    let expected: Vec<_> = expected
        .iter()
        .map(|(line, message)| at("agents/a.md", *line, message))
        .collect();
    check_diagnostics(&[("agents/a.md", &agent_with(extra))], &expected);
}

fn schedules_of(extra: &str) -> Vec<Schedule> {
    let workspace = load(&[("agents/a.md", &agent_with(extra))]);
    workspace.agents["a"].schedules.clone()
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

fn texts(ticks: &[u64]) -> Vec<String> {
    ticks
        .iter()
        .map(|tick| Schedule::tick_text(*tick))
        .collect()
}

const BOTH: &str = "\
schedules:
  morning:
    cron: \"0 9 * * 1-5\"
    timezone: Europe/Paris
    conversation: reports
    message: \"Write the report for {tick}\"
  beat:
    every: 2m
    conversation: \"beat-{tick}\"
    catch_up: skip
    signal:
      type: heartbeat
      body: \"at {tick}\"
      tag: tick
      attributes: { source: ops }
";

#[test]
fn both_timings_are_read_with_their_message_and_defaults() {
    let schedules = schedules_of(BOTH);
    let summary: Vec<_> = schedules
        .iter()
        .map(|schedule| {
            (
                schedule.name.as_str(),
                schedule.agent.as_str(),
                schedule.path.as_str(),
                schedule.line,
                schedule.timing_text(),
                schedule.timezone_name().to_owned(),
                schedule.conversation.as_str(),
                schedule.catch_up,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "beat",
                "a",
                "agents/a.md",
                9,
                "every 120s".to_owned(),
                "UTC".to_owned(),
                "beat-{tick}",
                CatchUp::Skip
            ),
            (
                "morning",
                "a",
                "agents/a.md",
                4,
                "cron 0 9 * * 1-5".to_owned(),
                "Europe/Paris".to_owned(),
                "reports",
                CatchUp::Once
            ),
        ]
    );
    assert_eq!(
        schedules[1].message,
        ScheduleMessage::Text("Write the report for {tick}".to_owned())
    );
    assert!(matches!(
        schedules[0].timing,
        Timing::Every {
            interval_ms: 120_000
        }
    ));
}

#[test]
fn cron_ticks_follow_the_zone_across_a_daylight_saving_change() {
    let schedules = schedules_of(BOTH);
    let morning = &schedules[1];
    // Paris moves to summer time on Sunday 29 March 2026: 09:00 is 08:00Z before, 07:00Z after.
    let after = ms("2026-03-26T12:00:00Z");
    assert_eq!(
        texts(&morning.next_ticks(after, 3)),
        [
            "2026-03-27T08:00:00Z",
            "2026-03-30T07:00:00Z",
            "2026-03-31T07:00:00Z"
        ]
    );
    assert_eq!(
        morning.local_tick_text(ms("2026-03-30T07:00:00Z")),
        "2026-03-30T09:00:00+02:00"
    );
    // The latest tick at or before an instant: a tick itself counts.
    assert_eq!(
        morning.latest_at_or_before(ms("2026-03-30T06:59:59Z")),
        Some(ms("2026-03-27T08:00:00Z"))
    );
    assert_eq!(
        morning.latest_at_or_before(ms("2026-03-30T07:00:00Z")),
        Some(ms("2026-03-30T07:00:00Z"))
    );
}

#[test]
fn interval_ticks_are_multiples_of_the_interval_since_the_epoch() {
    let beat = &schedules_of(BOTH)[0];
    let after = ms("2026-01-01T00:00:10Z");
    assert_eq!(
        texts(&beat.next_ticks(after, 3)),
        [
            "2026-01-01T00:02:00Z",
            "2026-01-01T00:04:00Z",
            "2026-01-01T00:06:00Z"
        ]
    );
    assert_eq!(
        beat.next_after(ms("2026-01-01T00:02:00Z")),
        Some(ms("2026-01-01T00:04:00Z"))
    );
    assert_eq!(
        beat.latest_at_or_before(ms("2026-01-01T00:03:59.999Z")),
        Some(ms("2026-01-01T00:02:00Z"))
    );
}

#[test]
fn a_tick_sends_a_message_derived_from_the_schedule_and_the_tick_alone() {
    let schedules = schedules_of(BOTH);
    let tick = ms("2026-01-01T00:01:00Z");
    let (beat, morning) = (&schedules[0], &schedules[1]);
    assert_eq!(beat.conversation_for(tick), "beat-2026-01-01T00:01:00Z");
    assert_eq!(
        beat.message_for(tick),
        DeliveredMessage::Signal {
            signal_type: "heartbeat".to_owned(),
            body: "at 2026-01-01T00:01:00Z".to_owned(),
            attributes: BTreeMap::from([
                ("schedule".to_owned(), "beat".to_owned()),
                ("source".to_owned(), "ops".to_owned()),
                ("tick".to_owned(), "2026-01-01T00:01:00Z".to_owned()),
            ]),
            tag_name: Some("tick".to_owned()),
            initial_data: None,
            options: Default::default(),
        }
    );
    assert_eq!(
        beat.idempotency_key(tick),
        "schedule:beat:2026-01-01T00:01:00Z"
    );
    assert_eq!(schedule_of_key(&beat.idempotency_key(tick)), Some("beat"));
    assert_eq!(schedule_of_key("ticket-42"), None);
    assert_eq!(beat.origin(), "schedule:beat");
    assert_eq!(morning.conversation_for(tick), "reports");
    assert_eq!(
        morning.message_for(tick),
        DeliveredMessage::user("Write the report for 2026-01-01T00:01:00Z")
    );
}

#[test]
fn without_conversation_or_message_a_schedule_sends_a_schedule_signal_to_its_own_conversation() {
    let schedules = schedules_of("schedules:\n  nightly:\n    cron: \"0 3 * * *\"\n");
    let tick = ms("2026-01-02T03:00:00Z");
    assert_eq!(schedules[0].conversation_for(tick), "schedule-nightly");
    assert_eq!(
        schedules[0].message_for(tick),
        DeliveredMessage::Signal {
            signal_type: "schedule".to_owned(),
            body: String::new(),
            attributes: BTreeMap::from([
                ("schedule".to_owned(), "nightly".to_owned()),
                ("tick".to_owned(), "2026-01-02T03:00:00Z".to_owned()),
            ]),
            tag_name: None,
            initial_data: None,
            options: Default::default(),
        }
    );
}

#[test]
fn a_bad_cron_line_is_reported_at_its_line() {
    check_errors(
        "schedules:\n  nightly:\n    message: hi\n    cron: \"0 25 * * *\"\n",
        &[(
            6,
            "`schedules.nightly.cron`: invalid cron line \"0 25 * * *\": Component error: Number \
             out of bounds.; expected five fields `<minute> <hour> <day of month> <month> <day \
             of week>`, e.g. \"0 9 * * 1-5\"",
        )],
    );
}

#[test]
fn every_problem_of_a_schedule_is_reported_at_its_line() {
    check_errors(
        "\
schedules:
  zoned:
    cron: \"0 9 * * *\"
    timezone: Mars/Olympus
  both:
    cron: \"* * * * *\"
    every: 1m
  neither:
    message: hi
  slow:
    every: 10 minutes
    timezone: UTC
  noisy:
    every: 1h
    message: hi
    signal: { type: x }
    catch_up: sometimes
    conversations: x
  attrs:
    every: 1h
    conversation: \"a/{tick}\"
    signal: { body: x, attributes: { tick: now } }
",
        &[
            (
                6,
                "`schedules.zoned.timezone`: unknown time zone \"Mars/Olympus\": use an IANA \
                 name like `Europe/Paris`, `America/New_York` or `UTC`",
            ),
            (7, "schedule `both` has both `cron` and `every`: keep one"),
            (
                10,
                "schedule `neither` needs `cron: \"<minute> <hour> <day> <month> <weekday>\"` \
                 or `every: <n>s|m|h`",
            ),
            (
                13,
                "`schedules.slow.every` must be a whole number of seconds, minutes or hours like \
                 `5m`, `90s` or `1h`, got \"10 minutes\"",
            ),
            (
                18,
                "`schedules.noisy` has both `message` and `signal`: keep one",
            ),
            (
                19,
                "invalid catch-up policy `sometimes`: expected one of once, skip",
            ),
            (
                20,
                "unknown key `conversations` in schedule `noisy` (did you mean `conversation`?)",
            ),
            (
                23,
                "`schedules.attrs.conversation` is not a valid conversation id: invalid \
                 conversation id \"a/1970-01-01T00:00:00Z\": it contains a slash; use 1 to 128 \
                 printable characters without spaces or slashes, such as a ticket number, an \
                 email address or a user id",
            ),
            (
                24,
                "`schedules.attrs.signal.attributes.tick` is set by each tick (the schedule's \
                 name and the tick): remove it",
            ),
            (
                24,
                "`schedules.attrs.signal` needs a `type`, e.g. `type: daily-report`",
            ),
        ],
    );
}

#[test]
fn schedule_names_are_unique_in_the_workspace() {
    let schedule = "schedules:\n  nightly:\n    cron: \"0 3 * * *\"\n";
    check_diagnostics(
        &[
            ("agents/a.md", &agent_with(schedule)),
            ("agents/b.md", &agent_with(schedule)),
        ],
        &[at(
            "agents/b.md",
            4,
            "schedule `nightly` is declared already in agents/a.md:4: schedule names are unique \
             in the workspace; rename one",
        )],
    );
}

#[test]
fn flue_toml_declares_schedules_for_an_agent() {
    let workspace = load(&[
        ("agents/a.md", &agent_with("")),
        (
            "flue.toml",
            "[schedules.weekly]\nagent = \"a\"\ncron = \"0 8 * * MON\"\ntimezone = \
             \"America/New_York\"\nsignal = { type = \"weekly\", tag = \"cron\", attributes = \
             { team = \"ops\" } }\n",
        ),
    ]);
    let schedules = workspace.schedules();
    assert_eq!(schedules.len(), 1);
    let weekly = schedules[0];
    assert_eq!(
        (
            weekly.name.as_str(),
            weekly.agent.as_str(),
            weekly.path.as_str(),
            weekly.line,
            weekly.timezone_name(),
            weekly.conversation.as_str()
        ),
        (
            "weekly",
            "a",
            "flue.toml",
            1,
            "America/New_York",
            "schedule-weekly"
        )
    );
    let tick = ms("2026-01-05T13:00:00Z");
    assert_eq!(weekly.next_after(ms("2026-01-01T00:00:00Z")), Some(tick));
    assert_eq!(
        weekly.message_for(tick),
        DeliveredMessage::Signal {
            signal_type: "weekly".to_owned(),
            body: String::new(),
            attributes: BTreeMap::from([
                ("schedule".to_owned(), "weekly".to_owned()),
                ("team".to_owned(), "ops".to_owned()),
                ("tick".to_owned(), "2026-01-05T13:00:00Z".to_owned()),
            ]),
            tag_name: Some("cron".to_owned()),
            initial_data: None,
            options: Default::default(),
        }
    );
}

#[test]
fn schedules_fire_at_most_once_a_minute() {
    // Every tick is a stored submission and a model run: one a second grows the store by
    // gigabytes a day. A minute passes, in either form.
    let accepted = schedules_of(
        "schedules:\n  minutely:\n    every: 1m\n  on-the-minute:\n    cron: \"0 * * * * *\"\n",
    );
    assert_eq!(accepted.len(), 2);
    check_diagnostics(
        &[
            (
                "agents/a.md",
                &agent_with(
                    "schedules:\n  hot:\n    every: 1s\n  almost:\n    every: 59s\n  \
                     each-second:\n    cron: \"* * * * * *\"\n  twice:\n    cron: \"0,30 * * * * *\"\n",
                ),
            ),
            (
                "flue.toml",
                "[schedules.toml-hot]\nagent = \"a\"\nevery = \"10s\"\n",
            ),
        ],
        &[
            at(
                "agents/a.md",
                5,
                "`schedules.hot.every` is 1s, more often than schedules may fire: at least every \
                 1m (each tick is a stored submission and a model run); use `1m` or longer",
            ),
            at(
                "agents/a.md",
                7,
                "`schedules.almost.every` is 59s, more often than schedules may fire: at least \
                 every 1m (each tick is a stored submission and a model run); use `1m` or longer",
            ),
            at(
                "agents/a.md",
                9,
                "`schedules.each-second.cron`: cron line \"* * * * * *\" fires 60 times a \
                 minute; schedules fire at most once every 1m (each tick is a stored \
                 submission): give the seconds field one value, e.g. \"0 * * * * *\", or use \
                 five fields",
            ),
            at(
                "agents/a.md",
                11,
                "`schedules.twice.cron`: cron line \"0,30 * * * * *\" fires 2 times a minute; \
                 schedules fire at most once every 1m (each tick is a stored submission): give \
                 the seconds field one value, e.g. \"0 * * * * *\", or use five fields",
            ),
            at(
                "flue.toml",
                3,
                "`schedules.toml-hot.every` is 10s, more often than schedules may fire: at least \
                 every 1m (each tick is a stored submission and a model run); use `1m` or longer",
            ),
        ],
    );
}

#[test]
fn flue_toml_schedule_problems_are_reported_at_their_lines() {
    check_diagnostics(
        &[
            (
                "agents/a.md",
                &agent_with("schedules:\n  dup:\n    every: 1m\n"),
            ),
            (
                "flue.toml",
                "[schedules.bad]\nagent = \"a\"\ncron = \"61 * * * *\"\n\n[schedules.lost]\n\
                 agent = \"b\"\nevery = \"1m\"\n\n[schedules.dup]\nagent = \"a\"\nevery = \"1m\"\n\n\
                 [schedules.late]\nagent = \"a\"\nevery = \"1m\"\ncatch_up = \"never\"\n",
            ),
        ],
        &[
            at(
                "flue.toml",
                3,
                "`schedules.bad.cron`: invalid cron line \"61 * * * *\": Component error: Number \
                 out of bounds.; expected five fields `<minute> <hour> <day of month> <month> \
                 <day of week>`, e.g. \"0 9 * * 1-5\"",
            ),
            at(
                "flue.toml",
                5,
                "schedule `lost` names unknown agent `b` (did you mean `a`?): add agents/b.md or \
                 fix `agent`",
            ),
            at(
                "flue.toml",
                9,
                "schedule `dup` is declared already in agents/a.md:4: schedule names are unique \
                 in the workspace; rename one",
            ),
            at(
                "flue.toml",
                16,
                "invalid catch-up policy `never`: expected one of once, skip",
            ),
        ],
    );
}
