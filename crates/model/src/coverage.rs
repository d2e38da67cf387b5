//! Coverage of one execution as a trace records it: per process, every edge reached, with its
//! call-site address, hit count and the step that first reached it (and so the thread and action
//! that did), plus the process's module map so the call-site addresses can be symbolized later,
//! offline (`dara coverage`). See docs/coverage.md.
//!
//! The scheduler fills a [`ProcessCoverage`] from its shared region (through [`CoverageAreas`])
//! when the execution ends, and the module map from `/proc/<pid>/maps` (parsed by [`parse_maps`])
//! while the process is alive; that reading lives in the scheduler's `coverage` module.
use serde::{Deserialize, Serialize};


/// One edge reached in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeHit {
    /// Index in the process's map: guard number (`trace-pc-guard`) or hashed call site
    /// (`trace-pc`).
    pub edge: u32,
    /// Return address of the instrumented call (the byte after the `call`); ASLR is off, so it
    /// repeats across executions.
    pub pc: u64,
    /// Hits in this execution, saturating at 255.
    pub count: u8,
    /// Index of the decision after whose grant the edge was first reached.
    pub first_step: u32,
}

/// One executable, file-backed mapping of a process: `[start, end)` maps `path` from byte
/// `offset` on. An address `pc` in it is at file offset `pc - start + offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    pub path: String,
    pub start: u64,
    pub end: u64,
    pub offset: u64,
}

/// What one process covered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCoverage {
    /// Instrumented edges of the process's `trace-pc-guard` modules (0 for `trace-pc` builds,
    /// whose total is not known at run time).
    pub guards: u32,
    /// Edges reached, by increasing index.
    pub edges: Vec<EdgeHit>,
    /// Executable mappings of the process, by increasing start (empty when the maps could not be
    /// read).
    pub modules: Vec<Module>,
}

/// Where the per-process coverage areas live: the scheduler's shared region.
pub trait CoverageAreas {
    /// Process `p`'s area (`p < dara_abi::MAX_PROCESSES`).
    fn coverage(&self, p: usize) -> &dara_abi::Coverage;
}

/// The scheduler shares its region between the execution and its helpers.
impl<A: CoverageAreas + ?Sized> CoverageAreas for std::sync::Arc<A> {
    fn coverage(&self, p: usize) -> &dara_abi::Coverage {
        (**self).coverage(p)
    }
}

impl ProcessCoverage {
    /// Reads process `p`'s area; `None` when the process reached no instrumented edge. The
    /// counters are scanned only when the area says an edge was reached
    /// ([`dara_abi::Coverage::reached`]): most programs are not instrumented.
    pub fn read(areas: &impl CoverageAreas, p: usize) -> Option<ProcessCoverage> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        if p >= dara_abi::MAX_PROCESSES {
            return None;
        }
        let cov = areas.coverage(p);
        let guards = cov.guards.load(Relaxed);
        if cov.reached.load(Acquire) == 0 {
            return (guards != 0).then_some(ProcessCoverage { guards, edges: Vec::new(), modules: Vec::new() });
        }
        let edges: Vec<EdgeHit> = cov
            .counts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let count = c.load(Acquire);
                (count != 0).then(|| EdgeHit { edge: i as u32, pc: cov.pcs[i].load(Relaxed), count, first_step: cov.first_step[i].load(Relaxed) })
            })
            .collect();
        (!edges.is_empty() || guards != 0).then_some(ProcessCoverage { guards, edges, modules: Vec::new() })
    }

    /// Same guards and edges (counts, call sites, first steps); the module maps are not compared.
    pub fn same_edges(&self, other: &ProcessCoverage) -> bool {
        self.guards == other.guards && self.edges == other.edges
    }
}

/// Parses `/proc/<pid>/maps` text, keeping `r-xp`-style mappings whose path is absolute.
pub fn parse_maps(maps: &str) -> Vec<Module> {
    let mut modules: Vec<Module> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let path = fields.nth(2)?.trim_start();
            if perms.as_bytes().get(2) != Some(&b'x') || !path.starts_with('/') || path.ends_with(" (deleted)") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Module {
                path: path.to_string(),
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
            })
        })
        .collect();
    modules.sort_by_key(|m| m.start);
    modules
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    /// Coverage areas of a few processes in ordinary memory, zeroed as a fresh region is.
    struct FakeAreas(Vec<Box<dara_abi::Coverage>>);

    impl FakeAreas {
        fn new(processes: usize) -> FakeAreas {
            let layout = std::alloc::Layout::new::<dara_abi::Coverage>();
            FakeAreas(
                (0..processes)
                    .map(|_| {
                        // SAFETY: Coverage is atomics only, for which all-zero bytes are valid;
                        // the allocation has Coverage's layout and is owned by the Box alone.
                        unsafe {
                            let raw = std::alloc::alloc_zeroed(layout) as *mut dara_abi::Coverage;
                            assert!(!raw.is_null(), "out of memory");
                            Box::from_raw(raw)
                        }
                    })
                    .collect(),
            )
        }
    }

    impl CoverageAreas for FakeAreas {
        fn coverage(&self, p: usize) -> &dara_abi::Coverage {
            &self.0[p]
        }
    }

    #[test]
    fn reads_the_edges_a_process_reached_in_index_order() {
        let areas = FakeAreas::new(3);
        assert_eq!(ProcessCoverage::read(&areas, 0), None, "no guards, no edges: nothing to record");
        areas.0[1].guards.store(40, Relaxed);
        assert_eq!(ProcessCoverage::read(&areas, 1), Some(ProcessCoverage { guards: 40, edges: vec![], modules: vec![] }));
        let area = &areas.0[2];
        area.counts[9].store(1, Relaxed);
        assert_eq!(ProcessCoverage::read(&areas, 2), None, "a counter without `reached` is not looked at");
        area.counts[9].store(0, Relaxed);
        area.reached.store(1, Relaxed);
        for (edge, count, pc, step) in [(7usize, 3u8, 0x40_1000u64, 5u32), (2, 255, 0x40_0f00, 1)] {
            area.counts[edge].store(count, Relaxed);
            area.pcs[edge].store(pc, Relaxed);
            area.first_step[edge].store(step, Relaxed);
        }
        let read = ProcessCoverage::read(&std::sync::Arc::new(areas), 2).expect("two edges reached");
        assert_eq!(read.guards, 0, "a trace-pc build hands out no guards");
        assert_eq!(read.edges, vec![EdgeHit { edge: 2, pc: 0x40_0f00, count: 255, first_step: 1 }, EdgeHit { edge: 7, pc: 0x40_1000, count: 3, first_step: 5 }]);
        assert!(read.same_edges(&ProcessCoverage { modules: vec![Module { path: "/x".into(), start: 0, end: 1, offset: 0 }], ..read.clone() }));
    }

    #[test]
    fn a_process_past_the_limit_has_no_coverage() {
        assert_eq!(ProcessCoverage::read(&FakeAreas::new(0), dara_abi::MAX_PROCESSES), None);
    }

    #[test]
    fn keeps_executable_file_mappings_only() {
        let maps = "\
555555554000-555555555000 r--p 00000000 08:01 123 /work/a.out
555555555000-555555556000 r-xp 00001000 08:01 123 /work/a.out
555555559000-55555557a000 rw-p 00000000 00:00 0 [heap]
7ffff7dc3000-7ffff7f58000 r-xp 00028000 08:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0 [vdso]
7ffff7fc5000-7ffff7fc6000 r-xp 00000000 08:01 9 /tmp/with space/lib.so
7ffff7fc6000-7ffff7fc7000 r-xp 00000000 08:01 9 /tmp/gone.so (deleted)
";
        let m = parse_maps(maps);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0], Module { path: "/work/a.out".into(), start: 0x5555_5555_5000, end: 0x5555_5555_6000, offset: 0x1000 });
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[2].path, "/tmp/with space/lib.so");
    }
}
