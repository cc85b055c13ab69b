//! Flue agents over HTTP: the TypeScript Flue 2.x conversation protocol as an embeddable axum
//! [`Router`](axum::Router), so its official client (`@flue/sdk`) works unchanged.
//!
//! Every conversation is a URL, `/agents/<agent>/<id>`: `POST` admits a message (202 with a
//! resume offset), `GET` reads a snapshot or the updates after an offset (plain, long-poll or
//! SSE), `POST .../abort` stops its work. The router renders what a [`Backend`] hands it and
//! never reaches into sessions; [`LocalRuntime`] is the in-process backend over flue-core
//! sessions. The protocol and our additions are documented in `docs/http-api.md`.
//!
//! ```no_run
//! # async fn demo(host: std::sync::Arc<dyn flue_server::AgentHost>) -> std::io::Result<()> {
//! use std::sync::Arc;
//! use flue_server::{LocalRuntime, ServerConfig, router, serve};
//!
//! let runtime = LocalRuntime::new(host);
//! let app = axum::Router::new().merge(router(Arc::new(runtime), ServerConfig::default()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! serve(listener, app, 20_000, std::future::pending()).await
//! # }
//! ```
//!
//! Main types: [`router`] and [`ServerConfig`]; [`Backend`] (what a runtime provides) and its
//! data ([`ConversationKey`], [`Delivery`], [`Batch`], [`Page`]); [`LocalRuntime`] and
//! [`AgentHost`]; the wire shapes in [`wire`].

mod backend;
mod chunks;
mod durable;
mod error;
mod live;
mod local;
mod project;
mod router;
mod routes;
mod serve;
mod turns;
pub mod wire;

pub use backend::{
    Admitted, AgentInfo, Attachment, AttachmentBytes, Backend, BackendError, Batch,
    ConversationKey, Decision, Delivered, Delivery, LiveChunks, LiveCursor, Page, Resolved,
    SendCondition, SubmissionStatus,
};
pub use durable::DurableRuntime;
pub use error::ApiError;
pub use local::{AgentHost, LocalRuntime};
pub use router::{ROUTES, ServerConfig, router};
pub use serve::{Connection, serve};

#[cfg(test)]
mod tests;
