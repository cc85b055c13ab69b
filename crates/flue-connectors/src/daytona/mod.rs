//! [`DaytonaSandbox`]: a remote Daytona sandbox, driven through the Daytona REST API.
//!
//! The lifecycle (create, reuse, start, delete) goes to the Daytona API; commands and files go
//! to the sandbox's toolbox (`{toolboxProxyUrl}/{sandboxId}/...`). Paths are confined to a
//! root inside the remote sandbox: each file operation first runs a small probe in the
//! sandbox (`realpath -m` and the file types on the way), so that no `..`, absolute path or
//! symlink leads out, and so that errors have the same kinds as on every other sandbox.
//!
//! The toolbox's execute endpoint returns one combined output stream; the client runs each
//! command under a wrapper that sends standard error back base64-encoded after a random
//! marker, so that stdout and stderr stay apart.

#[cfg(test)]
mod tests;

mod text;
mod wire;

use std::collections::BTreeMap;
use std::time::Duration;

use flue_core::{
    BoxFuture, ExecOptions, FlueError, Result, Sandbox,
    error::BoxError,
    error::SandboxErrorReason,
    sandbox::ShellResult,
    sandbox::{
        FileStat, MkdirOptions, RmOptions, TIMEOUT_EXIT_CODE, check_protected, normalize_path,
        protected_name,
    },
    util::{new_uuid, or_cancel},
};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use self::text::{base64_decode, cap_output, is_env_name, rfc3339_to_ms, shell_quote};
use self::wire::{
    CreateSandbox, ExecuteRequest, ExecuteResponse, FileInfo, SandboxDto, ToolboxProxyUrl,
    WorkDirResponse,
};

/// The Daytona API of the hosted service.
pub const DEFAULT_DAYTONA_API_URL: &str = "https://app.daytona.io/api";

/// Bytes kept of each output stream by default.
const DEFAULT_OUTPUT_LIMIT: usize = 1024 * 1024;

/// Time limit of requests other than command execution.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a starting sandbox is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Resolves one path inside the sandbox. Prints four lines: the path with every symlink
/// followed, the path with its parent's symlinks followed, the kind of what is there
/// (`dir`, `file`, `link-dir`, `link-file`, `link-missing`, `missing`, `through-file`) and
/// whether the parent is a directory (`dir` or `none`).
const PROBE_SCRIPT: &str = r#"p=$1
real=$(realpath -m -- "$p") || exit 1
parent=$(dirname -- "$p")
nofollow=$(realpath -m -- "$parent")/$(basename -- "$p")
if [ -L "$p" ]; then
  if [ -d "$p" ]; then kind=link-dir; elif [ -e "$p" ]; then kind=link-file; else kind=link-missing; fi
elif [ -d "$p" ]; then kind=dir
elif [ -e "$p" ]; then kind=file
else
  d=$p
  while [ ! -e "$d" ] && [ ! -L "$d" ]; do d=$(dirname -- "$d"); done
  if [ -d "$d" ]; then kind=missing; else kind=through-file; fi
fi
if [ -d "$parent" ]; then pk=dir; else pk=none; fi
printf '%s\n%s\n%s\n%s\n' "$real" "$nofollow" "$kind" "$pk"
"#;

/// Runs a command with its standard error captured apart: `$1` is the marker, `$2` the
/// command. Exports for the command's environment are prepended.
const EXEC_SCRIPT: &str = r#"m=$1; c=$2
f=$(mktemp) || exit 125
bash -c "$c" 2>"$f" </dev/null
s=$?
printf '%s' "$m"
base64 -w0 < "$f"
rm -f "$f"
exit $s
"#;

/// How to reach Daytona and which sandbox to use.
///
/// The API key is kept out of `Debug` output, errors and logs.
///
/// ```
/// use flue_connectors::DaytonaConfig;
/// let config = DaytonaConfig::new("dtn_...")
///     .with_snapshot("daytona-small")
///     .with_label("team", "agents");
/// assert!(!format!("{config:?}").contains("dtn_"));
/// ```
#[derive(Clone)]
pub struct DaytonaConfig {
    api_key: String,
    api_url: String,
    sandbox_id: Option<String>,
    snapshot: Option<String>,
    network: bool,
    labels: BTreeMap<String, String>,
    workspace: Option<String>,
    start_timeout: Duration,
    max_time: Duration,
    output_limit: usize,
}

impl std::fmt::Debug for DaytonaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaConfig")
            .field("api_key", &"[redacted]")
            .field("api_url", &self.api_url)
            .field("sandbox_id", &self.sandbox_id)
            .field("snapshot", &self.snapshot)
            .field("network", &self.network)
            .field("labels", &self.labels)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl DaytonaConfig {
    /// A configuration with the API key (the CLI reads it from `DAYTONA_API_KEY`) and the
    /// hosted API URL; creates a new sandbox without network access.
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            api_key: api_key.into(),
            api_url: DEFAULT_DAYTONA_API_URL.to_owned(),
            sandbox_id: None,
            snapshot: None,
            network: false,
            labels: BTreeMap::new(),
            workspace: None,
            start_timeout: Duration::from_secs(120),
            max_time: Duration::from_secs(1800),
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }

    /// Sets the API URL (default [`DEFAULT_DAYTONA_API_URL`]).
    #[must_use]
    pub fn with_api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = url.into();
        self
    }

    /// Uses the existing sandbox `id` (started if stopped) instead of creating one; it is
    /// not deleted by [`DaytonaSandbox::cleanup`].
    #[must_use]
    pub fn with_sandbox_id(mut self, id: impl Into<String>) -> Self {
        self.sandbox_id = Some(id.into());
        self
    }

    /// Creates the sandbox from `snapshot` (default: the organization's default).
    #[must_use]
    pub fn with_snapshot(mut self, snapshot: impl Into<String>) -> Self {
        self.snapshot = Some(snapshot.into());
        self
    }

    /// Lets a created sandbox use the network (default: `networkBlockAll`).
    #[must_use]
    pub fn with_network(mut self) -> Self {
        self.network = true;
        self
    }

    /// Adds a label to a created sandbox (`created-by: flue` is always set).
    #[must_use]
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets the sandbox root, an absolute path in the remote sandbox (default: the toolbox's
    /// working directory). It is created when missing.
    #[must_use]
    pub fn with_workspace(mut self, path: impl Into<String>) -> Self {
        self.workspace = Some(path.into());
        self
    }

    /// How long to wait for a sandbox to start (default 120 s).
    #[must_use]
    pub fn with_start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// The server-side time limit of a command that sets no timeout (default 30 min).
    #[must_use]
    pub fn with_max_time(mut self, time: Duration) -> Self {
        self.max_time = time;
        self
    }

    /// Sets how many bytes of each output stream a command keeps (default 1 MiB).
    #[must_use]
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }
}

/// A remote Daytona sandbox.
///
/// [`DaytonaSandbox::connect`] creates a sandbox (or reuses one by id) and waits until it has
/// started; [`DaytonaSandbox::cleanup`] deletes it again when this client created it.
/// Commands run with `bash`; `cwd`, `env` and `timeout` are honoured, and a timeout gives
/// exit code 124 with a note, as everywhere. An abort stops waiting at once; the remote
/// command runs on until its server-side time limit.
///
/// ```no_run
/// # async fn demo() -> flue_core::Result<()> {
/// use flue_connectors::{DaytonaConfig, DaytonaSandbox};
/// use flue_core::{ExecOptions, Sandbox};
/// let key = std::env::var("DAYTONA_API_KEY").unwrap_or_default();
/// let sandbox = DaytonaSandbox::connect(DaytonaConfig::new(key)).await?;
/// let res = sandbox.exec("uname -a", ExecOptions::new()).await?;
/// println!("{}", res.stdout);
/// sandbox.cleanup().await?;
/// # Ok(()) }
/// ```
pub struct DaytonaSandbox {
    http: reqwest::Client,
    api_url: String,
    api_key: String,
    id: String,
    /// `{toolboxProxyUrl}/{id}`, without a trailing slash.
    toolbox: String,
    root: String,
    created: bool,
    max_time: Duration,
    output_limit: usize,
}

impl std::fmt::Debug for DaytonaSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaSandbox")
            .field("id", &self.id)
            .field("root", &self.root)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

impl DaytonaSandbox {
    /// Creates (or reuses) a sandbox, waits until it has started and finds its root.
    ///
    /// Fails with [`SandboxErrorReason::Unavailable`] when the API refuses (a bad key, no
    /// quota) or the sandbox does not start in time.
    pub async fn connect(config: DaytonaConfig) -> Result<Self> {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|err| http_error("create the HTTP client", err))?;
        let api_url = config.api_url.trim_end_matches('/').to_owned();
        let mut client = Self {
            http,
            api_url,
            api_key: config.api_key.clone(),
            id: String::new(),
            toolbox: String::new(),
            root: String::new(),
            created: false,
            max_time: config.max_time,
            output_limit: config.output_limit,
        };
        let sandbox = match &config.sandbox_id {
            Some(id) => client.reuse(id, &config).await?,
            None => client.create(&config).await?,
        };
        client.id.clone_from(&sandbox.id);
        let proxy = match sandbox.toolbox_proxy_url.filter(|url| !url.is_empty()) {
            Some(url) => url,
            None => {
                let path = format!("/sandbox/{}/toolbox-proxy-url", sandbox.id);
                let proxy: ToolboxProxyUrl = client.api_json(Method::GET, &path, None).await?;
                proxy.url
            }
        };
        client.toolbox = format!("{}/{}", proxy.trim_end_matches('/'), sandbox.id);
        let root = match &config.workspace {
            Some(workspace) => workspace.clone(),
            None => {
                let work_dir: WorkDirResponse = client
                    .toolbox_json(Method::GET, "/work-dir", &[], None)
                    .await?;
                work_dir.dir
            }
        };
        let root = normalize_path("/", &root)?;
        client.root = root.clone();
        let probe = client.probe(&root).await?;
        match probe.kind.as_str() {
            "dir" | "link-dir" => {}
            "missing" => {
                client
                    .toolbox_send(
                        Method::POST,
                        "/files/folder",
                        &[("path", &root), ("mode", "0755")],
                        None,
                    )
                    .await?;
            }
            _ => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::NotADirectory,
                    format!("daytona workspace {root}: not a directory"),
                ));
            }
        }
        // Compare against the root as the sandbox resolves it.
        client.root = probe.real;
        Ok(client)
    }

    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Deletes the sandbox when [`DaytonaSandbox::connect`] created it; leaves a reused one.
    pub async fn cleanup(&self) -> Result<()> {
        if self.created {
            self.delete().await?;
        }
        Ok(())
    }

    /// Deletes the sandbox, whoever created it.
    pub async fn delete(&self) -> Result<()> {
        let path = format!("/sandbox/{}", self.id);
        self.api_send(Method::DELETE, &path, None).await?;
        Ok(())
    }

    async fn create(&mut self, config: &DaytonaConfig) -> Result<SandboxDto> {
        let mut labels = config.labels.clone();
        labels.insert("created-by".to_owned(), "flue".to_owned());
        let body = CreateSandbox {
            snapshot: config.snapshot.clone(),
            labels,
            network_block_all: !config.network,
        };
        let body = serde_json::to_value(&body).map_err(|err| FlueError::Sandbox {
            message: "daytona: encode the create request".to_owned(),
            reason: SandboxErrorReason::Other,
            source: Some(BoxError::from(err)),
        })?;
        let sandbox: SandboxDto = self.api_json(Method::POST, "/sandbox", Some(body)).await?;
        self.created = true;
        self.wait_started(sandbox, config.start_timeout).await
    }

    async fn reuse(&mut self, id: &str, config: &DaytonaConfig) -> Result<SandboxDto> {
        let sandbox: SandboxDto = self
            .api_json(Method::GET, &format!("/sandbox/{id}"), None)
            .await?;
        let state = sandbox.state.clone().unwrap_or_default();
        if matches!(state.as_str(), "stopped" | "archived" | "paused") {
            let started: SandboxDto = self
                .api_json(Method::POST, &format!("/sandbox/{id}/start"), None)
                .await?;
            return self.wait_started(started, config.start_timeout).await;
        }
        self.wait_started(sandbox, config.start_timeout).await
    }

    /// Polls the sandbox until its state is `started`.
    async fn wait_started(&self, mut sandbox: SandboxDto, timeout: Duration) -> Result<SandboxDto> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match sandbox.state.as_deref() {
                Some("started") | None => return Ok(sandbox),
                Some(state @ ("error" | "build_failed" | "destroyed" | "destroying")) => {
                    let reason = sandbox.error_reason.as_deref().unwrap_or("no reason given");
                    return Err(FlueError::sandbox(
                        SandboxErrorReason::Unavailable,
                        format!(
                            "daytona sandbox {} is {state} ({reason}); create another one",
                            sandbox.id
                        ),
                    ));
                }
                Some(state) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(FlueError::sandbox(
                            SandboxErrorReason::Unavailable,
                            format!(
                                "daytona sandbox {} did not start within {} s (still {state}); \
                                 raise the start timeout or check the Daytona dashboard",
                                sandbox.id,
                                timeout.as_secs()
                            ),
                        ));
                    }
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
            sandbox = self
                .api_json(Method::GET, &format!("/sandbox/{}", sandbox.id), None)
                .await?;
        }
    }

    /// A request to the Daytona API; the response when its status is a success.
    async fn api_send(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<reqwest::Response> {
        let url = format!("{}{path}", self.api_url);
        let mut request = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(&self.api_key)
            .timeout(REQUEST_TIMEOUT);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let what = format!("{method} {path}");
        let response = request.send().await.map_err(|err| http_error(&what, err))?;
        check_status(&what, response).await
    }

    async fn api_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<T> {
        let what = format!("{method} {path}");
        let response = self.api_send(method, path, body).await?;
        response
            .json()
            .await
            .map_err(|err| http_error(&format!("read the response of {what}"), err))
    }

    /// A request to the sandbox's toolbox; `query` pairs are URL-encoded.
    async fn toolbox_send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<ToolboxBody>,
    ) -> Result<reqwest::Response> {
        let mut url =
            Url::parse(&format!("{}{path}", self.toolbox)).map_err(|err| FlueError::Sandbox {
                message: format!("daytona: bad toolbox URL for {path}"),
                reason: SandboxErrorReason::Unavailable,
                source: Some(BoxError::from(err)),
            })?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self
            .http
            .request(method.clone(), url)
            .bearer_auth(&self.api_key);
        request = match body {
            Some(ToolboxBody::Json(value, timeout)) => request.json(&value).timeout(timeout),
            Some(ToolboxBody::File(name, bytes)) => {
                let part = reqwest::multipart::Part::bytes(bytes).file_name(name);
                request
                    .multipart(reqwest::multipart::Form::new().part("file", part))
                    .timeout(REQUEST_TIMEOUT)
            }
            None => request.timeout(REQUEST_TIMEOUT),
        };
        let what = format!("{method} {path}");
        let response = request.send().await.map_err(|err| http_error(&what, err))?;
        check_status(&what, response).await
    }

    async fn toolbox_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<ToolboxBody>,
    ) -> Result<T> {
        let what = format!("{method} {path}");
        let response = self.toolbox_send(method, path, query, body).await?;
        response
            .json()
            .await
            .map_err(|err| http_error(&format!("read the response of {what}"), err))
    }

    /// Runs a command line through the toolbox; `None` when `timeout` passed first.
    async fn execute(
        &self,
        command: String,
        cwd: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<Option<ExecuteResponse>> {
        let limit = timeout.unwrap_or(self.max_time);
        let server_seconds = limit.as_millis().div_ceil(1000).max(1);
        let request = ExecuteRequest {
            command,
            cwd,
            timeout: u64::try_from(server_seconds).unwrap_or(u64::MAX),
        };
        let body = serde_json::to_value(&request).map_err(|err| FlueError::Sandbox {
            message: "daytona: encode the execute request".to_owned(),
            reason: SandboxErrorReason::Other,
            source: Some(BoxError::from(err)),
        })?;
        // The HTTP wait may run a little past the command's own limit.
        let http_timeout = limit + Duration::from_secs(30);
        let call = self.toolbox_json::<ExecuteResponse>(
            Method::POST,
            "/process/execute",
            &[],
            Some(ToolboxBody::Json(body, http_timeout)),
        );
        let Some(timeout) = timeout else {
            return match call.await {
                Err(err) if is_server_timeout(&err) => Ok(None),
                other => other.map(Some),
            };
        };
        match tokio::time::timeout(timeout, call).await {
            Err(_) => Ok(None),
            Ok(Err(err)) if is_server_timeout(&err) => Ok(None),
            Ok(res) => res.map(Some),
        }
    }

    /// Resolves `path` in the sandbox (see [`PROBE_SCRIPT`]) and checks it stays in the root.
    async fn resolve(&self, path: &str) -> Result<Probe> {
        let lexical = normalize_path(&self.root, path)?;
        if !is_inside(&self.root, &lexical) {
            return Err(FlueError::PathOutsideSandbox {
                path: path.to_owned(),
            });
        }
        check_protected(&self.root, &lexical, path)?;
        let probe = self.probe(&lexical).await?;
        if !is_inside(&self.root, &probe.real) || !is_inside(&self.root, &probe.nofollow) {
            return Err(FlueError::PathOutsideSandbox {
                path: path.to_owned(),
            });
        }
        // Through a symlink too: where the path leads must not be protected.
        check_protected(&self.root, &probe.real, path)?;
        check_protected(&self.root, &probe.nofollow, path)?;
        Ok(Probe { lexical, ..probe })
    }

    async fn probe(&self, lexical: &str) -> Result<Probe> {
        let command = format!(
            "bash -c {} flue-probe {}",
            shell_quote(PROBE_SCRIPT),
            shell_quote(lexical)
        );
        let response = self
            .execute(command, None, Some(Duration::from_secs(60)))
            .await?
            .ok_or_else(|| {
                FlueError::sandbox(
                    SandboxErrorReason::Unavailable,
                    format!("daytona: resolving {lexical} in the sandbox timed out"),
                )
            })?;
        let mut lines = response.result.lines();
        let (Some(real), Some(nofollow), Some(kind), Some(parent)) =
            (lines.next(), lines.next(), lines.next(), lines.next())
        else {
            return Err(FlueError::sandbox(
                SandboxErrorReason::Unavailable,
                format!(
                    "daytona: resolving {lexical} in the sandbox failed (exit code {}): {}; the \
                     sandbox needs bash and coreutils",
                    response.exit_code.unwrap_or(-1),
                    response.result.trim()
                ),
            ));
        };
        Ok(Probe {
            lexical: lexical.to_owned(),
            real: real.to_owned(),
            nofollow: nofollow.to_owned(),
            kind: kind.to_owned(),
            parent_is_dir: parent == "dir",
        })
    }

    async fn run(&self, command: &str, options: ExecOptions) -> Result<ShellResult> {
        let cancel = options.cancel.clone().unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(FlueError::Aborted);
        }
        or_cancel(self.run_uncancelled(command, &options), &cancel).await?
    }

    async fn run_uncancelled(&self, command: &str, options: &ExecOptions) -> Result<ShellResult> {
        let cwd_text = options.cwd.as_deref().unwrap_or(&self.root);
        let cwd = self.resolve(cwd_text).await?;
        match cwd.kind.as_str() {
            "dir" | "link-dir" => {}
            "missing" | "link-missing" => return Err(not_found("run in", cwd_text)),
            _ => return Err(not_a_directory("run in", cwd_text)),
        }
        let mut exports = String::new();
        for (key, value) in &options.env {
            if !is_env_name(key) {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::Unsupported,
                    format!(
                        "daytona: environment variable name {key:?} cannot be exported; use \
                         letters, digits and underscores"
                    ),
                ));
            }
            exports.push_str(&format!("export {key}={}\n", shell_quote(value)));
        }
        let marker = format!("\n__flue_stderr_{}__", new_uuid());
        let script = format!("{exports}{EXEC_SCRIPT}");
        let line = format!(
            "bash -c {} flue {} {}",
            shell_quote(&script),
            shell_quote(&marker),
            shell_quote(command)
        );
        let Some(response) = self.execute(line, Some(cwd.real), options.timeout).await? else {
            let timeout_ms = options.timeout.unwrap_or(self.max_time).as_millis();
            return Ok(ShellResult {
                stdout: String::new(),
                stderr: format!("[command timed out after {timeout_ms} ms]"),
                exit_code: TIMEOUT_EXIT_CODE,
            });
        };
        let (stdout, stderr) = match response.result.rsplit_once(&marker) {
            Some((stdout, encoded)) => {
                let stderr = base64_decode(encoded.trim())
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                    .unwrap_or_default();
                (stdout.to_owned(), stderr)
            }
            None => (response.result, String::new()),
        };
        Ok(ShellResult {
            stdout: cap_output(stdout, self.output_limit, "stdout"),
            stderr: cap_output(stderr, self.output_limit, "stderr"),
            exit_code: response.exit_code.unwrap_or(-1),
        })
    }

    async fn read_bytes(&self, path: &str) -> Result<Vec<u8>> {
        let probe = self.resolve(path).await?;
        match probe.kind.as_str() {
            "file" | "link-file" => {}
            "dir" | "link-dir" => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::IsDirectory,
                    format!("read {path}: is a directory"),
                ));
            }
            "through-file" => return Err(not_a_directory("read", path)),
            _ => return Err(not_found("read", path)),
        }
        let response = self
            .toolbox_send(
                Method::GET,
                "/files/download",
                &[("path", &probe.real)],
                None,
            )
            .await
            .map_err(|err| named(err, "read", path))?;
        let bytes = response
            .bytes()
            .await
            .map_err(|err| http_error(&format!("read {path}"), err))?;
        Ok(bytes.to_vec())
    }

    async fn write(&self, path: &str, content: &[u8]) -> Result<()> {
        let probe = self.resolve(path).await?;
        match probe.kind.as_str() {
            "dir" | "link-dir" => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::IsDirectory,
                    format!("write {path}: is a directory"),
                ));
            }
            "through-file" => return Err(not_a_directory("write", path)),
            "missing" | "link-missing" => {
                if let Some((parent, _)) = probe.real.rsplit_once('/') {
                    let parent = if parent.is_empty() { "/" } else { parent };
                    self.toolbox_send(
                        Method::POST,
                        "/files/folder",
                        &[("path", parent), ("mode", "0755")],
                        None,
                    )
                    .await
                    .map_err(|err| named(err, "write", path))?;
                }
            }
            _ => {}
        }
        let name = probe.real.rsplit('/').next().unwrap_or("file").to_owned();
        self.toolbox_send(
            Method::POST,
            "/files/upload",
            &[("path", &probe.real)],
            Some(ToolboxBody::File(name, content.to_vec())),
        )
        .await
        .map_err(|err| named(err, "write", path))?;
        Ok(())
    }

    async fn stat_path(&self, path: &str) -> Result<FileStat> {
        let probe = self.resolve(path).await?;
        match probe.kind.as_str() {
            "link-dir" | "link-file" | "link-missing" => {
                return Ok(FileStat {
                    is_file: false,
                    is_dir: false,
                    is_symlink: Some(true),
                    size: None,
                    mtime_ms: None,
                });
            }
            "through-file" => return Err(not_a_directory("stat", path)),
            "missing" => return Err(not_found("stat", path)),
            _ => {}
        }
        let info: FileInfo = self
            .toolbox_json(Method::GET, "/files/info", &[("path", &probe.real)], None)
            .await
            .map_err(|err| named(err, "stat", path))?;
        Ok(FileStat {
            is_file: !info.is_dir,
            is_dir: info.is_dir,
            is_symlink: Some(false),
            size: Some(info.size),
            mtime_ms: rfc3339_to_ms(&info.mod_time),
        })
    }

    async fn list(&self, path: &str) -> Result<Vec<String>> {
        let probe = self.resolve(path).await?;
        match probe.kind.as_str() {
            "dir" | "link-dir" => {}
            "missing" | "link-missing" => return Err(not_found("list", path)),
            _ => return Err(not_a_directory("list", path)),
        }
        let entries: Vec<FileInfo> = self
            .toolbox_json(Method::GET, "/files", &[("path", &probe.real)], None)
            .await
            .map_err(|err| named(err, "list", path))?;
        let mut names: Vec<String> = entries
            .into_iter()
            .map(|entry| entry.name)
            .filter(|name| protected_name(name).is_none())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn make_dir(&self, path: &str, options: MkdirOptions) -> Result<()> {
        let probe = self.resolve(path).await?;
        match probe.kind.as_str() {
            "dir" | "link-dir" if options.recursive => return Ok(()),
            "missing" => {}
            "through-file" => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::NotADirectory,
                    format!("create directory {path}: a parent is not a directory"),
                ));
            }
            _ => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::AlreadyExists,
                    format!("create directory {path}: already exists"),
                ));
            }
        }
        if !options.recursive && !probe.parent_is_dir {
            return Err(not_found("create directory", path));
        }
        self.toolbox_send(
            Method::POST,
            "/files/folder",
            &[("path", &probe.nofollow), ("mode", "0755")],
            None,
        )
        .await
        .map_err(|err| named(err, "create directory", path))?;
        Ok(())
    }

    /// Refuses removing the directory `dir` when its tree holds a protected entry (`.flue`,
    /// `.env*`), as the local sandbox does.
    async fn refuse_protected_below(&self, dir: &str, path: &str) -> Result<()> {
        let command = format!(
            "find -P {} \\( -name .flue -o -name '.env*' \\) -print -quit",
            shell_quote(dir)
        );
        let found = self
            .execute(command, None, Some(Duration::from_secs(60)))
            .await?
            .map(|response| response.result)
            .unwrap_or_default();
        let Some(name) = found
            .lines()
            .next()
            .and_then(|line| line.rsplit('/').next())
        else {
            return Ok(());
        };
        match protected_name(name) {
            Some(reason) => Err(FlueError::ProtectedPath {
                path: path.to_owned(),
                reason: reason.to_owned(),
            }),
            None => Ok(()),
        }
    }

    async fn remove(&self, path: &str, options: RmOptions) -> Result<()> {
        let probe = self.resolve(path).await?;
        if probe.lexical == self.root || probe.nofollow == self.root {
            return Err(FlueError::sandbox(
                SandboxErrorReason::PermissionDenied,
                format!("remove {path}: refusing to remove the sandbox root"),
            ));
        }
        match probe.kind.as_str() {
            "missing" | "through-file" if options.force => return Ok(()),
            "missing" => return Err(not_found("remove", path)),
            "through-file" => return Err(not_a_directory("remove", path)),
            "dir" if !options.recursive => {
                return Err(FlueError::sandbox(
                    SandboxErrorReason::IsDirectory,
                    format!("remove {path}: is a directory (set recursive to remove it)"),
                ));
            }
            "dir" => self.refuse_protected_below(&probe.nofollow, path).await?,
            _ => {}
        }
        let recursive = if options.recursive { "true" } else { "false" };
        self.toolbox_send(
            Method::DELETE,
            "/files",
            &[("path", &probe.nofollow), ("recursive", recursive)],
            None,
        )
        .await
        .map_err(|err| named(err, "remove", path))?;
        Ok(())
    }
}

impl Sandbox for DaytonaSandbox {
    fn cwd(&self) -> &str {
        &self.root
    }

    fn exec<'a>(
        &'a self,
        command: &'a str,
        options: ExecOptions,
    ) -> BoxFuture<'a, Result<ShellResult>> {
        Box::pin(self.run(command, options))
    }

    fn read_file_bytes<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(self.read_bytes(path))
    }

    fn write_file<'a>(&'a self, path: &'a str, content: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write(path, content))
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat>> {
        Box::pin(self.stat_path(path))
    }

    fn readdir<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.list(path))
    }

    fn mkdir<'a>(&'a self, path: &'a str, options: MkdirOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.make_dir(path, options))
    }

    fn rm<'a>(&'a self, path: &'a str, options: RmOptions) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.remove(path, options))
    }
}

/// The body of a toolbox request.
enum ToolboxBody {
    /// JSON, with the request's time limit.
    Json(serde_json::Value, Duration),
    /// A multipart upload: file name and content.
    File(String, Vec<u8>),
}

/// What the probe found for one path.
#[derive(Debug)]
struct Probe {
    /// The normalized path as given.
    lexical: String,
    /// Every symlink followed.
    real: String,
    /// The parent's symlinks followed, the final component as is.
    nofollow: String,
    kind: String,
    parent_is_dir: bool,
}

/// Whether `path` is `root` or below it.
fn is_inside(root: &str, path: &str) -> bool {
    root == "/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The response when its status is a success, else a typed error with the server's message.
async fn check_status(what: &str, response: reqwest::Response) -> Result<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let detail = server_message(&body);
    let (reason, hint) = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => (
            SandboxErrorReason::Unavailable,
            "; check the API key (DAYTONA_API_KEY)",
        ),
        StatusCode::NOT_FOUND => (SandboxErrorReason::NotFound, ""),
        StatusCode::REQUEST_TIMEOUT => (SandboxErrorReason::Other, ""),
        status if status.is_server_error() => (
            SandboxErrorReason::Unavailable,
            "; the Daytona service failed, retry later",
        ),
        _ => (SandboxErrorReason::Other, ""),
    };
    Err(FlueError::Sandbox {
        message: format!("daytona: {what} failed with {status}: {detail}{hint}"),
        reason,
        source: None,
    }
    .with_status(status))
}

/// The `message` or `error` field of a JSON error body, else the body's first 300 bytes.
fn server_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(body) {
        for key in ["message", "error"] {
            if let Some(text) = value.get(key).and_then(serde_json::Value::as_str) {
                return text.to_owned();
            }
        }
    }
    let mut end = body.len().min(300);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    body[..end].trim().to_owned()
}

/// Marks errors that came from an HTTP status, so a 408 can be told apart.
trait WithStatus {
    fn with_status(self, status: StatusCode) -> Self;
}

impl WithStatus for FlueError {
    fn with_status(self, status: StatusCode) -> Self {
        match self {
            Self::Sandbox {
                message,
                reason,
                source: None,
            } => Self::Sandbox {
                message,
                reason,
                source: Some(BoxError::from(HttpStatus(status.as_u16()))),
            },
            other => other,
        }
    }
}

/// An HTTP status kept as the source of an error.
#[derive(Debug)]
struct HttpStatus(u16);

impl std::fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP status {}", self.0)
    }
}

impl std::error::Error for HttpStatus {}

/// Whether the server reported that the command hit its time limit.
fn is_server_timeout(err: &FlueError) -> bool {
    match err {
        FlueError::Sandbox {
            source: Some(source),
            ..
        } => source
            .downcast_ref::<HttpStatus>()
            .is_some_and(|status| status.0 == StatusCode::REQUEST_TIMEOUT.as_u16()),
        _ => false,
    }
}

/// A transport error, with the URL left out.
fn http_error(what: &str, err: reqwest::Error) -> FlueError {
    let err = err.without_url();
    FlueError::Sandbox {
        message: format!("daytona: {what}: {err}; check the API URL and the network"),
        reason: SandboxErrorReason::Unavailable,
        source: Some(BoxError::from(err)),
    }
}

/// Rewords a toolbox error for a file operation on `path` (as the caller gave it).
fn named(err: FlueError, operation: &str, path: &str) -> FlueError {
    match err {
        FlueError::Sandbox {
            message,
            reason,
            source,
        } => FlueError::Sandbox {
            message: format!("{operation} {path}: {message}"),
            reason,
            source,
        },
        other => other,
    }
}

fn not_found(operation: &str, path: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::NotFound,
        format!("{operation} {path}: no such file or directory"),
    )
}

fn not_a_directory(operation: &str, path: &str) -> FlueError {
    FlueError::sandbox(
        SandboxErrorReason::NotADirectory,
        format!("{operation} {path}: not a directory"),
    )
}
