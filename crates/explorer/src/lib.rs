//! dara's search side: what to run next.
//!
//! * [`strategy`]: the [`Strategy`](strategy::Strategy) trait (begin an execution, choose among
//!   the enabled choices, end it) and one file per strategy, chosen by name with
//!   [`strategy::parse`]. Strategies are pure: given the enabled choices of a step, they return a
//!   decision; no I/O, no processes (docs/strategies.md).
//!   * [`random`](strategy::random): uniform random walk (Dara's Random; MaceMC's random walks);
//!   * [`pct`](strategy::pct) (`pct:D`): probabilistic concurrency testing, Burckhardt et al.,
//!     ASPLOS 2010;
//!   * [`dfs`](strategy::dfs) (`dfs`, `dfs:preempt[=K]`, `dfs:delay[=K]`): stateless depth-first
//!     search, bounded by preemptions (Musuvathi & Qadeer, PLDI 2007) or delays (Emmi, Qadeer &
//!     Rakamarić, POPL 2011);
//!   * [`dpor`](strategy::dpor): dynamic partial-order reduction, Flanagan & Godefroid, POPL 2005,
//!     with sleep sets (Godefroid 1996) and source sets (Abdulla et al., POPL 2014);
//!   * [`coverage`](strategy::coverage) (`coverage:unique|frequency|node-frequency`): Dara's
//!     coverage-guided objectives, aiming at the program's unmet goals (`sometimes`,
//!     `reachable`) from the executions that came closest;
//!   * [`replay`](strategy::replay): follow a recorded decision list, report the first divergence
//!     (dBug's replay);
//!   * [`seeded`](strategy::seeded) (`--seed-trace`): a wrapper starting execution 0 from a
//!     recorded schedule, as Dara's explorer starts from a seed schedule;
//!   * [`faults`](strategy::faults): a wrapper placing fault points (crash, partition, ...) for the
//!     sampling strategies, like PCT's change points, within SAMC-style fault budgets.
//! * [`search`]: the search loop: executions under a strategy, each bug saved once, and the first
//!   execution that met each goal; `last_trace` keeps its `trace.bin`, the last execution's,
//!   written about once a second and at the end; `launch_ahead` launches the next execution's
//!   program on another CPU while one runs.
//! * [`reproduce`]: re-running a trace with the replay strategy, and `--verify`'s comparison.
//! * [`minimize`]: shrink a failing schedule to fewer preemptions and steps that still fail the
//!   same way, with the [`Guided`](minimize::Guided) strategy that follows a plan.
//! * [`liveness`]: the critical transition of a liveness violation (MaceMC's binary search over
//!   the trace's prefixes with random walks from each).
//! * [`profile`]: the profiling run that derives the watch set of memory-level scheduling
//!   points (`--preempt-on memory`) before a search.
//! * [`watch_growth`]: the adaptive watch set: sharing later executions show is watched by the
//!   executions after them, in epochs, the same for every `--jobs`.
//! * [`schedule`]: a schedule written by a person (the listing's format), enforced, with the
//!   first line that could not be followed (after Vtrace).
//! * [`visibility`]: whether a search saw every point where threads could interleave, which
//!   decides whether an exhausted systematic search proved anything.
//! * [`hint`]: the one line a search that found no bug adds when points that could matter were
//!   off (memory points on an instrumented build, atomics on a sancov build, a full watch set).
//! * [`deadline`]: a stop flag that also fires when the time budget runs out.
//! * [`rng`]: the strategies' seeded generator. Its output is part of dara's reproducibility
//!   contract: a trace's (strategy, seed, execution) must regenerate the same schedule.
//!
//! Below this crate, `dara-model` owns the model, the enabled set, choices and the trace format
//! (the strategies use nothing else), and `dara-scheduler` runs executions (the search loop,
//! reproduction, minimization and the profile run use it); above it, `dara-tools` turns all this
//! into command lines.
pub mod rng;
pub mod strategy;
pub mod reproduce;
pub mod search;
mod last_trace;
mod launch_ahead;
pub mod minimize;
pub mod liveness;
pub mod profile;
pub mod watch_growth;
pub mod deadline;
pub mod schedule;
pub mod visibility;
pub mod hint;
