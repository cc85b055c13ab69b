//! Hints for errors a user fixes in the workspace: where the URL of a provider that could not
//! be reached was configured.

use flue_core::util::workspace_file::{MAX_CONFIG_BYTES, WorkspaceFiles};
use flue_providers::BuiltinProvider;

use crate::AgentSet;

/// For a failure to reach a provider: where its URL was configured (the flue.toml line, or the
/// variable), so the fix is one edit away; `None` for other failures.
pub fn connection_hint(agents: &AgentSet, message: &str) -> Option<String> {
    if !(message.contains("cannot reach ") || message.contains("no answer from ")) {
        return None;
    }
    let config = &agents.workspace().config;
    let toml_path = agents.root().join("flue.toml");
    let toml_text = WorkspaceFiles::open(agents.root())
        .ok()
        .and_then(|files| files.read("flue.toml", MAX_CONFIG_BYTES).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_default();
    for (id, settings) in &config.providers {
        let Some(base_url) = &settings.base_url else {
            continue;
        };
        // Errors show the URL with its credentials hidden.
        let shown = flue_core::util::hide_url_credentials(base_url.trim_end_matches('/'));
        if !message.contains(shown.as_ref()) {
            continue;
        }
        let header = format!("[providers.{id}]");
        let line = toml_text
            .lines()
            .position(|line| line.trim() == header)
            .and_then(|start| {
                toml_text
                    .lines()
                    .enumerate()
                    .skip(start + 1)
                    .take_while(|(_, line)| !line.trim_start().starts_with('['))
                    .find(|(_, line)| line.trim_start().starts_with("base_url"))
                    .map(|(idx, _)| idx + 1)
                    .or(Some(start + 1))
            });
        return Some(match line {
            Some(line) => format!(
                "provider `{id}`'s URL is set at {}:{line} (`base_url`); check that the server \
                 is running there, or fix the URL",
                toml_path.display()
            ),
            None => format!(
                "provider `{id}`'s URL comes from [providers.{id}] in flue.toml; check that the \
                 server is running there, or fix `base_url`"
            ),
        });
    }
    for builtin in BuiltinProvider::ALL {
        if let Some(var) = builtin.base_url_env
            && let Some(url) = agents.env().get(var)
            && !url.trim().is_empty()
            && message.contains(
                flue_core::util::hide_url_credentials(url.trim().trim_end_matches('/')).as_ref(),
            )
        {
            return Some(format!(
                "provider `{}`'s URL comes from the variable {var}; check that the server is \
                 running there, or fix {var} (or set `base_url` under [providers.{}] in flue.toml)",
                builtin.id, builtin.id
            ));
        }
    }
    None
}
