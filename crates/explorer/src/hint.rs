//! The one line a search that found no bug adds when scheduling points that could have mattered
//! were off: memory points on a build that has memory instrumentation, the program's own atomic
//! instructions on a plain build, atomics on a sancov build, plain memory when only atomic
//! instructions were trapped, or shared memory beyond what the watch set holds. Built from the
//! facts [`crate::visibility`] keeps (its [`BlindSpot`]s and their wording), plus what only the
//! tool knows: the program's build (read from its ELF after the search) and whether the watch
//! set overflowed. An exhausted systematic search already says why it proved nothing
//! ("search not exhaustive: ..."), so this is for the searches that just ran out of executions.
use dara_scheduler::preempt::Instrumented;

use crate::visibility::{BlindSpot, Visibility};

/// What is known about a search that ended without a bug.
#[derive(Clone, Copy, Debug)]
pub struct EmptySearch {
    pub visibility: Visibility,
    /// The memory instrumentation the program's build carries (none when unknown).
    pub build: Instrumented,
    /// Atomic instructions in the program's own code (`--preempt-on atomics` would trap them;
    /// 0 when unknown or not looked for).
    pub atomic_instructions: usize,
    /// Shared written memory was left unwatched: the table or the watch set was full.
    pub overflowed: bool,
}

/// The hint, if a point that could matter was off.
pub fn hint(search: &EmptySearch) -> Option<String> {
    match search.visibility.blind_spot() {
        Some(BlindSpot::NoMemoryPoints) if search.build.any() => Some(format!(
            "hint: no bug found, but the program is built with memory instrumentation ({}) and its loads and stores were not scheduling points: try --preempt-on memory (docs/memory-preemption.md)",
            sources(search.build)
        )),
        Some(BlindSpot::NoMemoryPoints) if search.atomic_instructions > 0 => Some(format!(
            "hint: no bug found, but the program's own code has {} atomic instruction{} (lock-prefixed, xchg) and none was a scheduling point: try --preempt-on atomics, or build with memory instrumentation for plain memory too (docs/memory-preemption.md)",
            search.atomic_instructions,
            if search.atomic_instructions == 1 { "" } else { "s" }
        )),
        Some(blind @ (BlindSpot::AtomicsNotInstrumented | BlindSpot::OnlyAtomicInstructions)) => Some(format!("hint: no bug found, but {blind}")),
        _ if search.overflowed => Some(format!(
            "hint: no bug found, but the program shares more memory than --preempt-on memory watches ({} granules at most, {} recorded per execution), so some shared memory was never a scheduling point: search a smaller workload (fewer threads, iterations or items)",
            dara_scheduler::preempt::MAX_WATCHED,
            dara_abi::ACCESS_TABLE_SLOTS * 3 / 4
        )),
        _ => None,
    }
}

/// "ThreadSanitizer ABI, plain and atomic", "sancov loads/stores".
fn sources(build: Instrumented) -> String {
    let mut parts = Vec::new();
    if build.tsan || build.tsan_atomics {
        parts.push(if build.tsan_atomics { "ThreadSanitizer ABI, plain and atomic" } else { "ThreadSanitizer ABI" });
    }
    if build.sancov {
        parts.push("sancov loads/stores");
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use dara_abi::instrumented;
    use dara_scheduler::preempt::Preemption;

    use super::*;

    fn empty(preempt: &Preemption, profiled: Option<Instrumented>, build: u32, overflowed: bool) -> Option<String> {
        hint(&EmptySearch { visibility: Visibility::of(preempt, profiled), build: Instrumented::from_bits(build), atomic_instructions: 0, overflowed })
    }

    #[test]
    fn memory_points_are_suggested_only_for_an_instrumented_build() {
        let none = Preemption::default();
        let tsan = instrumented::TSAN | instrumented::TSAN_ATOMIC;
        let line = empty(&none, None, tsan, false).expect("a TSan build searched without memory points");
        assert!(line.contains("--preempt-on memory") && line.contains("plain and atomic") && !line.contains('\n'), "{line}");
        assert!(empty(&none, None, instrumented::SANCOV, false).unwrap().contains("sancov"));
        assert_eq!(empty(&none, None, 0, false), None, "an uninstrumented program without atomics: nothing to suggest");
        let prebuilt = EmptySearch { visibility: Visibility::of(&none, None), build: Instrumented::default(), atomic_instructions: 2, overflowed: false };
        assert!(hint(&prebuilt).unwrap().contains("has 2 atomic instructions") && hint(&prebuilt).unwrap().contains("--preempt-on atomics"));
        let trapped = Preemption { atomics: true, ..Default::default() };
        assert!(empty(&trapped, Some(Instrumented::default()), 0, false).unwrap().contains("--preempt-on memory"), "plain memory was not seen");
    }

    #[test]
    fn a_sancov_build_with_memory_points_is_told_about_atomics_and_a_full_set_about_its_size() {
        let memory = Preemption { memory: true, ..Default::default() };
        let sancov = Instrumented::from_bits(instrumented::SANCOV);
        assert!(empty(&memory, Some(sancov), instrumented::SANCOV, false).unwrap().contains("-ldara_tsan"));
        let tsan = Instrumented::from_bits(instrumented::TSAN);
        assert_eq!(empty(&memory, Some(tsan), instrumented::TSAN, false), None, "everything was visible");
        assert!(empty(&memory, Some(tsan), instrumented::TSAN, true).unwrap().contains("smaller workload"));
    }
}
