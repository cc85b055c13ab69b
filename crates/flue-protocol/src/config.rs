//! Settings that travel on the wire: the reasoning effort of a model call and the limits of a
//! durable submission.
//!
//! Both are part of stored data (a submission stores its [`DurabilityConfig`]) and of agent
//! files, so their serde shapes are a durable format.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ProtocolError;

/// Reasoning effort requested from the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    /// No reasoning.
    #[default]
    Off,
    /// The least reasoning the model offers.
    Minimal,
    /// Low effort.
    Low,
    /// Medium effort.
    Medium,
    /// High effort.
    High,
    /// The most the model offers.
    Xhigh,
}

impl ThinkingLevel {
    /// All levels, in increasing effort.
    pub const ALL: [Self; 6] = [
        Self::Off,
        Self::Minimal,
        Self::Low,
        Self::Medium,
        Self::High,
        Self::Xhigh,
    ];

    /// The wire name (`off`, `minimal`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Xhigh => "xhigh",
        }
    }
}

impl fmt::Display for ThinkingLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ThinkingLevel {
    type Err = ProtocolError;

    fn from_str(text: &str) -> Result<Self, ProtocolError> {
        Self::ALL
            .into_iter()
            .find(|level| level.as_str() == text)
            .ok_or_else(|| ProtocolError::InvalidThinkingLevel {
                text: text.to_owned(),
            })
    }
}

/// Limits for durable submissions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurabilityConfig {
    /// Total attempts before the submission fails (default 10).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Wall-clock limit of one submission in milliseconds (default one hour).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

fn default_max_attempts() -> u32 {
    10
}

fn default_timeout_ms() -> u64 {
    3_600_000
}

/// Spending limits of one scope: a submission, or a whole conversation. Unset limits do not
/// apply. Cost is what the providers reported (priced from the model catalog when a provider
/// reports tokens only); turns are model calls, failed ones included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    /// Most US dollars the scope may spend: no model call starts once this much is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Most model calls the scope may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
}

// Costs are finite wherever limits are read (`Budget::check`, the HTTP and frontmatter
// parsers), so equality is total on the values in use.
impl Eq for BudgetLimits {}

impl BudgetLimits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.max_cost_usd.is_none() && self.max_turns.is_none()
    }

    /// These limits, each unset one taken from `fallback`.
    #[must_use]
    pub fn or(self, fallback: BudgetLimits) -> BudgetLimits {
        BudgetLimits {
            max_cost_usd: self.max_cost_usd.or(fallback.max_cost_usd),
            max_turns: self.max_turns.or(fallback.max_turns),
        }
    }
}

/// Budgets of a submission and of its conversation (`budget:` in an agent file,
/// `[defaults.budget]` in flue.toml, `flue run --max-cost-usd`, a message's `budget` over
/// HTTP). Exceeding one
/// settles the submission `failed` with the error kind `budget_exceeded`. Stored as
/// `{max_cost_usd?, max_turns?, conversation?: {max_cost_usd?, max_turns?}}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Most US dollars each submission may spend (its turns and its tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Most model calls each submission may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Limits of the conversation as a whole: everything its sessions ever spent, as stored.
    #[serde(default, skip_serializing_if = "BudgetLimits::is_empty")]
    pub conversation: BudgetLimits,
}

// See `BudgetLimits`'s `Eq`.
impl Eq for Budget {}

impl Budget {
    /// The limits of each submission.
    pub fn submission(&self) -> BudgetLimits {
        BudgetLimits {
            max_cost_usd: self.max_cost_usd,
            max_turns: self.max_turns,
        }
    }

    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.submission().is_empty() && self.conversation.is_empty()
    }

    /// These budgets, each unset limit taken from `fallback`.
    #[must_use]
    pub fn or(self, fallback: Budget) -> Budget {
        Budget {
            max_cost_usd: self.max_cost_usd.or(fallback.max_cost_usd),
            max_turns: self.max_turns.or(fallback.max_turns),
            conversation: self.conversation.or(fallback.conversation),
        }
    }

    /// Checks the limits: positive, finite costs and at least one turn. The error names the
    /// field.
    pub fn check(&self) -> Result<(), String> {
        for (scope, limits) in [
            ("", self.submission()),
            ("conversation.", self.conversation),
        ] {
            if let Some(cost) = limits.max_cost_usd
                && !(cost.is_finite() && cost > 0.0)
            {
                return Err(format!(
                    "budget {scope}max_cost_usd must be a positive number of US dollars, not {cost}"
                ));
            }
            if limits.max_turns == Some(0) {
                return Err(format!("budget {scope}max_turns must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
