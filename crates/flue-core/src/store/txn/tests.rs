//! The operations' step order over a transaction that records each step, and `run_ready`.

use flue_protocol::{BatchBody, Offset, Settlement, SubmissionState};
use pretty_assertions::assert_eq;

use super::{AbortTransaction, request_abort, run_ready};
use crate::error::{FlueError, Result};

/// A transaction that answers from a fixed list and records what it was asked.
struct Recording {
    unsettled: Vec<(String, SubmissionState, u32)>,
    steps: Vec<String>,
    head: u64,
}

impl Recording {
    fn new(unsettled: &[(&str, SubmissionState, u32)]) -> Self {
        Self {
            unsettled: unsettled
                .iter()
                .map(|(id, state, attempts)| ((*id).to_owned(), *state, *attempts))
                .collect(),
            steps: Vec::new(),
            head: 10,
        }
    }
}

impl AbortTransaction for Recording {
    async fn unsettled(&mut self) -> Result<Vec<(String, SubmissionState, u32)>> {
        self.steps.push("read unsettled".to_owned());
        Ok(self.unsettled.clone())
    }

    async fn mark_abort_requested(&mut self) -> Result<()> {
        self.steps.push("mark".to_owned());
        Ok(())
    }

    async fn push_batch(&mut self, body: &BatchBody) -> Result<Offset> {
        let BatchBody::AbortRequested { submission_ids } = body else {
            return Err(FlueError::Store {
                message: format!("unexpected batch {body:?}"),
                source: None,
            });
        };
        self.head += 1;
        self.steps
            .push(format!("push {}", submission_ids.join(",")));
        Ok(Offset(self.head))
    }

    async fn settle(&mut self, settlement: &Settlement) -> Result<Option<Offset>> {
        self.head += 1;
        self.steps
            .push(format!("settle {}", settlement.submission_id));
        Ok(Some(Offset(self.head)))
    }
}

#[test]
fn an_abort_marks_records_then_settles_what_is_not_running() {
    let mut tx = Recording::new(&[
        ("running", SubmissionState::Running, 1),
        ("queued", SubmissionState::Queued, 0),
        ("waiting", SubmissionState::Waiting, 1),
    ]);
    let (report, head) = run_ready(request_abort(&mut tx)).unwrap().unwrap();
    assert_eq!(
        tx.steps,
        [
            "read unsettled",
            "mark",
            "push running,queued,waiting",
            "settle queued",
            "settle waiting",
        ]
    );
    assert_eq!(report.requested, ["running", "queued", "waiting"]);
    assert_eq!(report.settled, ["queued", "waiting"]);
    assert_eq!(head, Some(Offset(13)));
}

#[test]
fn an_abort_with_nothing_unsettled_writes_nothing() {
    let mut tx = Recording::new(&[]);
    let (report, head) = run_ready(request_abort(&mut tx)).unwrap().unwrap();
    assert_eq!(tx.steps, ["read unsettled"]);
    assert_eq!(report.requested, Vec::<String>::new());
    assert_eq!(head, None);
}

#[test]
fn run_ready_reports_an_operation_that_waits() {
    let err = run_ready(std::future::pending::<()>()).unwrap_err();
    assert_eq!(err.kind(), "store_error");
    assert_eq!(run_ready(async { 7 }).unwrap(), 7);
}
