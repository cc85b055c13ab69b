//! "Always for this conversation": the tools a person allowed for good in one conversation,
//! kept in the user's flue configuration directory (`approvals.json` beside the trust records,
//! by workspace, agent and conversation id) so a later `flue chat` or `flue run` on that
//! conversation at a terminal does not ask again. Never in the workspace: a file a cloned
//! workspace ships must not answer the user's questions for them.
//!
//! These rules belong to the terminal's answerer: a server's or the console's pauses still
//! ask. A file that cannot be read holds no rules; one that cannot be written keeps the rule
//! for this process only, with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flue_core::ConversationKey;
use flue_host::TrustStore;

/// The always-allowed tools of one conversation.
#[derive(Debug)]
pub(crate) struct AlwaysRules {
    /// `None` without a configuration directory (no HOME): nothing is kept.
    path: Option<PathBuf>,
    conversation: String,
}

/// The file's content: tool names by `agent/id`.
type Rules = BTreeMap<String, Vec<String>>;

impl AlwaysRules {
    /// The rules of `key`'s conversation in the workspace at `root`.
    pub(crate) fn new(root: &Path, key: &ConversationKey) -> Self {
        let dir = TrustStore::for_user(|name| std::env::var(name).ok());
        Self {
            path: dir.map(|store| store.dir().join("approvals.json")),
            conversation: format!("{} {}/{}", root.display(), key.agent, key.id),
        }
    }

    /// The tools allowed for good in this conversation.
    pub(crate) fn tools(&self) -> Vec<String> {
        self.load().remove(&self.conversation).unwrap_or_default()
    }

    /// Whether `tool` is allowed for good.
    pub(crate) fn allows(&self, tool: &str) -> bool {
        self.tools().iter().any(|allowed| allowed == tool)
    }

    /// Allows `tool` for good in this conversation.
    pub(crate) fn allow(&self, tool: &str) -> std::io::Result<()> {
        let mut rules = self.load();
        let tools = rules.entry(self.conversation.clone()).or_default();
        if !tools.iter().any(|allowed| allowed == tool) {
            tools.push(tool.to_owned());
        }
        let Some(path) = &self.path else {
            return Err(std::io::Error::other(
                "no configuration directory: set HOME, XDG_CONFIG_HOME or FLUE_CONFIG_DIR",
            ));
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let text = serde_json::to_string_pretty(&rules).map_err(std::io::Error::other)?;
        // Written whole then renamed: a crash leaves the old rules or the new ones.
        let staged = path.with_extension("json.tmp");
        std::fs::write(&staged, text)?;
        std::fs::rename(&staged, path)
    }

    fn load(&self) -> Rules {
        let Some(path) = &self.path else {
            return Rules::default();
        };
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }
}
