//! Coverage of one execution as the scheduler reads it from the region when the execution ends:
//! per process, every edge reached, with its call-site address, hit count and the step that first
//! reached it (and so the thread and action that did). See docs/coverage.md.
use serde::{Deserialize, Serialize};

use crate::region::Region;

/// One edge reached in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeHit {
    /// Index in the process's map: guard number (`trace-pc-guard`) or hashed call site
    /// (`trace-pc`).
    pub edge: u32,
    /// Address of the instrumented call site (ASLR is off, so it repeats across executions).
    pub pc: u64,
    /// Hits in this execution, saturating at 255.
    pub count: u8,
    /// Index of the decision after whose grant the edge was first reached.
    pub first_step: u32,
}

/// What one process covered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCoverage {
    /// Instrumented edges of the process's `trace-pc-guard` modules (0 for `trace-pc` builds,
    /// whose total is not known at run time).
    pub guards: u32,
    /// Edges reached, by index.
    pub edges: Vec<EdgeHit>,
}

impl ProcessCoverage {
    /// Reads process `p`'s area; `None` when the process reached no instrumented edge.
    pub fn read(region: &Region, p: usize) -> Option<ProcessCoverage> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        if p >= dara_abi::MAX_PROCESSES {
            return None;
        }
        let cov = region.coverage(p);
        let edges: Vec<EdgeHit> = cov
            .counts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let count = c.load(Acquire);
                (count != 0).then(|| EdgeHit { edge: i as u32, pc: cov.pcs[i].load(Relaxed), count, first_step: cov.first_step[i].load(Relaxed) })
            })
            .collect();
        let guards = cov.guards.load(Relaxed);
        (!edges.is_empty() || guards != 0).then_some(ProcessCoverage { guards, edges })
    }
}
