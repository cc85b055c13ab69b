//! `schedules:` in an agent file: messages or signals sent to the agent on a cron line (in a
//! time zone) or every fixed interval, read and checked here, and the tick arithmetic every
//! node agrees on (which instants are ticks, the conversation, message and idempotency key of
//! each).
//!
//! A tick is an instant in milliseconds since the Unix epoch. Cron ticks are the cron line's
//! matches in its zone; interval ticks are the multiples of the interval since the epoch, so
//! two nodes started at different times agree on them. What a tick sends is a pure function of
//! the schedule and the tick, so a tick admitted twice (two nodes, a restart) carries the same
//! idempotency key and the same message, and the store deduplicates it.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::CronParser;
use flue_core::DeliveredMessage;
use gray_matter::Pod;
use serde::Deserialize;
use toml::Spanned;

use crate::diagnostic::Diagnostic;
use crate::fields::{self, Report};
use crate::toml_span::{PATH, line_of};

/// One declared schedule: when it fires, where to, and what it sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Its name (the key under `schedules:`), unique in the workspace.
    pub name: String,
    /// The agent it sends to (the file it is declared in).
    pub agent: String,
    /// The agent file, relative to the workspace root.
    pub path: String,
    /// The line of its name in that file (1-based).
    pub line: usize,
    /// When it fires.
    pub timing: Timing,
    /// `conversation`: the conversation id; every `{tick}` in it is replaced by the tick (RFC
    /// 3339, UTC), so a template with `{tick}` opens one conversation per tick. Default
    /// `schedule-<name>`.
    pub conversation: String,
    /// `message` or `signal`: what each tick sends.
    pub message: ScheduleMessage,
    /// `catch_up`: what a node that starts after a tick was due does.
    pub catch_up: CatchUp,
}

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Timing {
    /// `cron: "<line>"` with `timezone` (default UTC): the line's matches in that zone (five
    /// fields, or six with seconds first).
    Cron {
        /// The line as written.
        expression: String,
        /// It parsed.
        cron: Box<Cron>,
        /// The zone its fields are read in.
        timezone: Tz,
    },
    /// `every: 30s`: every multiple of the interval since the Unix epoch.
    Every {
        /// The interval in milliseconds (a whole number of seconds, at least one).
        interval_ms: u64,
    },
}

/// What a tick sends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleMessage {
    /// `message: "..."`: a user message; every `{tick}` is replaced by the tick.
    Text(String),
    /// `signal: {type, body, tag, attributes}`: a signal (the HTTP protocol's `kind: "signal"`),
    /// with the attributes `schedule` (the name) and `tick` added. Without `message` or
    /// `signal`, a signal of type `schedule` with an empty body.
    Signal {
        /// Its type.
        signal_type: String,
        /// Its body; every `{tick}` is replaced by the tick.
        body: String,
        /// Its attributes (without `schedule` and `tick`, which each tick adds).
        attributes: BTreeMap<String, String>,
        /// Its envelope tag (default `signal`).
        tag_name: Option<String>,
    },
}

/// What a node that was down when a tick was due does when it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// `once` (the default): the most recent tick at or before its start is fired (a no-op when
    /// another node or an earlier run fired it already); older missed ticks are not.
    #[default]
    Once,
    /// `skip`: only ticks that fall due while it runs are fired.
    Skip,
}

impl CatchUp {
    /// Its word in the agent file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Skip => "skip",
        }
    }
}

/// The keys of one schedule.
const SCHEDULE_KEYS: &[&str] = &[
    "cron",
    "every",
    "timezone",
    "conversation",
    "message",
    "signal",
    "catch_up",
];
/// The keys of `signal:`.
const SIGNAL_KEYS: &[&str] = &["type", "body", "tag", "attributes"];
/// Attributes every tick's signal carries.
const RESERVED_ATTRIBUTES: &[&str] = &["schedule", "tick"];
/// The placeholder replaced by the tick.
const TICK: &str = "{tick}";
/// The longest schedule name.
const MAX_NAME_CHARS: usize = 64;
/// The prefix of a tick's idempotency key and of a scheduled submission's origin.
pub const SCHEDULE_ORIGIN_PREFIX: &str = "schedule:";

impl Schedule {
    /// The first tick strictly after `after_ms`, or `None` when there is none (a cron line
    /// that never matches again).
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        match &self.timing {
            Timing::Every { interval_ms } => {
                let interval = (*interval_ms).max(1);
                (after_ms / interval).checked_add(1)?.checked_mul(interval)
            }
            Timing::Cron { cron, timezone, .. } => {
                let start = timezone
                    .timestamp_millis_opt(i64::try_from(after_ms).ok()?)
                    .single()?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                u64::try_from(next.timestamp_millis()).ok()
            }
        }
    }

    /// The last tick at or before `at_ms`, or `None` when there is none.
    pub fn latest_at_or_before(&self, at_ms: u64) -> Option<u64> {
        match &self.timing {
            Timing::Every { interval_ms } => {
                let interval = (*interval_ms).max(1);
                Some(at_ms / interval * interval)
            }
            Timing::Cron { cron, timezone, .. } => {
                let start = timezone
                    .timestamp_millis_opt(i64::try_from(at_ms).ok()?)
                    .single()?;
                let previous = cron.find_previous_occurrence(&start, true).ok()?;
                u64::try_from(previous.timestamp_millis()).ok()
            }
        }
    }

    /// The next `n` ticks strictly after `after_ms`.
    pub fn next_ticks(&self, after_ms: u64, n: usize) -> Vec<u64> {
        let mut ticks = Vec::with_capacity(n);
        let mut cursor = after_ms;
        while ticks.len() < n {
            let Some(tick) = self.next_after(cursor) else {
                break;
            };
            ticks.push(tick);
            cursor = tick;
        }
        ticks
    }

    /// The tick as text: RFC 3339 in UTC (`2026-01-31T09:00:00Z`), what `{tick}` becomes.
    pub fn tick_text(tick_ms: u64) -> String {
        i64::try_from(tick_ms)
            .ok()
            .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
            .map_or_else(
                || tick_ms.to_string(),
                |time| time.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            )
    }

    /// The tick in the schedule's zone (RFC 3339 with its offset), for listings.
    pub fn local_tick_text(&self, tick_ms: u64) -> String {
        let zone = match &self.timing {
            Timing::Cron { timezone, .. } => *timezone,
            Timing::Every { .. } => Tz::UTC,
        };
        i64::try_from(tick_ms)
            .ok()
            .and_then(|ms| zone.timestamp_millis_opt(ms).single())
            .map_or_else(
                || tick_ms.to_string(),
                |time| time.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            )
    }

    /// The conversation id the tick goes to.
    pub fn conversation_for(&self, tick_ms: u64) -> String {
        self.conversation.replace(TICK, &Self::tick_text(tick_ms))
    }

    /// The message the tick sends.
    pub fn message_for(&self, tick_ms: u64) -> DeliveredMessage {
        let tick = Self::tick_text(tick_ms);
        match &self.message {
            ScheduleMessage::Text(text) => DeliveredMessage::user(text.replace(TICK, &tick)),
            ScheduleMessage::Signal {
                signal_type,
                body,
                attributes,
                tag_name,
            } => {
                let mut attributes = attributes.clone();
                attributes.insert("schedule".to_owned(), self.name.clone());
                attributes.insert("tick".to_owned(), tick.clone());
                DeliveredMessage::Signal {
                    signal_type: signal_type.clone(),
                    body: body.replace(TICK, &tick),
                    attributes,
                    tag_name: tag_name.clone(),
                    initial_data: None,
                    options: Default::default(),
                }
            }
        }
    }

    /// The idempotency key the tick is admitted with: `schedule:<name>:<tick>` (the tick as
    /// [`Schedule::tick_text`] writes it). Keys are kept for the conversation's lifetime, so a
    /// tick is admitted once however many nodes or restarts fire it.
    pub fn idempotency_key(&self, tick_ms: u64) -> String {
        format!(
            "{SCHEDULE_ORIGIN_PREFIX}{}:{}",
            self.name,
            Self::tick_text(tick_ms)
        )
    }

    /// Where its submissions come from, as listings show it: `schedule:<name>`.
    pub fn origin(&self) -> String {
        format!("{SCHEDULE_ORIGIN_PREFIX}{}", self.name)
    }

    /// The timing as one line: `cron 0 9 * * 1-5` or `every 30s`.
    pub fn timing_text(&self) -> String {
        match &self.timing {
            Timing::Cron { expression, .. } => format!("cron {expression}"),
            Timing::Every { interval_ms } => format!("every {}s", interval_ms / 1000),
        }
    }

    /// The zone the cron line is read in (`UTC` for an interval).
    pub fn timezone_name(&self) -> &str {
        match &self.timing {
            Timing::Cron { timezone, .. } => timezone.name(),
            Timing::Every { .. } => "UTC",
        }
    }
}

/// The schedule name of an idempotency key made by [`Schedule::idempotency_key`].
pub fn schedule_of_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(SCHEDULE_ORIGIN_PREFIX)?;
    // The tick follows the last name character; names hold no `:`.
    rest.split_once(':').map(|(name, _)| name)
}

/// `schedules:` of agent `agent` (the file at `path`): every schedule checked, the valid ones
/// kept in name order.
pub(crate) fn parse(
    agent: &str,
    path: &str,
    value: &Pod,
    report: &mut Report<'_>,
) -> Vec<Schedule> {
    let expected = "a mapping of schedule names to `{cron: \"0 9 * * *\", message: ...}` or \
                    `{every: 30s, signal: ...}`";
    let Some(entries) = report.check(
        &["schedules"],
        fields::mapping("schedules", value, expected),
    ) else {
        return Vec::new();
    };
    let mut schedules = Vec::new();
    for (name, value) in entries {
        if let Some(schedule) = one(agent, path, name, value, report) {
            schedules.push(schedule);
        }
    }
    schedules
}

fn one(
    agent: &str,
    path: &str,
    name: &str,
    value: &Pod,
    report: &mut Report<'_>,
) -> Option<Schedule> {
    let at_name = ["schedules", name];
    let line = report.line(&at_name);
    let name_ok = report.check(&at_name, check_name(name)).is_some();
    let entries = report.check(
        &at_name,
        fields::mapping(
            &format!("schedules.{name}"),
            value,
            "a mapping with `cron` or `every`, and `message` or `signal`",
        ),
    )?;
    let mut valid = name_ok;
    let mut cron_line = None;
    let mut every = None;
    let mut timezone = None;
    let mut conversation = None;
    let mut message = None;
    let mut catch_up = CatchUp::default();
    let mut has_message = false;
    for (key, value) in entries {
        let keys = ["schedules", name, key.as_str()];
        let dotted = format!("schedules.{name}.{key}");
        let ok = match key.as_str() {
            "cron" => report
                .check(
                    &keys,
                    fields::string(&dotted, value).and_then(|line| cron(&dotted, &line)),
                )
                .map(|parsed| cron_line = Some(parsed)),
            "every" => report
                .check(&keys, interval(&dotted, value))
                .map(|interval_ms| every = Some(interval_ms)),
            "timezone" => report
                .check(
                    &keys,
                    fields::string(&dotted, value).and_then(|zone| tz(&dotted, &zone)),
                )
                .map(|zone| timezone = Some(zone)),
            "conversation" => report
                .check(
                    &keys,
                    fields::string(&dotted, value)
                        .and_then(|template| conversation_template(&dotted, agent, &template)),
                )
                .map(|template| conversation = Some(template)),
            "message" => {
                let checked = fields::string(&dotted, value).and_then(|text| {
                    if has_message {
                        Err(format!(
                            "`schedules.{name}` has both `message` and `signal`: keep one"
                        ))
                    } else if text.trim().is_empty() {
                        Err(format!("`{dotted}` is empty: write the message to send"))
                    } else {
                        Ok(text)
                    }
                });
                has_message = true;
                report
                    .check(&keys, checked)
                    .map(|text| message = Some(ScheduleMessage::Text(text)))
            }
            "signal" => {
                let duplicate = has_message;
                has_message = true;
                if duplicate {
                    report.error(
                        &keys,
                        format!("`schedules.{name}` has both `message` and `signal`: keep one"),
                    );
                    None
                } else {
                    signal(name, value, report).map(|signal| message = Some(signal))
                }
            }
            "catch_up" => report
                .check(
                    &keys,
                    fields::one_of(
                        &dotted,
                        value,
                        "catch-up policy",
                        &[("once", CatchUp::Once), ("skip", CatchUp::Skip)],
                    ),
                )
                .map(|policy| catch_up = policy),
            _ => {
                report.unknown_key(&keys, &format!(" in schedule `{name}`"), SCHEDULE_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    let timing = match (cron_line, every) {
        (Some(_), Some(_)) => {
            report.error(
                &at_name,
                format!("schedule `{name}` has both `cron` and `every`: keep one"),
            );
            None
        }
        (Some((expression, cron)), None) => Some(Timing::Cron {
            expression,
            cron: Box::new(cron),
            timezone: timezone.unwrap_or(Tz::UTC),
        }),
        (None, Some(interval_ms)) => {
            if timezone.is_some() {
                report.error(
                    &["schedules", name, "timezone"],
                    format!(
                        "`schedules.{name}.timezone` applies to `cron` only: an `every` \
                         interval counts from the Unix epoch; remove it"
                    ),
                );
                valid = false;
            }
            Some(Timing::Every { interval_ms })
        }
        (None, None) => {
            // A bad `cron` or `every` was reported already.
            if valid {
                report.error(
                    &at_name,
                    format!(
                        "schedule `{name}` needs `cron: \"<minute> <hour> <day> <month> \
                         <weekday>\"` or `every: <n>s|m|h`"
                    ),
                );
            }
            None
        }
    };
    let timing = timing?;
    if !valid {
        return None;
    }
    Some(Schedule {
        name: name.to_owned(),
        agent: agent.to_owned(),
        path: path.to_owned(),
        line,
        timing,
        conversation: conversation.unwrap_or_else(|| format!("schedule-{name}")),
        message: message.unwrap_or_else(|| ScheduleMessage::Signal {
            signal_type: "schedule".to_owned(),
            body: String::new(),
            attributes: BTreeMap::new(),
            tag_name: None,
        }),
        catch_up,
    })
}

/// One `[schedules.<name>]` table of flue.toml: the keys of an agent file's schedule plus
/// `agent`, with their spans.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchedule {
    agent: Option<Spanned<String>>,
    cron: Option<Spanned<String>>,
    every: Option<Spanned<String>>,
    timezone: Option<Spanned<String>>,
    conversation: Option<Spanned<String>>,
    message: Option<Spanned<String>>,
    signal: Option<Spanned<RawSignal>>,
    catch_up: Option<Spanned<String>>,
}

/// `signal = { type, body, tag, attributes }` in flue.toml.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignal {
    #[serde(rename = "type")]
    signal_type: Option<Spanned<String>>,
    body: Option<String>,
    tag: Option<Spanned<String>>,
    attributes: Option<Spanned<BTreeMap<String, String>>>,
}

/// `[schedules.<name>]` of flue.toml (`text`): checked like an agent file's, every problem at
/// its line; whether the agent exists is checked with the workspace.
pub(crate) fn from_toml(
    text: &str,
    name: &Spanned<String>,
    raw: Spanned<RawSchedule>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Schedule> {
    let line = line_of(text, &name.span());
    let name = name.get_ref().as_str();
    let raw = raw.into_inner();
    let mut valid = true;
    let mut check = |span: Option<std::ops::Range<usize>>, result: Result<(), String>| {
        if let Err(message) = result {
            let at = span.map_or(line, |span| line_of(text, &span));
            diagnostics.push(Diagnostic::at(PATH, at, message));
            valid = false;
        }
    };
    check(None, check_name(name));
    let agent = match &raw.agent {
        Some(agent) => agent.get_ref().clone(),
        None => {
            check(
                None,
                Err(format!(
                    "`[schedules.{name}]` needs `agent = \"<name>\"`: the agent of agents/<name>.md \
                     it sends to"
                )),
            );
            String::new()
        }
    };
    let key = |field: &str| format!("schedules.{name}.{field}");
    let mut timezone = None;
    if let Some(zone) = &raw.timezone {
        match tz(&key("timezone"), zone.get_ref()) {
            Ok(zone) => timezone = Some(zone),
            Err(message) => check(Some(zone.span()), Err(message)),
        }
    }
    let mut timing = None;
    match (&raw.cron, &raw.every) {
        (Some(_), Some(every)) => check(
            Some(every.span()),
            Err(format!(
                "schedule `{name}` has both `cron` and `every`: keep one"
            )),
        ),
        (Some(line_text), None) => match cron(&key("cron"), line_text.get_ref()) {
            Ok((expression, cron)) => {
                timing = Some(Timing::Cron {
                    expression,
                    cron: Box::new(cron),
                    timezone: timezone.unwrap_or(Tz::UTC),
                });
            }
            Err(message) => check(Some(line_text.span()), Err(message)),
        },
        (None, Some(every)) => match interval_text(&key("every"), every.get_ref()) {
            Ok(interval_ms) => {
                if let Some(zone) = &raw.timezone {
                    check(
                        Some(zone.span()),
                        Err(format!(
                            "`schedules.{name}.timezone` applies to `cron` only: an `every` \
                             interval counts from the Unix epoch; remove it"
                        )),
                    );
                }
                timing = Some(Timing::Every { interval_ms });
            }
            Err(message) => check(Some(every.span()), Err(message)),
        },
        (None, None) => check(
            None,
            Err(format!(
                "schedule `{name}` needs `cron = \"<minute> <hour> <day> <month> <weekday>\"` \
                 or `every = \"<n>s|m|h\"`"
            )),
        ),
    }
    let mut conversation = format!("schedule-{name}");
    if let Some(template) = &raw.conversation {
        match conversation_template(&key("conversation"), &agent, template.get_ref()) {
            Ok(template) => conversation = template,
            Err(message) => check(Some(template.span()), Err(message)),
        }
    }
    let mut message = ScheduleMessage::Signal {
        signal_type: "schedule".to_owned(),
        body: String::new(),
        attributes: BTreeMap::new(),
        tag_name: None,
    };
    match (&raw.message, raw.signal) {
        (Some(_), Some(signal)) => check(
            Some(signal.span()),
            Err(format!(
                "`schedules.{name}` has both `message` and `signal`: keep one"
            )),
        ),
        (Some(text_value), None) => {
            if text_value.get_ref().trim().is_empty() {
                check(
                    Some(text_value.span()),
                    Err(format!(
                        "`{}` is empty: write the message to send",
                        key("message")
                    )),
                );
            }
            message = ScheduleMessage::Text(text_value.get_ref().clone());
        }
        (None, Some(signal)) => {
            let span = signal.span();
            let signal = signal.into_inner();
            let dotted = key("signal");
            let signal_type = match signal.signal_type {
                Some(kind) if !kind.get_ref().trim().is_empty() => kind.into_inner(),
                Some(kind) => {
                    check(
                        Some(kind.span()),
                        Err(format!(
                            "`{dotted}.type` must not be empty, e.g. `daily-report`"
                        )),
                    );
                    String::new()
                }
                None => {
                    check(
                        Some(span),
                        Err(format!(
                            "`{dotted}` needs a `type`, e.g. `type = \"daily-report\"`"
                        )),
                    );
                    String::new()
                }
            };
            let mut tag_name = None;
            if let Some(tag) = signal.tag {
                match xml_name(&format!("{dotted}.tag"), tag.get_ref().clone()) {
                    Ok(tag) => tag_name = Some(tag),
                    Err(message) => check(Some(tag.span()), Err(message)),
                }
            }
            let mut attributes = BTreeMap::new();
            if let Some(given) = signal.attributes {
                let span = given.span();
                match check_attributes(&format!("{dotted}.attributes"), given.into_inner()) {
                    Ok(map) => attributes = map,
                    Err(message) => check(Some(span), Err(message)),
                }
            }
            message = ScheduleMessage::Signal {
                signal_type,
                body: signal.body.unwrap_or_default(),
                attributes,
                tag_name,
            };
        }
        (None, None) => {}
    }
    let mut catch_up = CatchUp::default();
    if let Some(policy) = &raw.catch_up {
        match fields::one_of_str(
            policy.get_ref(),
            "catch-up policy",
            &[("once", CatchUp::Once), ("skip", CatchUp::Skip)],
        ) {
            Ok(policy) => catch_up = policy,
            Err(message) => check(Some(policy.span()), Err(message)),
        }
    }
    let timing = timing?;
    valid.then(|| Schedule {
        name: name.to_owned(),
        agent,
        path: PATH.to_owned(),
        line,
        timing,
        conversation,
        message,
        catch_up,
    })
}

/// Signal attributes: XML names, without the ones each tick sets.
fn check_attributes(
    key: &str,
    map: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    for attribute in map.keys() {
        if RESERVED_ATTRIBUTES.contains(&attribute.as_str()) {
            return Err(format!(
                "`{key}.{attribute}` is set by each tick (the schedule's name and the tick): \
                 remove it"
            ));
        }
        xml_name(key, attribute.clone())?;
    }
    Ok(map)
}

/// A schedule name: 1 to 64 of `A-Z a-z 0-9 _ . -`.
fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "schedule name {name:?} must be 1 to {MAX_NAME_CHARS} letters, digits, `_`, `.` or \
             `-`"
        ))
    }
}

/// A cron line, parsed: five fields (minute hour day month weekday), or six with seconds
/// first; a seconds field may name one second only (see [`min_interval_ms`]).
fn cron(key: &str, line: &str) -> Result<(String, Cron), String> {
    let line = line.trim();
    let cron = CronParser::new().parse(line).map_err(|err| {
        format!(
            "`{key}`: invalid cron line {line:?}: {err}; expected five fields \
             `<minute> <hour> <day of month> <month> <day of week>`, e.g. \"0 9 * * 1-5\""
        )
    })?;
    let n_seconds = (0..60)
        .filter(|second| cron.pattern.second_match(*second).unwrap_or(false))
        .count();
    let min_ms = min_interval_ms();
    // More than one second of a minute fires more than once that minute.
    if n_seconds > 1 && min_ms >= 60_000 {
        return Err(format!(
            "`{key}`: cron line {line:?} fires {n_seconds} times a minute; schedules fire at \
             most once every {} (each tick is a stored submission): give the seconds field \
             one value, e.g. \"0 * * * * *\", or use five fields",
            interval_words(min_ms)
        ));
    }
    Ok((line.to_owned(), cron))
}

/// The shortest interval between two ticks of a schedule, in milliseconds: one minute, as
/// cron's own resolution and Flue 2.x's platform schedulers (Cloudflare Cron Triggers) allow.
/// Every tick is a stored submission and a model run, so a schedule firing every second
/// would grow the store by gigabytes a day. The environment variable
/// `FLUE_SCHEDULE_MIN_INTERVAL` (an interval such as `1s`) lowers it for the process that
/// sets it: the user's own choice, for tests and demos, which no workspace file can make.
pub const MIN_SCHEDULE_INTERVAL_MS: u64 = 60_000;

/// [`MIN_SCHEDULE_INTERVAL_MS`], or what `FLUE_SCHEDULE_MIN_INTERVAL` sets when it is a valid
/// interval.
fn min_interval_ms() -> u64 {
    std::env::var("FLUE_SCHEDULE_MIN_INTERVAL")
        .ok()
        .and_then(|text| parse_interval(&text))
        .unwrap_or(MIN_SCHEDULE_INTERVAL_MS)
}

/// An interval in the largest unit that writes it whole: `1m`, `90s`, `2h`.
fn interval_words(interval_ms: u64) -> String {
    let seconds = interval_ms / 1000;
    if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// An IANA zone name (`Europe/Paris`, `UTC`), from the zones compiled in.
fn tz(key: &str, name: &str) -> Result<Tz, String> {
    Tz::from_str(name.trim()).map_err(|_| {
        format!(
            "`{key}`: unknown time zone {name:?}: use an IANA name like `Europe/Paris`, \
             `America/New_York` or `UTC`"
        )
    })
}

/// `every`: `<n>s`, `<n>m` or `<n>h` (at least [`min_interval_ms`]).
fn interval(key: &str, value: &Pod) -> Result<u64, String> {
    interval_text(key, &fields::string(key, value)?)
}

/// [`interval`] of a string: at least [`min_interval_ms`].
fn interval_text(key: &str, text: &str) -> Result<u64, String> {
    let Some(interval_ms) = parse_interval(text) else {
        return Err(format!(
            "`{key}` must be a whole number of seconds, minutes or hours like `5m`, `90s` or \
             `1h`, got {text:?}"
        ));
    };
    let min_ms = min_interval_ms();
    if interval_ms < min_ms {
        return Err(format!(
            "`{key}` is {}, more often than schedules may fire: at least every {} (each tick \
             is a stored submission and a model run); use `{}` or longer",
            text.trim(),
            interval_words(min_ms),
            interval_words(min_ms)
        ));
    }
    Ok(interval_ms)
}

/// `<n>s`, `<n>m` or `<n>h` in milliseconds, when it is one and not zero.
fn parse_interval(text: &str) -> Option<u64> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let unit_ms: u64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    let count: u64 = digits.parse().ok()?;
    count
        .checked_mul(unit_ms)
        .filter(|interval_ms| *interval_ms > 0)
}

/// A conversation id, or a template of one with `{tick}`: the id a tick makes must be a valid
/// conversation id.
fn conversation_template(key: &str, agent: &str, template: &str) -> Result<String, String> {
    let sample = template.replace(TICK, &Schedule::tick_text(0));
    flue_core::check_instance_id(&sample)
        .and_then(|()| flue_core::check_instance_id(&format!("{agent}:{sample}")))
        .map_err(|err| format!("`{key}` is not a valid conversation id: {err}"))?;
    Ok(template.to_owned())
}

/// `signal: {type, body, tag, attributes}`.
fn signal(name: &str, value: &Pod, report: &mut Report<'_>) -> Option<ScheduleMessage> {
    let at = ["schedules", name, "signal"];
    let entries = report.check(
        &at,
        fields::mapping(
            &format!("schedules.{name}.signal"),
            value,
            "a mapping with `type`, and optionally `body`, `tag` and `attributes`",
        ),
    )?;
    let mut signal_type = None;
    let mut body = String::new();
    let mut tag_name = None;
    let mut attributes = BTreeMap::new();
    let mut valid = true;
    for (key, value) in entries {
        let keys = ["schedules", name, "signal", key.as_str()];
        let dotted = format!("schedules.{name}.signal.{key}");
        let ok = match key.as_str() {
            "type" => report
                .check(
                    &keys,
                    fields::string(&dotted, value).and_then(|kind| {
                        if kind.trim().is_empty() {
                            Err(format!("`{dotted}` must not be empty, e.g. `daily-report`"))
                        } else {
                            Ok(kind)
                        }
                    }),
                )
                .map(|kind| signal_type = Some(kind)),
            "body" => report
                .check(&keys, fields::scalar_string(&dotted, value))
                .map(|text| body = text),
            "tag" => report
                .check(
                    &keys,
                    fields::string(&dotted, value).and_then(|tag| xml_name(&dotted, tag)),
                )
                .map(|tag| tag_name = Some(tag)),
            "attributes" => report
                .check(
                    &keys,
                    fields::string_map(&dotted, value)
                        .and_then(|map| check_attributes(&dotted, map)),
                )
                .map(|map| attributes = map),
            _ => {
                report.unknown_key(&keys, " in `signal`", SIGNAL_KEYS);
                None
            }
        };
        valid &= ok.is_some();
    }
    let Some(signal_type) = signal_type else {
        report.error(
            &at,
            format!("`schedules.{name}.signal` needs a `type`, e.g. `type: daily-report`"),
        );
        return None;
    };
    valid.then_some(ScheduleMessage::Signal {
        signal_type,
        body,
        attributes,
        tag_name,
    })
}

/// An XML name (`^[A-Za-z_][A-Za-z0-9_.-]*$`), as signal tags and attributes must be.
fn xml_name(key: &str, name: String) -> Result<String, String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "`{key}`: {name:?} is not a valid XML name (a letter or `_`, then letters, digits, \
             `_`, `.` or `-`)"
        ))
    }
}
