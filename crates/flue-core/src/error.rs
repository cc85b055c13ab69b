//! The one error taxonomy of the runtime.
//!
//! Every failure a caller can see is a [`FlueError`] variant with a stable [`FlueError::kind`]
//! string. Third-party errors (SQLite, HTTP, I/O) are only reachable through `source()`, so
//! upgrading those crates never changes this type. [`FlueError::to_info`] is the single place
//! that turns an error into its wire shape.

use std::error::Error as StdError;

use flue_protocol::ProtocolError;
use serde::{Deserialize, Serialize};

use flue_protocol::event::ErrorInfo;

/// A boxed third-party error kept as a `source()`.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Result alias for the runtime.
pub type Result<T, E = FlueError> = std::result::Result<T, E>;

/// Every error the runtime reports. Grows over time: match with a wildcard outside flue-core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlueError {
    /// The session does not exist. Fix: create it, or use `harness.session()` (get or create).
    #[error("session {session:?} not found")]
    SessionNotFound {
        /// Session name.
        session: String,
    },
    /// `sessions.create` found the session already there. Fix: use `get` or another name.
    #[error("session {session:?} already exists")]
    SessionAlreadyExists {
        /// Session name.
        session: String,
    },
    /// Another operation is running on this session. Retry once it finishes, or use another session.
    #[error("session {session:?} is busy with another operation")]
    SessionBusy {
        /// Session name.
        session: String,
    },
    /// The session name is not allowed (empty, too long, or reserved like `task:`). Fix the name.
    #[error("invalid session name {name:?}: {reason}")]
    InvalidSessionName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A conversation (agent instance) id breaks the rules of [`check_instance_id`]: empty,
    /// too long, or holding whitespace, control or invisible characters or a slash. Not
    /// retryable: the caller fixes the id. The message shows the id escaped and shortened.
    ///
    /// [`check_instance_id`]: crate::harness::check_instance_id
    #[error("{}", ProtocolError::invalid_id_message(.id, .reason))]
    InvalidInstanceId {
        /// The rejected id, as given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Another writer appended to the session first; nothing was written. Reload and retry.
    #[error("session {session:?} changed underneath: expected version {expected}, found {actual}")]
    VersionConflict {
        /// Session name.
        session: String,
        /// The version the writer expected.
        expected: u64,
        /// The version in the store.
        actual: u64,
    },
    /// The storage backend failed. Usually not retryable without operator action.
    #[error("store error: {message}")]
    Store {
        /// What failed.
        message: String,
        /// The backend's error.
        #[source]
        source: Option<BoxError>,
    },
    /// A stored record could not be read (corrupt or from a newer format). Not retryable.
    #[error("corrupt record {index} in session {session:?}: {message}")]
    CorruptRecord {
        /// Session name.
        session: String,
        /// Record index.
        index: u64,
        /// What was wrong.
        message: String,
    },
    /// A profile, agent definition or option is invalid. Fix the configuration.
    #[error("{}", location_prefixed(.path.as_deref(), *.line, .message))]
    InvalidConfig {
        /// What is wrong and how to fix it.
        message: String,
        /// The file at fault, when there is one.
        path: Option<String>,
        /// 1-based line in `path`, when known.
        line: Option<usize>,
    },
    /// No model was configured for the operation. Fix: set `model` on the agent, in flue.toml
    /// defaults, or per call.
    #[error("no model configured{}", .hint.as_deref().map(|h| format!(": {h}")).unwrap_or_default())]
    ModelNotConfigured {
        /// Where a model could be set.
        hint: Option<String>,
    },
    /// The message has images but the call's model does not accept image input. Raised before
    /// anything is stored or sent. Not retryable as is: choose a vision-capable model for the
    /// call, or send the message without images.
    #[error(
        "model {model:?} does not accept image input: choose a vision-capable model for this \
         call, or send the message without images"
    )]
    ImageInputUnsupported {
        /// The call's model specifier.
        model: String,
    },
    /// A conversation's state document is not a JSON object (`initialData`, a tool's or the
    /// application's write). Fix: write an object, such as `{"step": 1}`.
    #[error("invalid state: {reason}")]
    InvalidState {
        /// What is wrong with it.
        reason: String,
    },
    /// A conversation's state document is larger than its limit
    /// ([`MAX_STATE_BYTES`](flue_protocol::record::MAX_STATE_BYTES)); nothing was stored. Fix: keep less in the
    /// state (large data belongs in files or the application's own store).
    #[error(
        "the state is {bytes} bytes of JSON, over its limit of {limit} bytes: keep less in it (large data belongs in files or the application's own store)"
    )]
    StateTooLarge {
        /// Its size as JSON.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A model specifier is not `<provider>/<model>`. Fix the specifier.
    #[error("invalid model specifier {spec:?}: expected \"<provider>/<model>\"")]
    InvalidModelSpec {
        /// The specifier given.
        spec: String,
    },
    /// The provider part of a model specifier names no registered provider. Fix the specifier
    /// or register the provider.
    #[error("unknown provider {provider:?} in model {spec:?} (known providers: {})", .known.join(", "))]
    UnknownProvider {
        /// The provider id.
        provider: String,
        /// The whole specifier.
        spec: String,
        /// Registered provider ids.
        known: Vec<String>,
    },
    /// The model provider failed. `retryable` says whether the same request may succeed later
    /// (remote providers have already retried transient failures a few times by then); callers
    /// that retry should wait `retry_after_ms` when it is set. Otherwise fix what the provider's
    /// message says (a bad key, an unknown model, an invalid request).
    #[error(
        "model provider {provider:?} failed{}: {message}",
        .status.map(|status| format!(" (HTTP {status})")).unwrap_or_default()
    )]
    Provider {
        /// Provider id.
        provider: String,
        /// What went wrong, with the provider's own message when it sent one.
        message: String,
        /// The HTTP status of the provider's answer, when there was one.
        status: Option<u16>,
        /// True for transient failures (rate limits, overload, network).
        retryable: bool,
        /// How long the provider asked callers to wait before retrying, when it said.
        retry_after_ms: Option<u64>,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// A provider that needs an API key has none. Fix: set the named environment variable (in
    /// the environment or in `.env`); not retryable until then. Raised before any request.
    #[error(
        "model provider {provider:?} needs an API key: set {env_var} in the environment or in .env"
    )]
    MissingApiKey {
        /// Provider id.
        provider: String,
        /// The environment variable the key is read from.
        env_var: String,
    },
    /// The request did not fit the model's context window (the provider said so). Not retryable
    /// as is: compaction handles it by folding old history and retrying once; otherwise shorten
    /// the conversation or pick a model with a larger window.
    #[error(
        "model provider {provider:?}: the conversation exceeds the model's context window: \
         {message}; compact the session or use a model with a larger context window"
    )]
    ContextOverflow {
        /// Provider id.
        provider: String,
        /// The provider's message.
        message: String,
    },
    /// The model ended its answer for a reason that is not a normal end: it refused, the
    /// provider's content filter stopped it, the context window filled up, it kept pausing,
    /// or the provider gave a reason this version does not know. The turn (with any refusal
    /// text and partial answer) is stored with its stop reason; nothing was cut silently.
    /// Fix: rephrase the request, or see `docs/providers.md` for what each reason means.
    #[error("{}", model_stopped_message(model, reason, refusal.as_deref()))]
    ModelStopped {
        /// The model, as `provider/model`.
        model: String,
        /// Why the model stopped.
        reason: flue_protocol::record::StopReason,
        /// The model's refusal, in its own words, when it refused and said why.
        refusal: Option<String>,
    },
    /// A scripted model's script is unreadable, invalid, or has no rule for the situation.
    /// Fix the script file.
    #[error("script {path}: {message}")]
    Script {
        /// The script path as given in the model specifier.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Two tools in one session's tool list share a name. Fix: rename one.
    #[error("tool name collision: {name:?} is defined more than once")]
    ToolNameCollision {
        /// The duplicated name.
        name: String,
    },
    /// A tool definition is invalid (bad name or schema). Fix the definition.
    #[error("invalid tool {name:?}: {message}")]
    InvalidTool {
        /// Tool name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A sandbox path resolves outside the sandbox root. The operation was refused.
    #[error("path {path:?} is outside the sandbox")]
    PathOutsideSandbox {
        /// The path as given.
        path: String,
    },
    /// A sandbox path reaches something flue keeps from agents: its store (`.flue/`) or a
    /// secrets file (a name starting with `.env`), directly or through a symlink. The
    /// operation was refused in every sandbox. Not retryable: use another path.
    #[error("path {path:?} is protected: {reason}")]
    ProtectedPath {
        /// The path as given.
        path: String,
        /// Why the path is off limits.
        reason: String,
    },
    /// A sandbox file operation or command failed.
    #[error("sandbox: {message}")]
    Sandbox {
        /// What failed, with the path where there is one.
        message: String,
        /// Stable sub-kind (`not_found`, `is_directory`, `not_a_directory`, `already_exists`, ...).
        reason: SandboxErrorReason,
        /// The underlying I/O error.
        #[source]
        source: Option<BoxError>,
    },
    /// The operation was aborted by its caller. The session is consistent; nothing to fix.
    #[error("operation aborted")]
    Aborted,
    /// The model kept calling tools past the turn limit. Raise `max_turns` or fix the loop.
    #[error("stopped after {max_turns} model turns without a final answer")]
    MaxTurnsExceeded {
        /// The limit that was hit.
        max_turns: u32,
    },
    /// A budget (`budget:` in the agent file, `[defaults.budget]` in flue.toml, a flag or the
    /// message's `budget`) was used up: no further model call was made. Raise the limit
    /// named, or start a new conversation for a conversation budget.
    #[error(
        "the {scope} budget {limit} = {value} is used up ({reached} reached); no further model \
         call was made. Raise it: `budget:` in the agent file, `[defaults.budget]` in \
         flue.toml, a flag of `flue run` or `flue chat`, or the message's `budget`"
    )]
    BudgetExceeded {
        /// `submission` or `conversation`.
        scope: String,
        /// `max_cost_usd` or `max_turns`.
        limit: String,
        /// The limit's value (US dollars, or model calls).
        value: String,
        /// The figure reached (`0.0123 USD`, `5 model calls`).
        reached: String,
    },
    /// A hook tripped a guardrail: it blocked the user's message or the model call, or said
    /// to stop (`continue: false`) at any point. The operation ends; nothing it would have
    /// led to ran.
    #[error("guardrail tripped at {event} by {hook}: {reason}")]
    GuardrailTripped {
        /// The hook point (`UserPromptSubmit`, `Stop`, ...).
        event: String,
        /// The hook that decided.
        hook: String,
        /// Its reason.
        reason: String,
    },
    /// A hook at a point that blocks (`UserPromptSubmit`, `BeforeModelCall`) failed (timed
    /// out, crashed, answered unreadable JSON) and fails closed.
    #[error("hook failed at {event}: {message}")]
    HookFailed {
        /// The hook point.
        event: String,
        /// The hook.
        hook: String,
        /// What went wrong, and how to let the point go on despite it.
        message: String,
    },
    /// A structured-result operation ended without valid data.
    #[error("result unavailable: {reason}")]
    ResultUnavailable {
        /// Why (the model gave up, or kept returning invalid data).
        reason: String,
    },
    /// The runtime's worker stopped before answering (a panic inside an operation, or shutdown).
    #[error("runtime stopped: {message}")]
    RuntimeStopped {
        /// What happened.
        message: String,
    },
    /// An MCP server failed: it could not be started or reached, broke the protocol, timed out,
    /// or went away. Raised by flue-connectors when connecting (the harness cannot start: fix
    /// the server or its declaration) and, as a tool error the model sees, during a call.
    /// `reason` says whether a retry can help.
    #[error("mcp server {server:?}: {message}")]
    Mcp {
        /// The server's name as declared.
        server: String,
        /// Stable sub-kind.
        reason: McpErrorReason,
        /// What went wrong and how to fix it; never carries header or environment values.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// `session.skill` (or the model's `load_skill` tool) named a skill this session does not
    /// have. Not retryable: fix the name, or add the skill to `.agents/skills/` or the agent.
    #[error("skill {skill:?} is not registered (available skills: {})", list_or_none(.available))]
    SkillNotRegistered {
        /// The requested skill.
        skill: String,
        /// The skills the session has, sorted.
        available: Vec<String>,
    },
    /// A call or a session default named a role that does not exist. Not retryable: fix the
    /// name, or add `.agents/roles/<name>.md`.
    #[error("unknown role {role:?} (roles: {})", list_or_none(.known))]
    UnknownRole {
        /// The requested role.
        role: String,
        /// The roles that exist, sorted.
        known: Vec<String>,
    },
    /// A task named a subagent its agent does not declare. Not retryable: use one of the
    /// declared subagents, or declare it (`subagents:` in the agent file).
    #[error("subagent {agent:?} is not declared by this agent (declared subagents: {})", list_or_none(.declared))]
    SubagentNotDeclared {
        /// The requested subagent.
        agent: String,
        /// The subagents the running agent declares.
        declared: Vec<String>,
    },
    /// A task would nest deeper than the limit below the root session. Not retryable: do the
    /// work in the current task instead of delegating again.
    #[error(
        "cannot start a task at depth {depth}: tasks nest at most {max} levels below the root \
         session; do this work here instead of delegating"
    )]
    DelegationDepthExceeded {
        /// The depth the refused task would have had.
        depth: u32,
        /// The limit.
        max: u32,
    },
    /// The model called an action (an [`ActionDefinition`](crate::action::ActionDefinition)) with
    /// input that does not match its input schema. Returned to the model as a tool error it
    /// can retry from with fixed arguments; the operation goes on.
    #[error("invalid input for action {action:?}: {}", .issues.join("; "))]
    ActionInputValidation {
        /// The action.
        action: String,
        /// Each problem, with the path of the field (`/count: "x" is not of type "integer"`).
        issues: Vec<String>,
    },
    /// An action returned output that does not match its declared output schema. A bug in
    /// the action, not in the model's call: fix the action or its schema. Returned to the
    /// model as a tool error.
    #[error("action {action:?} returned output that does not match its output schema: {}", .issues.join("; "))]
    ActionOutputValidation {
        /// The action.
        action: String,
        /// Each problem, with the path of the field.
        issues: Vec<String>,
    },
    /// An action's output could not be turned into JSON (a map with non-string keys, a
    /// `Serialize` impl that fails). A bug in the action: return JSON-representable data.
    /// Returned to the model as a tool error.
    #[error("action {action:?} returned output that is not JSON-serializable: {message}")]
    ActionOutputSerialization {
        /// The action.
        action: String,
        /// What serde reported.
        message: String,
    },
    /// An action called from inside an action's scope would nest deeper than the limit. Not
    /// retryable: do the work in the current action instead of calling another.
    #[error(
        "cannot run action {action:?}: actions nest at most {max} levels deep; do this work \
         here instead of calling another action"
    )]
    ActionDepthExceeded {
        /// The refused action.
        action: String,
        /// The limit.
        max: u32,
    },
    /// A request is malformed (an empty signal type, a bad signal tag name, ...). Not
    /// retryable: fix the request as the message says.
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A memory note, or a subject's notes, would exceed a bound of the agent's `memory:`
    /// (`what` says which). Nothing was stored. Delete notes or shorten the note.
    #[error("memory limit exceeded: {what} (limit {limit})")]
    MemoryLimitExceeded {
        /// Which bound: `note bytes`, `notes per subject` or `bytes per subject`.
        what: String,
        /// The bound.
        limit: u64,
    },
    /// A conversation's memory subject was set once and another one was given. Nothing was
    /// stored. Use the conversation's subject, or start another conversation.
    #[error("conversation {instance_id} keeps the memory of subject {bound:?}, not {given:?}")]
    MemorySubjectConflict {
        /// The conversation's instance id.
        instance_id: String,
        /// Its subject.
        bound: String,
        /// The subject given.
        given: String,
    },
    /// A dispatch named an agent the runtime does not serve. Not retryable: fix the name.
    #[error("agent {agent:?} not found (agents: {})", list_or_none(.known))]
    UnknownAgent {
        /// The requested agent.
        agent: String,
        /// The agents served, sorted.
        known: Vec<String>,
    },
    /// The conversation does not exist, or (with a `uid` send condition) is another
    /// incarnation. Nothing was stored. Fix the id or drop the condition.
    #[error(
        "conversation {agent}/{id} not found{}",
        .uid.as_deref().map(|uid| format!(" with uid {uid}")).unwrap_or_default()
    )]
    AgentInstanceNotFound {
        /// Agent name.
        agent: String,
        /// Conversation id.
        id: String,
        /// The uid the caller required, if any.
        uid: Option<String>,
    },
    /// A create-only dispatch found the conversation already there. Nothing was stored.
    /// Continue it by passing its `uid`, or use another id.
    #[error("conversation {agent}/{id} already exists (uid {uid})")]
    AgentInstanceExists {
        /// Agent name.
        agent: String,
        /// Conversation id.
        id: String,
        /// The existing incarnation's uid.
        uid: String,
    },
    /// The conversation has unsettled work and the caller asked not to queue behind it.
    /// Nothing was stored. Retry later, or dispatch with queueing. Kind `session_busy`.
    #[error(
        "conversation {agent}/{id} is busy with {unsettled} unsettled submission(s){}",
        .owner.as_deref().map(|owner| format!(" (owner {owner})")).unwrap_or_default()
    )]
    ConversationBusy {
        /// Agent name.
        agent: String,
        /// Conversation id.
        id: String,
        /// The owner processing it, when one holds it.
        owner: Option<String>,
        /// How many submissions are unsettled.
        unsettled: u64,
    },
    /// An idempotency key was reused with another message. Nothing was stored. Not
    /// retryable: use a new key for a new message.
    #[error(
        "idempotency key {key:?} was already used for submission {submission_id} with another message"
    )]
    SubmissionConflict {
        /// The key.
        key: String,
        /// The submission admitted with it first.
        submission_id: String,
    },
    /// No submission has this id. Fix the id.
    #[error("submission {submission_id} not found")]
    SubmissionNotFound {
        /// The id.
        submission_id: String,
    },
    /// The submission ran past its wall-clock budget (`durability.timeout_ms`, counted from
    /// its first attempt) and was settled failed. Not retried; send a new message to go on.
    #[error("submission {submission_id} timed out after {timeout_ms} ms")]
    SubmissionTimeout {
        /// The submission.
        submission_id: String,
        /// The budget.
        timeout_ms: u64,
    },
    /// The submission was interrupted more often than `durability.max_attempts` allows and
    /// was settled failed. Send a new message to go on.
    #[error(
        "submission {submission_id} was interrupted {attempts} times (max_attempts {max_attempts})"
    )]
    SubmissionRetryExhausted {
        /// The submission.
        submission_id: String,
        /// Attempts used.
        attempts: u32,
        /// The budget.
        max_attempts: u32,
    },
    /// The submission was interrupted and cannot be resumed (its agent is no longer served,
    /// or its session was deleted); settled failed. Send a new message to go on.
    #[error("submission {submission_id} was interrupted and cannot resume: {reason}")]
    SubmissionInterrupted {
        /// The submission.
        submission_id: String,
        /// Why it cannot resume.
        reason: String,
    },
    /// The submission was aborted (by an abort of its conversation). Nothing to fix.
    #[error("submission {submission_id} was aborted")]
    SubmissionAborted {
        /// The submission.
        submission_id: String,
    },
    /// The submission settled failed with the error of its operation (`error.kind` says
    /// which: a provider error, max turns, ...); see that kind for what to do.
    #[error("submission {submission_id} failed: {}: {}", .error.kind, .error.message)]
    SubmissionFailed {
        /// The submission.
        submission_id: String,
        /// The operation's error.
        error: ErrorInfo,
    },
    /// This process no longer owns the conversation (another took over after its lease
    /// expired or it was presumed dead), or a write bypassed the runtime on a conversation it
    /// manages; nothing was written. The new owner carries on; do not retry the write.
    #[error("not the owner of conversation {conversation} (epoch {epoch}): {message}")]
    LeaseLost {
        /// `agent/id`.
        conversation: String,
        /// The epoch the writer held (0 when it held none).
        epoch: u64,
        /// What happened.
        message: String,
    },
    /// The session (or conversation) waits for decisions on tool calls, so it takes no new
    /// message. Resolve the listed actions first (confirm, deny, or supply a custom tool's
    /// result), or interrupt, which answers them all and may carry the new message.
    #[error(
        "session {session:?} is waiting for decisions on {}; resolve them or interrupt first",
        .actions.join(", ")
    )]
    ActionsPending {
        /// The session (or conversation, `agent/id`).
        session: String,
        /// The pending action ids.
        actions: Vec<String>,
    },
    /// The action was decided already (the first decision wins); nothing was changed. Read
    /// the actions to see the decision that was taken.
    #[error("action {action_id} was already resolved")]
    ActionAlreadyResolved {
        /// The action.
        action_id: String,
    },
    /// No action with this id exists in the session. Fix the id (list the actions).
    #[error("no action {action_id} in session {session:?}; pending: {}", list_or_none(.pending))]
    ActionNotFound {
        /// The action id asked for.
        action_id: String,
        /// The session.
        session: String,
        /// The actions still pending there.
        pending: Vec<String>,
    },
    /// The decision does not fit the action: `allow` is for confirmations, a result for
    /// custom tools. Fix the request.
    #[error("invalid decision for action {action_id}: {message}")]
    InvalidDecision {
        /// The action.
        action_id: String,
        /// What is wrong.
        message: String,
    },
    /// A stream read started past the head. Fix the offset (take it from a response).
    #[error("offset {offset} is past the head {head} of conversation {conversation}")]
    OffsetOutOfRange {
        /// `agent/id`.
        conversation: String,
        /// The requested offset.
        offset: u64,
        /// The head.
        head: u64,
    },
}

/// Sub-kinds of [`FlueError::Mcp`], stable on the wire. May grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum McpErrorReason {
    /// The server could not be started or reached, or refused the handshake. Fix the server or
    /// its declaration; retry once it runs.
    StartFailed,
    /// A request got no answer within the timeout. Retryable.
    Timeout,
    /// The server exited or closed the connection. Restart it (a new harness reconnects).
    Closed,
    /// The server answered with something that is not valid MCP. Not retryable.
    MalformedResponse,
    /// The server's tool list cannot be used (duplicate adapted names, a repeated pagination
    /// cursor, an invalid schema). Fix the server.
    InvalidTools,
    /// The server answered a request with a JSON-RPC error. Usually fix the input.
    ServerError,
    /// The server needs OAuth authorization that is missing, expired or was refused. Sign in
    /// (`flue mcp login <server>`) or fix the server's `oauth` settings, then retry.
    AuthRequired,
}

/// Sub-kinds of [`FlueError::Sandbox`], stable on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SandboxErrorReason {
    /// The path does not exist.
    NotFound,
    /// A directory was found where a file was expected.
    IsDirectory,
    /// A file was found where a directory was expected.
    NotADirectory,
    /// The path exists already.
    AlreadyExists,
    /// The directory is not empty.
    NotEmpty,
    /// The sandbox refused access.
    PermissionDenied,
    /// The content is not valid UTF-8 text.
    InvalidUtf8,
    /// The sandbox does not support the requested option.
    Unsupported,
    /// A command or file operation hit one of the sandbox's limits (commands, loop
    /// iterations, filesystem size, ...). Not retryable as is: do less, or raise the limit.
    LimitExceeded,
    /// The sandbox cannot run on this machine or cannot be reached (a missing tool, a
    /// refused namespace, a remote API that failed). The message says how to fix it.
    Unavailable,
    /// Anything else.
    Other,
}

impl FlueError {
    /// The stable kind string of this error, for matching by callers and on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SessionNotFound { .. } => "session_not_found",
            Self::SessionAlreadyExists { .. } => "session_already_exists",
            Self::SessionBusy { .. } | Self::ConversationBusy { .. } => "session_busy",
            Self::InvalidSessionName { .. } => "invalid_session_name",
            Self::InvalidInstanceId { .. } => "invalid_id",
            Self::VersionConflict { .. } => "version_conflict",
            Self::Store { .. } => "store_error",
            Self::CorruptRecord { .. } => "corrupt_record",
            Self::InvalidConfig { .. } => "invalid_config",
            Self::ModelNotConfigured { .. } => "model_not_configured",
            Self::ImageInputUnsupported { .. } => "image_input_unsupported",
            Self::InvalidModelSpec { .. } => "invalid_model_spec",
            Self::InvalidState { .. } => "invalid_state",
            Self::StateTooLarge { .. } => "state_too_large",
            Self::UnknownProvider { .. } => "unknown_provider",
            Self::Provider { .. } => "provider_error",
            Self::ContextOverflow { .. } => "context_overflow",
            Self::ModelStopped { reason, .. } => match reason {
                flue_protocol::record::StopReason::Refusal => "model_refusal",
                flue_protocol::record::StopReason::ContentFilter => "content_filter",
                flue_protocol::record::StopReason::ContextWindowExceeded => {
                    "context_window_exceeded"
                }
                _ => "model_stopped",
            },
            Self::MissingApiKey { .. } => "missing_api_key",
            Self::Script { .. } => "script_error",
            Self::ToolNameCollision { .. } => "tool_name_collision",
            Self::InvalidTool { .. } => "invalid_tool",
            Self::PathOutsideSandbox { .. } => "outside_workspace",
            Self::ProtectedPath { .. } => "protected_path",
            Self::Sandbox { reason, .. } => reason.kind(),
            Self::Aborted => "aborted",
            Self::MaxTurnsExceeded { .. } => "max_turns_exceeded",
            Self::BudgetExceeded { .. } => "budget_exceeded",
            Self::ResultUnavailable { .. } => "result_unavailable",
            Self::GuardrailTripped { .. } => "guardrail_tripped",
            Self::HookFailed { .. } => "hook_failed",
            Self::RuntimeStopped { .. } => "runtime_stopped",
            Self::Mcp { reason, .. } => reason.kind(),
            Self::SkillNotRegistered { .. } => "skill_not_registered",
            Self::UnknownRole { .. } => "unknown_role",
            Self::SubagentNotDeclared { .. } => "subagent_not_declared",
            Self::DelegationDepthExceeded { .. } => "delegation_depth_exceeded",
            Self::ActionInputValidation { .. } => "action_input_validation",
            Self::ActionOutputValidation { .. } => "action_output_validation",
            Self::ActionOutputSerialization { .. } => "action_output_serialization",
            Self::ActionDepthExceeded { .. } => "action_depth_exceeded",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::MemoryLimitExceeded { .. } => "memory_limit_exceeded",
            Self::MemorySubjectConflict { .. } => "memory_subject_conflict",
            Self::UnknownAgent { .. } => "agent_not_found",
            Self::AgentInstanceNotFound { .. } => "agent_instance_not_found",
            Self::AgentInstanceExists { .. } => "agent_instance_exists",
            Self::SubmissionConflict { .. } => "submission_conflict",
            Self::SubmissionNotFound { .. } => "submission_not_found",
            Self::SubmissionTimeout { .. } => "submission_timeout",
            Self::SubmissionRetryExhausted { .. } => "submission_retry_exhausted",
            Self::SubmissionInterrupted { .. } => "submission_interrupted",
            Self::SubmissionAborted { .. } => "submission_aborted",
            Self::SubmissionFailed { .. } => "submission_failed",
            Self::LeaseLost { .. } => "lease_lost",
            Self::OffsetOutOfRange { .. } => "offset_out_of_range",
            Self::ActionsPending { .. } => "actions_pending",
            Self::ActionAlreadyResolved { .. } => "action_already_resolved",
            Self::ActionNotFound { .. } => "action_not_found",
            Self::InvalidDecision { .. } => "invalid_decision",
        }
    }

    /// The wire shape of this error.
    pub fn to_info(&self) -> ErrorInfo {
        ErrorInfo {
            kind: self.kind().to_owned(),
            message: self.to_string(),
        }
    }

    /// A configuration error without a file location.
    pub fn config(message: impl Into<String>) -> Self {
        Self::InvalidConfig {
            message: message.into(),
            path: None,
            line: None,
        }
    }

    /// A store error wrapping a backend error.
    pub fn store(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Store {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A sandbox error of the given reason.
    pub fn sandbox(reason: SandboxErrorReason, message: impl Into<String>) -> Self {
        Self::Sandbox {
            message: message.into(),
            reason,
            source: None,
        }
    }
}

impl From<ProtocolError> for FlueError {
    /// An id that breaks the id rule becomes [`FlueError::InvalidInstanceId`]; any other value
    /// that breaks a wire rule (a thinking level) becomes [`FlueError::InvalidConfig`]. The
    /// message stays the same.
    fn from(err: ProtocolError) -> Self {
        match err {
            ProtocolError::InvalidId { id, reason } => Self::InvalidInstanceId { id, reason },
            other => Self::config(other.to_string()),
        }
    }
}

impl SandboxErrorReason {
    /// The stable kind string.
    pub fn kind(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::IsDirectory => "is_directory",
            Self::NotADirectory => "not_a_directory",
            Self::AlreadyExists => "already_exists",
            Self::NotEmpty => "not_empty",
            Self::PermissionDenied => "permission_denied",
            Self::InvalidUtf8 => "invalid_utf8",
            Self::Unsupported => "unsupported",
            Self::LimitExceeded => "limit_exceeded",
            Self::Unavailable => "sandbox_unavailable",
            Self::Other => "sandbox_error",
        }
    }
}

impl McpErrorReason {
    /// The stable kind string.
    pub fn kind(self) -> &'static str {
        match self {
            Self::StartFailed => "mcp_start_failed",
            Self::Timeout => "mcp_timeout",
            Self::Closed => "mcp_server_closed",
            Self::MalformedResponse => "mcp_malformed_response",
            Self::InvalidTools => "mcp_invalid_tools",
            Self::ServerError => "mcp_server_error",
            Self::AuthRequired => "mcp_auth_required",
        }
    }
}

/// The message of [`FlueError::ModelStopped`].
fn model_stopped_message(
    model: &str,
    reason: &flue_protocol::record::StopReason,
    refusal: Option<&str>,
) -> String {
    use flue_protocol::record::StopReason;
    match reason {
        StopReason::Refusal => match refusal.map(str::trim).filter(|text| !text.is_empty()) {
            Some(text) => format!("the model {model} refused to answer: {text}"),
            None => format!("the model {model} refused to answer (it gave no reason)"),
        },
        StopReason::ContentFilter => format!(
            "the provider's content filter stopped the answer of {model}; what arrived before \
             is stored in the session, but the answer is incomplete"
        ),
        StopReason::ContextWindowExceeded => format!(
            "the answer of {model} was cut off because the conversation filled the model's \
             context window; compact the session or start a new conversation"
        ),
        StopReason::PauseTurn => format!(
            "the model {model} paused its turn again and again without finishing; the paused \
             turn is stored, send another message to let it go on"
        ),
        other => format!(
            "the model {model} stopped for a reason flue does not know ({other}); the answer \
             may be incomplete"
        ),
    }
}

fn location_prefixed(path: Option<&str>, line: Option<usize>, message: &str) -> String {
    match (path, line) {
        (Some(path), Some(line)) => format!("{path}:{line}: {message}"),
        (Some(path), None) => format!("{path}: {message}"),
        _ => message.to_owned(),
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
