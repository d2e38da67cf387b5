//! Strategies: how the next enabled choice is picked (DESIGN 2.5).
//!
//! A strategy is a small pure type: given the enabled [`Choice`]s of one step it returns an index,
//! using nothing but its own state and its seeded generator. No I/O, no clock, no processes, so
//! every strategy is unit-tested here against simulated programs. As shuttle's `Scheduler`, the
//! [`Strategy`] trait is narrow: [`begin_execution`](Strategy::begin_execution), `choose` (from
//! [`Decide`]) at every step, and [`end_execution`](Strategy::end_execution), which gets what the
//! execution did ([`Feedback`]: its decisions, coverage and properties) and answers with a [`Status`] (the
//! space is exhausted; notes for the user). What the search must know before it starts (the spec
//! stored in traces, whether executions may run in parallel or start from a seed trace) is an
//! [`Info`] that [`parse`] returns once, from each strategy's [`Describe`]. Wrappers implement the
//! three methods and, if they make decisions for the strategy they wrap, pass them on with
//! [`Strategy::forced`]; nothing else.
//!
//! One file (or folder) per strategy, each citing its paper:
//!
//! * [`random`]: uniform random walk (Dara's Random; MaceMC's random walks);
//! * [`pct`]: probabilistic concurrency testing with d−1 priority change points (Burckhardt et
//!   al., ASPLOS 2010);
//! * [`pos`]: partial order sampling, a random priority per event, redrawn for the events that
//!   race with the one that ran (Yuan, Yang & Gu, CAV 2018);
//! * [`rf`]: reads-from feedback, steering executions toward reads-from pairs not seen yet on
//!   top of `pos` (after RFF, Wolff et al., ASPLOS 2024);
//! * [`dfs`]: systematic depth-first search of the decision tree, unbounded or bounded by
//!   preemptions (Musuvathi & Qadeer, PLDI 2007) or delays (Emmi, Qadeer & Rakamarić, POPL 2011)
//!   (`dfs`, `dfs:preempt=K`, `dfs:delay=K`, and iteratively deepening `dfs:preempt`,
//!   `dfs:delay`);
//! * [`dpor`]: systematic search up to reordering of independent steps (dynamic partial-order
//!   reduction, Flanagan & Godefroid, POPL 2005, with sleep sets and source sets);
//! * [`coverage`]: coverage-guided search (`coverage:unique`, `coverage:frequency`,
//!   `coverage:node-frequency`, Dara's three objectives) learning from earlier executions which
//!   actions reach new code, and aiming executions at the program's unmet goals (`sometimes`,
//!   `reachable`) from the executions that came closest (`:no-goals` turns that off);
//! * [`replay`]: follow a recorded decision list and report the first divergence (dBug's and
//!   Vtrace's replay);
//! * [`seeded`]: a wrapper starting execution 0 from a recorded schedule (`--seed-trace`, as
//!   Dara's explorer starts from a seed schedule);
//! * [`faults`]: a wrapper that gives the sampling strategies fault points (when to crash,
//!   partition, ...; SAMC's fault budgets placed like PCT's change points), so their own choices
//!   stay among threads and timers.
//!
//! The systematic strategies (`dfs`, `dpor`) share the `prefix` they replay every execution
//! (loom's `Path`) and the `base` scheduler they depart from. They choose each execution from
//! the ones before it, so they run sequentially, and say when the whole space has been explored
//! ([`Status::exhausted`]). A replayed node the program does not offer again stops the search
//! with a [`Divergence`](dara_model::Divergence).
//!
//! Reproducibility rule for seeded strategies: execution `k` of a search with seed `s` depends
//! only on `(s, k)` (and, for PCT and the fault points, on execution 0's length, passed in
//! [`Start`]), via [`Rng::for_execution`](crate::rng::Rng::for_execution). A trace's header
//! (strategy, seed, execution) is therefore enough to regenerate its schedule.
use std::collections::BTreeMap;

use dara_model::choice::ProcessId;
use dara_model::coverage::ProcessCoverage;
use dara_model::property::ExecutionProperties;
use dara_model::{Choice, Decide};

mod base;
pub mod coverage;
pub mod dfs;
pub mod dpor;
pub mod faults;
pub mod pct;
pub mod pos;
mod prefix;
pub mod random;
pub mod replay;
pub mod rf;
pub mod seeded;
#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
pub(crate) mod testkit;

pub use dfs::Dfs;
pub use dpor::Dpor;
pub use pct::Pct;
pub use pos::Pos;
pub use random::Random;
pub use replay::Replay;
pub use rf::Rf;
pub use seeded::Seeded;

/// A decision procedure over a whole search: `choose` (from [`Decide`]) at every step, framed by
/// `begin_execution`/`end_execution` around each execution.
pub trait Strategy: Decide {
    /// Execution `start.execution` is about to start: reset per-execution state and derive this
    /// execution's generator.
    fn begin_execution(&mut self, start: Start);
    /// The execution that began last is over: learn from it, and say whether anything is left.
    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status;
    /// Decision `chosen` of `choices` at `step` was made for the strategy (a seed trace's
    /// prefix) instead of by `choose`. Only strategies whose later decisions depend on the
    /// earlier ones of the same execution need it. Default: nothing.
    fn forced(&mut self, _step: u64, _choices: &[Choice], _chosen: usize) {}
}

/// Which execution begins, and what the search knows of the first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Start {
    /// 0-based index within the search.
    pub execution: u64,
    /// Decisions execution 0 took, for every later execution (None for execution 0 itself):
    /// PCT draws its change points and the fault wrapper its fault points over this length.
    pub first_steps: Option<u64>,
}

impl Start {
    /// Execution `execution`, without a measured first execution.
    pub fn at(execution: u64) -> Start {
        Start { execution, first_steps: None }
    }

    /// Execution `execution` of a search whose execution 0 took `first_steps` decisions.
    pub fn calibrated(execution: u64, first_steps: u64) -> Start {
        Start { execution, first_steps: Some(first_steps) }
    }
}

/// What a finished execution did, for the strategy that ran it.
pub struct Feedback<'a> {
    /// The decisions taken, in order.
    pub choices: &'a [Choice],
    /// Coverage per process (empty for programs built without coverage).
    pub coverage: &'a BTreeMap<ProcessId, ProcessCoverage>,
    /// The user properties the program declared and evaluated (empty without the SDK): which
    /// goals (`sometimes`, `reachable`) the execution evaluated and which it met.
    pub properties: &'a ExecutionProperties,
}

/// Coverage of a program built without it.
static NO_COVERAGE: BTreeMap<ProcessId, ProcessCoverage> = BTreeMap::new();
/// Properties of a program that reports none.
static NO_PROPERTIES: ExecutionProperties = ExecutionProperties::empty();

impl<'a> Feedback<'a> {
    /// An execution of a program without coverage or properties.
    pub fn without_coverage(choices: &'a [Choice]) -> Feedback<'a> {
        Feedback { choices, coverage: &NO_COVERAGE, properties: &NO_PROPERTIES }
    }

    /// An execution with coverage and no properties.
    pub fn with_coverage(choices: &'a [Choice], coverage: &'a BTreeMap<ProcessId, ProcessCoverage>) -> Feedback<'a> {
        Feedback { choices, coverage, properties: &NO_PROPERTIES }
    }

    /// Decisions the execution took.
    pub fn steps(&self) -> u64 {
        self.choices.len() as u64
    }
}

/// What a strategy says after an execution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "the status says whether the search is exhausted"]
pub struct Status {
    /// Systematic strategies, once every schedule within the bound has run: what the search
    /// proved ("explored all 42 schedules with at most 2 preemptions"); the search then stops.
    /// Sampling strategies never are.
    pub exhausted: Option<String>,
    /// Things the user should know about how the search went so far (the summary shows the
    /// last execution's, once).
    pub notes: Vec<String>,
}

/// How a strategy's executions depend on each other, which decides what the search may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Execution k depends only on (seed, k) and execution 0's length: executions may run in
    /// parallel (`--jobs`) and execution 0 may start from a seed trace (`random`, `pct`).
    Independent,
    /// Learns from the executions before: one after another; execution 0 may start from a seed
    /// trace (`coverage:*`).
    Learning,
    /// Builds a decision tree from the first step: one after another, never from a seed trace
    /// (`dfs`, `dpor`).
    Systematic,
}

/// What the search needs to know of a strategy before it runs one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The spec that recreates the strategy with [`parse`] (`random`, `pct:3`); stored in traces.
    pub spec: String,
    pub order: Order,
}

impl Info {
    /// Whether executions may run in parallel (`--jobs`).
    pub fn parallel_safe(&self) -> bool {
        self.order == Order::Independent
    }

    /// Whether execution 0 may start from a seed trace (`--seed-trace`).
    pub fn accepts_seed_trace(&self) -> bool {
        self.order != Order::Systematic
    }
}

/// A strategy that a search can be asked for by name.
pub trait Describe {
    fn info(&self) -> Info;
}

/// A strategy built from its spec, and what it is.
pub struct Parsed {
    pub info: Info,
    pub strategy: Box<dyn Strategy + Send>,
}

impl Parsed {
    fn new<S: Strategy + Describe + Send + 'static>(strategy: S) -> Parsed {
        Parsed { info: strategy.info(), strategy: Box::new(strategy) }
    }

    /// A sampling strategy, given fault points ([`faults`]).
    fn sampling<S: Strategy + Describe + Send + 'static>(strategy: S, seed: u64) -> Parsed {
        Parsed { info: strategy.info(), strategy: Box::new(faults::Faults::new(strategy, seed)) }
    }
}

/// The specs [`parse`] accepts, for messages.
pub const VALID_SPECS: &str = "random, pct (same as pct:3), pct:D with D in 1..=10, pos, rf, dfs, dfs:preempt=K, dfs:delay=K, dfs:preempt, dfs:delay, dpor, coverage:unique, coverage:frequency, coverage:node-frequency (each also with :no-goals)";

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
    #[error("unknown coverage objective in `{spec}`: use coverage:unique, coverage:frequency or coverage:node-frequency, optionally followed by :no-goals (no aiming at unmet goals)")]
    CoverageObjective { spec: String },
    #[error("`replay` follows a recorded trace and cannot be chosen for a search: use dara-replay TRACE (search strategies are {VALID_SPECS})")]
    ReplayNeedsTrace,
}

/// Builds the search strategy named by `spec`, seeded with the search seed.
pub fn parse(spec: &str, seed: u64) -> Result<Parsed, StrategyError> {
    let spec = spec.trim();
    match spec {
        "random" => return Ok(Parsed::sampling(Random::new(seed), seed)),
        "pct" => return Ok(Parsed::sampling(Pct::new(pct::DEFAULT_DEPTH, seed), seed)),
        "pos" => return Ok(Parsed::sampling(Pos::new(seed), seed)),
        "rf" => return Ok(Parsed::sampling(Rf::new(seed), seed)),
        "replay" => return Err(StrategyError::ReplayNeedsTrace),
        "dfs" => return Ok(Parsed::new(Dfs::unbounded())),
        "dfs:preempt" => return Ok(Parsed::new(Dfs::iterative(dfs::Bound::Preemptions))),
        "dfs:delay" => return Ok(Parsed::new(Dfs::iterative(dfs::Bound::Delays))),
        "dpor" => return Ok(Parsed::new(Dpor::new())),
        _ => {}
    }
    if let Some(suffix) = spec.strip_prefix("coverage:") {
        return match coverage::Coverage::parse(suffix, seed) {
            Some(strategy) => Ok(Parsed::sampling(strategy, seed)),
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
            Some((b, k)) => Ok(Parsed::new(Dfs::bounded(b, k))),
            None => Err(StrategyError::DfsBound { spec: spec.to_string() }),
        };
    }
    if let Some(depth) = spec.strip_prefix("pct:") {
        return match depth.parse::<u32>() {
            Ok(d) if (1..=pct::MAX_DEPTH).contains(&d) => Ok(Parsed::sampling(Pct::new(d, seed), seed)),
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
mod tests {
    use dara_abi::Op;

    use super::testkit::run_choice;
    use super::*;

    #[test]
    fn parse_accepts_the_documented_specs() {
        use Order::*;
        for (spec, described, order) in [
            ("random", "random", Independent),
            ("pct", "pct:3", Independent),
            ("pct:1", "pct:1", Independent),
            ("pct:10", "pct:10", Independent),
            ("pos", "pos", Independent),
            ("rf", "rf", Learning),
            (" pct:4 ", "pct:4", Independent),
            ("dfs", "dfs", Systematic),
            ("dfs:preempt=2", "dfs:preempt=2", Systematic),
            ("dfs:delay=0", "dfs:delay=0", Systematic),
            ("dfs:preempt", "dfs:preempt", Systematic),
            ("dfs:delay", "dfs:delay", Systematic),
            ("dpor", "dpor", Systematic),
            ("coverage:unique", "coverage:unique", Learning),
            ("coverage:frequency", "coverage:frequency", Learning),
            ("coverage:node-frequency", "coverage:node-frequency", Learning),
            ("coverage:unique:no-goals", "coverage:unique:no-goals", Learning),
            ("coverage:node-frequency:no-goals", "coverage:node-frequency:no-goals", Learning),
        ] {
            let info = parse(spec, 1).unwrap_or_else(|e| panic!("{spec}: {e}")).info;
            assert_eq!(info, Info { spec: described.to_string(), order }, "{spec}");
            assert_eq!(parse(&info.spec, 1).unwrap().info, info, "the spec parses back");
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
             pos, rf, dfs, dfs:preempt=K, dfs:delay=K, dfs:preempt, dfs:delay, dpor, coverage:unique, coverage:frequency, \
             coverage:node-frequency (each also with :no-goals)"
        );
        for spec in ["coverage:", "coverage:edges", "coverage", "coverage:unique:goals", "coverage:edges:no-goals", "coverage:unique:no-goals:x"] {
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
            kind: dara_model::ChoiceKind::Timeout,
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
