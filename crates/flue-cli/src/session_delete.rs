//! `flue session delete`: delete a stored conversation with its task sessions, through the
//! store's one delete (refused while a message of the conversation is unsettled, in any
//! process), and the transcript copies its hooks read. The conversation's audit log and trash
//! are kept.

use anyhow::bail;
use flue_core::ConversationKey;
use serde_json::json;

use crate::Exit;
use crate::args::DeleteArgs;
use crate::audit::open_existing_store;
use crate::stdout::outln;
use crate::terminal::Output;
use crate::workspace::{instance_id, resolve_store_root};

/// Runs `flue session delete`.
pub(crate) async fn delete(args: DeleteArgs) -> anyhow::Result<Exit> {
    flue_core::check_instance_id(&args.id)?;
    let root = resolve_store_root(args.root.as_deref())?;
    let store = open_existing_store(&root, args.store.as_deref()).await?;
    let instance = instance_id(&*store, &args.id).await?;
    let sessions = store.list(&instance).await?;
    let deleted = match ConversationKey::from_instance_id(&instance) {
        // Busy: `session_busy`, naming the unsettled count; nothing is deleted.
        Some(key) => store.delete_conversation(&key).await?,
        None => {
            // Sessions stored without the runtime under a bare id: each, the store's rule
            // applied to every one.
            for session in &sessions {
                store
                    .delete(&flue_core::store::SessionKey::new(
                        instance.clone(),
                        session.session.clone(),
                    ))
                    .await?;
            }
            !sessions.is_empty()
        }
    };
    if !deleted {
        bail!(
            "no conversation {:?} under {}; `flue session list` shows the stored ones",
            args.id,
            root.display()
        );
    }
    // The copies of its transcript that command hooks read go with it.
    if let Err(err) = flue_core::hook::remove_transcripts(&root, &instance) {
        eprintln!("warning: cannot remove the hook transcripts of {instance}: {err}");
    }
    let output = Output::for_workspace(&root)?;
    if args.json {
        let out = json!({
            "id": args.id,
            "instance": instance,
            "deleted": true,
            "sessions": sessions.iter().map(|session| &session.session).collect::<Vec<_>>(),
        });
        outln!("{}", output.json_pretty(&out)?)?;
    } else {
        let noun = if sessions.len() == 1 {
            "session"
        } else {
            "sessions"
        };
        eprintln!(
            "deleted conversation {instance} ({} {noun}); its audit log and trash are kept",
            sessions.len()
        );
    }
    Ok(Exit::Success)
}
