//! dara's search side: what to run next.
//!
//! * [`strategy`]: the [`Strategy`](strategy::Strategy) trait and one type per strategy
//!   (`random`, `pct:d`, `replay`), chosen by name with [`strategy::parse`]. Strategies are pure:
//!   given the enabled choices of a step, they return a decision; no I/O, no processes.
//! * [`minimize`]: shrink a failing schedule to fewer preemptions and steps that still fail the
//!   same way, with the [`Guided`](minimize::Guided) strategy that follows a plan.
//! * [`profile`]: the profiling run that derives the watch set of memory-level scheduling
//!   points (`--preempt-on memory`) before a search.
//! * [`deadline`]: a stop flag that also fires when the time budget runs out.
//! * [`rng`]: the strategies' seeded generator. Its output is part of dara's reproducibility
//!   contract: a trace's (strategy, seed, execution) must regenerate the same schedule.
//!
//! Below this crate, `dara-scheduler` owns the model, the enabled set and the trace format;
//! above it, `dara-tools` turns all this into command lines.
pub mod rng;
pub mod strategy;
pub mod reproduce;
pub mod search;
pub mod minimize;
pub mod profile;
pub mod deadline;
