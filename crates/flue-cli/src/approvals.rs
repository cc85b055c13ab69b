//! A conversation's standing approvals at the terminal: "always" answered to a confirmation is
//! a rule of the conversation kept by the runtime (signed with the user's approval key, so a
//! cloned workspace's store cannot grant one); here they are listed (`/tools`, `flue session
//! show`) and revoked (`/tools revoke`).

use flue_core::standing::RuleInfo;
use flue_core::{AgentRuntime, ConversationKey};

use crate::terminal::escape_controls;

/// The lines listing `rules`, or `None` when there are none.
pub(crate) fn rules_text(rules: &[RuleInfo]) -> Option<String> {
    if rules.is_empty() {
        return None;
    }
    let mut text = String::from("always allowed in this conversation (standing rules):");
    for rule in rules {
        let status = match rule.status.as_str() {
            "active" => String::new(),
            "unverified" => " (unverified: not signed with this user's key; ignored)".to_owned(),
            other => format!(" ({other})"),
        };
        text.push_str(&format!(
            "\n  {} {}{status}",
            escape_controls(&rule.tool_name),
            escape_controls(&rule.rule_id)
        ));
    }
    Some(text)
}

/// Prints the conversation's rules (nothing when it has none or is not stored yet).
pub(crate) async fn print_rules(runtime: &AgentRuntime, key: &ConversationKey) {
    let rules = runtime.rules(key).await.unwrap_or_default();
    if let Some(text) = rules_text(&rules) {
        eprintln!("{text}");
        eprintln!("  (`/tools revoke TOOL` or `/tools revoke RULE_ID` asks again)");
    }
}

/// Revokes the active rules `what` names (a rule id, or a tool name for all of its rules).
pub(crate) async fn revoke(runtime: &AgentRuntime, key: &ConversationKey, what: &str) {
    let rules = runtime.rules(key).await.unwrap_or_default();
    let named: Vec<&RuleInfo> = rules
        .iter()
        .filter(|rule| rule.status != "revoked" && (rule.rule_id == what || rule.tool_name == what))
        .collect();
    if named.is_empty() {
        eprintln!(
            "no standing rule {} in this conversation (`/tools` lists them)",
            escape_controls(what)
        );
        return;
    }
    for rule in named {
        match runtime.revoke_rule(key, &rule.rule_id).await {
            Ok(_) => eprintln!(
                "revoked {}: {} asks again",
                escape_controls(&rule.rule_id),
                escape_controls(&rule.tool_name)
            ),
            Err(err) => eprintln!("error: {}", escape_controls(&err.to_string())),
        }
    }
}
