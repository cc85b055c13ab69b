//! The status line shown while work runs on a terminal: a spinner, the seconds since the
//! message was sent, the tokens so far and what the work waits for.
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
    /// Whether the line is on the screen now.
    pub(crate) shown: bool,
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
            shown: false,
        }
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
        let text = format!(
            "{} {}s · {tokens} · {} (Ctrl-C aborts)",
            FRAMES[self.frame],
            self.started.elapsed().as_secs(),
            self.waiting
        );
        Style::DIM.paint(&text, colored)
    }
}
