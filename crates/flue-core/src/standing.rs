//! Standing approvals: "always" answered to a confirmation becomes a [`StandingRule`] grant in
//! the conversation's root log, and later confirmations of that tool are approved without
//! asking until the rule is revoked.
//!
//! A store can come from anywhere (a cloned workspace ships its own `.flue`), so a grant
//! counts only when its HMAC-SHA256 verifies with the [`ApprovalKey`] the embedder gives the
//! runtime; without a key nothing is granted or honoured. Revocations need no signature: they
//! can only take an approval away.

use sha2::{Digest, Sha256};

use crate::error::{FlueError, Result};
use flue_protocol::record::{Record, RuleChange, StandingRule};

/// The secret that signs and verifies standing approvals (32 bytes or more). Keep it out of
/// every workspace: flue-host reads it from `FLUE_APPROVAL_KEY` or the user's configuration
/// directory. A key can be given outright or loaded on first use ([`ApprovalKey::lazy`]), so
/// that a process that never grants a rule never creates one.
#[derive(Clone)]
pub struct ApprovalKey {
    source: std::sync::Arc<KeySource>,
}

/// Loads a key's bytes; `create` asks to make one where there is none yet. `Ok(None)`: there
/// is no key (and none was asked for).
pub type KeyLoader =
    dyn Fn(bool) -> std::result::Result<Option<Vec<u8>>, String> + Send + Sync + 'static;

enum KeySource {
    Fixed(Vec<u8>),
    Lazy {
        load: Box<KeyLoader>,
        loaded: std::sync::OnceLock<Vec<u8>>,
    },
}

impl std::fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalKey(..)")
    }
}

/// The smallest key, in bytes.
const MIN_KEY_BYTES: usize = 32;
/// HMAC-SHA256's block size.
const BLOCK: usize = 64;

impl ApprovalKey {
    /// A key of `bytes`; fewer than 32 bytes is a configuration error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        check_len(bytes).map_err(FlueError::config)?;
        Ok(Self {
            source: std::sync::Arc::new(KeySource::Fixed(bytes.to_vec())),
        })
    }

    /// A key written as hex (64 digits or more), as `FLUE_APPROVAL_KEY` holds it.
    pub fn from_hex(text: &str) -> Result<Self> {
        Self::from_bytes(&parse_hex(text).map_err(FlueError::config)?)
    }

    /// A key `load` reads when first needed: to verify a rule (`create` false: no key means
    /// nothing verifies) or to sign one (`create` true). Loaded bytes are kept.
    pub fn lazy(load: Box<KeyLoader>) -> Self {
        Self {
            source: std::sync::Arc::new(KeySource::Lazy {
                load,
                loaded: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The key's bytes, loading (and with `create`, making) them on first use.
    fn bytes(&self, create: bool) -> std::result::Result<Option<&[u8]>, String> {
        match self.source.as_ref() {
            KeySource::Fixed(bytes) => Ok(Some(bytes)),
            KeySource::Lazy { load, loaded } => {
                if let Some(bytes) = loaded.get() {
                    return Ok(Some(bytes));
                }
                let Some(bytes) = load(create)? else {
                    return Ok(None);
                };
                check_len(&bytes)?;
                Ok(Some(loaded.get_or_init(|| bytes)))
            }
        }
    }

    /// The signature of a grant of `tool_name` with id `rule_id` (creating the key if it is
    /// loaded lazily and missing); the error says why there is no key.
    pub(crate) fn sign(
        &self,
        rule_id: &str,
        tool_name: &str,
    ) -> std::result::Result<String, String> {
        let key = self
            .bytes(true)?
            .ok_or_else(|| "no approval key could be made".to_owned())?;
        Ok(signature(key, rule_id, tool_name))
    }

    /// Whether `rule` is a grant signed with this key.
    pub(crate) fn verifies(&self, rule: &StandingRule) -> bool {
        let (Some(signature_given), Ok(Some(key))) = (&rule.signature, self.bytes(false)) else {
            return false;
        };
        let expected = signature(key, &rule.rule_id, &rule.tool_name);
        // Compared in full whatever differs first: the time says nothing about the key.
        expected.len() == signature_given.len()
            && expected
                .bytes()
                .zip(signature_given.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Parses a key written as hex.
pub(crate) fn parse_hex(text: &str) -> std::result::Result<Vec<u8>, String> {
    hex::decode(text.trim()).map_err(|err| format!("the approval key is not hex: {err}"))
}

fn check_len(bytes: &[u8]) -> std::result::Result<(), String> {
    if bytes.len() < MIN_KEY_BYTES {
        return Err(format!(
            "an approval key needs at least {MIN_KEY_BYTES} bytes, got {}",
            bytes.len()
        ));
    }
    Ok(())
}

/// A grant's signature under `key`.
fn signature(key: &[u8], rule_id: &str, tool_name: &str) -> String {
    let message = format!("flue-standing-rule-v1\n{rule_id}\n{tool_name}");
    hex::encode(hmac_sha256(key, message.as_bytes()))
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|key_byte| key_byte ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// One standing approval of a conversation, as listed (`/tools`, `flue session show`, the
/// console).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RuleInfo {
    /// The rule's id.
    pub rule_id: String,
    /// The tool it approves.
    pub tool_name: String,
    /// The confirmation that granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// `active`, `revoked`, or `unverified` (its signature does not match this process's
    /// key, or there is no key: it approves nothing).
    pub status: String,
}

/// A new grant of `tool_name`, signed with `key`; the error says why it cannot be signed.
pub(crate) fn grant(
    key: &ApprovalKey,
    tool_name: &str,
    action_id: &str,
) -> std::result::Result<StandingRule, String> {
    let rule_id = format!("rule_{}", crate::util::new_ulid().to_ascii_lowercase());
    Ok(StandingRule {
        signature: Some(key.sign(&rule_id, tool_name)?),
        rule_id,
        tool_name: tool_name.to_owned(),
        change: RuleChange::Grant,
        action_id: Some(action_id.to_owned()),
    })
}

/// The revocation of `rule`.
pub(crate) fn revocation(rule: &RuleInfo) -> StandingRule {
    StandingRule {
        rule_id: rule.rule_id.clone(),
        tool_name: rule.tool_name.clone(),
        change: RuleChange::Revoke,
        action_id: None,
        signature: None,
    }
}

/// Every standing rule granted in `records` (a conversation's root session log), in grant
/// order, with its status under `key` (`unverified` for every grant without one).
pub fn standing_rules(records: &[Record], key: Option<&ApprovalKey>) -> Vec<RuleInfo> {
    let mut listed: Vec<RuleInfo> = Vec::new();
    for record in records {
        let Record::Rule(rule) = record else {
            continue;
        };
        match rule.change {
            RuleChange::Grant => {
                if listed.iter().any(|known| known.rule_id == rule.rule_id) {
                    continue;
                }
                let verified = key.is_some_and(|key| key.verifies(rule));
                listed.push(RuleInfo {
                    rule_id: rule.rule_id.clone(),
                    tool_name: rule.tool_name.clone(),
                    action_id: rule.action_id.clone(),
                    status: if verified { "active" } else { "unverified" }.to_owned(),
                });
            }
            RuleChange::Revoke => {
                for known in &mut listed {
                    if known.rule_id == rule.rule_id {
                        "revoked".clone_into(&mut known.status);
                    }
                }
            }
            // A change a later version added: it grants nothing here.
            _ => {}
        }
    }
    listed
}

/// The active rule approving `tool_name` in `records`, if one does.
pub(crate) fn approving(
    records: &[Record],
    key: Option<&ApprovalKey>,
    tool_name: &str,
) -> Option<RuleInfo> {
    standing_rules(records, key)
        .into_iter()
        .find(|rule| rule.status == "active" && rule.tool_name == tool_name)
}

#[cfg(test)]
mod tests;
