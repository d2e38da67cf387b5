//! The `trace.bin` format: a header, the decision list with what was observed at each step, a
//! footer with the outcome, and the coverage of the run's instrumented processes (edges and module
//! maps), closed by a checksum. See docs/trace-format.md (repository root),
//! which documents the layout byte by byte; keep the two in step.
//!
//! * [`writer`](encode): [`encode`], [`write_file`] (atomic: temp file + rename) and
//!   [`decision_bytes`], the canonical bytes of the step list used to compare two runs (coverage
//!   is not part of them).
//! * [`reader`](decode): [`decode`] and [`read_file`].
//!
//! The reader treats its input as hostile: every length is bounded, every read checked, and a
//! damaged, truncated or foreign file yields a [`TraceError`] that says what is wrong; it never
//! panics, and never allocates in proportion to a count it has not checked against the bytes
//! that are actually there.
//!
//! Versioning: [`FORMAT_VERSION`] is bumped on any change to the layout or to the meaning of a
//! field. A reader accepts exactly its own version and reports any other as
//! [`TraceError::Version`]; there is no silent best-effort reading of other versions.
use serde::{Deserialize, Serialize};

pub mod private_env;
mod reader;
mod varint;
mod writer;

#[cfg(test)]
mod tests;

pub use reader::{decode, read_file};
pub use writer::{decision_bytes, encode, write_file, write_private, PRIVATE_MODE};

/// First eight bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"DARATRC\0";
/// Version of the layout described in docs/trace-format.md.
pub const FORMAT_VERSION: u32 = 13;
/// Largest header JSON a reader accepts (and a writer produces).
pub const MAX_HEADER_BYTES: u32 = 1 << 20;
/// Largest trace file a reader takes. Files are read whole, so this bounds what reading one
/// costs; a recording of millions of requests stays far below it.
pub const MAX_TRACE_BYTES: u64 = 4 << 30;
/// Largest outcome JSON a reader accepts (and a writer produces).
pub const MAX_OUTCOME_BYTES: u32 = 16 << 20;

/// Largest path of a module in the coverage section.
pub const MAX_MODULE_PATH: usize = 4096;
/// Most modules one process's map may list in the coverage section.
pub const MAX_MODULES: usize = 4096;

/// Choice kind codes in a step.
pub(crate) const KIND_RUN: u8 = 0;
pub(crate) const KIND_TIMEOUT: u8 = 1;
pub(crate) const KIND_FAULT: u8 = 2;
pub(crate) const KIND_INTERRUPT: u8 = 3;
/// Kinds of an outside event (the outside section).
pub(crate) const OUTSIDE_CONNECT: u8 = 0;
pub(crate) const OUTSIDE_DATA: u8 = 1;
pub(crate) const OUTSIDE_CLOSE: u8 = 2;
pub(crate) const OUTSIDE_OUTPUT: u8 = 3;
pub(crate) const OUTSIDE_OUTPUT_CLOSED: u8 = 4;
pub(crate) const OUTSIDE_SIGNAL: u8 = 5;
pub(crate) const OUTSIDE_STDIN: u8 = 6;
pub(crate) const OUTSIDE_STDIN_CLOSED: u8 = 7;
pub(crate) const OUTSIDE_PEER: u8 = 8;
pub(crate) const OUTSIDE_DATAGRAM: u8 = 9;
pub(crate) const OUTSIDE_DATAGRAM_OUTPUT: u8 = 10;
pub(crate) const OUTSIDE_RESET: u8 = 11;
pub(crate) const OUTSIDE_CLOCK: u8 = 12;
pub(crate) const OUTSIDE_DIAL: u8 = 13;
pub(crate) const OUTSIDE_NAME_LOOKUP: u8 = 14;
pub(crate) const OUTSIDE_SIGNAL_ENDING_WAIT: u8 = 15;
/// The smallest encoded outside event (step delta, kind, stream), and the most bytes one carries.
pub(crate) const MIN_OUTSIDE_BYTES: usize = 3;
pub(crate) const MAX_OUTSIDE_BYTES: usize = 64 << 20;
/// Result tags in a step: blocked (no result follows) or granted (a zigzag varint follows).
pub(crate) const RESULT_BLOCKED: u8 = 0;
pub(crate) const RESULT_GRANTED: u8 = 1;
/// The smallest possible encoded step: thread, kind, alt, op, obj, result tag and time delta of
/// one byte each. Bounds how many steps the remaining bytes can hold.
pub(crate) const MIN_STEP_BYTES: usize = 7;
/// The smallest encoded coverage record of a module and of an edge (every varint one byte, an
/// empty path). They bound how many of each the remaining bytes can hold.
pub(crate) const MIN_MODULE_BYTES: usize = 4;
pub(crate) const MIN_EDGE_BYTES: usize = 4;
/// Bytes of the fixed-size parts: magic, version, header length, step count, outcome length,
/// process count of the coverage section and event count of the outside section (one varint byte
/// each when empty), checksum. No valid file is shorter.
pub(crate) const FIXED_BYTES: usize = 8 + 4 + 4 + 8 + 4 + 1 + 1 + 8;

/// FNV-1a, 64-bit: the file checksum. Not cryptographic; it catches truncation, bit rot and
/// accidental edits. Every single-byte change to the covered bytes changes the result (each
/// round is a bijection of the state for a fixed byte, and injective in the byte).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

use std::collections::BTreeMap;

use crate::choice::{Choice, ProcessId};
use crate::coverage::ProcessCoverage;
use crate::outcome::Outcome;

/// Files an execution opened for writing (its processes' `open`, `openat` and `fopen` calls with
/// a writing flag or mode, as absolute paths, first opened first; devices, `/proc`, `/sys`,
/// pipes, sockets and deleted files left out). A replay starts from the disk as the recorded run
/// left it, so these are the first suspects when it diverges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenFiles {
    pub paths: Vec<String>,
    /// More files were opened for writing than the preload's table holds (32).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

impl WrittenFiles {
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && !self.more
    }
}

/// Everything needed to re-run the execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// dara's version that wrote the trace.
    pub dara_version: String,
    /// The command and its arguments, as given to dara-trace.
    pub command: Vec<String>,
    /// Working directory of the command.
    pub cwd: String,
    /// The command's complete environment (without dara's own variables); a variable listed in
    /// `env_left_out` keeps its place here with an empty value.
    pub env: Vec<(String, String)>,
    /// Variables whose values the trace does not hold (`--env-exclude`): a replay takes them from
    /// its own environment (see [`private_env`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_left_out: Vec<private_env::LeftOut>,
    /// Strategy description (`pct:3`), search seed and execution index within the search.
    pub strategy: String,
    pub seed: u64,
    pub execution: u64,
    /// Seed of the application's random streams in this execution.
    pub random_seed: u64,
    /// CPU count the target saw.
    pub cpus: u32,
    /// The memory and swap totals `sysinfo` showed: the host's when dara-trace started.
    #[serde(default)]
    pub memory: crate::memory_totals::MemoryTotals,
    /// The dynamic loader's cache when the trace was recorded (see [`crate::library_cache`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_cache: Option<crate::library_cache::LibraryCache>,
    /// Bounds the execution ran under.
    pub max_steps: u64,
    pub max_vtime_ns: u64,
    /// (path, GNU build-id hex) of the binaries involved, when known.
    pub build_ids: Vec<(String, String)>,
    /// `--preempt-on` settings and the watch set of memory-level points: which scheduling points
    /// exist. Absent in traces written before memory-level preemption (= none).
    #[serde(default)]
    pub preempt: crate::preempt::Preemption,
    /// The cluster run's nodes, check command and fault budgets (`--config`, `--check`,
    /// `--faults`); absent for a plain run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::cluster::ClusterSpec>,
    /// Shell commands run (outside dara) before and after every execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<String>,
    /// Files the run opened for writing: on-disk state a replay finds as the run left it.
    #[serde(default, skip_serializing_if = "WrittenFiles::is_empty")]
    pub written: WrittenFiles,
    /// Peers outside dara could talk to the program (a recording run): listeners were split and
    /// the outside section holds the inputs a replay feeds back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside: bool,
    /// The program's stdin was a pipe dara fed from its own stdin (recorded in the outside
    /// section); otherwise /dev/null.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// How virtual time behaved: timer policy, step cost, pause budget, run length.
    #[serde(default)]
    pub time: crate::time::TimeConfig,
    /// The liveness walk after the workload (`--liveness-steps`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<crate::liveness::LivenessConfig>,
    /// A liveness violation's critical transition, once found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_transition: Option<crate::liveness::CriticalTransition>,
    /// The host's pids the recorded program saw (a recording runs without a PID namespace, so
    /// pid files and outside tools agree with it); a replay gives every process and thread the
    /// same one. Absent for searches, whose executions each have a namespace of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<RecordedPids>,
}

/// The pids of a recording made with the host's pids, for its replay to give out again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedPids {
    /// What `getppid` gave a process whose parent was dara (the first command, and orphans,
    /// which dara adopts): dara's own pid.
    pub parent: u32,
    /// What `getsid` gave a process in dara's session (one that did not start a session of its
    /// own): dara's session id.
    #[serde(default)]
    pub session: u32,
    /// The pid or tid of every process and thread in the order they were born (the first command
    /// first; an `exec` is no birth).
    pub born: Vec<u32>,
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
    /// Coverage of the instrumented processes, by logical process (empty for programs built
    /// without sancov). Not part of [`decision_bytes`].
    pub coverage: BTreeMap<ProcessId, ProcessCoverage>,
    /// Inputs from peers outside dara and the program's outputs to them (a recording run; empty
    /// otherwise). Part of [`decision_bytes`].
    pub outside: Vec<crate::outside::OutsideEvent>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// `cause` is shown in the message rather than chained as a source, so error reports that
    /// print the chain do not repeat it.
    #[error("cannot {action} {path}: {cause}")]
    Io { path: String, action: &'static str, cause: std::io::Error },
    #[error("{path} is not a dara trace (bad magic)")]
    NotATrace { path: String },
    #[error("{path} was written by trace format version {found}; this dara reads version {expected}")]
    Version { path: String, found: u32, expected: u32 },
    #[error("{path} is truncated at byte {offset} ({what})")]
    Truncated { path: String, offset: u64, what: String },
    #[error("{path} is damaged at byte {offset}: {what}")]
    Damaged { path: String, offset: u64, what: String },
    /// Refused by the writer: the file would exceed a limit every reader enforces.
    #[error("cannot write {path}: its {what} would be {size} bytes, over the {limit}-byte limit readers accept")]
    TooLarge { path: String, what: String, size: u64, limit: u64 },
}
