//! The id rules every frontend shares: conversation (agent instance) ids and the names of
//! sessions (the default one, and the reserved prefixes of task and action sessions).
//!
//! Ids name conversations in URLs, logs, terminals and store keys, so the CLI, the HTTP server
//! and the runtime check them with the same function, [`check_instance_id`].

use crate::error::{MAX_INSTANCE_ID_CHARS, ProtocolError};

/// The session used when no name is given.
pub const DEFAULT_SESSION: &str = "default";

/// Prefix of framework-owned task session names.
pub const TASK_SESSION_PREFIX: &str = "task:";

/// The first part of the stored name of every session an action scope opens
/// (`action:<invocation>:<name>`); reserved, so callers cannot open such names themselves.
pub const ACTION_SCOPE_PREFIX: &str = "action:";

/// The parent of a task session, read from its name (`task:<parent>:<uuid>`); `None` for a
/// session that is not a task.
///
/// ```
/// let child = "task:default:0b0e6b4c-3c1e-4d5e-9f1a-2b3c4d5e6f70";
/// assert_eq!(flue_protocol::task_session_parent(child), Some("default"));
/// let grandchild = format!("task:{child}:1c1e6b4c-3c1e-4d5e-9f1a-2b3c4d5e6f71");
/// assert_eq!(flue_protocol::task_session_parent(&grandchild), Some(child));
/// assert_eq!(flue_protocol::task_session_parent("default"), None);
/// ```
pub fn task_session_parent(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(TASK_SESSION_PREFIX)?;
    let (parent, id) = rest.rsplit_once(':')?;
    let is_uuid = id.len() == 36 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    (is_uuid && !parent.is_empty()).then_some(parent)
}

/// Checks a conversation (agent instance) id, the CLI's `--id` and the HTTP server's
/// `/agents/<agent>/<id>`: every frontend calls this before using an id a user gave.
///
/// An id is 1 to [`MAX_INSTANCE_ID_CHARS`] characters, none of them whitespace, a control
/// character (terminal escapes), an invisible formatting character (bidirectional overrides,
/// zero-width spaces) or a slash (`/`, `\`), and is not `.` or `..`. Ticket numbers
/// (`PROJ-1234`, `#812`), email addresses, user ids, UUIDs and ULIDs all pass; ids name
/// conversations in URLs, logs and terminals, where the refused characters would mislead.
///
/// Fails with [`ProtocolError::InvalidId`] saying what is wrong.
///
/// ```
/// assert!(flue_protocol::check_instance_id("alice@example.com").is_ok());
/// assert!(flue_protocol::check_instance_id("PROJ-1234").is_ok());
/// assert!(flue_protocol::check_instance_id("two words").is_err());
/// ```
pub fn check_instance_id(id: &str) -> Result<(), ProtocolError> {
    let n_chars = id.chars().count();
    let reason = if id.is_empty() {
        "it is empty".to_owned()
    } else if n_chars > MAX_INSTANCE_ID_CHARS {
        format!("it is {n_chars} characters long")
    } else if id.chars().any(char::is_control) {
        "it contains a control character (a newline or a terminal escape)".to_owned()
    } else if id.chars().any(char::is_whitespace) {
        "it contains whitespace".to_owned()
    } else if id.chars().any(is_invisible_char) {
        "it contains an invisible formatting character".to_owned()
    } else if id.contains(['/', '\\']) {
        "it contains a slash".to_owned()
    } else if id == "." || id == ".." {
        "it is a dot name".to_owned()
    } else {
        return Ok(());
    };
    Err(ProtocolError::InvalidId {
        id: id.to_owned(),
        reason,
    })
}

/// Checks a conversation id: the rule of every instance id ([`check_instance_id`]: 1 to 128
/// characters, no whitespace, control or invisible characters, no slash, not `.` or `..`), so
/// CLIs, the HTTP server and dispatch accept the same ids.
pub fn check_conversation_id(id: &str) -> Result<(), ProtocolError> {
    check_instance_id(id)
}

/// Whether `c` changes how text displays without showing: zero-width and bidirectional
/// formatting characters (overrides, embeddings, isolates and marks), the word joiner family,
/// variation selectors and the byte order mark. Ids refuse them, and so does the HTTP
/// protocol's `idempotencyKey`.
///
/// ```
/// assert!(flue_protocol::is_invisible_char('\u{202E}'));
/// assert!(!flue_protocol::is_invisible_char('a'));
/// ```
pub fn is_invisible_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}
