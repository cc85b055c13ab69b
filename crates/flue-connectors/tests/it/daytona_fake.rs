//! A fake Daytona service on loopback: the sandbox API and the toolbox, with the request and
//! response shapes of `@daytonaio/api-client` and `@daytonaio/toolbox-api-client`.
//!
//! A plain HTTP/1.1 server on tokio (keep-alive, `Content-Length` bodies, multipart uploads).
//! Each fake sandbox is a host temporary directory: its work dir. Commands run as real
//! processes on the host, the way the toolbox's execute endpoint runs them: the command line
//! is split into words (no shell) and executed in `cwd`, output is stdout then stderr, and a
//! `timeout` in seconds ends the whole process group with HTTP 408. Every request is logged
//! for the tests to inspect.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The API key the fake accepts.
pub const FAKE_KEY: &str = "dtn_fake_secret_key_123";

/// One request as the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub authorized: bool,
    pub body: String,
}

/// A running fake; stops when dropped.
pub struct FakeDaytona {
    /// The API base URL to configure the client with.
    pub api_url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeDaytona {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    port: u16,
    sandboxes: BTreeMap<String, FakeSandbox>,
    n_created: u32,
    log: Vec<LoggedRequest>,
}

struct FakeSandbox {
    state: String,
    labels: Value,
    network_block_all: bool,
    work_dir: TempDir,
}

impl FakeSandbox {
    fn dto(&self, id: &str, port: u16) -> Value {
        json!({
            "id": id,
            "organizationId": "org-1",
            "name": id,
            "user": "daytona",
            "env": {},
            "labels": self.labels,
            "public": false,
            "networkBlockAll": self.network_block_all,
            "kvm": false,
            "target": "local",
            "cpu": 1, "gpu": 0, "memory": 1, "disk": 3,
            "state": self.state,
            "toolboxProxyUrl": format!("http://127.0.0.1:{port}/toolbox"),
        })
    }
}

/// A response: status, content type, body.
struct Reply(u16, &'static str, Vec<u8>);

impl Reply {
    fn json(status: u16, value: &Value) -> Self {
        Self(status, "application/json", value.to_string().into_bytes())
    }

    fn error(status: u16, message: &str) -> Self {
        Self::json(
            status,
            &json!({"statusCode": status, "message": message, "error": message}),
        )
    }
}

impl FakeDaytona {
    /// Starts the fake on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            port,
            sandboxes: BTreeMap::new(),
            n_created: 0,
            log: Vec::new(),
        }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(serve_connection(stream, state));
            }
        });
        Self {
            api_url: format!("http://127.0.0.1:{port}/api"),
            state,
            task,
        }
    }

    /// Adds a sandbox in `state` (for reuse tests); returns its work dir.
    pub fn add_sandbox(&self, id: &str, state: &str) -> PathBuf {
        let work_dir = TempDir::new().unwrap();
        let path = work_dir.path().canonicalize().unwrap();
        self.state.lock().unwrap().sandboxes.insert(
            id.to_owned(),
            FakeSandbox {
                state: state.to_owned(),
                labels: json!({}),
                network_block_all: true,
                work_dir,
            },
        );
        path
    }

    /// The state of sandbox `id`, if it exists.
    pub fn sandbox_state(&self, id: &str) -> Option<String> {
        let state = self.state.lock().unwrap();
        state.sandboxes.get(id).map(|sandbox| sandbox.state.clone())
    }

    /// The labels and network setting a sandbox was created with.
    pub fn sandbox_settings(&self, id: &str) -> Option<(Value, bool)> {
        let state = self.state.lock().unwrap();
        state
            .sandboxes
            .get(id)
            .map(|sandbox| (sandbox.labels.clone(), sandbox.network_block_all))
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<LoggedRequest> {
        self.state.lock().unwrap().log.clone()
    }
}

async fn serve_connection(stream: TcpStream, state: Arc<Mutex<State>>) {
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut lines = head.lines();
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or_default().to_owned();
        let mut headers = BTreeMap::new();
        for line in lines {
            if let Some((name, value)) = line.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|value| value.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        let authorized =
            headers.get("authorization").map(String::as_str) == Some(&format!("Bearer {FAKE_KEY}"));
        state.lock().unwrap().log.push(LoggedRequest {
            method: method.clone(),
            target: target.clone(),
            authorized,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        let reply = if authorized {
            route(&state, &method, &target, &headers, &body).await
        } else {
            Reply::error(401, "Unauthorized")
        };
        let Reply(status, content_type, payload) = reply;
        let head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            reason(status),
            payload.len()
        );
        if write_half.write_all(head.as_bytes()).await.is_err()
            || write_half.write_all(&payload).await.is_err()
        {
            return;
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        408 => "Request Timeout",
        _ => "Error",
    }
}

async fn route(
    state: &Arc<Mutex<State>>,
    method: &str,
    target: &str,
    headers: &BTreeMap<String, String>,
    body: &[u8],
) -> Reply {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = parse_query(query);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["api", "sandbox"]) => create_sandbox(state, body),
        ("GET", ["api", "sandbox", id]) => {
            let mut state = state.lock().unwrap();
            let port = state.port;
            match state.sandboxes.get_mut(*id) {
                Some(sandbox) => {
                    // A created or started sandbox is up by the first poll.
                    if sandbox.state == "creating" || sandbox.state == "starting" {
                        sandbox.state = "started".to_owned();
                    }
                    Reply::json(200, &sandbox.dto(id, port))
                }
                None => Reply::error(404, "sandbox not found"),
            }
        }
        ("POST", ["api", "sandbox", id, "start"]) => {
            let mut state = state.lock().unwrap();
            let port = state.port;
            match state.sandboxes.get_mut(*id) {
                Some(sandbox) => {
                    sandbox.state = "starting".to_owned();
                    Reply::json(200, &sandbox.dto(id, port))
                }
                None => Reply::error(404, "sandbox not found"),
            }
        }
        ("DELETE", ["api", "sandbox", id]) => {
            let mut state = state.lock().unwrap();
            let port = state.port;
            match state.sandboxes.get_mut(*id) {
                Some(sandbox) => {
                    sandbox.state = "destroyed".to_owned();
                    Reply::json(200, &sandbox.dto(id, port))
                }
                None => Reply::error(404, "sandbox not found"),
            }
        }
        ("GET", ["api", "sandbox", _, "toolbox-proxy-url"]) => {
            let port = state.lock().unwrap().port;
            Reply::json(
                200,
                &json!({"url": format!("http://127.0.0.1:{port}/toolbox")}),
            )
        }
        (_, ["toolbox", id, rest @ ..]) => {
            let work_dir = {
                let state = state.lock().unwrap();
                match state.sandboxes.get(*id) {
                    Some(sandbox) if sandbox.state == "started" => {
                        sandbox.work_dir.path().canonicalize().unwrap()
                    }
                    Some(_) => return Reply::error(400, "sandbox is not started"),
                    None => return Reply::error(404, "sandbox not found"),
                }
            };
            toolbox(method, rest, &query, headers, body, &work_dir).await
        }
        _ => Reply::error(404, "no such route"),
    }
}

fn create_sandbox(state: &Arc<Mutex<State>>, body: &[u8]) -> Reply {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Reply::error(400, "invalid JSON");
    };
    let mut state = state.lock().unwrap();
    state.n_created += 1;
    let id = format!("sandbox-{}", state.n_created);
    let sandbox = FakeSandbox {
        state: "creating".to_owned(),
        labels: request.get("labels").cloned().unwrap_or_else(|| json!({})),
        network_block_all: request
            .get("networkBlockAll")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        work_dir: TempDir::new().unwrap(),
    };
    let dto = sandbox.dto(&id, state.port);
    state.sandboxes.insert(id, sandbox);
    Reply::json(200, &dto)
}

async fn toolbox(
    method: &str,
    rest: &[&str],
    query: &BTreeMap<String, String>,
    headers: &BTreeMap<String, String>,
    body: &[u8],
    work_dir: &Path,
) -> Reply {
    let path_param = || query.get("path").map(PathBuf::from);
    match (method, rest) {
        ("GET", ["work-dir"]) => Reply::json(200, &json!({"dir": work_dir.display().to_string()})),
        ("POST", ["process", "execute"]) => execute(body, work_dir).await,
        ("GET", ["files", "download"]) => {
            let Some(path) = path_param() else {
                return Reply::error(400, "path is required");
            };
            match std::fs::read(&path) {
                Ok(bytes) => Reply(200, "application/octet-stream", bytes),
                Err(err) => io_reply(&err),
            }
        }
        ("POST", ["files", "upload"]) => {
            let Some(path) = path_param() else {
                return Reply::error(400, "path is required");
            };
            let Some(content) = multipart_file(headers, body) else {
                return Reply::error(400, "no file part");
            };
            match std::fs::write(&path, content) {
                Ok(()) => Reply::json(200, &json!({})),
                Err(err) => io_reply(&err),
            }
        }
        ("GET", ["files"]) => {
            let path = path_param().unwrap_or_else(|| work_dir.to_path_buf());
            let entries = match std::fs::read_dir(&path) {
                Ok(entries) => entries,
                Err(err) => return io_reply(&err),
            };
            let infos: Vec<Value> = entries
                .filter_map(Result::ok)
                .map(|entry| file_info(&entry.path()))
                .collect();
            Reply::json(200, &Value::Array(infos))
        }
        ("GET", ["files", "info"]) => {
            let Some(path) = path_param() else {
                return Reply::error(400, "path is required");
            };
            match std::fs::metadata(&path) {
                Ok(_) => Reply::json(200, &file_info(&path)),
                Err(err) => io_reply(&err),
            }
        }
        ("DELETE", ["files"]) => {
            let Some(path) = path_param() else {
                return Reply::error(400, "path is required");
            };
            let recursive = query.get("recursive").map(String::as_str) == Some("true");
            let res = match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() && recursive => std::fs::remove_dir_all(&path),
                Ok(meta) if meta.is_dir() => std::fs::remove_dir(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(err) => Err(err),
            };
            match res {
                Ok(()) => Reply::json(200, &json!({})),
                Err(err) => io_reply(&err),
            }
        }
        ("POST", ["files", "folder"]) => {
            let Some(path) = path_param() else {
                return Reply::error(400, "path is required");
            };
            match std::fs::create_dir_all(&path) {
                Ok(()) => Reply::json(200, &json!({})),
                Err(err) => io_reply(&err),
            }
        }
        _ => Reply::error(404, "no such toolbox route"),
    }
}

/// `POST /process/execute`: split, run, combine output; 408 after `timeout` seconds.
async fn execute(body: &[u8], work_dir: &Path) -> Reply {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Reply::error(400, "invalid JSON");
    };
    let command = request["command"].as_str().unwrap_or_default();
    let cwd = request["cwd"]
        .as_str()
        .map_or_else(|| work_dir.to_path_buf(), PathBuf::from);
    let timeout = request["timeout"].as_u64().unwrap_or(10);
    let Some(words) = split_words(command) else {
        return Reply::error(400, "unbalanced quotes");
    };
    let Some((program, args)) = words.split_first() else {
        return Reply::error(400, "empty command");
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", work_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(err) => return Reply::error(400, &format!("cannot start {program}: {err}")),
    };
    let pgid = child.id().unwrap_or(0);
    let waited = if timeout == 0 {
        Ok(child.wait_with_output().await)
    } else {
        tokio::time::timeout(Duration::from_secs(timeout), child.wait_with_output()).await
    };
    match waited {
        Ok(Ok(output)) => {
            let mut result = String::from_utf8_lossy(&output.stdout).into_owned();
            result.push_str(&String::from_utf8_lossy(&output.stderr));
            Reply::json(
                200,
                &json!({"exitCode": output.status.code().unwrap_or(-1), "result": result}),
            )
        }
        Ok(Err(err)) => Reply::error(400, &err.to_string()),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .status();
            Reply::error(408, "command execution timeout")
        }
    }
}

fn io_reply(err: &std::io::Error) -> Reply {
    match err.kind() {
        std::io::ErrorKind::NotFound => Reply::error(404, "file not found"),
        _ => Reply::error(400, &err.to_string()),
    }
}

/// `FileInfo` of `path` (symlinks followed, as `os.Stat` does).
fn file_info(path: &Path) -> Value {
    let meta = std::fs::metadata(path).or_else(|_| std::fs::symlink_metadata(path));
    let (is_dir, size, mtime) = match &meta {
        Ok(meta) => (
            meta.is_dir(),
            meta.len(),
            meta.modified()
                .ok()
                .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |elapsed| elapsed.as_secs()),
        ),
        Err(_) => (false, 0, 0),
    };
    json!({
        "name": path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default(),
        "isDir": is_dir,
        "size": size,
        "modTime": rfc3339(mtime),
        "mode": if is_dir { "drwxr-xr-x" } else { "-rw-r--r--" },
        "permissions": "0644",
        "owner": "daytona",
        "group": "daytona",
    })
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since the epoch.
fn rfc3339(seconds: u64) -> String {
    let days = i64::try_from(seconds / 86_400).unwrap();
    let rest = seconds % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// Splits a command line into words the way shell-word splitters do: whitespace separates,
/// single quotes are literal, double quotes allow `\` escapes, `\` escapes outside quotes.
fn split_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        other => word.push(other),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The query parameters, percent-decoded.
fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut idx = 0;
    while idx < bytes.len() {
        match bytes[idx] {
            b'%' if idx + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[idx + 1..idx + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        idx += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        idx += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                idx += 1;
            }
            byte => {
                out.push(byte);
                idx += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The content of the multipart part named `file`.
fn multipart_file(headers: &BTreeMap<String, String>, body: &[u8]) -> Option<Vec<u8>> {
    let content_type = headers.get("content-type")?;
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let delimiter = format!("--{boundary}");
    let mut rest = body;
    loop {
        let start = find(rest, delimiter.as_bytes())? + delimiter.len();
        rest = &rest[start..];
        let next = find(rest, delimiter.as_bytes())?;
        let part = &rest[..next];
        let header_end = find(part, b"\r\n\r\n")?;
        let part_headers = String::from_utf8_lossy(&part[..header_end]);
        if part_headers.contains("name=\"file\"") {
            let content = &part[header_end + 4..];
            let content = content.strip_suffix(b"\r\n").unwrap_or(content);
            return Some(content.to_vec());
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
