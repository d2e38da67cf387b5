//! How virtual time behaves in an execution (docs/time.md): when a timer may fire, what one
//! scheduling step costs, how many `pause` faults an execution may inject, and how long an
//! endless program runs before it is stopped and judged. Recorded in the trace header, so a
//! replay keeps time exactly as its recording did.
//!
//! The default is the real world's order: a timer fires only once the virtual clock has reached
//! its deadline, the clock moves by [`DEFAULT_STEP_NS`] per decision, and when nothing can run
//! it jumps to the earliest pending deadline (timers due at the same instant are a choice). A
//! timeout that fires *early* — the thread it waited for was slow — is a fault the search injects
//! within a budget (`pause`), like a crash. [`TimerPolicy::Any`] keeps the older model in which
//! any pending timer may fire at any step (an arbitrarily slow machine).
use serde::{Deserialize, Serialize};

/// Virtual nanoseconds one scheduling decision costs by default (`--step-cost`).
pub const DEFAULT_STEP_NS: u64 = 1_000;

/// When a thread's timer (its `Timeout` choice) is offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimerPolicy {
    /// Once the virtual clock has reached the deadline (the real world's order).
    #[default]
    Deadline,
    /// At any step while the timer is pending, whatever its deadline: firing it moves the clock
    /// to the deadline. Explores every race between a timeout and other threads' work, including
    /// the ones that need a machine slower than any real one.
    Any,
}

impl TimerPolicy {
    /// `deadline` or `any`, as `--timers` spells it.
    pub fn parse(text: &str) -> Result<TimerPolicy, String> {
        match text {
            "deadline" => Ok(TimerPolicy::Deadline),
            "any" => Ok(TimerPolicy::Any),
            other => Err(format!("unknown timer policy `{other}`: use `deadline` (timers fire at their deadlines; early timeouts come from --faults pause) or `any` (any pending timer may fire at any step)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TimerPolicy::Deadline => "deadline",
            TimerPolicy::Any => "any",
        }
    }
}

/// The time settings of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimeConfig {
    pub timers: TimerPolicy,
    /// Virtual nanoseconds added by every decision, so a thread spinning on clock reads sees
    /// time pass.
    pub step_ns: u64,
    /// Most `pause` faults per execution: a thread stops being scheduled while virtual time
    /// passes the other threads' next deadline (a GC pause, SIGSTOP, a starved VM).
    pub pauses: u32,
    /// Stop the execution once virtual time reaches this and judge it as it stands (an endless
    /// server or chaos loop is then not a hang): `--run-for`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_for_ns: Option<u64>,
    /// What the program's wall clock (`CLOCK_REALTIME`, `time`, `gettimeofday`) reads at virtual
    /// time 0, in nanoseconds since 1970. dara-trace takes the real time at which its search or
    /// recording starts, the same for every execution of it, so a program compares its clock
    /// with the times of files made before, certificates and peers' timestamps as natively; a
    /// replay uses the recorded value. Traces written before this setting existed read
    /// 2024-01-01 ([`dara_abi::REALTIME_EPOCH_NS`]).
    pub realtime_epoch_ns: u64,
}

impl Default for TimeConfig {
    fn default() -> TimeConfig {
        TimeConfig { timers: TimerPolicy::Deadline, step_ns: DEFAULT_STEP_NS, pauses: 0, run_for_ns: None, realtime_epoch_ns: dara_abi::REALTIME_EPOCH_NS }
    }
}

/// Virtual time as seconds with millisecond precision (`12.345s`).
pub fn format_vtime(ns: u64) -> String {
    format!("{}.{:03}s", ns / 1_000_000_000, (ns / 1_000_000) % 1000)
}
