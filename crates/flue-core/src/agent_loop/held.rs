//! Holding a root session's reply back until its `Stop` hooks pass (`hold_reply_until_stop`):
//! a turn streams into a buffer; a turn with tool calls is released when it ends, a final
//! reply only once no hook blocked it, so a blocked reply never reaches any stream.

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::model::TurnSink;
use flue_protocol::event::Event;

/// What a holding loop keeps back: the events of the current turn and of a final reply that
/// waits for the `Stop` hooks.
#[derive(Default)]
pub(super) struct HeldReply {
    on: bool,
    turn: Option<UnboundedReceiver<Event>>,
    reply: Vec<Event>,
}

impl HeldReply {
    /// Holding when `on`; otherwise every method passes events straight through.
    pub(super) fn new(on: bool) -> Self {
        Self {
            on,
            ..Self::default()
        }
    }

    /// The sink a model turn streams to: a buffer when holding, else `sink` itself.
    pub(super) fn turn_sink(&mut self, sink: &TurnSink) -> TurnSink {
        if !self.on {
            return sink.clone();
        }
        let (events, received) = unbounded_channel();
        self.turn = Some(received);
        TurnSink::new(events)
    }

    /// The turn ended: one with tool calls is not the reply, and is released to `sink` with
    /// whatever was held; one without waits for the `Stop` hooks.
    pub(super) fn turn_ended(&mut self, has_calls: bool, sink: &TurnSink) {
        let Some(mut received) = self.turn.take() else {
            return;
        };
        while let Ok(event) = received.try_recv() {
            self.reply.push(event);
        }
        if has_calls {
            for event in std::mem::take(&mut self.reply) {
                sink.send(event);
            }
        }
    }

    /// A turn failed or a hook blocked the reply: what is held is never shown.
    pub(super) fn discard(&mut self) {
        self.turn = None;
        self.reply.clear();
    }

    /// The reply passed its hooks: sends what is held, its text deltas replaced by `text` (the
    /// reply as the hooks left it) when given.
    pub(super) fn release(&mut self, sink: &TurnSink, text: Option<&str>) {
        for event in std::mem::take(&mut self.reply) {
            if text.is_some() && matches!(event, Event::TextDelta { .. }) {
                continue;
            }
            sink.send(event);
        }
        if let Some(text) = text.filter(|text| self.on && !text.is_empty()) {
            sink.send(Event::TextDelta {
                text: text.to_owned(),
            });
        }
    }
}
