//! Shared pieces of dara's command-line tools (`dara-trace`, `dara-replay`, `dara`).
//!
//! Reading a trace (these use `dara-model`, not the scheduler or the explorer):
//! * [`listing`]: the readable interleaving a replay prints;
//! * [`coverage`]: `dara coverage`, the edge coverage stored in traces, symbolized;
//! * [`export`]: `dara export`, a trace's steps as a ShiViz log (vector clocks) or JSON;
//! * [`on_disk`]: what a diverged replay says about on-disk state;
//! * [`cpu_randomness`]: what it says about a CPU whose random numbers dara cannot hide;
//! * [`cluster_config`]: the cluster config file and the options that override it.
//!
//! Running programs (these drive `dara-scheduler` and `dara-explorer`):
//! * [`setup`]: locating the preload, the run options common to `dara-trace` and `dara-replay`,
//!   becoming subreaper, signal handling;
//! * [`explain`]: `dara explain`, the short story of a bug (its preemptions, racing pairs, lines);
//! * [`gdb`]: `dara-replay --gdb STEP`, a replay paused before a step and served to gdb;
//! * [`timeline`]: `dara timeline`, a run drawn as one self-contained HTML page;
//! * [`minimize`]: `dara minimize`, which re-executes a failing trace to shrink it;
//! * [`liveness`]: a liveness violation's critical transition, found and stored after a search;
//! * [`memory_bound`]: the bound on a tool's own heap;
//! * [`memory_build`]: which memory instrumentation a program's build carries (for the hint of
//!   a search that ran without memory points);
//! * [`results`]: `--json` documents and the JUnit report, for machines;
//! * [`invocation`]: how a printed command names another of dara's tools so that it runs.
pub mod cluster_config;
pub mod coverage;
pub mod cpu_randomness;
pub mod explain;
pub mod gdb;
pub mod export;
pub mod invocation;
pub mod listing;
pub mod liveness;
pub mod memory_bound;
pub mod memory_build;
pub mod minimize;
pub mod on_disk;
pub mod results;
pub mod setup;
pub mod timeline;
