//! What a search could see: whether every point where two threads could interleave was a
//! scheduling point, so that a systematic strategy (`dfs`, `dpor`) that has explored its whole
//! space proved something about the program, or only about the points dara saw.
//!
//! dara switches threads only at scheduling points. Code between two of them runs in one piece,
//! so a race between two such points on plain memory or on an atomic variable (a check-then-act
//! on an `atomic_int`, a lock-free queue's missing CAS) is never reordered, however many
//! schedules run. Only an instrumented build with `--preempt-on memory` makes those accesses
//! points, and only a ThreadSanitizer-ABI build makes atomic operations points as well: sancov's
//! load/store callbacks skip atomic instructions. The facts come from the run: the
//! `--preempt-on` settings, and which instrumentation the profiling run received
//! ([`Instrumented`], `Header::instrumented`).
//!
//! Not a blind spot by this definition, and said in docs/memory-preemption.md instead: memory
//! touched only by uninstrumented code (libc, the kernel), and sharing that no execution showed.
//! Sharing a systematic search's executions showed outside its watch set, with no executions
//! left for a round that watches it, is one ([`BlindSpot::UnwatchedSharing`]).
use std::fmt;

use dara_scheduler::preempt::{Instrumented, Preemption};

/// The build line that makes plain memory and atomics scheduling points (docs/memory-preemption.md).
pub const TSAN_BUILD: &str = "clang -fsanitize=thread -mllvm -tsan-instrument-read-before-write prog.c -fno-sanitize-link-runtime -ldara_tsan";

/// Whether a search saw every point where threads could interleave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Visibility {
    /// Plain loads and stores and atomic operations of the instrumented code were scheduling
    /// points (on the watched memory).
    Complete,
    /// Some interleavings were out of sight; an exhausted search is not a proof.
    Partial(BlindSpot),
    /// Not decided (a search configured without the facts, e.g. from a library): treated as
    /// partial, with the commonest reason.
    #[default]
    Unknown,
}

/// Why a search could not see every interleaving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlindSpot {
    /// No memory-level scheduling points were asked for (`--preempt-on memory` not given).
    NoMemoryPoints,
    /// `--preempt-on memory`, but the profiling run received no instrumented access.
    NotInstrumented,
    /// Plain loads and stores were points, atomic operations were not (a sancov build).
    AtomicsNotInstrumented,
    /// A systematic search's executions showed memory shared and written outside its watch set,
    /// and none were left for a round that watches it (`crate::watch_growth`).
    UnwatchedSharing,
    /// Only the program's trapped atomic instructions were points (`--preempt-on atomics` on a
    /// plain build): plain loads and stores, and atomic loads (plain moves), were not.
    OnlyAtomicInstructions,
}

impl Visibility {
    /// From the run's settings and, when `--preempt-on memory` profiled the program, which
    /// instrumentation the profiling run received.
    pub fn of(preempt: &Preemption, profiled: Option<Instrumented>) -> Visibility {
        match profiled {
            _ if !preempt.memory_level() => Visibility::Partial(BlindSpot::NoMemoryPoints),
            _ if !preempt.memory => Visibility::Partial(BlindSpot::OnlyAtomicInstructions),
            None => Visibility::Partial(BlindSpot::NoMemoryPoints),
            Some(sources) if !sources.any() => Visibility::Partial(BlindSpot::NotInstrumented),
            Some(sources) if !sources.covers_atomics() => Visibility::Partial(BlindSpot::AtomicsNotInstrumented),
            Some(_) => Visibility::Complete,
        }
    }

    /// What kept the search from seeing everything, if anything.
    pub fn blind_spot(self) -> Option<BlindSpot> {
        match self {
            Visibility::Complete => None,
            Visibility::Partial(blind) => Some(blind),
            Visibility::Unknown => Some(BlindSpot::NoMemoryPoints),
        }
    }
}

impl fmt::Display for BlindSpot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlindSpot::NoMemoryPoints => write!(
                f,
                "memory accesses were not scheduling points, so races on plain memory or atomics between two scheduling points were not explored: build with {TSAN_BUILD} and use --preempt-on memory, or, without a rebuild, use --preempt-on atomics for the program's own atomic instructions (docs/memory-preemption.md)"
            ),
            BlindSpot::NotInstrumented => write!(
                f,
                "the program was not built with memory instrumentation (the profiling run saw no instrumented load, store or atomic), so races on plain memory or atomics between two scheduling points were not explored: build with {TSAN_BUILD} (docs/memory-preemption.md)"
            ),
            BlindSpot::AtomicsNotInstrumented => write!(
                f,
                "atomic operations were not scheduling points (sancov's load/store callbacks skip atomic instructions), so races on atomics between two scheduling points were not explored: build with {TSAN_BUILD} instead (docs/memory-preemption.md)"
            ),
            BlindSpot::UnwatchedSharing => write!(
                f,
                "its executions showed memory shared and written outside the watch set, and no executions were left for a round that watches it, so accesses to that memory were not scheduling points: give more --runs (docs/memory-preemption.md)"
            ),
            BlindSpot::OnlyAtomicInstructions => write!(
                f,
                "only the program's own atomic read-modify-write and exchange instructions were scheduling points (--preempt-on atomics): plain loads and stores, atomic loads and release stores (plain moves) and atomics inside shared libraries were not, so races through them were not explored: build with {TSAN_BUILD} and use --preempt-on memory (docs/memory-preemption.md)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::instrumented;

    use super::*;

    fn memory() -> Preemption {
        Preemption { memory: true, ..Default::default() }
    }

    #[test]
    fn only_a_tsan_abi_build_with_memory_points_sees_everything() {
        let none = Preemption::default();
        assert_eq!(Visibility::of(&none, None), Visibility::Partial(BlindSpot::NoMemoryPoints));
        let tsan = Instrumented::from_bits(instrumented::TSAN | instrumented::TSAN_ATOMIC);
        assert_eq!(Visibility::of(&none, Some(tsan)), Visibility::Partial(BlindSpot::NoMemoryPoints), "instrumented, but memory points were off");
        assert_eq!(Visibility::of(&memory(), Some(Instrumented::default())), Visibility::Partial(BlindSpot::NotInstrumented));
        let sancov = Instrumented::from_bits(instrumented::SANCOV);
        assert_eq!(Visibility::of(&memory(), Some(sancov)), Visibility::Partial(BlindSpot::AtomicsNotInstrumented));
        let mixed = Instrumented::from_bits(instrumented::SANCOV | instrumented::TSAN);
        assert_eq!(Visibility::of(&memory(), Some(mixed)), Visibility::Partial(BlindSpot::AtomicsNotInstrumented));
        assert_eq!(Visibility::of(&memory(), Some(tsan)), Visibility::Complete);
        let tsan_plain_only = Instrumented::from_bits(instrumented::TSAN);
        assert_eq!(Visibility::of(&memory(), Some(tsan_plain_only)), Visibility::Complete, "a TSan build without atomics has none to miss");
        let atomics = Preemption { atomics: true, ..Default::default() };
        let trapped = Instrumented::from_bits(instrumented::TRAPPED_ATOMIC);
        assert_eq!(Visibility::of(&atomics, Some(trapped)), Visibility::Partial(BlindSpot::OnlyAtomicInstructions));
        let both = Preemption { memory: true, atomics: true, ..Default::default() };
        assert_eq!(Visibility::of(&both, Some(trapped)), Visibility::Partial(BlindSpot::NotInstrumented), "trapped atomics are not instrumentation");
        assert_eq!(Visibility::of(&both, Some(Instrumented::from_bits(instrumented::TRAPPED_ATOMIC | instrumented::TSAN))), Visibility::Complete);
    }

    #[test]
    fn unknown_counts_as_blind() {
        assert_eq!(Visibility::default().blind_spot(), Some(BlindSpot::NoMemoryPoints));
        assert_eq!(Visibility::Complete.blind_spot(), None);
    }

    #[test]
    fn every_reason_names_the_build_line() {
        for blind in [BlindSpot::NoMemoryPoints, BlindSpot::NotInstrumented, BlindSpot::AtomicsNotInstrumented, BlindSpot::OnlyAtomicInstructions] {
            let text = blind.to_string();
            assert!(text.contains("-fsanitize=thread") && text.contains("-ldara_tsan") && !text.contains('\n'), "{text}");
        }
    }
}
