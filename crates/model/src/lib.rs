//! The pure types of a dara run: what can be chosen, the model that lists the choices and applies
//! them, how a run ends, the settings that make it reproducible, and the `trace.bin` format that
//! records it. No processes, no shared memory, no clocks: the scheduler (`dara-scheduler`) drives
//! a live program with these types; tools that only read a trace (`dara info`, `dara view`) need
//! nothing else.
//!
//! * [`choice`]: what a strategy chooses between ([`Choice`], its object), and the [`Decide`]
//!   interface strategies implement.
//! * [`model`]: the model of threads, synchronization objects, timers and the virtual clock; it
//!   computes the enabled set and applies decisions.
//! * [`outcome`]: how an execution ended, and whether that is a bug.
//! * [`cluster`]: the nodes and fault budgets of a cluster run, and the bookkeeping from which its
//!   fault choices are listed.
//! * [`coverage`]: the edges each process reached and its module map.
//! * [`outside`]: inputs from and outputs to peers outside dara, as recorded.
//! * [`name_lookup`]: a program's `getaddrinfo` and the resolver's answer, as recorded.
//! * [`preempt`]: the `--preempt-on` settings (memory-level points, edge quanta) and the
//!   profiling run's access profile.
//! * [`liveness`]: the liveness walk's settings, its marks, the critical transition.
//! * [`memory_totals`]: the memory and swap totals `sysinfo` shows, a snapshot of the host's.
//! * [`property`]: user properties (the SDKs' `DARA_ALWAYS`, ...), their tallies and verdicts.
//! * [`time`]: how virtual time behaves (timer policy, step cost, pause budget, run length).
//! * [`trace`]: the `trace.bin` format (writer and a reader that never panics on bad input).
//!
//! Dependencies: `dara-abi` (op codes and request types) only.
pub mod choice;
pub mod cluster;
pub mod coverage;
pub mod model;
pub mod name_lookup;
pub mod outcome;
pub mod outside;
pub mod preempt;
pub mod liveness;
pub mod library_cache;
pub mod memory_totals;
pub mod property;
pub mod time;
pub mod trace;

pub use choice::{Choice, ChoiceKind, Decide, Divergence};
pub use outcome::Outcome;
