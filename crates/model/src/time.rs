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

/// Virtual nanoseconds one scheduling decision costs by default (`--step-cost`), on average.
pub const DEFAULT_STEP_NS: u64 = 1_000;

/// What the `decision`-th decision of an execution costs when decisions cost `step_ns` on
/// average: from half to one and a half times that, drawn from the decision's number, so the
/// same in every run.
///
/// Natively two clock reads in a row are tens of nanoseconds apart, with jitter. Were every step
/// to cost exactly `step_ns`, a thread alone reading the clock would read it in lockstep, and a
/// loop that waits for a coarser clock to tick *between the two reads of one iteration* (MySQL's
/// and MariaDB's `my_timer_init` measure a timer's resolution so) might never see it: with 1 µs
/// steps every millisecond boundary falls at the same place of the loop's two-read cycle, and
/// for half of all starting points that place is between iterations (mariadbd read the clock
/// 20 million times). With costs that vary (a hash of the decision's number: the sum over a
/// millisecond wanders by several steps, so which read first sees the next tick does too), time
/// still only moves forward and averages `step_ns` a decision.
pub fn step_cost(decision: u64, step_ns: u64) -> u64 {
    // splitmix64's finaliser: a well-mixed 64-bit value of the decision's number.
    let mut h = decision.wrapping_add(0x9E37_79B9_7F4A_7C15);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    let low = step_ns / 2;
    let values = 2 * (step_ns - low) + 1; // low ..= 2 * step_ns - low: the mean is step_ns
    low + ((u128::from(h) * u128::from(values)) >> 64) as u64
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_cost_half_to_one_and_a_half_times_the_setting_and_that_on_average() {
        for step_ns in [1, 7, 1_000, 250_000] {
            let costs: Vec<u64> = (0..100_000).map(|d| step_cost(d, step_ns)).collect();
            assert!(costs.iter().all(|&c| c >= step_ns / 2 && c <= 2 * step_ns - step_ns / 2), "cost {step_ns}");
            let mean = costs.iter().sum::<u64>() as f64 / costs.len() as f64;
            assert!((mean - step_ns as f64).abs() <= 0.01 * step_ns as f64 + 0.01, "cost {step_ns}: mean {mean}");
        }
        assert_eq!(step_cost(12, 1_000), step_cost(12, 1_000), "the same decision costs the same in every run");
    }

    /// MariaDB's `my_timer_init_resolution`: read a millisecond clock twice, until the two reads
    /// of one iteration differ. A thread alone, one decision a read: it sees the tick within
    /// 100 ms of virtual time whatever the clock's phase, each millisecond's tick falling between
    /// an iteration's reads about half the time (with reads in lockstep, half of all phases
    /// never saw one: MariaDB gives up after 10 million iterations).
    #[test]
    fn a_loop_waiting_for_a_tick_between_two_reads_sees_one_at_every_phase() {
        let step_ns = DEFAULT_STEP_NS;
        for first in [0, 1, 350, 4_321] {
            for phase in (0..1_000_000).step_by(997).chain([0, 1_000, 500_000]) {
                let mut now = phase;
                let mut decision = first;
                let mut read = || {
                    now += step_cost(decision, step_ns);
                    decision += 1;
                    now / 1_000_000
                };
                let iterations = (0..200_000).take_while(|_| read() == read()).count();
                assert!(iterations < 50_000, "phase {phase}, first decision {first}: no tick between two reads of an iteration in {iterations} iterations");
            }
        }
    }
}
