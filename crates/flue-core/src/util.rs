//! Small shared helpers: boxed futures, clocks, ids, the name rule, cancellation, the
//! credentials of URLs hidden where they are shown, and the event-stream parser ([`sse`]).

pub(crate) mod beneath;
pub mod sse;
mod url_credentials;
pub mod workspace_file;

// The id rules of flue-protocol that the sibling crates apply to names they show.
pub use flue_protocol::{is_invisible_char, task_session_parent};
pub use url_credentials::hide_url_credentials;

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use flue_protocol::record::{Record, StoredRecord};
use tokio_util::sync::CancellationToken;

use crate::error::{FlueError, Result};

/// A boxed, sendable future: the return type of the object-safe extension traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A piece of work's clock: when it began (for the log) and a monotonic start (for its
/// duration, which a wall-clock step cannot bend).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkClock {
    started_at: u64,
    started: std::time::Instant,
}

impl WorkClock {
    /// A clock started now.
    pub(crate) fn start() -> Self {
        Self {
            started_at: now_ms(),
            started: std::time::Instant::now(),
        }
    }

    /// When the work began, taking no time (work that ended as it began).
    pub(crate) fn at_start(&self) -> flue_protocol::WorkTiming {
        flue_protocol::WorkTiming {
            started_at: self.started_at,
            duration_ms: 0,
        }
    }

    /// When the work began and how long it has run until now.
    pub(crate) fn stop(&self) -> flue_protocol::WorkTiming {
        flue_protocol::WorkTiming {
            started_at: self.started_at,
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Checks a profile, skill or tool name: 1 to 64 characters of `[A-Za-z0-9_-]`.
pub(crate) fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > 64 {
        return Err("is longer than 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err("may only contain letters, digits, '_' and '-'");
    }
    Ok(())
}

/// Wraps records written together, all stamped now.
pub(crate) fn stamp_now(records: impl IntoIterator<Item = Record>) -> Vec<StoredRecord> {
    let at = now_ms();
    records
        .into_iter()
        .map(|record| StoredRecord::new(record, at))
        .collect()
}

/// `ms` since the Unix epoch as an ISO 8601 / RFC 3339 UTC timestamp with milliseconds:
/// `2023-11-14T22:13:20.123Z`.
///
/// ```
/// assert_eq!(flue_core::util::iso8601_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
/// ```
pub fn iso8601_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// A new ULID: 48 bits of milliseconds, then 80 random bits, in Crockford base32.
///
/// Randomness comes from std's per-process random hasher keys mixed with a counter, which is
/// unique enough for identifiers (these are not secrets).
pub fn new_ulid() -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let value = (u128::from(now_ms()) << 80) | (random_u128() & ((1u128 << 80) - 1));
    (0..26)
        .rev()
        .map(|idx| char::from(ALPHABET[((value >> (idx * 5)) & 0x1f) as usize]))
        .collect()
}

/// A new random UUID (version 4 layout), lowercase and hyphenated.
pub fn new_uuid() -> String {
    let mut value = random_u128();
    value = (value & !(0xf << 76)) | (0x4 << 76);
    value = (value & !(0x3 << 62)) | (0x2 << 62);
    let hex = format!("{value:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

fn random_u128() -> u128 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut halves = [0u64; 2];
    for (idx, half) in halves.iter_mut().enumerate() {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(count);
        hasher.write_u64(now_ms());
        hasher.write_usize(idx);
        *half = hasher.finish();
    }
    (u128::from(halves[0]) << 64) | u128::from(halves[1])
}

/// Runs `future` until it finishes or `cancel` fires; a cancel becomes [`FlueError::Aborted`].
pub async fn or_cancel<F: Future>(future: F, cancel: &CancellationToken) -> Result<F::Output> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(FlueError::Aborted),
        output = future => Ok(output),
    }
}
