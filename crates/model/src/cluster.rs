//! Cluster runs (docs/cluster.md): the nodes dara starts and restarts itself, the check command
//! that judges the end state, the fault budgets, and the bookkeeping of one execution's nodes —
//! which process belongs to which node, which nodes are up, crashed, cut apart or skewed — from
//! which the fault choices of each step are listed.
//!
//! Pure: no processes are touched here. The execution's cluster world (`execution/cluster.rs`)
//! launches the nodes and applies a chosen fault.
use std::collections::{BTreeMap, BTreeSet};

use dara_abi::Op;
use serde::{Deserialize, Serialize};

use crate::choice::{Choice, ChoiceKind, ChoiceObject, ProcessId, FAULT_THREAD};

/// What a cluster run starts and may break. Recorded in the trace header, so a replay starts the
/// same nodes and offers the same faults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Started in this order, each under control, before the workload.
    pub nodes: Vec<NodeSpec>,
    /// Run under control once the workload exited 0, while the nodes are still up; its exit
    /// status is the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Vec<String>>,
    /// `--eventually CMD`: a liveness property as a command, run under control during the
    /// liveness walk after the workload until it exits 0 (docs/properties.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eventually: Option<Vec<String>>,
    #[serde(default)]
    pub faults: FaultBudget,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    /// The command (program and arguments) that starts the node.
    pub start: Vec<String>,
    /// The command that starts it again after a crash; empty means `start`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart: Vec<String>,
}

/// How many faults of each kind one execution may inject (0: that kind is off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultBudget {
    pub crashes: u32,
    pub restarts: u32,
    pub partitions: u32,
    pub resets: u32,
    pub drops: u32,
    pub skews: u32,
    /// How far a skewed node's wall clock is off, in milliseconds (ahead or behind: a choice).
    pub skew_ms: u32,
    /// `pause` faults (a thread stops while time passes; see `crate::time`). Parsed with the
    /// others, but an execution takes its pause budget from its `TimeConfig`: pauses need no
    /// nodes.
    #[serde(skip)]
    pub pauses: u32,
    /// `pause-node` faults: every thread of a node stands still while time passes the other
    /// nodes' next deadline (see `Model::pause_group`).
    pub node_pauses: u32,
}

/// Fault kinds by name, as `--faults` and the config file spell them.
pub const FAULT_KINDS: &str = "crash, restart, partition, reset, drop, skew, pause-node, pause";

impl FaultBudget {
    /// The budget field of kind `name` (see [`FAULT_KINDS`]).
    pub fn kind_mut(&mut self, name: &str) -> Option<&mut u32> {
        Some(match name {
            "crash" => &mut self.crashes,
            "restart" => &mut self.restarts,
            "partition" => &mut self.partitions,
            "reset" => &mut self.resets,
            "drop" => &mut self.drops,
            "skew" => &mut self.skews,
            "pause" => &mut self.pauses,
            "pause-node" => &mut self.node_pauses,
            _ => return None,
        })
    }

    /// Whether any node fault has a budget (thread pauses are not node faults; node pauses are).
    pub fn any(&self) -> bool {
        self.crashes + self.restarts + self.partitions + self.resets + self.drops + self.skews + self.node_pauses > 0
    }
}

/// The skew of a node ahead of (alt 0) or behind (alt 1) the shared clock, in ns.
pub fn skew_ns(budget: &FaultBudget, alt: u32) -> i64 {
    let ns = i64::from(budget.skew_ms) * 1_000_000;
    if alt == 0 {
        ns
    } else {
        -ns
    }
}

pub use crate::choice::object::pair_obj;

/// Where a cluster execution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Launching the nodes in order, each once the one before it serves.
    StartingNodes,
    /// Every node launched; the workload starts once the last one serves.
    Settling,
    Workload,
    Check,
}

/// What a launched command is in the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Node(usize),
    Workload,
    Check,
    /// The `--eventually` command, run during the liveness walk.
    Eventually,
}

/// One execution's nodes.
#[derive(Debug)]
pub struct Nodes {
    pub spec: ClusterSpec,
    pub phase: Phase,
    /// Nodes launched so far (in `StartingNodes`).
    pub launched: usize,
    /// The node of each process (a node's forks and execs belong to it).
    pub node_of: BTreeMap<ProcessId, usize>,
    /// The workload's and the check's process, by role name (for listings).
    pub others: BTreeMap<ProcessId, &'static str>,
    /// Killed by a crash fault and not restarted.
    pub crashed: Vec<bool>,
    pub partitions: BTreeSet<(usize, usize)>,
    /// Each node's wall-clock skew in ns.
    pub skew: Vec<i64>,
    /// `--run-for` was reached at this virtual time and the check was started then: its passing
    /// ends the run as ran-for.
    pub ran_for: Option<u64>,
    used: FaultBudget,
}

impl Nodes {
    pub fn new(spec: ClusterSpec) -> Nodes {
        let n = spec.nodes.len();
        let phase = if n == 0 { Phase::Settling } else { Phase::StartingNodes };
        Nodes { spec, phase, launched: 0, node_of: BTreeMap::new(), others: BTreeMap::new(), crashed: vec![false; n], partitions: BTreeSet::new(), skew: vec![0; n], ran_for: None, used: FaultBudget::default() }
    }

    pub fn name(&self, node: usize) -> &str {
        self.spec.nodes.get(node).map_or("?", |n| n.name.as_str())
    }

    /// The command that (re)starts `node`.
    pub fn command(&self, node: usize, restart: bool) -> Vec<String> {
        let spec = &self.spec.nodes[node];
        if restart && !spec.restart.is_empty() {
            spec.restart.clone()
        } else {
            spec.start.clone()
        }
    }

    pub fn partitioned(&self, a: usize, b: usize) -> bool {
        self.partitions.contains(&(a.min(b), a.max(b)))
    }

    /// Appends the fault choices this step offers: only while the workload runs, within the
    /// budgets. `up(n)`: node `n` has a live process.
    pub fn fault_choices(&self, up: impl Fn(usize) -> bool, out: &mut Vec<Choice>) {
        if self.phase != Phase::Workload {
            return;
        }
        let b = &self.spec.faults;
        let left = |budget: u32, used: u32| used < budget;
        let fault = |op: Op, obj: u64, alt: u32| Choice { thread: FAULT_THREAD, kind: ChoiceKind::Fault, alt, op, obj };
        let n = self.spec.nodes.len();
        for node in 0..n {
            if left(b.crashes, self.used.crashes) && up(node) {
                out.push(fault(Op::NodeCrash, node as u64, 0));
            }
            if left(b.restarts, self.used.restarts) && self.crashed[node] && !up(node) {
                out.push(fault(Op::NodeRestart, node as u64, 0));
            }
        }
        for a in 0..n {
            for b_node in a + 1..n {
                let obj = pair_obj(a, b_node);
                if self.partitioned(a, b_node) {
                    out.push(fault(Op::Heal, obj, 0));
                } else if left(b.partitions, self.used.partitions) {
                    out.push(fault(Op::Partition, obj, 0));
                }
                if left(b.resets, self.used.resets) && up(a) && up(b_node) {
                    out.push(fault(Op::ConnReset, obj, 0));
                }
            }
        }
        if left(b.skews, self.used.skews) && b.skew_ms > 0 {
            for node in (0..n).filter(|&node| self.skew[node] == 0 && up(node)) {
                out.push(fault(Op::ClockSkew, node as u64, 0));
                out.push(fault(Op::ClockSkew, node as u64, 1));
            }
        }
    }

    /// Whether node pauses may be offered now (the execution knows which nodes it could pause).
    pub fn may_pause_node(&self) -> bool {
        self.phase == Phase::Workload && self.used.node_pauses < self.spec.faults.node_pauses
    }

    /// Whether a dropped-datagram alternative may be offered now.
    pub fn may_drop(&self) -> bool {
        self.phase == Phase::Workload && self.used.drops < self.spec.faults.drops
    }

    /// Books a chosen fault against its budget and updates the node states (the execution does
    /// the deed).
    pub fn note_fault(&mut self, choice: &Choice) {
        match choice.op {
            Op::NodeCrash | Op::NodeRestart => {
                let crash = choice.op == Op::NodeCrash;
                if crash {
                    self.used.crashes += 1;
                } else {
                    self.used.restarts += 1;
                }
                if let Some(crashed) = choice.node().and_then(|n| self.crashed.get_mut(n)) {
                    *crashed = crash;
                }
            }
            Op::Partition => {
                self.used.partitions += 1;
                self.partitions.extend(choice.node_pair());
            }
            Op::Heal => {
                if let Some(pair) = choice.node_pair() {
                    self.partitions.remove(&pair);
                }
            }
            Op::ConnReset => self.used.resets += 1,
            Op::NodePause => self.used.node_pauses += 1,
            Op::DropDatagram => self.used.drops += 1,
            Op::ClockSkew => {
                self.used.skews += 1;
                if let Some(skew) = choice.node().and_then(|n| self.skew.get_mut(n)) {
                    *skew = skew_ns(&self.spec.faults, choice.alt);
                }
            }
            _ => {}
        }
    }

    /// Readable form of a fault choice for listings: "crash kv1", "partition kv1 | kv2", "pause
    /// thread 2 until 1.000s", "pause node kv1 while time passes". Without the cluster's spec, nodes are named by index.
    pub fn describe(spec: Option<&ClusterSpec>, choice: &Choice) -> String {
        let name = |n: usize| spec.and_then(|s| s.nodes.get(n)).map_or_else(|| format!("node {n}"), |s| s.name.clone());
        let skew_ms = |alt| spec.map_or(0, |s| skew_ns(&s.faults, alt) / 1_000_000);
        match (choice.op, choice.object()) {
            (Op::NodeCrash | Op::NodeRestart, ChoiceObject::Node(n)) => format!("{} {}", choice.op.name(), name(n)),
            (Op::NodePause, ChoiceObject::Node(n)) => format!("pause node {} while time passes", name(n)),
            (Op::Partition | Op::Heal | Op::ConnReset, ChoiceObject::NodePair(a, b)) => {
                let what = if choice.op == Op::ConnReset { "reset connections" } else { choice.op.name() };
                format!("{what} {} | {}", name(a), name(b))
            }
            (Op::ClockSkew, ChoiceObject::Node(n)) => format!("skew {} {:+} ms", name(n), skew_ms(choice.alt)),
            (Op::DropDatagram, _) => format!("drop a datagram for thread {}", choice.thread),
            (Op::Pause, ChoiceObject::Time(t)) => format!("pause thread {} until {}", choice.thread, crate::time::format_vtime(t)),
            (op, _) => op.name().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::object::obj_pair;

    fn spec(nodes: usize, faults: FaultBudget) -> ClusterSpec {
        ClusterSpec { nodes: (0..nodes).map(|i| NodeSpec { name: format!("n{i}"), start: vec!["./n".into()], restart: vec![] }).collect(), check: None, eventually: None, faults }
    }

    fn offered(nodes: &Nodes, up: &[bool]) -> Vec<(Op, u64, u32)> {
        let mut out = Vec::new();
        nodes.fault_choices(|n| up[n], &mut out);
        out.iter().map(|c| (c.op, c.obj, c.alt)).collect()
    }

    #[test]
    fn faults_are_offered_only_during_the_workload_and_within_budget() {
        let mut nodes = Nodes::new(spec(2, FaultBudget { crashes: 1, restarts: 1, ..Default::default() }));
        assert!(offered(&nodes, &[true, true]).is_empty(), "nothing while nodes start");
        nodes.phase = Phase::Workload;
        assert_eq!(offered(&nodes, &[true, true]), vec![(Op::NodeCrash, 0, 0), (Op::NodeCrash, 1, 0)]);
        let crash = Choice { thread: FAULT_THREAD, kind: ChoiceKind::Fault, alt: 0, op: Op::NodeCrash, obj: 1 };
        nodes.note_fault(&crash);
        assert_eq!(offered(&nodes, &[true, false]), vec![(Op::NodeRestart, 1, 0)], "crash budget spent; the crashed node may restart");
        nodes.note_fault(&Choice { op: Op::NodeRestart, ..crash });
        assert!(offered(&nodes, &[true, true]).is_empty(), "every budget spent");
    }

    #[test]
    fn a_partition_is_offered_per_pair_and_healed_for_free() {
        let mut nodes = Nodes::new(spec(3, FaultBudget { partitions: 1, ..Default::default() }));
        nodes.phase = Phase::Workload;
        let pairs: Vec<_> = offered(&nodes, &[true; 3]).into_iter().map(|(op, obj, _)| (op, obj_pair(obj))).collect();
        assert_eq!(pairs, vec![(Op::Partition, (0, 1)), (Op::Partition, (0, 2)), (Op::Partition, (1, 2))]);
        nodes.note_fault(&Choice { thread: FAULT_THREAD, kind: ChoiceKind::Fault, alt: 0, op: Op::Partition, obj: pair_obj(0, 2) });
        assert!(nodes.partitioned(2, 0));
        assert_eq!(offered(&nodes, &[true; 3]).into_iter().map(|(op, obj, _)| (op, obj_pair(obj))).collect::<Vec<_>>(), vec![(Op::Heal, (0, 2))]);
    }

    #[test]
    fn a_skew_is_ahead_or_behind() {
        let budget = FaultBudget { skews: 1, skew_ms: 300, ..Default::default() };
        let mut nodes = Nodes::new(spec(1, budget));
        nodes.phase = Phase::Workload;
        assert_eq!(offered(&nodes, &[true]), vec![(Op::ClockSkew, 0, 0), (Op::ClockSkew, 0, 1)]);
        nodes.note_fault(&Choice { thread: FAULT_THREAD, kind: ChoiceKind::Fault, alt: 1, op: Op::ClockSkew, obj: 0 });
        assert_eq!(nodes.skew[0], -300_000_000);
        assert!(offered(&nodes, &[true]).is_empty());
    }
}
