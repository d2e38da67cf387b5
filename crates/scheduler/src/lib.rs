//! The global scheduler of one execution.
//!
//! * [`choice`]: what a strategy chooses between, and the [`Decide`] interface strategies implement.
//! * [`model`]: the pure model of threads, synchronization objects, timers and the virtual clock;
//!   it computes the enabled set and applies decisions. No I/O.
//! * [`outcome`]: how an execution ended, and whether that is a bug.
//! * [`preempt`]: the `--preempt-on` settings (memory-level points, edge quanta) and the
//!   profiling run's access profile.
//! * [`time`]: how virtual time behaves (timer policy, step cost, pause budget, run length).
//! * [`trace`]: the `trace.bin` format (writer and a reader that never panics on bad input).
//!
//! The parts that touch processes (shared memory, the handoff loop) build on these.
pub mod choice;
pub mod cluster;
pub mod coverage;
pub mod crash_site;
pub mod sanitizer_options;
pub mod sanitizer_report;
pub mod model;
pub mod outcome;
pub mod preempt;
pub mod time;
pub mod trace;

pub use choice::{Choice, ChoiceKind, Decide, Divergence};
pub use outcome::Outcome;
pub mod futex;
pub mod region;
pub mod memory;
pub mod epoll_dups;
pub mod fifo;
pub mod netprobe;
pub mod outside;
pub mod sockdiag;
pub mod procfs;
pub mod symbols;
pub mod execution;
pub mod own_tsc;
pub mod coarse_time;
