//! The Daytona REST API's request and response shapes that the client uses.
//!
//! Field names follow the OpenAPI clients `@daytonaio/api-client` (sandbox lifecycle) and
//! `@daytonaio/toolbox-api-client` (process and file system); unknown fields are ignored so
//! that newer servers keep working.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /sandbox` body (`CreateSandbox`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreateSandbox {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) snapshot: Option<String>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) network_block_all: bool,
}

/// A sandbox as the API returns it (`Sandbox`), reduced to what the client reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SandboxDto {
    pub(super) id: String,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    pub(super) error_reason: Option<String>,
    #[serde(default)]
    pub(super) toolbox_proxy_url: Option<String>,
}

/// `GET /sandbox/{id}/toolbox-proxy-url` response (`ToolboxProxyUrl`).
#[derive(Debug, Deserialize)]
pub(super) struct ToolboxProxyUrl {
    pub(super) url: String,
}

/// Toolbox `GET /work-dir` response (`WorkDirResponse`).
#[derive(Debug, Deserialize)]
pub(super) struct WorkDirResponse {
    pub(super) dir: String,
}

/// Toolbox `POST /process/execute` body (`ExecuteRequest`); `timeout` is in seconds.
#[derive(Debug, Serialize)]
pub(super) struct ExecuteRequest {
    pub(super) command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cwd: Option<String>,
    pub(super) timeout: u64,
}

/// Toolbox `POST /process/execute` response (`ExecuteResponse`): the combined output.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ExecuteResponse {
    #[serde(default)]
    pub(super) exit_code: Option<i32>,
    #[serde(default)]
    pub(super) result: String,
}

/// Toolbox file metadata (`FileInfo`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FileInfo {
    pub(super) name: String,
    #[serde(default)]
    pub(super) is_dir: bool,
    #[serde(default)]
    pub(super) size: u64,
    #[serde(default)]
    pub(super) mod_time: String,
}
