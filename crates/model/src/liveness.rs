//! Liveness after MaceMC: the settings of the fair random walk that follows an execution's
//! workload when an `eventually` property does not hold at its end, the marks that tie the SDK's
//! line stream to the schedule, and the critical transition a trace may carry.
//!
//! The walk (docs/properties.md, "Liveness"): once the workload phase is over (`--run-for`
//! reached, else `--max-steps` decisions, or the step a critical-transition probe starts from),
//! every `eventually` property whose latest evaluation was false (or that was declared and never
//! evaluated) is *pending*; the run goes on for up to [`LivenessConfig::steps`] decisions, each
//! uniform among the runnable threads. All pending properties holding at some evaluation ends the
//! run clean; a walk that spends its steps is a liveness violation.
//!
//! Marks: the scheduler writes `MARK_PREFIX` and a number as a line into the SDK's pipe at a quiet
//! point. Every line the program wrote before is already in the pipe (its threads are parked) and
//! every later one comes after, so once the reader has seen the mark, what the lines say up to it
//! is the same in every run of the schedule: the walk's start and its checks are deterministic.
use serde::{Deserialize, Serialize};

/// What starts a mark line in the SDK's pipe (a NUL: no program writes it).
pub const MARK_PREFIX: &str = "\0dara-mark ";

/// The walk starts at mark 1; later marks are checks.
pub const WALK_START_MARK: u64 = 1;

/// How the liveness walk runs (`--liveness-steps`); stored in the trace so a replay starts its
/// walk at the same step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessConfig {
    /// Most decisions of the walk; 0: no walk.
    pub steps: u64,
    /// Mixed into the execution's random seed for the walk's own choices (the critical-transition
    /// probes walk from one prefix with different salts).
    #[serde(default)]
    pub salt: u64,
    /// The workload phase ends after this many decisions (a critical-transition probe), rather
    /// than at `--run-for` or `--max-steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<u64>,
    /// The walk's decisions come from the strategy (a replay follows the recorded walk), not
    /// from the walk's own random choices. Not stored.
    #[serde(skip)]
    pub follow_strategy: bool,
}

/// The walk's length when a program declares an `eventually` property and the user said nothing.
pub const DEFAULT_WALK_STEPS: u64 = 20_000;

/// The earliest step after which the property was not reached again (MaceMC's critical
/// transition), found by binary search over prefixes of a liveness violation's trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalTransition {
    /// Index of the decision (as the listing numbers steps): walks from the prefix that ends with
    /// it never reached the property; walks from the prefix just before it did (one at least).
    pub step: u64,
    /// Walks tried from each prefix, and their length.
    pub walks: u32,
    pub walk_steps: u64,
    /// The property.
    pub property: String,
}

impl CriticalTransition {
    /// The listing's line for it.
    pub fn describe(&self) -> String {
        format!("critical transition at step {}: after it, {} random walks of {} steps never reached \"{}\"", self.step, self.walks, self.walk_steps, self.property)
    }
}

/// `MARK_PREFIX` + number, with its newline.
pub fn mark_line(mark: u64) -> String {
    format!("{MARK_PREFIX}{mark}\n")
}

/// The mark a line carries, if it is one.
pub fn parse_mark(line: &str) -> Option<u64> {
    line.strip_prefix(MARK_PREFIX)?.trim().parse().ok()
}

/// Thousands separated by commas (`20,000`), for summaries.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_numbers_are_grouped() {
        assert_eq!(parse_mark(mark_line(7).trim_end()), Some(7));
        assert_eq!(parse_mark("eventually 1 x"), None);
        assert_eq!(grouped(20_000), "20,000");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }
}
