//! flue-protocol: Flue's wire types as plain data, with nothing of the runtime.
//!
//! Session records ([`Record`], stored as [`StoredRecord`]), the events every operation emits
//! ([`Event`]), the durable submission types ([`ConversationKey`], [`DeliveredMessage`],
//! [`DispatchReceipt`], [`StreamBatch`], [`Settlement`], ...), the id rules
//! ([`check_instance_id`]), the error's wire shape ([`ErrorInfo`]) and the settings stored with
//! them ([`ThinkingLevel`], [`DurabilityConfig`]). Every type here is a durable format or part
//! of the HTTP protocol: enums are tagged in snake_case and fields are never renamed without an
//! alias.
//!
//! This crate depends on serde and serde_json only and imports nothing else of Flue's. The
//! runtime (flue-core) re-exports every name at its root, so `flue_core::Record` and
//! `flue_protocol::Record` are the same type; crates that need only the data (telemetry, a
//! client) depend on this crate alone.
//!
//! ```
//! use flue_protocol::{Record, StoredRecord, UserMessage};
//! let stored = StoredRecord::new(Record::User(UserMessage::text("hello")), 1_700_000_000_000);
//! let json = serde_json::to_string(&stored).unwrap();
//! assert_eq!(
//!     json,
//!     r#"{"v":1,"at":1700000000000,"type":"user","content":[{"type":"text","text":"hello"}]}"#
//! );
//! ```
//!
//! Map of the modules:
//! - [`record`]: the session log ([`Record`], [`StoredRecord`], [`RECORD_FORMAT_VERSION`])
//! - [`event`]: the operation stream ([`Event`], [`Outcome`], [`ErrorInfo`])
//! - [`submission`]: conversations, messages, receipts, offsets, stream batches, settlements
//! - ids and session names ([`check_instance_id`], [`DEFAULT_SESSION`],
//!   [`TASK_SESSION_PREFIX`], [`task_session_parent`]), settings ([`ThinkingLevel`],
//!   [`DurabilityConfig`]), the span target ([`SPAN_TARGET`]) and the one error,
//!   [`ProtocolError`]

// Only the binaries write to the terminal: flue-cli's stdout is a JSON contract, and an
// embedding application owns its own output.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod config;
mod error;
pub mod event;
mod id;
pub mod record;
pub mod submission;

pub use config::{Budget, BudgetLimits, DurabilityConfig, ThinkingLevel};
pub use error::{MAX_INSTANCE_ID_CHARS, ProtocolError};
pub use event::{CompactionReason, ErrorInfo, Event, OperationKind, Outcome};
pub use id::{
    ACTION_SCOPE_PREFIX, DEFAULT_SESSION, TASK_SESSION_PREFIX, check_conversation_id,
    check_instance_id, is_invisible_char, task_session_parent,
};
pub use record::{
    ActionDecision, ActionInfo, ActionKind, ActionResolution, ActionStarted, AssistantContent,
    AssistantMessage, CompactionSummary, EmittedData, FailedTurn, HookRecord, Image,
    MAX_STATE_BYTES, ModelRef, PendingAction, RECORD_FORMAT_VERSION, Record, RuleChange,
    SampledMessage, SamplingExchange, ShellExchange, StandingRule, StateChange, StopReason,
    StoredRecord, ToolAttempt, ToolCall, ToolResult, Usage, UserContent, UserMessage, WorkTiming,
};
pub use submission::{
    BatchBody, ConversationInfo, ConversationKey, DeliveredMessage, DispatchOptions,
    DispatchReceipt, MessageOptions, Offset, SendCondition, Settlement, StreamBatch, StreamPage,
    SubmissionInfo, SubmissionState, WhenBusy,
};

/// The `tracing` target of every span the runtime (flue-core, and flue-server) opens for
/// telemetry; flue-telemetry exports the spans of this target.
pub const SPAN_TARGET: &str = "flue::telemetry";
