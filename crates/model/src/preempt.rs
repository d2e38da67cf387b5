//! Optional scheduling points (`--preempt-on`): memory-level points on sancov `trace-loads` /
//! `trace-stores` builds and a yield every N coverage edges.
//!
//! [`Preemption`] is part of what makes an execution reproducible — which accesses are
//! scheduling points decides which decisions exist — so it is recorded in the trace header and
//! handed back to every replay, minimization and search reproduction unchanged. Its watch set is
//! derived once per search from a profiling run ([`AccessProfile`]): the granules touched by more
//! than one thread with at least one write.
use std::sync::atomic::Ordering;

use dara_abi::{access, instrumented, preempt, AccessTable};
use serde::{Deserialize, Serialize};

/// Watched granules a trace header may carry (its JSON stays well under the reader's limit).
pub const MAX_WATCHED: usize = 16_384;

/// The `--preempt-on` settings of an execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// Memory-level scheduling points on watched granules.
    #[serde(default)]
    pub memory: bool,
    /// `memory:all`: watch every granule the profile saw, not only shared written ones (to
    /// measure what the filter saves, or when the profile's schedule misses a sharing).
    #[serde(default)]
    pub all_accesses: bool,
    /// Post `EdgeQuantum` every this many coverage edges (0 = off).
    #[serde(default)]
    pub edges: u32,
    /// Granules (`addr >> 3`) whose accesses are scheduling points, sorted.
    #[serde(default)]
    pub watch: Vec<u64>,
    /// `atomics`: the program's own atomic instructions (lock-prefixed, `xchg` with memory) are
    /// trapped, no rebuild needed, and are memory-level points on watched granules.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomics: bool,
    /// Coarse steps (a recording, which needs no decision there): private lock operations and
    /// most clock reads are not scheduling points (`dara_abi::preempt::COARSE`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub coarse: bool,
}

impl Preemption {
    /// Whether any memory-level points were asked for (instrumented accesses or trapped
    /// atomics): a profiling run and a watch set.
    pub fn memory_level(&self) -> bool {
        self.memory || self.atomics
    }

    /// Whether every granule a run touched is worth watching, not only the shared written ones:
    /// `memory:all`, or trapped atomics alone, which cannot tell sharing apart (the plain moves
    /// that read atomics are not seen, so a granule one thread writes atomically and others only
    /// read looks private; atomic instructions are few and there to be shared).
    pub fn watches_every_touched(&self) -> bool {
        self.all_accesses || (self.atomics && !self.memory)
    }

    /// Parses `memory`, `memory:all`, `atomics`, `edges:N` or a comma-separated combination.
    pub fn parse(spec: &str) -> Result<Preemption, String> {
        let mut p = Preemption::default();
        for part in spec.split(',').map(str::trim) {
            match part {
                "memory" => p.memory = true,
                "atomics" => p.atomics = true,
                "memory:all" => {
                    p.memory = true;
                    p.all_accesses = true;
                }
                _ => match part.strip_prefix("edges:").map(str::parse::<u32>) {
                    Some(Ok(n)) if n > 0 => p.edges = n,
                    _ => return Err(format!("unknown --preempt-on value {part:?}: expected memory, memory:all, atomics, edges:N (N > 0) or a comma-separated combination such as memory,edges:1000")),
                },
            }
        }
        Ok(p)
    }

    /// `memory,edges:1000`-style description ("none" when off).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.memory {
            parts.push(if self.all_accesses { "memory:all".to_string() } else { "memory".to_string() });
        }
        if self.atomics {
            parts.push("atomics".into());
        }
        if self.edges > 0 {
            parts.push(format!("edges:{}", self.edges));
        }
        if self.coarse {
            parts.push("coarse".into());
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(",")
        }
    }

    /// Header flags for an execution with these settings (`profile`: the profiling run).
    pub fn flags(&self, profile: bool) -> u32 {
        let mode = match (self.memory_level(), profile) {
            (true, true) => preempt::PROFILE,
            (true, false) => preempt::MEMORY,
            (false, _) => 0,
        };
        let sources = if self.memory { preempt::INSTRUMENTED } else { 0 } | if self.atomics { preempt::ATOMICS } else { 0 };
        mode | sources | if self.coarse { preempt::COARSE } else { 0 }
    }

    /// Writes the watch set into a fresh table. Returns how many granules did not fit (0 unless
    /// the set is far larger than [`MAX_WATCHED`]).
    pub fn write_watch_set(&self, table: &AccessTable) -> usize {
        self.watch.iter().filter(|&&g| !access::watch(&table.entries, g)).count()
    }
}

/// What a profiling run saw in the access table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessProfile {
    /// Granules touched by two or more threads, at least one of them writing; sorted.
    pub racy: Vec<u64>,
    /// Every granule a gated thread touched off its own stack; sorted.
    pub touched: Vec<u64>,
    /// Which instrumentation reported the accesses.
    pub sources: Instrumented,
}

/// Which kinds of instrumented access a profiling run received (`Header::instrumented`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Instrumented {
    /// sancov `trace-loads`/`trace-stores`: plain accesses only, atomics are not reported.
    pub sancov: bool,
    /// ThreadSanitizer-ABI plain accesses (`libdara_tsan.so`).
    pub tsan: bool,
    /// ThreadSanitizer-ABI atomic operations.
    pub tsan_atomics: bool,
    /// A prebuilt program's atomic instructions, trapped (`--preempt-on atomics`).
    pub trapped_atomics: bool,
}

impl Instrumented {
    /// Decodes the header word.
    pub fn from_bits(bits: u32) -> Instrumented {
        Instrumented {
            sancov: bits & instrumented::SANCOV != 0,
            tsan: bits & instrumented::TSAN != 0,
            tsan_atomics: bits & instrumented::TSAN_ATOMIC != 0,
            trapped_atomics: bits & instrumented::TRAPPED_ATOMIC != 0,
        }
    }

    /// Whether any instrumented access reached dara.
    pub fn any(self) -> bool {
        self.sancov || self.tsan || self.tsan_atomics
    }

    /// Whether plain loads and stores reached dara (only instrumentation reports them).
    pub fn plain_accesses(self) -> bool {
        self.sancov || self.tsan
    }

    /// Whether every instrumented module reported its atomic operations too: accesses came
    /// through the ThreadSanitizer ABI and none through sancov, whose callbacks skip atomics.
    pub fn covers_atomics(self) -> bool {
        (self.tsan || self.tsan_atomics) && !self.sancov
    }
}

impl AccessProfile {
    /// Reads the table and the header's [`Instrumented`] bits after the profiling run has ended.
    pub fn read(table: &AccessTable, instrumented_bits: u32) -> AccessProfile {
        let mut profile = AccessProfile { sources: Instrumented::from_bits(instrumented_bits), ..Default::default() };
        for entry in table.entries.iter().map(|e| e.load(Ordering::Acquire)).filter(|&e| e != 0) {
            let g = access::entry_granule(entry);
            profile.touched.push(g);
            if access::entry_racy(entry) {
                profile.racy.push(g);
            }
        }
        profile.touched.sort_unstable();
        profile.racy.sort_unstable();
        profile
    }

    /// Whether the table filled up enough that accesses may have gone unrecorded.
    pub fn nearly_full(&self) -> bool {
        self.touched.len() >= dara_abi::ACCESS_TABLE_SLOTS * 3 / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed_table() -> Box<AccessTable> {
        let layout = std::alloc::Layout::new::<AccessTable>();
        // SAFETY: the layout is AccessTable's own (non-zero size, 64-byte alignment); zeroed
        // bytes are a valid AccessTable (atomics only), and the Box takes over that allocation.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) } as *mut AccessTable;
        assert!(!raw.is_null());
        // SAFETY: `raw` was just allocated with AccessTable's layout and is initialised (zeroed).
        unsafe { Box::from_raw(raw) }
    }

    #[test]
    fn parses_every_form_and_refuses_the_rest() {
        assert_eq!(Preemption::parse("memory").unwrap(), Preemption { memory: true, ..Default::default() });
        let both = Preemption::parse("memory,edges:1000").unwrap();
        assert!(both.memory && !both.all_accesses && both.edges == 1000);
        assert_eq!(both.describe(), "memory,edges:1000");
        assert_eq!(Preemption::parse("edges:7").unwrap().describe(), "edges:7");
        assert!(Preemption::parse("memory:all").unwrap().all_accesses);
        for bad in ["", "mem", "edges", "edges:0", "edges:x", "memory,edges:-1", "memory;edges:3"] {
            assert!(Preemption::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(Preemption::default().describe(), "none");
    }

    #[test]
    fn atomics_are_covered_only_when_no_module_reported_through_sancov() {
        assert!(!Instrumented::from_bits(0).any());
        assert!(Instrumented::from_bits(instrumented::TSAN).covers_atomics());
        assert!(Instrumented::from_bits(instrumented::TSAN_ATOMIC).covers_atomics());
        assert!(!Instrumented::from_bits(instrumented::TSAN | instrumented::SANCOV).covers_atomics(), "a sancov module's atomics are unseen");
        assert!(!Instrumented::from_bits(instrumented::SANCOV).covers_atomics());
    }

    #[test]
    fn flags_follow_memory_and_profile() {
        let m = Preemption::parse("memory").unwrap();
        assert_eq!(m.flags(true), preempt::PROFILE | preempt::INSTRUMENTED);
        assert_eq!(m.flags(false), preempt::MEMORY | preempt::INSTRUMENTED);
        let a = Preemption::parse("atomics").unwrap();
        assert!(a.memory_level() && !a.memory);
        assert_eq!(a.flags(false), preempt::MEMORY | preempt::ATOMICS);
        assert_eq!(Preemption::parse("memory,atomics").unwrap().flags(true), preempt::PROFILE | preempt::INSTRUMENTED | preempt::ATOMICS);
        assert_eq!(a.describe(), "atomics");
        assert_eq!(Preemption::parse("edges:5").unwrap().flags(true), 0);
    }

    #[test]
    fn the_profile_keeps_only_shared_written_granules_and_the_watch_set_round_trips() {
        let table = zeroed_table();
        access::record(&table.entries, 0x1000, 0, true);
        access::record(&table.entries, 0x1000, 1, false);
        access::record(&table.entries, 0x2000, 0, true);
        access::record(&table.entries, 0x3000, 0, false);
        access::record(&table.entries, 0x3000, 1, false);
        let profile = AccessProfile::read(&table, instrumented::SANCOV);
        assert_eq!(profile.racy, vec![access::granule(0x1000)]);
        assert!(profile.sources.sancov && !profile.sources.covers_atomics());
        assert_eq!(profile.touched.len(), 3);
        assert!(!profile.nearly_full());

        let fresh = zeroed_table();
        let p = Preemption { memory: true, watch: profile.racy.clone(), ..Default::default() };
        assert_eq!(p.write_watch_set(&fresh), 0);
        assert!(access::is_watched(&fresh.entries, 0x1004));
        assert!(!access::is_watched(&fresh.entries, 0x2000));
    }
}
