//! Budgets: the spending limits of a submission and of its conversation, checked before each
//! model call of a root session's operation.
//!
//! What was spent is read from what the providers reported and the store kept: the `usage` of
//! every assistant turn, failed turn, sampling exchange and prompt hook (cost priced from the model catalog
//! when a provider reports tokens only). A submission's figure is its root session's records
//! since its message (so a submission resumed after a pause or a crash counts its earlier
//! attempts too) plus what this operation spent, its tasks included; a conversation's figure is
//! every session of the instance as stored when the operation started, plus what this operation
//! spent. Turns are model calls: a submission counts its root session's, a conversation every
//! session's. The check runs before a model call, so the call that crosses a cost limit
//! finishes (its tool calls are answered) and the next one is not made.

use flue_protocol::record::{Record, Usage};
use flue_protocol::{Budget, BudgetLimits};

use crate::error::{FlueError, Result};
use crate::shared::HarnessShared;
use crate::store::SessionKey;

/// What a scope spent: US dollars and model calls.
#[derive(Clone, Copy, Debug, Default)]
struct Spent {
    cost_usd: f64,
    turns: u64,
}

impl Spent {
    fn add(&mut self, record: &Record) {
        let usage = match record {
            Record::Assistant(message) => {
                self.turns += 1;
                message.usage
            }
            Record::FailedTurn(failed) => {
                self.turns += 1;
                failed.usage
            }
            Record::Sampling(exchange) => exchange.usage,
            // A prompt hook's judgement costs money but is not a turn of the conversation.
            Record::Hook(hook) => match hook.usage {
                Some(usage) => usage,
                None => return,
            },
            _ => return,
        };
        self.cost_usd += usage.cost_usd.unwrap_or(0.0);
    }

    fn of(records: &[Record]) -> Self {
        let mut spent = Self::default();
        for record in records {
            spent.add(record);
        }
        spent
    }
}

/// The budgets of one operation with what its submission and conversation spent before it.
#[derive(Debug)]
pub(crate) struct BudgetCheck {
    budget: Budget,
    submission: Spent,
    conversation: Spent,
}

impl BudgetCheck {
    /// The check of an operation of a root session whose log is `records` (the operation's
    /// message, if any, already appended at `opened_at`): `None` without budgets. Reads every
    /// session of the instance when a conversation limit is set.
    pub(crate) async fn start(
        harness: &HarnessShared,
        records: &[Record],
        opened_at: Option<usize>,
        budget: Budget,
    ) -> Result<Option<Self>> {
        if budget.is_empty() {
            return Ok(None);
        }
        // A resumed submission started at its message: the last user record.
        let from = opened_at
            .or_else(|| {
                records
                    .iter()
                    .rposition(|record| matches!(record, Record::User(_)))
            })
            .unwrap_or(0)
            .min(records.len());
        let submission = Spent::of(&records[from..]);
        let conversation = if budget.conversation.is_empty() {
            Spent::default()
        } else {
            let mut spent = Spent::default();
            let store = &harness.store;
            for session in store.list(&harness.instance_id).await? {
                let key = SessionKey::new(harness.instance_id.clone(), session.session);
                if let Some(log) = store.load(&key, 0).await? {
                    for stored in &log.records {
                        spent.add(&stored.record);
                    }
                }
            }
            spent
        };
        Ok(Some(Self {
            budget,
            submission,
            conversation,
        }))
    }

    /// Fails with [`FlueError::BudgetExceeded`] when a limit is reached: `turns` model calls
    /// made and `spent` spent by this operation so far.
    pub(crate) fn check(&self, turns: u32, spent: &Usage) -> Result<()> {
        let scopes = [
            ("submission", self.budget.submission(), self.submission),
            ("conversation", self.budget.conversation, self.conversation),
        ];
        for (scope, limits, before) in scopes {
            exceeded(scope, limits, before, turns, spent)?;
        }
        Ok(())
    }
}

fn exceeded(
    scope: &str,
    limits: BudgetLimits,
    before: Spent,
    turns: u32,
    spent: &Usage,
) -> Result<()> {
    let turns = before.turns + u64::from(turns);
    if let Some(max) = limits.max_turns
        && turns >= u64::from(max)
    {
        return Err(FlueError::BudgetExceeded {
            scope: scope.to_owned(),
            limit: "max_turns".to_owned(),
            value: max.to_string(),
            reached: format!("{turns} model call{}", if turns == 1 { "" } else { "s" }),
        });
    }
    let cost = before.cost_usd + spent.cost_usd.unwrap_or(0.0);
    if let Some(max) = limits.max_cost_usd
        && cost >= max
    {
        return Err(FlueError::BudgetExceeded {
            scope: scope.to_owned(),
            limit: "max_cost_usd".to_owned(),
            value: format!("{max} USD"),
            reached: format!("{cost:.6} USD"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_reached_at_its_value_and_named() {
        let limits = BudgetLimits {
            max_cost_usd: Some(0.01),
            max_turns: Some(3),
        };
        let before = Spent {
            cost_usd: 0.004,
            turns: 1,
        };
        let cheap = Usage {
            cost_usd: Some(0.001),
            ..Usage::default()
        };
        assert!(exceeded("submission", limits, before, 1, &cheap).is_ok());
        let err = exceeded("submission", limits, before, 2, &cheap).unwrap_err();
        assert_eq!(err.kind(), "budget_exceeded");
        assert!(
            err.to_string().starts_with(
                "the submission budget max_turns = 3 is used up (3 model calls reached)"
            ),
            "{err}"
        );
        let dear = Usage {
            cost_usd: Some(0.007),
            ..Usage::default()
        };
        let err = exceeded("conversation", limits, before, 0, &dear).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "the conversation budget max_cost_usd = 0.01 USD is used up (0.011000 USD reached)"
            ),
            "{err}"
        );
    }
}
