//! The status line shown while work runs on a terminal: a spinner, the seconds since the
//! message was sent, the tokens so far, what the work waits for and the tasks running now
//! (each numbered, with its agent, what it does and its tokens and cost so far).
//!
//! It lives on the line after the last output and is erased before anything else is
//! written, so it never ends up in the scrollback.

use std::time::Instant;

use super::Style;

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// What erases the status line (the cursor is on it).
pub(crate) const ERASE: &str = "\r\x1b[K";

/// The state the status line shows.
#[derive(Debug)]
pub(crate) struct Status {
    started: Instant,
    frame: usize,
    /// Tokens of the model turns that ended.
    tokens: u64,
    /// Their cost, when the model's price is known.
    cost_usd: Option<f64>,
    /// Characters streamed in the current turn (about four to a token).
    streamed_chars: u64,
    /// What the work waits for now.
    waiting: String,
    /// The tasks running now, in the order they started.
    tasks: Vec<LiveTask>,
    /// Whether `/abort N` is read while tasks run (`flue chat`), so the line names it.
    abort_command: bool,
    /// Whether the line is on the screen now.
    pub(crate) shown: bool,
}

/// One running task as the status line shows it.
#[derive(Debug)]
struct LiveTask {
    session: String,
    /// The subagent, or `self` for a copy of the agent.
    agent: String,
    /// Its current tool, or `thinking` or `writing`.
    doing: String,
    tokens: u64,
    cost_usd: Option<f64>,
}

impl Status {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            frame: 0,
            tokens: 0,
            cost_usd: None,
            streamed_chars: 0,
            waiting: "waiting for the model".to_owned(),
            tasks: Vec::new(),
            abort_command: false,
            shown: false,
        }
    }

    /// Names `/abort N` while tasks run: it is read meanwhile.
    pub(crate) fn with_abort_command(mut self) -> Self {
        self.abort_command = true;
        self
    }

    /// The task `session` (running `agent`, or a copy of the agent) started.
    pub(crate) fn task_started(&mut self, session: &str, agent: Option<&str>) {
        self.tasks.push(LiveTask {
            session: session.to_owned(),
            agent: agent.unwrap_or("self").to_owned(),
            doing: "thinking".to_owned(),
            tokens: 0,
            cost_usd: None,
        });
    }

    /// The task `session` ended.
    pub(crate) fn task_ended(&mut self, session: &str) {
        self.tasks.retain(|task| task.session != session);
    }

    /// The task `session` now does `doing` (a tool's name, `thinking`, `writing`).
    pub(crate) fn task_doing(&mut self, session: &str, doing: &str) {
        if let Some(task) = self.task(session) {
            doing.clone_into(&mut task.doing);
        }
    }

    /// A model turn of the task `session` ended with `tokens` costing `cost_usd`.
    pub(crate) fn task_turn_ended(&mut self, session: &str, tokens: u64, cost_usd: Option<f64>) {
        if let Some(task) = self.task(session) {
            task.tokens += tokens;
            if let Some(cost) = cost_usd {
                task.cost_usd = Some(task.cost_usd.unwrap_or(0.0) + cost);
            }
            "thinking".clone_into(&mut task.doing);
        }
    }

    /// The task sessions running now, numbered from 1 in the order the line shows them.
    pub(crate) fn running_tasks(&self) -> Vec<String> {
        self.tasks.iter().map(|task| task.session.clone()).collect()
    }

    /// `[1] helper task:default:…: bash, 120 tokens`, one per running task.
    pub(crate) fn task_lines(&self) -> Vec<String> {
        self.tasks
            .iter()
            .enumerate()
            .map(|(idx, task)| {
                let cost = task
                    .cost_usd
                    .map(|cost| format!(", {}", super::cost_text(cost)))
                    .unwrap_or_default();
                format!(
                    "[{}] {} {}: {}, {} tokens{cost}",
                    idx + 1,
                    task.agent,
                    task.session,
                    task.doing,
                    task.tokens
                )
            })
            .collect()
    }

    fn task(&mut self, session: &str) -> Option<&mut LiveTask> {
        self.tasks.iter_mut().find(|task| task.session == session)
    }

    /// `· tasks: [1] helper bash 120 tokens, ...`, or nothing while no task runs.
    fn tasks_text(&self) -> String {
        if self.tasks.is_empty() {
            return String::new();
        }
        let listed: Vec<String> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(idx, task)| {
                let cost = task
                    .cost_usd
                    .map(|cost| format!(" {}", super::cost_text(cost)))
                    .unwrap_or_default();
                format!(
                    "[{}] {} {} {} tokens{cost}",
                    idx + 1,
                    task.agent,
                    task.doing,
                    task.tokens
                )
            })
            .collect();
        format!(" · tasks: {}", listed.join(", "))
    }

    /// A model turn ended with `tokens` (input and output) costing `cost_usd`.
    pub(crate) fn turn_ended(&mut self, tokens: u64, cost_usd: Option<f64>) {
        self.tokens += tokens;
        if let Some(cost) = cost_usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + cost);
        }
        self.streamed_chars = 0;
        self.waiting = "waiting for the model".to_owned();
    }

    /// The model streamed `chars` more characters.
    pub(crate) fn streamed(&mut self, chars: usize) {
        self.streamed_chars += u64::try_from(chars).unwrap_or(0);
        self.waiting = "the model is writing".to_owned();
    }

    /// The work now waits for `what`.
    pub(crate) fn waiting_for(&mut self, what: String) {
        self.waiting = what;
    }

    /// The next frame of the line (without a line end), styled when `colored`.
    pub(crate) fn next_frame(&mut self, colored: bool) -> String {
        self.frame = (self.frame + 1) % FRAMES.len();
        let tokens = self.tokens + self.streamed_chars / 4;
        let mut tokens = if self.streamed_chars > 0 {
            format!("~{tokens} tokens")
        } else {
            format!("{tokens} tokens")
        };
        if let Some(cost) = self.cost_usd {
            tokens.push_str(&format!(", {}", super::cost_text(cost)));
        }
        let head = format!(
            "{} {}s · {tokens} · {}",
            FRAMES[self.frame],
            self.started.elapsed().as_secs(),
            self.waiting
        );
        let tail = if self.tasks.is_empty() || !self.abort_command {
            " (Ctrl-C aborts)"
        } else {
            " (Ctrl-C aborts; /abort N aborts a task)"
        };
        // One line only: a wrapped line would not be erased whole. The tasks give way first.
        let room = super::width()
            .saturating_sub(1)
            .saturating_sub(head.chars().count() + tail.chars().count());
        let tasks = self.tasks_text();
        let tasks = if tasks.chars().count() > room {
            let kept: String = tasks.chars().take(room.saturating_sub(1)).collect();
            if kept.is_empty() {
                kept
            } else {
                format!("{kept}…")
            }
        } else {
            tasks
        };
        let text = format!("{head}{tasks}{tail}");
        Style::DIM.paint(&text, colored)
    }
}
