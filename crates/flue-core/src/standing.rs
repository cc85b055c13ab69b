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
use crate::record::{Record, RuleChange, StandingRule};

/// The secret that signs and verifies standing approvals (32 bytes or more). Keep it out of
/// every workspace: flue-host reads it from `FLUE_APPROVAL_KEY` or the user's configuration
/// directory.
#[derive(Clone)]
pub struct ApprovalKey {
    bytes: Vec<u8>,
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
        if bytes.len() < MIN_KEY_BYTES {
            return Err(FlueError::config(format!(
                "an approval key needs at least {MIN_KEY_BYTES} bytes, got {}",
                bytes.len()
            )));
        }
        Ok(Self {
            bytes: bytes.to_vec(),
        })
    }

    /// A key written as hex (64 digits or more), as `FLUE_APPROVAL_KEY` holds it.
    pub fn from_hex(text: &str) -> Result<Self> {
        let bytes = hex::decode(text.trim())
            .map_err(|err| FlueError::config(format!("the approval key is not hex: {err}")))?;
        Self::from_bytes(&bytes)
    }

    /// The signature of a grant of `tool_name` with id `rule_id`.
    pub(crate) fn sign(&self, rule_id: &str, tool_name: &str) -> String {
        hex::encode(self.mac(format!("flue-standing-rule-v1\n{rule_id}\n{tool_name}").as_bytes()))
    }

    /// Whether `rule` is a grant signed with this key.
    pub(crate) fn verifies(&self, rule: &StandingRule) -> bool {
        let Some(signature) = &rule.signature else {
            return false;
        };
        let expected = self.sign(&rule.rule_id, &rule.tool_name);
        // Compared in full whatever differs first: the time says nothing about the key.
        expected.len() == signature.len()
            && expected
                .bytes()
                .zip(signature.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// HMAC-SHA256 (RFC 2104) of `message`.
    fn mac(&self, message: &[u8]) -> [u8; 32] {
        let mut block = [0u8; BLOCK];
        if self.bytes.len() > BLOCK {
            block[..32].copy_from_slice(&Sha256::digest(&self.bytes));
        } else {
            block[..self.bytes.len()].copy_from_slice(&self.bytes);
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

/// A new grant of `tool_name`, signed with `key`.
pub(crate) fn grant(key: &ApprovalKey, tool_name: &str, action_id: &str) -> StandingRule {
    let rule_id = format!("rule_{}", crate::util::new_ulid().to_ascii_lowercase());
    StandingRule {
        signature: Some(key.sign(&rule_id, tool_name)),
        rule_id,
        tool_name: tool_name.to_owned(),
        change: RuleChange::Grant,
        action_id: Some(action_id.to_owned()),
    }
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

/// Every rule granted in `records`, in grant order, with its status under `key`.
pub(crate) fn rules(records: &[Record], key: Option<&ApprovalKey>) -> Vec<RuleInfo> {
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
    rules(records, key)
        .into_iter()
        .find(|rule| rule.status == "active" && rule.tool_name == tool_name)
}

#[cfg(test)]
mod tests;
