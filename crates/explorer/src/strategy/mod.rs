//! Strategies: how the next enabled choice is picked (DESIGN 2.5).
//!
//! A strategy is a small pure type: given the enabled [`Choice`]s of one step it returns an index,
//! using nothing but its own state and its seeded generator. No I/O, no clock, no processes, so
//! every strategy is unit-tested here against simulated programs. One file per strategy:
//!
//! * [`random`]: uniform random walk;
//! * [`pct`]: probabilistic concurrency testing with d−1 priority change points;
//! * [`replay`]: follow a recorded decision list and report the first divergence;
//! * [`dfs`]: systematic depth-first search of the decision tree, unbounded or bounded by
//!   preemptions or delays (`dfs`, `dfs:preempt=K`, `dfs:delay=K`, and iteratively deepening
//!   `dfs:preempt`, `dfs:delay`);
//! * [`dpor`]: systematic search up to reordering of independent steps (dynamic partial-order
//!   reduction with sleep sets);
//! * [`coverage`]: coverage-guided search (`coverage:unique`, `coverage:frequency`,
//!   `coverage:node-frequency`) learning which actions reach new code from earlier executions
//!   ([`Strategy::observe`]);
//! * [`seeded`]: a wrapper starting execution 0 from a recorded schedule (`--seed-trace`);
//! * [`faults`]: a wrapper that gives the sampling strategies fault points (when to crash,
//!   partition, ...), so their own choices stay among threads and timers.
//!
//! The systematic strategies (`dfs`, `dpor`) choose each execution from the ones before it, so
//! they run sequentially, and say when the whole space has been explored
//! ([`Strategy::exhausted`]). They replay a prefix of earlier decisions every execution and stop
//! the search with a [`Divergence`](dara_scheduler::Divergence) if the program does not offer
//! the same choices again.
//!
//! Reproducibility rule for seeded strategies: execution `k` of a search with seed `s` depends
//! only on `(s, k)` (and, for PCT, on the step estimate carried over from earlier executions), via
//! [`Rng::for_execution`](crate::rng::Rng::for_execution). A trace's header (strategy, seed,
//! execution) is therefore enough to regenerate its schedule.
use std::collections::BTreeMap;

use dara_scheduler::choice::ProcessId;
use dara_scheduler::coverage::ProcessCoverage;
use dara_scheduler::{Choice, Decide};

pub mod coverage;
pub mod dfs;
pub mod dpor;
pub mod faults;
pub mod pct;
pub mod random;
pub mod replay;
pub mod seeded;
#[cfg(test)]
pub(crate) mod sim;

pub use dfs::Dfs;
pub use dpor::Dpor;
pub use pct::Pct;
pub use random::Random;
pub use replay::Replay;
pub use seeded::Seeded;

/// What a finished execution tells a strategy that learns across executions.
pub struct Feedback<'a> {
    /// The decisions taken, in order.
    pub choices: &'a [Choice],
    /// Coverage per process (empty for programs built without coverage).
    pub coverage: &'a BTreeMap<ProcessId, ProcessCoverage>,
}

/// A decision procedure over a whole search: `choose` (from [`Decide`]) at every step, framed by
/// `begin_execution`/`end_execution` around each execution.
pub trait Strategy: Decide {
    /// The spec that recreates this strategy with [`parse`] (`random`, `pct:3`); stored in traces.
    fn describe(&self) -> String;
    /// Execution `execution` (0-based index within the search) is about to start: reset
    /// per-execution state and derive this execution's generator.
    fn begin_execution(&mut self, execution: u64);
    /// The execution that began last is over after `steps` decisions.
    fn end_execution(&mut self, steps: u64);
    /// Systematic strategies: true once every schedule within the bound has been explored; the
    /// search then stops and reports [`Strategy::exhausted_note`]. Sampling strategies never are.
    fn exhausted(&self) -> bool {
        false
    }
    /// What an exhausted search proved, e.g. "all 42 schedules with at most 2 preemptions".
    fn exhausted_note(&self) -> Option<String> {
        None
    }
    /// Whether executions may run in parallel (`--jobs`), i.e. whether execution k's decisions
    /// depend only on (seed, k) and the calibration, never on other executions' results.
    fn parallel_safe(&self) -> bool {
        true
    }
    /// Called with the step count of execution 0 before any other execution starts (used by PCT
    /// to size its change-point range). Default: nothing.
    fn calibrate(&mut self, _first_execution_steps: u64) {}
    /// Called after every execution (after `end_execution`) with its decisions and coverage.
    /// Default: nothing (only strategies that learn across executions use it).
    fn observe(&mut self, _feedback: &Feedback<'_>) {}
    /// Decision `chosen` of `choices` at `step` was made for the strategy (a seed trace's
    /// prefix) instead of by `choose`. Default: nothing.
    fn forced(&mut self, _step: u64, _choices: &[Choice], _chosen: usize) {}
    /// Whether execution 0 may start from a seed trace (`--seed-trace`). Systematic strategies
    /// build their decision tree from the root and say no.
    fn accepts_seed_trace(&self) -> bool {
        true
    }
    /// Things the user should know about how the search went (shown once in the summary).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The specs [`parse`] accepts, for messages.
pub const VALID_SPECS: &str = "random, pct (same as pct:3), pct:D with D in 1..=10, dfs, dfs:preempt=K, dfs:delay=K, dfs:preempt, dfs:delay, dpor, coverage:unique, coverage:frequency, coverage:node-frequency";

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    #[error("unknown strategy `{spec}`: valid strategies are {VALID_SPECS}")]
    Unknown { spec: String },
    #[error(
        "bad PCT depth in `{spec}`: D must be a whole number from 1 to 10 (pct:D uses D-1 priority change points)"
    )]
    PctDepth { spec: String },
    #[error(
        "bad bound in `{spec}`: use dfs:preempt=K or dfs:delay=K with K a whole number, or dfs:preempt / dfs:delay to raise the bound step by step"
    )]
    DfsBound { spec: String },
    #[error("unknown coverage objective in `{spec}`: use coverage:unique, coverage:frequency or coverage:node-frequency")]
    CoverageObjective { spec: String },
    #[error("`replay` follows a recorded trace and cannot be chosen for a search: use dara-replay TRACE (search strategies are {VALID_SPECS})")]
    ReplayNeedsTrace,
}

/// Builds the search strategy named by `spec`, seeded with the search seed.
pub fn parse(spec: &str, seed: u64) -> Result<Box<dyn Strategy + Send>, StrategyError> {
    let spec = spec.trim();
    match spec {
        "random" => return Ok(Box::new(faults::Faults::new(Random::new(seed), seed))),
        "pct" => return Ok(Box::new(faults::Faults::new(Pct::new(pct::DEFAULT_DEPTH, seed), seed))),
        "replay" => return Err(StrategyError::ReplayNeedsTrace),
        "dfs" => return Ok(Box::new(Dfs::unbounded())),
        "dfs:preempt" => return Ok(Box::new(Dfs::iterative(dfs::Bound::Preemptions))),
        "dfs:delay" => return Ok(Box::new(Dfs::iterative(dfs::Bound::Delays))),
        "dpor" => return Ok(Box::new(Dpor::new())),
        _ => {}
    }
    if let Some(name) = spec.strip_prefix("coverage:") {
        return match coverage::Coverage::parse_objective(name) {
            Some(objective) => Ok(Box::new(faults::Faults::new(coverage::Coverage::new(objective, seed), seed))),
            None => Err(StrategyError::CoverageObjective { spec: spec.to_string() }),
        };
    }
    if let Some(bound) = spec.strip_prefix("dfs:") {
        let parsed = match bound.split_once('=') {
            Some(("preempt", k)) => k.parse::<u32>().ok().map(|k| (dfs::Bound::Preemptions, k)),
            Some(("delay", k)) => k.parse::<u32>().ok().map(|k| (dfs::Bound::Delays, k)),
            _ => None,
        };
        return match parsed {
            Some((b, k)) => Ok(Box::new(Dfs::bounded(b, k))),
            None => Err(StrategyError::DfsBound { spec: spec.to_string() }),
        };
    }
    if let Some(depth) = spec.strip_prefix("pct:") {
        return match depth.parse::<u32>() {
            Ok(d) if (1..=pct::MAX_DEPTH).contains(&d) => Ok(Box::new(faults::Faults::new(Pct::new(d, seed), seed))),
            _ => Err(StrategyError::PctDepth { spec: spec.to_string() }),
        };
    }
    Err(StrategyError::Unknown { spec: spec.to_string() })
}

/// Several choices as people read them in divergence reports (each as `Choice`'s `Display`:
/// `<thread 2 run mutex-lock 0x4040>`), comma-separated.
pub fn choices_label(choices: &[Choice]) -> String {
    if choices.is_empty() {
        return "nothing".to_string();
    }
    choices.iter().map(Choice::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Simulated programs for strategy tests: each offers choices the way the model does (in
    //! thread order) and applies the chosen one.
    use dara_abi::Op;
    use dara_scheduler::{Choice, ChoiceKind};

    use super::Strategy;

    pub(crate) trait Program {
        /// Enabled choices; empty when the program is finished.
        fn choices(&self) -> Vec<Choice>;
        fn apply(&mut self, c: &Choice);
    }

    pub(crate) fn run_choice(thread: u32, op: Op, obj: u64) -> Choice {
        Choice {
            thread,
            kind: ChoiceKind::Run,
            alt: 0,
            op,
            obj,
        }
    }

    /// Runs `program` under `strategy` (execution `execution`) for at most `max_steps`
    /// decisions. Returns the decisions taken and whether the program finished.
    pub(crate) fn run(
        strategy: &mut dyn Strategy,
        execution: u64,
        program: &mut dyn Program,
        max_steps: u64,
    ) -> (Vec<Choice>, bool) {
        strategy.begin_execution(execution);
        let mut taken = Vec::new();
        let mut finished = false;
        for step in 0..max_steps {
            let choices = program.choices();
            if choices.is_empty() {
                finished = true;
                break;
            }
            let i = strategy.choose(step, &choices).expect("strategy diverged");
            assert!(i < choices.len(), "index {i} out of {} choices", choices.len());
            program.apply(&choices[i]);
            taken.push(choices[i]);
        }
        finished |= program.choices().is_empty();
        strategy.end_execution(taken.len() as u64);
        if execution == 0 {
            // As the search loop does: execution 0 calibrates the strategy.
            strategy.calibrate(taken.len() as u64);
        }
        (taken, finished)
    }

    /// Straight-line threads: thread `t` performs `ops[t]` in order, one op per step. The object
    /// of each choice is `0x1000 * (t + 1) + index` so every step is distinguishable. A `Sleep`
    /// op also offers a `Timeout` choice.
    pub(crate) struct Straight {
        pub ops: Vec<Vec<Op>>,
        pub pc: Vec<usize>,
        /// (thread, op index) in execution order.
        pub history: Vec<(u32, usize)>,
    }

    impl Straight {
        pub(crate) fn new(ops: Vec<Vec<Op>>) -> Straight {
            let n = ops.len();
            Straight {
                ops,
                pc: vec![0; n],
                history: Vec::new(),
            }
        }

        /// Position in `history` of thread `t`'s op `i`.
        pub(crate) fn when(&self, t: u32, i: usize) -> Option<usize> {
            self.history.iter().position(|&h| h == (t, i))
        }
    }

    impl Program for Straight {
        fn choices(&self) -> Vec<Choice> {
            let mut out = Vec::new();
            for (t, ops) in self.ops.iter().enumerate() {
                if let Some(&op) = ops.get(self.pc[t]) {
                    let c = run_choice(t as u32, op, 0x1000 * (t as u64 + 1) + self.pc[t] as u64);
                    out.push(c);
                    if op == Op::Sleep {
                        out.push(Choice {
                            kind: ChoiceKind::Timeout,
                            ..c
                        });
                    }
                }
            }
            out
        }

        fn apply(&mut self, c: &Choice) {
            let t = c.thread as usize;
            self.history.push((c.thread, self.pc[t]));
            self.pc[t] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::testkit::run_choice;
    use super::*;

    #[test]
    fn parse_accepts_the_documented_specs() {
        for (spec, described) in [
            ("random", "random"),
            ("pct", "pct:3"),
            ("pct:1", "pct:1"),
            ("pct:10", "pct:10"),
            (" pct:4 ", "pct:4"),
            ("dfs", "dfs"),
            ("dfs:preempt=2", "dfs:preempt=2"),
            ("dfs:delay=0", "dfs:delay=0"),
            ("dfs:preempt", "dfs:preempt"),
            ("dfs:delay", "dfs:delay"),
            ("dpor", "dpor"),
            ("coverage:unique", "coverage:unique"),
            ("coverage:frequency", "coverage:frequency"),
            ("coverage:node-frequency", "coverage:node-frequency"),
        ] {
            let s = parse(spec, 1).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(s.describe(), described);
            assert_eq!(
                parse(&s.describe(), 1).unwrap().describe(),
                described,
                "describe() parses back"
            );
        }
    }

    #[test]
    fn parse_rejects_with_a_useful_message() {
        for spec in ["pct:0", "pct:11", "pct:", "pct:x", "pct:-1"] {
            assert_eq!(
                parse(spec, 1).err(),
                Some(StrategyError::PctDepth { spec: spec.to_string() })
            );
        }
        for spec in ["dfs:preempt=", "dfs:preempt=x", "dfs:delay=-1", "dfs:depth=2", "dfs:", "dfs:preempt=1=2"] {
            assert_eq!(
                parse(spec, 1).err(),
                Some(StrategyError::DfsBound { spec: spec.to_string() })
            );
        }
        let err = parse("bfs", 1).err().unwrap();
        assert_eq!(err, StrategyError::Unknown { spec: "bfs".into() });
        assert_eq!(
            err.to_string(),
            "unknown strategy `bfs`: valid strategies are random, pct (same as pct:3), pct:D with D in 1..=10, \
             dfs, dfs:preempt=K, dfs:delay=K, dfs:preempt, dfs:delay, dpor, coverage:unique, coverage:frequency, \
             coverage:node-frequency"
        );
        for spec in ["coverage:", "coverage:edges", "coverage"] {
            let err = parse(spec, 1).err().unwrap();
            assert!(
                matches!(err, StrategyError::CoverageObjective { .. } | StrategyError::Unknown { .. }),
                "{spec}: {err}"
            );
        }
        assert_eq!(
            parse("coverage:edges", 1).err(),
            Some(StrategyError::CoverageObjective { spec: "coverage:edges".into() })
        );
        assert_eq!(parse("replay", 1).err(), Some(StrategyError::ReplayNeedsTrace));
    }

    #[test]
    fn labels_read_like_the_interleaving_log() {
        let c = run_choice(2, Op::MutexLock, 0x4040);
        assert_eq!(c.to_string(), "<thread 2 run mutex-lock 0x4040>");
        let t = Choice {
            kind: dara_scheduler::ChoiceKind::Timeout,
            alt: 1,
            ..run_choice(3, Op::CondSignal, 0x10)
        };
        assert_eq!(t.to_string(), "<thread 3 timeout cond-signal 0x10 alt 1>");
        assert_eq!(
            choices_label(&[c, t]),
            "<thread 2 run mutex-lock 0x4040>, <thread 3 timeout cond-signal 0x10 alt 1>"
        );
    }
}
