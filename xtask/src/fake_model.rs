//! A fake OpenAI Chat Completions server for benchmarks, in this process: cheaper than the
//! server it feeds, so a benchmark measures `flue serve` and not its model.
//!
//! `POST .../chat/completions` answers with a streamed reply chosen from the request alone:
//! a tool result last -> the text "Final answer."; a user message last and a `read_file` tool
//! offered -> a call `read_file({"path": "facts.txt"})`; else "Hello from the fake model.".
//! Each stream is one write with a `content-length` (content, finish reason, usage,
//! `[DONE]`), on keep-alive connections, a thread per connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use anyhow::Context;

/// A running fake model: its port. Its threads end with the process.
pub(crate) struct FakeModel {
    pub(crate) port: u16,
}

/// Starts the fake model on a free loopback port.
pub(crate) fn start() -> anyhow::Result<FakeModel> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the fake model")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = serve(stream);
            });
        }
    });
    Ok(FakeModel { port })
}

/// Answers the requests of one connection until the client closes it.
fn serve(stream: TcpStream) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut body = Vec::new();
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse()?;
            }
        }
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
        let response = if request_line.contains("/chat/completions") {
            let events = reply(&body);
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
                events.len()
            )
        } else {
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
        };
        writer.write_all(response.as_bytes())?;
    }
}

/// The event stream answering a request body.
fn reply(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    // The last message's role: the last `"role":"` of the body (messages are serialized
    // before the tools, whose schemas hold no roles; quotes inside strings are escaped).
    let last_role = text
        .rfind("\"role\":\"")
        .map(|at| &text[at + 8..])
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("");
    let delta = if last_role == "tool" {
        r#"{"content":"Final answer."}"#.to_owned()
    } else if last_role == "user" && text.contains("\"name\":\"read_file\"") {
        r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"facts.txt\"}"}}]}"#.to_owned()
    } else {
        r#"{"content":"Hello from the fake model."}"#.to_owned()
    };
    let finish = if delta.contains("tool_calls") {
        "tool_calls"
    } else {
        "stop"
    };
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}]}}\n\n\
         data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":20,\"completion_tokens\":5,\"total_tokens\":25}}}}\n\n\
         data: [DONE]\n\n"
    )
}
