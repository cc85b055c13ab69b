//! The one error of the protocol crate: a value that breaks a rule of the wire format.
//!
//! flue-core turns it into its `FlueError` (an id into `InvalidInstanceId`, kind `invalid_id`;
//! a thinking level into `InvalidConfig`) with the same message, so callers of the runtime see
//! one taxonomy.

use std::fmt;

/// The most characters a conversation (agent instance) id may have: the limit
/// [`check_instance_id`](crate::check_instance_id) enforces and the message of
/// [`ProtocolError::InvalidId`] states, kept here so the id rules raise this error without it
/// reading them back.
pub const MAX_INSTANCE_ID_CHARS: usize = 128;

/// A value that breaks a rule of the protocol. Grows over time: match with a wildcard.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A conversation (agent instance) id breaks the rules of
    /// [`check_instance_id`](crate::check_instance_id). The message shows the id escaped and
    /// shortened.
    InvalidId {
        /// The rejected id, as given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A thinking level name that is none of [`ThinkingLevel::ALL`](crate::ThinkingLevel::ALL).
    InvalidThinkingLevel {
        /// The rejected name.
        text: String,
    },
}

impl ProtocolError {
    /// The message of [`ProtocolError::InvalidId`] for `id` and `reason`, without building the
    /// error: flue-core's `FlueError::InvalidInstanceId` displays the same text.
    pub fn invalid_id_message(id: &str, reason: &str) -> String {
        format!(
            "invalid conversation id {}: {reason}; use 1 to {MAX_INSTANCE_ID_CHARS} printable \
             characters without spaces or slashes, such as a ticket number, an email address or \
             a user id",
            shown_id(id)
        )
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidId { id, reason } => f.write_str(&Self::invalid_id_message(id, reason)),
            Self::InvalidThinkingLevel { text } => write!(
                f,
                "invalid thinking level {text:?}: expected one of off, minimal, low, medium, \
                 high, xhigh"
            ),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// An id for a message: escaped (control and invisible characters shown as escapes, never
/// sent to a terminal raw) and cut to its first 40 characters, with its length when cut.
fn shown_id(id: &str) -> String {
    const SHOWN_CHARS: usize = 40;
    let n_chars = id.chars().count();
    if n_chars <= SHOWN_CHARS {
        return format!("{id:?}");
    }
    let head: String = id.chars().take(SHOWN_CHARS).collect();
    format!("{head:?}... ({n_chars} characters)")
}
