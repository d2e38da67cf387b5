//! Shared pieces of dara's command-line tools: locating the preload, the run options common to
//! `dara-trace` and `dara-replay`, signal handling, and the interleaving listing.
pub mod listing;
pub mod setup;
