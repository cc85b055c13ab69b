//! What a command scorer prints, and a real scorer process.

use pretty_assertions::assert_eq;

use super::*;

fn verdict(stdout: &str) -> (bool, Option<f64>, Option<String>, String) {
    let check = verdict_of("s", stdout, 0.5);
    (check.passed, check.score, check.reasoning, check.detail)
}

#[test]
fn scores_words_and_reasoning() {
    assert_eq!(
        verdict("\n0.75\nmostly right\nbut slow\n"),
        (
            true,
            Some(0.75),
            Some("mostly right\nbut slow".to_owned()),
            "score 0.75 (passes at 0.5)".to_owned()
        )
    );
    assert_eq!(verdict("FAIL").1, Some(0.0));
    assert_eq!(verdict("pass").1, Some(1.0));
    assert_eq!(
        verdict("1.5"),
        (
            false,
            None,
            None,
            "the scorer printed \"1.5\"; its first line must be a score from 0 to 1, or pass / fail".to_owned()
        )
    );
    assert!(!verdict("").0);
}

fn scorer(command: &str, timeout_ms: u64) -> CommandScorer {
    CommandScorer {
        name: "s".to_owned(),
        command: command.to_owned(),
        threshold: 0.5,
        timeout_ms,
    }
}

fn path_env() -> Vec<(String, String)> {
    vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())]
}

#[tokio::test]
async fn a_scorer_reads_the_transcript_and_sees_no_other_variable() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = Transcript {
        reply: "the reply".to_owned(),
        ..Transcript::default()
    };
    // Prints the reply's length as a verdict, and the names of its environment variables.
    let check = run_command(
        &scorer(
            "input=$(cat); case \"$input\" in *'\"reply\":\"the reply\"'*) echo pass;; *) echo fail;; esac; env | cut -d= -f1 | grep -v '^PWD$\\|^SHLVL$\\|^_$' | sort | tr '\\n' ' '",
            10_000,
        ),
        dir.path(),
        &path_env(),
        &transcript,
    )
    .await;
    assert_eq!(
        (check.passed, check.reasoning.as_deref()),
        (true, Some("PATH"))
    );
}

#[tokio::test]
async fn a_scorer_past_its_time_is_stopped_with_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let command = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
    let check = run_command(
        &scorer(&command, 300),
        dir.path(),
        &path_env(),
        &Transcript::default(),
    )
    .await;
    assert_eq!(
        (check.passed, check.detail.as_str()),
        (
            false,
            "the scorer ran longer than 300 ms and was stopped (raise `timeout_ms`)"
        )
    );
    // The background `sleep` was in the scorer's process group: it is gone (or a zombie
    // waiting to be reaped) soon after, not 60 seconds later.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    let mut alive = true;
    for _ in 0..100 {
        alive = std::fs::read_to_string(&stat).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        });
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive, "the scorer's child outlived its timeout");
}

#[tokio::test]
async fn a_failing_scorer_reports_its_exit_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let check = run_command(
        &scorer("echo broken >&2; exit 3", 10_000),
        dir.path(),
        &path_env(),
        &Transcript::default(),
    )
    .await;
    assert_eq!(
        (check.passed, check.detail.as_str()),
        (false, "the scorer exited with exit status: 3: broken")
    );
}
