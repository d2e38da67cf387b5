//! The `trace.bin` format: a header, the decision list with what was observed at each step, and
//! a footer with the outcome, closed by a checksum. See docs/trace-format.md.
//!
//! The reader treats its input as hostile: every length is bounded, every read checked, and a
//! damaged, truncated or foreign file yields a [`TraceError`] that says what is wrong; it never
//! panics.
use serde::{Deserialize, Serialize};

use crate::choice::Choice;
use crate::outcome::Outcome;

/// Everything needed to re-run the execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// dara's version that wrote the trace.
    pub dara_version: String,
    /// The command and its arguments, as given to dara-trace.
    pub command: Vec<String>,
    /// Working directory of the command.
    pub cwd: String,
    /// Strategy description (`pct:3`), search seed and execution index within the search.
    pub strategy: String,
    pub seed: u64,
    pub execution: u64,
    /// Seed of the application's random streams in this execution.
    pub random_seed: u64,
    /// CPU count the target saw.
    pub cpus: u32,
    /// Bounds the execution ran under.
    pub max_steps: u64,
    pub max_vtime_ns: u64,
    /// (path, GNU build-id hex) of the binaries involved, when known.
    pub build_ids: Vec<(String, String)>,
}

/// One decision and what was observed when it was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub choice: Choice,
    /// Result handed to the thread (`Effect::Grant`), or `None` when it blocked.
    pub result: Option<i64>,
    /// Virtual time after the step.
    pub now_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub header: TraceHeader,
    pub steps: Vec<Step>,
    pub outcome: Outcome,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is not a dara trace (bad magic)")]
    NotATrace { path: String },
    #[error("{path} was written by trace format version {found}; this dara reads version {expected}")]
    Version { path: String, found: u32, expected: u32 },
    #[error("{path} is truncated at byte {offset} ({what})")]
    Truncated { path: String, offset: u64, what: String },
    #[error("{path} is damaged at byte {offset}: {what}")]
    Damaged { path: String, offset: u64, what: String },
}
