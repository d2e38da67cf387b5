//! How an execution ended. Always printed, always stored in the trace (as JSON in the footer),
//! and the basis of bug deduplication.
use serde::{Deserialize, Serialize};

use crate::choice::ThreadId;

/// What one blocked thread was waiting for when the system deadlocked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedThread {
    pub thread: ThreadId,
    pub process: u32,
    /// Operation name (`Op::name`).
    pub op: String,
    /// Address of the object waited on (mutex, condvar, futex word, ...), 0 if none.
    pub addr: u64,
    /// Symbol containing `addr` (`counter_lock`, `main_arena+40`) when it could be resolved.
    pub symbol: Option<String>,
    /// Human explanation: "waits for mutex 0x4040 held by thread 2".
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Outcome {
    /// Every process exited; `code` is the first (root) process's exit status.
    Exited {
        code: i32,
        /// Where a failing exit came from, when the program said so on stderr (a Rust panic).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        location: Option<String>,
    },
    /// A process died of a signal (SIGSEGV, SIGABRT from assert, ...).
    Crashed {
        process: u32,
        signal: i32,
        name: String,
        /// Where: the faulting function for SIGSEGV/SIGBUS/SIGFPE/SIGILL, the assertion or
        /// panic message for an abort (see the scheduler's `crash_site`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        location: Option<String>,
    },
    /// A cluster node's own process exited with a failure status while nobody told it to stop
    /// (a crash fault's SIGKILL is not this).
    NodeExited { node: String, code: i32 },
    /// The workload exited 0 but the check command (`--check`) failed.
    CheckFailed { code: i32 },
    /// A user property (`DARA_ALWAYS`, `DARA_UNREACHABLE`, `DARA_EVENTUALLY`) broke: `detail`
    /// says how (see [`crate::property`]).
    PropertyFailed { name: String, property: crate::property::PropertyKind, detail: String },
    /// An `eventually` property unmet at the end of the workload did not hold in `walk_steps`
    /// decisions of the fair random walk that followed (see [`crate::liveness`]).
    LivenessViolated { name: String, walk_steps: u64 },
    /// The `eventually` properties unmet at the end of the workload all held during the liveness
    /// walk, after `walk_steps` of its decisions: no bug.
    Recovered { walk_steps: u64 },
    /// No choice enabled while some threads have not finished.
    Deadlock { threads: Vec<BlockedThread> },
    /// Step bound, virtual-time bound, or a thread that ran too long without reaching a
    /// scheduling point.
    Hang { reason: String },
    /// The token holder sits in the kernel outside dara's control, or asked for a syscall dara
    /// cannot model. dara stopped the run rather than let it run uncontrolled.
    Uncontrolled { thread: ThreadId, syscall: String, detail: String },
    /// A process died of a SIGKILL that neither dara nor a traced process sent (`kill -9` by
    /// someone else, the OOM killer): not the program's doing, and not part of the schedule.
    KilledFromOutside { process: u32 },
    /// The launched program died of the SIGINT or SIGTERM dara passed on from the user (its
    /// default action, as at a terminal): the user stopped it; no bug.
    StoppedBySignal { process: u32, signal: i32, name: String },
    /// The launched program exited with a non-zero status after a SIGINT, SIGTERM or SIGHUP
    /// from outside (passed on by dara-trace, or sent straight to it): its answer to being
    /// stopped (rsync exits 20, varnishd 64), as at a terminal; no bug.
    ExitedAfterStop { process: u32, code: i32, signal: i32, name: String },
    /// dara-trace was interrupted (SIGINT/SIGTERM) before the execution ended.
    Interrupted,
    /// The execution reached its time limit (`--run-for`) with no bug: an endless program (a
    /// server, a chaos loop) judged as it stood then.
    RanFor { virtual_ns: u64 },
    /// Replay only: the run stopped offering the recorded decision.
    Diverged { step: u64, expected: String, seen: String },
}

impl Outcome {
    /// Whether this outcome is a bug in the target (as opposed to a clean run, or dara refusing
    /// to go on, or the user stopping it).
    pub fn is_bug(&self) -> bool {
        match self {
            Outcome::Exited { code, .. } => *code != 0,
            Outcome::Crashed { .. } | Outcome::NodeExited { .. } | Outcome::CheckFailed { .. } | Outcome::PropertyFailed { .. } | Outcome::LivenessViolated { .. } | Outcome::Deadlock { .. } | Outcome::Hang { .. } => true,
            Outcome::Uncontrolled { .. } | Outcome::KilledFromOutside { .. } | Outcome::StoppedBySignal { .. } | Outcome::ExitedAfterStop { .. } | Outcome::Interrupted | Outcome::RanFor { .. } | Outcome::Recovered { .. } | Outcome::Diverged { .. } => false,
        }
    }

    /// Key under which equal bugs are deduplicated: kind plus location (faulting function,
    /// assertion, panic site, deadlock cycle), without addresses that change between builds.
    pub fn signature(&self) -> String {
        let at = |location: &Option<String>| location.as_ref().map(|l| format!("@{l}")).unwrap_or_default();
        match self {
            Outcome::Exited { code, location } => format!("exit:{code}{}", at(location)),
            Outcome::Crashed { name, location, .. } => format!("signal:{name}{}", at(location)),
            Outcome::NodeExited { node, code } => format!("node-exit:{node}:{code}"),
            Outcome::CheckFailed { code } => format!("check:{code}"),
            Outcome::PropertyFailed { name, .. } => format!("property:{name}"),
            Outcome::LivenessViolated { name, .. } => format!("liveness:{name}"),
            Outcome::Recovered { .. } => "recovered".to_string(),
            Outcome::Deadlock { threads } => {
                let mut parts: Vec<String> = threads
                    .iter()
                    .map(|t| format!("{}@{}", t.op, t.symbol.clone().unwrap_or_else(|| format!("{:#x}", t.addr))))
                    .collect();
                parts.sort();
                format!("deadlock:{}", parts.join(","))
            }
            Outcome::Hang { .. } => "hang".to_string(),
            Outcome::Uncontrolled { syscall, .. } => format!("uncontrolled:{syscall}"),
            Outcome::KilledFromOutside { .. } => "killed-from-outside".to_string(),
            Outcome::StoppedBySignal { name, .. } => format!("stopped:{name}"),
            Outcome::ExitedAfterStop { code, name, .. } => format!("stopped-exit:{name}:{code}"),
            Outcome::Interrupted => "interrupted".to_string(),
            Outcome::RanFor { .. } => "ran-for".to_string(),
            Outcome::Diverged { step, .. } => format!("diverged:{step}"),
        }
    }

    /// Attaches a location to an outcome that can carry one and has none yet.
    pub fn locate(&mut self, found: Option<String>) {
        if let Outcome::Exited { location, .. } | Outcome::Crashed { location, .. } = self {
            if location.is_none() {
                *location = found;
            }
        }
    }

    /// One line for the terminal.
    pub fn summary(&self) -> String {
        let at = |location: &Option<String>| location.as_ref().map(|l| format!(": {l}")).unwrap_or_default();
        match self {
            Outcome::Exited { code: 0, .. } => "exited normally (status 0)".to_string(),
            Outcome::Exited { code, location } => format!("BUG: exited with status {code}{}", at(location)),
            Outcome::Crashed { process, name, location, .. } => format!("BUG: process {process} killed by {name}{}", at(location)),
            Outcome::NodeExited { node, code } => format!("BUG: node {node} exited with status {code}"),
            Outcome::CheckFailed { code } => format!("BUG: the check command failed (status {code})"),
            Outcome::PropertyFailed { name, property, detail } => format!("BUG: property \"{name}\" ({}) failed: {detail}", property.word()),
            Outcome::LivenessViolated { name, walk_steps } => format!("BUG: liveness: \"{name}\" (eventually) never held in {} steps of a fair random walk after the workload", crate::liveness::grouped(*walk_steps)),
            Outcome::Recovered { walk_steps } => format!("the eventually properties unmet at the end of the workload held after {} steps of the liveness walk (no bug)", crate::liveness::grouped(*walk_steps)),
            Outcome::Deadlock { threads } => {
                let who: Vec<String> = threads.iter().map(|t| format!("thread {} {}", t.thread, t.detail)).collect();
                format!("BUG: deadlock: {}", who.join("; "))
            }
            Outcome::Hang { reason } => format!("BUG: hang: {reason}"),
            Outcome::Uncontrolled { thread, syscall, detail } => {
                format!("uncontrolled: thread {thread} {syscall}: {detail}")
            }
            Outcome::KilledFromOutside { process } => format!("killed from outside (SIGKILL not sent by the program or dara): not a bug of the program; the run is not saved as a bug (process {process}: kill -9 by someone else, or the kernel's OOM killer)"),
            Outcome::StoppedBySignal { process, name, .. } => format!("stopped by {name}, passed on from dara-trace: process {process} took its default action (not a bug)"),
            Outcome::ExitedAfterStop { process, code, name, .. } => format!("exited with status {code} after the {name} from outside: process {process}'s answer to being stopped (not a bug)"),
            Outcome::Interrupted => "interrupted".to_string(),
            Outcome::RanFor { virtual_ns } => format!("ran for {} of virtual time with no bug (--run-for)", crate::time::format_vtime(*virtual_ns)),
            Outcome::Diverged { step, expected, seen } => {
                format!("DIVERGED at step {step}: the trace expected {expected}, the run offered {seen}")
            }
        }
    }
}

/// "SIGSEGV" for 11, and so on.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGSYS => "SIGSYS",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGALRM => "SIGALRM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}
