//! Eval runs kept as JSON files under `.flue/evals/` of the workspace, one file per run, each
//! rewritten whole after every finished case through a temporary file and a rename, so that a
//! crash leaves the last complete version (and `--resume` runs what is missing).

use std::path::{Path, PathBuf};

use crate::report::EvalRun;

/// Where runs are kept, relative to the workspace root.
pub const RUNS_DIR: &str = ".flue/evals";

/// Why a run could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunStoreError {
    /// No run has that id.
    #[error("no eval run {id} in {dir}; `flue eval list` shows the runs")]
    NotFound {
        /// The id asked for.
        id: String,
        /// The folder looked in.
        dir: String,
    },
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a run.
    #[error("{path} is not an eval run: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The runs of one workspace.
#[derive(Clone, Debug)]
pub struct RunStore {
    dir: PathBuf,
}

impl RunStore {
    /// The runs under `root`'s `.flue/evals/`.
    pub fn new(root: &Path) -> Self {
        Self {
            dir: root.join(RUNS_DIR),
        }
    }

    /// Writes `run` whole: a temporary file beside it, synced, then renamed over it.
    pub fn save(&self, run: &EvalRun) -> Result<(), RunStoreError> {
        let io = |source| RunStoreError::Io {
            path: self.dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let path = self.path_of(&run.id);
        let temporary = self.dir.join(format!(".{}.json.tmp", run.id));
        let text = serde_json::to_vec_pretty(run).map_err(|err| RunStoreError::Invalid {
            path: path.display().to_string(),
            message: err.to_string(),
        })?;
        let write = || -> std::io::Result<()> {
            use std::io::Write as _;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)
        };
        write().map_err(|source| RunStoreError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// The run `id`.
    pub fn load(&self, id: &str) -> Result<EvalRun, RunStoreError> {
        let valid_id = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric());
        let path = self.path_of(id);
        if !valid_id || !path.is_file() {
            return Err(RunStoreError::NotFound {
                id: id.to_owned(),
                dir: RUNS_DIR.to_owned(),
            });
        }
        let text = std::fs::read(&path).map_err(|source| RunStoreError::Io {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_slice(&text).map_err(|err| RunStoreError::Invalid {
            path: path.display().to_string(),
            message: err.to_string(),
        })
    }

    /// Every run, oldest first; files that are not runs are skipped.
    pub fn list(&self) -> Result<Vec<EvalRun>, RunStoreError> {
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
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                name.strip_suffix(".json")
                    .filter(|id| !id.starts_with('.'))
                    .map(str::to_owned)
            })
            .collect();
        ids.sort();
        Ok(ids.iter().filter_map(|id| self.load(id).ok()).collect())
    }

    /// The newest run, for `--baseline last`.
    pub fn latest(&self) -> Result<Option<EvalRun>, RunStoreError> {
        Ok(self.list()?.pop())
    }

    fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }
}
