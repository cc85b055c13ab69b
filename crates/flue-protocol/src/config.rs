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

#[cfg(test)]
mod tests;
