//! What the coverage strategies learn across executions: which action first reached which blocks,
//! how many executions reached each block (and from how many processes), which actions and which
//! (prefix, action) paths were ever taken. Pure bookkeeping; the decision rule is in `mod.rs`.
//!
//! An *action key* is the chosen [`Choice`] without its step number — (thread, kind, alternative,
//! op, object) — combined with the action taken just before it in the same execution (see the
//! module doc of [`super`] for why). Keys and paths are stable 64-bit mixes (splitmix64), never
//! std's hasher, so a history means the same thing in every build.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use dara_abi::splitmix64;
use dara_model::choice::ProcessId;
use dara_model::{Choice, ChoiceKind};

use super::Feedback;

/// A basic block (sancov edge) of one process.
pub(crate) type Block = (ProcessId, u32);

/// Context of the first decision of an execution (no previous action).
pub(crate) const START: u64 = 0x5747_A27D_0000_0001;

fn mix(a: u64, b: u64) -> u64 {
    splitmix64(a ^ splitmix64(b))
}

/// The choice as an action, independent of the step it is taken at.
pub(crate) fn action(c: &Choice) -> u64 {
    let kind = match c.kind {
        ChoiceKind::Run => 1,
        ChoiceKind::Timeout => 2,
        ChoiceKind::Fault => 3,
        ChoiceKind::Interrupt => 4,
    };
    let head = (u64::from(c.thread) << 32) | (kind << 24) | u64::from(c.alt & 0xff_ffff);
    mix(mix(head, c.op as u64), c.obj)
}

/// The action key of taking `action` right after `previous` (an action, or [`START`]).
pub(crate) fn key(action: u64, previous: u64) -> u64 {
    mix(action, previous ^ 0xC0DE)
}

/// The path id of taking `action` after a decision prefix whose hash is `prefix`; also the hash
/// of the prefix extended by it.
pub(crate) fn path(prefix: u64, action: u64) -> u64 {
    mix(prefix ^ 0x9A7B, action)
}

#[derive(Clone, Copy, Debug, Default)]
struct BlockStats {
    /// Executions that reached the block.
    executions: u64,
    /// Call-site address, shared by the same code in different processes of the same binary.
    pc: u64,
}

/// Per-block weights of the three objectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// Every block not yet reached in this execution counts 1.
    Unique,
    /// A block counts 1/(executions that reached it): rarely covered code weighs more.
    Frequency,
    /// A block counts P/(nodes(pc) · executions): P processes seen, nodes(pc) of them ever reached
    /// this code. With one process it is `Frequency`.
    NodeFrequency,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct History {
    /// Blocks first reached right after each action key, in any execution.
    credited: HashMap<u64, BTreeSet<Block>>,
    /// Action keys ever taken.
    seen: HashSet<u64>,
    /// Paths (prefix hash + action) ever taken.
    paths: HashSet<u64>,
    blocks: BTreeMap<Block, BlockStats>,
    /// Processes that reached each call site.
    nodes: HashMap<u64, BTreeSet<ProcessId>>,
    processes: BTreeSet<ProcessId>,
    pub(crate) executions: u64,
    /// Executions that reported any coverage.
    pub(crate) covered_executions: u64,
}

impl History {
    /// Learns from one finished execution: marks its keys and paths as taken, credits each block
    /// to the key of the decision after which the execution first reached it, counts blocks.
    pub(crate) fn record(&mut self, feedback: &Feedback<'_>) {
        let mut keys = Vec::with_capacity(feedback.choices.len());
        let (mut previous, mut prefix) = (START, START);
        for c in feedback.choices {
            let a = action(c);
            let k = key(a, previous);
            self.seen.insert(k);
            prefix = path(prefix, a);
            self.paths.insert(prefix);
            keys.push(k);
            previous = a;
        }
        self.executions += 1;
        if feedback.coverage.values().any(|p| !p.edges.is_empty()) {
            self.covered_executions += 1;
        }
        for (&process, coverage) in feedback.coverage {
            if !coverage.edges.is_empty() {
                self.processes.insert(process);
            }
            for hit in &coverage.edges {
                let block = (process, hit.edge);
                let stats = self.blocks.entry(block).or_default();
                stats.executions += 1;
                stats.pc = hit.pc;
                self.nodes.entry(hit.pc).or_default().insert(process);
                if let Some(&k) = keys.get(hit.first_step as usize) {
                    self.credited.entry(k).or_default().insert(block);
                }
            }
        }
    }

    pub(crate) fn seen(&self, key: u64) -> bool {
        self.seen.contains(&key)
    }

    pub(crate) fn path_taken(&self, path: u64) -> bool {
        self.paths.contains(&path)
    }

    /// Blocks credited to `key` (empty when it never reached anything first).
    pub(crate) fn credited(&self, key: u64) -> impl Iterator<Item = &Block> {
        self.credited.get(&key).into_iter().flatten()
    }

    /// What taking `key` promises under `objective`: the weights of its credited blocks that
    /// `reached` does not hold yet. 0 when it promises nothing new.
    pub(crate) fn promise(&self, key: u64, reached: &HashSet<Block>, objective: Objective) -> f64 {
        self.credited(key).filter(|b| !reached.contains(b)).map(|b| self.weight(b, objective)).sum()
    }

    fn weight(&self, block: &Block, objective: Objective) -> f64 {
        let stats = self.blocks.get(block).copied().unwrap_or_default();
        let executions = stats.executions.max(1) as f64;
        match objective {
            Objective::Unique => 1.0,
            Objective::Frequency => 1.0 / executions,
            Objective::NodeFrequency => {
                let processes = self.processes.len().max(1) as f64;
                let nodes = self.nodes.get(&stats.pc).map_or(1, |n| n.len().max(1)) as f64;
                processes / (nodes * executions)
            }
        }
    }

    /// Distinct blocks reached over all executions.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.len()
    }
}
