//! Shared pieces of dara's command-line tools: locating the preload, the run options common to
//! `dara-trace` and `dara-replay`, signal handling, the interleaving listing, the bound on a tool's own memory, what a diverged replay
//! says about on-disk state, and the
//! `dara minimize` and `dara coverage` commands.
pub mod coverage;
pub mod listing;
pub mod memory_bound;
pub mod minimize;
pub mod on_disk;
pub mod setup;
pub mod cluster_config;
