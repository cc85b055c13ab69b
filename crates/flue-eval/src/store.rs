//! Eval runs as records of the workspace's store ([`DynEvalRunStore`]): each run rewritten
//! whole after every finished case, so that a crash keeps the finished cases (and `--resume`
//! runs what is missing). Runs kept as JSON files under `.flue/evals/`, as earlier versions
//! did, are still read, and imported into the store the first time it is asked for them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flue_core::store::DynEvalRunStore;

use crate::report::EvalRun;

/// Where earlier versions kept runs, relative to the workspace root.
pub const RUNS_DIR: &str = ".flue/evals";

/// Why a run could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunStoreError {
    /// No run has that id.
    #[error("no eval run {id}; `flue eval list` shows the runs")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The store failed.
    #[error("eval runs: {0}")]
    Store(#[from] flue_core::FlueError),
    /// The store keeps no eval runs.
    #[error("this store keeps no eval runs")]
    Unsupported,
    /// A file of an earlier version could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A stored run or file is not a run.
    #[error("{what} is not an eval run: {message}")]
    Invalid {
        /// The record or file.
        what: String,
        /// What is wrong.
        message: String,
    },
}

/// The runs of one workspace: its store's records, and the files of earlier versions.
#[derive(Clone)]
pub struct RunStore {
    records: Option<Arc<dyn DynEvalRunStore>>,
    dir: PathBuf,
}

impl std::fmt::Debug for RunStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStore")
            .field("records", &self.records.is_some())
            .field("dir", &self.dir)
            .finish()
    }
}

impl RunStore {
    /// The runs in `records` (`None`: the workspace has no store yet, so only files of earlier
    /// versions are read) of the workspace at `root`.
    pub fn new(records: Option<Arc<dyn DynEvalRunStore>>, root: &Path) -> Self {
        Self {
            records,
            dir: root.join(RUNS_DIR),
        }
    }

    /// Stores `run` whole, replacing what was stored under its id.
    pub async fn save(&self, run: &EvalRun) -> Result<(), RunStoreError> {
        let records = self.records.as_ref().ok_or(RunStoreError::Unsupported)?;
        let text = serde_json::to_string(run).map_err(|err| RunStoreError::Invalid {
            what: format!("run {}", run.id),
            message: err.to_string(),
        })?;
        records.put_eval_run(&run.id, &text).await?;
        Ok(())
    }

    /// The run `id`.
    pub async fn load(&self, id: &str) -> Result<EvalRun, RunStoreError> {
        let not_found = || RunStoreError::NotFound { id: id.to_owned() };
        if let Some(records) = &self.records
            && let Some(record) = records.eval_run(id).await?
        {
            return parse(&format!("run {id}"), record.run.as_bytes());
        }
        let valid_id = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric());
        if !valid_id {
            return Err(not_found());
        }
        let run = self.read_file(id)?.ok_or_else(not_found)?;
        if self.records.is_some() {
            self.save(&run).await?;
        }
        Ok(run)
    }

    /// Every run, oldest first; files of earlier versions that are not runs are skipped.
    pub async fn list(&self) -> Result<Vec<EvalRun>, RunStoreError> {
        let mut runs: Vec<EvalRun> = match &self.records {
            Some(records) => records
                .eval_runs()
                .await?
                .iter()
                .filter_map(|record| parse(&record.id, record.run.as_bytes()).ok())
                .collect(),
            None => Vec::new(),
        };
        for id in self.file_ids()? {
            if runs.iter().any(|run| run.id == id) {
                continue;
            }
            let Ok(Some(run)) = self.read_file(&id) else {
                continue;
            };
            if self.records.is_some() {
                self.save(&run).await?;
            }
            runs.push(run);
        }
        runs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(runs)
    }

    /// The newest run, for `--baseline last`.
    pub async fn latest(&self) -> Result<Option<EvalRun>, RunStoreError> {
        Ok(self.list().await?.pop())
    }

    /// The ids of the run files under `.flue/evals/`.
    fn file_ids(&self) -> Result<Vec<String>, RunStoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(RunStoreError::Io {
                    path: self.dir.display().to_string(),
                    source,
                });
            }
        };
        Ok(entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                name.strip_suffix(".json")
                    .filter(|id| !id.starts_with('.'))
                    .map(str::to_owned)
            })
            .collect())
    }

    /// The run file `id`, if there is one.
    fn read_file(&self, id: &str) -> Result<Option<EvalRun>, RunStoreError> {
        let path = self.dir.join(format!("{id}.json"));
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read(&path).map_err(|source| RunStoreError::Io {
            path: path.display().to_string(),
            source,
        })?;
        parse(&path.display().to_string(), &text).map(Some)
    }
}

fn parse(what: &str, text: &[u8]) -> Result<EvalRun, RunStoreError> {
    serde_json::from_slice(text).map_err(|err| RunStoreError::Invalid {
        what: what.to_owned(),
        message: err.to_string(),
    })
}
