//! What a diverged replay says about the CPU: the random numbers it hands out (`rdrand`,
//! `rdseed`) are hidden from programs only where `cpuid` can be made to fault, so that dara can
//! answer it without those features (docs/determinism.md). On a CPU or hypervisor without CPUID
//! faulting (many AMD hosts and VMs) a program that uses them draws other numbers in every run,
//! and nothing dara does can show which instruction did it.

/// One line for a replay that diverged on this machine, when its CPU advertises RDRAND or RDSEED
/// and cannot fault on `cpuid`; None elsewhere.
pub fn divergence_note() -> Option<String> {
    note_for(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

/// The note for a machine whose /proc/cpuinfo is `cpuinfo`.
fn note_for(cpuinfo: &str) -> Option<String> {
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags"))?;
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    let random: Vec<&str> = [("rdrand", "RDRAND"), ("rdseed", "RDSEED")].into_iter().filter(|(flag, _)| has(flag)).map(|(_, name)| name).collect();
    if random.is_empty() || has("cpuid_fault") {
        return None;
    }
    Some(format!(
        "note: the replay may also differ because this CPU cannot fault on cpuid (no cpuid_fault in /proc/cpuinfo): dara cannot hide its {} from the program, and a program that uses them draws other numbers in every run; replay on a machine with CPUID faulting (most Intel hosts) or make the program take its randomness from getrandom or /dev/urandom",
        random.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speaks_only_of_a_cpu_whose_random_numbers_cannot_be_hidden() {
        let note = note_for("processor : 0\nflags : fpu sse2 rdrand rdseed\n").expect("RDRAND without CPUID faulting");
        assert!(note.contains("cannot fault on cpuid") && note.contains("RDRAND and RDSEED") && !note.contains('\n'), "{note}");
        assert!(note_for("flags : fpu rdrand cpuid_fault\n").is_none());
        assert!(note_for("flags : fpu sse2\n").is_none());
        assert!(note_for("processor : 0\n").is_none());
    }
}
