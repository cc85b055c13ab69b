//! The scorers that need more than the transcript: a command that reads the transcript on
//! stdin and prints a score, and a model that grades it against a rubric (the judge), its
//! reasoning kept with the verdict.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use flue_core::{AgentConfig, Harness, MemoryStore, PromptOptions};
use flue_host::AgentSet;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use crate::assertion::{Check, shorten};
use crate::case_file::{CommandScorer, Judge};
use crate::transcript::Transcript;

#[cfg(test)]
mod tests;

/// The most a scorer's output is read.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Runs `scorer` in `root` with the transcript as JSON on stdin. Its environment holds only
/// `PATH` and `HOME` (given, never read here), so it cannot read the agent's keys.
///
/// The first non-empty line of stdout is the score: a number from 0 to 1, or `pass` / `fail`
/// (also `true` / `false`); the lines after it are its reasoning. A non-zero exit, no score or
/// a timeout fails the check with the reason.
pub(crate) async fn run_command(
    scorer: &CommandScorer,
    root: &Path,
    env: &[(String, String)],
    transcript: &Transcript,
) -> Check {
    let stdin = serde_json::to_vec(transcript).unwrap_or_default();
    let ran = tokio::time::timeout(
        Duration::from_millis(scorer.timeout_ms),
        spawn_and_wait(&scorer.command, root, env, &stdin),
    )
    .await;
    let output = match ran {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => {
            return Check::new(
                &scorer.name,
                false,
                format!("the scorer could not run: {err}"),
            );
        }
        Err(_) => {
            return Check::new(
                &scorer.name,
                false,
                format!(
                    "the scorer ran longer than {} ms and was stopped (raise `timeout_ms`)",
                    scorer.timeout_ms
                ),
            );
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Check::new(
            &scorer.name,
            false,
            format!(
                "the scorer exited with {}: {}",
                output.status,
                shorten(stderr.trim(), 400)
            ),
        );
    }
    verdict_of(&scorer.name, &stdout, scorer.threshold)
}

/// Reads a scorer's stdout into a check.
pub(crate) fn verdict_of(name: &str, stdout: &str, threshold: f64) -> Check {
    let mut lines = stdout.lines().skip_while(|line| line.trim().is_empty());
    let Some(first) = lines.next() else {
        return Check::new(
            name,
            false,
            "the scorer printed nothing: print a score from 0 to 1, or pass / fail, on the first line",
        );
    };
    let rest: Vec<&str> = lines.collect();
    let reasoning = Some(rest.join("\n").trim().to_owned()).filter(|text| !text.is_empty());
    let score = match first.trim().to_ascii_lowercase().as_str() {
        "pass" | "true" => 1.0,
        "fail" | "false" => 0.0,
        other => match other.parse::<f64>() {
            Ok(score) if (0.0..=1.0).contains(&score) => score,
            _ => {
                return Check::new(
                    name,
                    false,
                    format!(
                        "the scorer printed {:?}; its first line must be a score from 0 to 1, or pass / fail",
                        shorten(first.trim(), 80)
                    ),
                );
            }
        },
    };
    let mut check = Check::new(
        name,
        score >= threshold,
        format!("score {score} (passes at {threshold})"),
    );
    check.score = Some(score);
    check.reasoning = reasoning;
    check
}

async fn spawn_and_wait(
    command: &str,
    root: &Path,
    env: &[(String, String)],
    stdin: &[u8],
) -> std::io::Result<std::process::Output> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .env_clear()
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout stops what it started too.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let mut guard = GroupKill(child.id());
    if let Some(mut pipe) = child.stdin.take() {
        // A scorer that does not read its stdin is not an error.
        let _ = pipe.write_all(stdin).await;
        drop(pipe);
    }
    let mut output = child.wait_with_output().await?;
    output.stdout.truncate(MAX_OUTPUT_BYTES);
    output.stderr.truncate(MAX_OUTPUT_BYTES);
    // Exited: nothing of its group is left to stop (and its id may be reused).
    guard.0 = None;
    Ok(output)
}

/// Kills a process group when dropped (the scorer timed out or the eval was stopped).
struct GroupKill(Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|pid| i32::try_from(pid).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// What the judge is told it is, before the rubric.
const JUDGE_INSTRUCTIONS: &str = "You are an eval judge. You grade one conversation between a \
user and an AI agent against a rubric. Read the rubric and the transcript, then give a score \
from 0 (the rubric is not met at all) to 1 (fully met) and your reasoning in a few sentences. \
Judge only what the transcript shows.";

/// Asks `judge.model` to grade `transcript` against the rubric. The judge runs in a harness of
/// its own on a throwaway in-memory store, with no tools: its verdict, score and reasoning are
/// what is kept.
pub(crate) async fn run_judge(judge: &Judge, agents: &AgentSet, transcript: &Transcript) -> Check {
    match ask_judge(judge, agents, transcript).await {
        Ok(check) => check,
        Err(err) => Check::new(
            &judge.name,
            false,
            format!("the judge ({}) could not grade: {err}", judge.model),
        ),
    }
}

async fn ask_judge(
    judge: &Judge,
    agents: &AgentSet,
    transcript: &Transcript,
) -> Result<Check, flue_core::FlueError> {
    let providers = agents.model_providers(&judge.model)?;
    let config = AgentConfig::new()
        .with_name("eval-judge")
        .with_model(&judge.model)
        .with_instructions(JUDGE_INSTRUCTIONS);
    let harness = Harness::builder(config)
        .with_providers(providers)
        .with_store(Arc::new(MemoryStore::new()))
        .with_workspace_context(None)
        .with_secrets(agents.env().secrets())
        .build()
        .await?;
    let session = harness.session("default").await?;
    let schema = json!({
        "type": "object",
        "properties": {
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "reasoning": {"type": "string"}
        },
        "required": ["score", "reasoning"]
    });
    let response = session
        .prompt(
            &judge_prompt(judge, transcript),
            PromptOptions::default().with_result(schema),
        )
        .await?;
    let data = response.data.unwrap_or_default();
    let score = data
        .get("score")
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(0.0);
    let reasoning = data
        .get("reasoning")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut check = Check::new(
        &judge.name,
        score >= judge.threshold,
        format!(
            "{} scored {score} (passes at {})",
            judge.model, judge.threshold
        ),
    );
    check.score = Some(score);
    check.reasoning = Some(reasoning);
    Ok(check)
}

/// The rubric and the transcript as the judge reads them.
fn judge_prompt(judge: &Judge, transcript: &Transcript) -> String {
    let mut text = format!("# Rubric\n\n{}\n\n# Transcript\n\n", judge.rubric.trim());
    for (message_idx, message) in transcript.messages.iter().enumerate() {
        text.push_str(&format!("## User\n\n{message}\n\n"));
        if let Some(reply) = transcript.replies.get(message_idx) {
            text.push_str(&format!("## Agent\n\n{reply}\n\n"));
        }
    }
    if !transcript.tool_calls.is_empty() {
        text.push_str("## Tool calls, in order\n\n");
        for call in &transcript.tool_calls {
            text.push_str(&format!(
                "- {} {} -> {}\n",
                call.name,
                call.input,
                shorten(call.output.as_deref().unwrap_or("(no result)"), 500)
            ));
        }
        text.push('\n');
    }
    if let Some(data) = &transcript.data {
        text.push_str(&format!("## Structured result\n\n{data}\n\n"));
    }
    text.push_str("Grade the transcript against the rubric.");
    text
}
