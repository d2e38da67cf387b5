//! The global scheduler of one execution: it drives a live program with the pure types of
//! `dara-model`.
//!
//! * [`execution`]: one execution, from launch to verdict: the handoff loop over the shared
//!   [`region`] (waking through [`futex`]), process supervision through `dara-tracer`, the
//!   watchdog, the outside relay.
//! * [`own_traps`], [`coarse_time`]: the scheduler thread runs with `rdtsc` disabled like the
//!   threads it gates, and reads a coarse clock for its limits.
//! * [`memory`]: reading target memory for the model, and where shared memory lies.
//! * [`netprobe`], [`sockdiag`], [`fifo`], [`epoll_dups`]: what the kernel says about the
//!   program's sockets, pipes and epoll sets, probed without blocking.
//! * [`outside`]: relaying peers outside dara (clients, signals, stdin) in a recording and a replay.
//! * [`names`]: the program's name lookups, answered by dara.
//! * [`coverage`], [`symbols`], [`crash_site`], [`sanitizer_report`], [`go_race`]: observations
//!   of a live process (coverage areas, module maps, symbols, crash locations); [`sanitizer_options`]: the
//!   sanitizer settings every target gets.
//!
//! `choice`, `cluster`, `memory_totals`, `model`, `outcome`, `preempt`, `time` and `trace` are `dara-model`'s,
//! re-exported so `dara_scheduler::trace` and `crate::model` keep naming them.
pub use dara_model::{choice, cluster, memory_totals, model, outcome, preempt, time, trace};
pub use dara_model::{Choice, ChoiceKind, Decide, Divergence, Outcome};
pub use dara_tracer::procfs;

pub mod atomic_plans;
pub mod coverage;
pub mod crash_frame;
pub mod crash_site;
pub mod go_race;
pub mod sanitizer_options;
pub mod sanitizer_report;
pub mod futex;
pub mod region;
pub mod memory;
pub mod epoll_dups;
pub mod fifo;
pub mod netprobe;
pub mod outside;
pub mod names;
pub mod sockdiag;
pub mod symbols;
pub mod execution;
pub mod own_traps;
pub mod coarse_time;
