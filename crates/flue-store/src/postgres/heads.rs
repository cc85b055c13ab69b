//! Stream-head notifications across processes: one `LISTEN` connection per store, outside the
//! pool, feeding a `watch` channel per conversation with subscribers.
//!
//! Every write that moves a conversation's head calls `pg_notify('flue_heads', '<head> <id>')`
//! in its transaction; Postgres delivers it to every listener when (and only if) the
//! transaction commits. Notifications are wake-ups, not the data: a subscriber reads the
//! stream from the store, and the runtime also polls, so a notification lost while the
//! listener reconnects delays a reader by one poll interval at most.

use std::sync::Arc;
use std::time::Duration;

use flue_core::store::HeadWatchers;
use flue_core::{Offset, Result};
use futures::StreamExt;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::tls::{RustlsConnect, TlsSettings, connect_failure};
use super::{NOTIFY_CHANNEL, pg_error};

/// Applies one notification payload, `<head> <instance id>`, to `heads`; ignores malformed
/// ones.
pub(crate) fn apply(heads: &HeadWatchers, payload: &str) {
    if let Some((head, instance_id)) = payload.split_once(' ')
        && let Ok(head) = head.parse::<u64>()
    {
        heads.notify(instance_id, Offset(head));
    }
}

/// The payload announcing that `instance_id`'s head is `head`.
pub(crate) fn payload(instance_id: &str, head: Offset) -> String {
    format!("{} {instance_id}", head.0)
}

/// Connects the listener (failing if it cannot) and keeps it running, reconnecting after a
/// lost connection, until `stop` fires.
pub(crate) async fn listen(
    config: tokio_postgres::Config,
    tls: RustlsConnect,
    tls_settings: TlsSettings,
    heads: Arc<HeadWatchers>,
    stop: CancellationToken,
    shown: String,
) -> Result<()> {
    let first = connect(&config, &tls, &tls_settings, &heads, &shown).await?;
    tokio::spawn(async move {
        let mut session = Some(first);
        let mut backoff = Duration::from_millis(100);
        loop {
            if let Some(running) = session.take() {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = running => {}
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            match connect(&config, &tls, &tls_settings, &heads, &shown).await {
                Ok(running) => {
                    backoff = Duration::from_millis(100);
                    session = Some(running);
                }
                Err(err) => {
                    tracing::warn!(error = %err, "postgres listener: reconnecting");
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    });
    Ok(())
}

/// One listener session: resolves when its connection ends.
async fn connect(
    config: &tokio_postgres::Config,
    tls: &RustlsConnect,
    tls_settings: &TlsSettings,
    heads: &Arc<HeadWatchers>,
    shown: &str,
) -> Result<futures::future::BoxFuture<'static, ()>> {
    let (client, mut connection) = config.connect(tls.clone()).await.map_err(|err| {
        connect_failure(
            "cannot connect the Postgres listener to",
            shown,
            tls_settings,
            &err,
        )
    })?;
    let heads = Arc::clone(heads);
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(note)) => apply(&heads, note.payload()),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))
        .await
        .map_err(pg_error("cannot LISTEN for head notifications"))?;
    Ok(Box::pin(async move {
        // The client must live as long as the connection, or the connection closes.
        let _client = client;
        let _ = driver.await;
    }))
}
