//! The cluster side of an execution (docs/cluster.md): launching the nodes one by one, then the
//! workload once the nodes have settled, then the check; knowing which process is which node;
//! judging their exits; and injecting the faults a strategy chose (crash, restart, partition,
//! heal, connection reset, clock skew, node pause). The thread `pause` fault is offered here
//! too, in any run with a pause budget; the model applies both kinds of pause.
//!
//! Launches are deterministic: dara starts one command at a time and takes no decision until its
//! `ProcessStart` has arrived, so logical process ids follow the launch order on every run.
use std::time::{Duration, Instant};

use dara_abi::Op;
use dara_tracer::reaper::ExitStatus;

use super::processes::ProcessRecord;
use super::Execution;
use crate::choice::{Choice, ChoiceKind, ProcessId, ThreadId};
use crate::cluster::{Phase, Role};
use crate::choice::NetObject;
use crate::model::net::kind as net_kind;
use crate::model::ThreadStatus;
use crate::outcome::Outcome;
use crate::procfs;

/// How long a launched command may take to reach dara's preload.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(10);

/// A command dara launched that has not posted its `ProcessStart` yet.
#[derive(Debug)]
pub(super) struct Arrival {
    pid: u32,
    role: Role,
    command: Vec<String>,
    since: Instant,
}

/// What the cluster wants before the next decision.
pub(super) enum Advance {
    /// Nothing: decide.
    Decide,
    /// A command was launched: wait for it.
    Launched,
    End(Outcome),
}

impl Execution<'_> {
    /// Starts the next node once the one before it first waits (no choice but timers: listening,
    /// waiting for input), and the workload once the last node does, so the start order means
    /// what it says (a node is listening before the next one starts) without waiting for a busy
    /// cluster to fall silent.
    pub(super) fn advance_cluster(&mut self) -> Advance {
        let Some(nodes) = &self.nodes else { return Advance::Decide };
        if let Some(arrival) = &self.arriving {
            // Still on its way after the limit (quiet checks stopped waiting for it).
            let who = self.role_name(arrival.role);
            return Advance::End(Outcome::Uncontrolled {
                thread: 0,
                syscall: "exec".into(),
                detail: format!("{who} (`{}`) did not reach dara's preload within {} s (a static binary, or a launcher that clears LD_PRELOAD?)", arrival.command.join(" "), ARRIVAL_LIMIT.as_secs()),
            });
        }
        let role = match nodes.phase {
            Phase::StartingNodes if nodes.launched < nodes.spec.nodes.len() => Role::Node(nodes.launched),
            Phase::Settling => Role::Workload,
            _ => return self.enforce_partitions(),
        };
        if nodes.launched > 0 && !self.node_waits(nodes.launched - 1) {
            return Advance::Decide;
        }
        match self.launch(role, false) {
            Ok(()) => Advance::Launched,
            Err(outcome) => Advance::End(outcome),
        }
    }

    /// `--run-for` is reached at `end`. A cluster run whose workload runs and that has a check
    /// runs the check now, under control, with the nodes and the workload still up; the check
    /// then gives the verdict (passing, the run ends as ran-for). Otherwise the run ends here.
    pub(super) fn run_for_reached(&mut self, end: u64) -> Advance {
        let ran_for = Advance::End(Outcome::RanFor { virtual_ns: end });
        let Some(nodes) = self.nodes.as_mut() else { return ran_for };
        match nodes.phase {
            Phase::Check => Advance::Decide, // the check is on its way or running: it decides
            Phase::Workload if nodes.spec.check.is_some() => {
                nodes.ran_for = Some(end);
                self.verdict = None;
                match self.launch(Role::Check, false) {
                    Ok(()) => Advance::Launched,
                    Err(outcome) => Advance::End(outcome),
                }
            }
            _ => ran_for,
        }
    }

    /// A connection made across a partition is reset as soon as it is established.
    pub(super) fn enforce_partitions(&mut self) -> Advance {
        let partitioned = self.nodes.as_ref().is_some_and(|n| !n.partitions.is_empty());
        if !partitioned || !std::mem::take(&mut self.network.new_connections) {
            return Advance::Decide;
        }
        match self.reset_partitioned() {
            Ok(()) => Advance::Decide,
            Err(outcome) => Advance::End(outcome),
        }
    }

    /// Whether `node` has reached the point where it serves: each of its live threads waits for
    /// input, a connection, a timer or a child (a receive, accept, poll, sleep or wait, whether
    /// or not something is ready for it), or is blocked on a lock or condition.
    pub(super) fn node_waits(&self, node: usize) -> bool {
        let serving = |op: Op| matches!(op, Op::NetRecv | Op::NetAccept | Op::NetPoll | Op::NetEpollWait | Op::Sleep | Op::ProcessWait);
        self.node_threads(node).into_iter().all(|t| match self.model.status(t) {
            Some(ThreadStatus::Pending(r)) => serving(r.op()),
            Some(ThreadStatus::Blocked(_)) => true,
            _ => false,
        })
    }

    /// Launches `role`'s command into the tree and waits for it before the next decision.
    pub(super) fn launch(&mut self, role: Role, restart: bool) -> Result<(), Outcome> {
        let nodes = self.nodes.as_mut().expect("cluster");
        let command = match role {
            Role::Node(n) => nodes.command(n, restart),
            Role::Workload => self.cfg.command.clone(),
            Role::Check => nodes.spec.check.clone().unwrap_or_default(),
        };
        match role {
            Role::Node(_) if !restart => {
                nodes.launched += 1;
                if nodes.launched == nodes.spec.nodes.len() {
                    nodes.phase = Phase::Settling;
                }
            }
            Role::Workload => nodes.phase = Phase::Workload,
            Role::Check => nodes.phase = Phase::Check,
            Role::Node(_) => {}
        }
        match self.tree.launch(&command) {
            Ok(pid) => {
                self.processes.launched.push(pid);
                self.arriving = Some(Arrival { pid, role, command, since: Instant::now() });
                Ok(())
            }
            Err(e) => Err(Outcome::Uncontrolled { thread: 0, syscall: "exec".into(), detail: format!("cannot start {}: {e}", self.role_name(role)) }),
        }
    }

    pub(super) fn role_name(&self, role: Role) -> String {
        match role {
            Role::Node(n) => format!("node {}", self.nodes.as_ref().map_or("?", |c| c.name(n))),
            Role::Workload => "the workload".into(),
            Role::Check => "the check command".into(),
        }
    }

    /// Whether a launched command is still due (bounded by [`ARRIVAL_LIMIT`]).
    pub(super) fn awaiting_arrival(&self) -> bool {
        self.arriving.as_ref().is_some_and(|a| a.since.elapsed() < ARRIVAL_LIMIT)
    }

    /// An unknown pid exited: if it is the command on its way, it ended before reaching dara.
    pub(super) fn arrival_failed(&mut self, pid: u32, status: ExitStatus) -> Option<Outcome> {
        let arrival = self.arriving.take_if(|a| a.pid == pid)?;
        let how = match status {
            ExitStatus::Code(code) => format!("exited with status {code}"),
            ExitStatus::Signal(signal) => format!("was killed by {}", super::signal_name(signal)),
        };
        Some(Outcome::Uncontrolled {
            thread: 0,
            syscall: "exec".into(),
            detail: format!("{} (`{}`) {how} before reaching dara's preload: check the command (status 127 means not found)", self.role_name(arrival.role), arrival.command.join(" ")),
        })
    }

    /// A process registered: the command on its way takes its role; a fork joins its parent's node.
    pub(super) fn place_process(&mut self, process: ProcessId, pid: u32, parent: Option<ProcessId>) {
        let Some(nodes) = &mut self.nodes else { return };
        let role = self.arriving.take_if(|a| a.pid == pid).map(|a| a.role);
        match (role, parent) {
            (Some(Role::Node(n)), _) => {
                nodes.node_of.insert(process, n);
            }
            (Some(role @ (Role::Workload | Role::Check)), _) => {
                self.verdict = Some(process);
                nodes.others.insert(process, if role == Role::Workload { "workload" } else { "check" });
            }
            (None, Some(parent)) => {
                if let Some(&n) = nodes.node_of.get(&parent) {
                    nodes.node_of.insert(process, n);
                } else if let Some(&label) = nodes.others.get(&parent) {
                    nodes.others.insert(process, label);
                }
            }
            (None, None) => {}
        }
    }

    /// Judges the end of a process of a cluster run: the workload's status launches the check or
    /// ends the run, the check's is the verdict, and a node's own process failing is a bug.
    pub(super) fn cluster_process_ended(&mut self, process: ProcessId, status: ExitStatus) -> Option<Outcome> {
        let nodes = self.nodes.as_ref()?;
        let code = match status {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(_) => return None, // judged like any process's signal
        };
        if self.verdict == Some(process) {
            return match nodes.phase {
                Phase::Workload if code == 0 && nodes.spec.check.is_some() => {
                    self.verdict = None;
                    self.launch(Role::Check, false).err()
                }
                Phase::Check if code != 0 => Some(Outcome::CheckFailed { code }),
                Phase::Check if let Some(virtual_ns) = nodes.ran_for => Some(Outcome::RanFor { virtual_ns }),
                _ => Some(Outcome::Exited { code, location: None }),
            };
        }
        let node = *nodes.node_of.get(&process)?;
        let is_node_root = self.processes.records.get(&process).is_some_and(|r| self.processes.launched.contains(&r.pid));
        (code != 0 && is_node_root).then(|| Outcome::NodeExited { node: nodes.name(node).to_string(), code })
    }

    /// Appends this step's fault choices: pauses (any run with a pause budget), then the node
    /// faults of a cluster run with a fault budget.
    pub(super) fn add_fault_choices(&self, choices: &mut Vec<Choice>) {
        if self.model.pauses_taken() < self.cfg.time.pauses {
            for (thread, until) in self.model.pausable() {
                choices.push(Choice { thread, kind: ChoiceKind::Fault, alt: 0, op: Op::Pause, obj: until });
            }
        }
        let Some(nodes) = &self.nodes else { return };
        nodes.fault_choices(|n| self.live_processes_of(n).next().is_some(), choices);
        if nodes.may_pause_node() {
            for node in 0..nodes.spec.nodes.len() {
                if self.model.may_pause_group(&self.node_threads(node)) {
                    choices.push(Choice { thread: crate::choice::FAULT_THREAD, kind: ChoiceKind::Fault, alt: 0, op: Op::NodePause, obj: node as u64 });
                }
            }
        }
        if nodes.may_drop() {
            // A ready datagram receive may instead lose the datagram it would get.
            for (thread, request) in self.model.net_requests() {
                let view = self.model.probed_view(thread).filter(|v| v.ready && request.op() == Op::NetRecv && NetObject::decode(v.obj).kind == net_kind::UDP);
                if let Some(view) = view {
                    choices.push(Choice { thread, kind: ChoiceKind::Fault, alt: 0, op: Op::DropDatagram, obj: view.obj });
                }
            }
        }
    }

    /// Does what a fault choice says. The step is recorded by the caller.
    pub(super) fn inject(&mut self, choice: &Choice) -> Option<Outcome> {
        let nodes = self.nodes.as_mut()?;
        nodes.note_fault(choice);
        self.network.dirty = true;
        match choice.op {
            Op::NodeCrash => {
                let node = choice.node()?;
                let now = Instant::now();
                let victims: Vec<ProcessId> = self.live_processes_of(node).map(|(p, _)| p).collect();
                for process in victims {
                    if let Some(pidfd) = self.processes.records.get(&process).and_then(|r| r.pidfd.as_ref()) {
                        procfs::pidfd_kill(pidfd);
                    }
                    self.processes.crashing.push(process);
                    self.processes.dying.push((process, now));
                    self.processes.exiting.push(process);
                }
                None
            }
            Op::NodeRestart => self.launch(Role::Node(choice.node()?), true).err(),
            Op::DropDatagram => {
                let fd = self.model.net_requests().into_iter().find(|(t, _)| *t == choice.thread).and_then(|(_, r)| r.fd())?;
                let pid = self.processes.pid_of(choice.thread);
                self.network.probe.drop_datagram(pid, fd).err().map(|e| Outcome::Uncontrolled { thread: choice.thread, syscall: "drop".into(), detail: e.0 })
            }
            Op::Partition | Op::ConnReset => {
                let (a, b) = choice.node_pair()?;
                self.reset_between(a, b).err()
            }
            Op::NodePause => {
                let threads = self.node_threads(choice.node()?);
                self.model.pause_group(&threads);
                None
            }
            _ => None, // heal and skew only change the books
        }
    }

    /// Resets every connection between the nodes of a partition (after new connections).
    pub(super) fn reset_partitioned(&mut self) -> Result<(), Outcome> {
        let pairs: Vec<(usize, usize)> = self.nodes.as_ref().map(|n| n.partitions.iter().copied().collect()).unwrap_or_default();
        for (a, b) in pairs {
            self.reset_between(a, b)?;
        }
        Ok(())
    }

    pub(super) fn reset_between(&mut self, a: usize, b: usize) -> Result<(), Outcome> {
        let pids = |node: usize| -> Vec<u32> { self.live_processes_of(node).map(|(_, r)| r.pid).collect() };
        let (pa, pb) = (pids(a), pids(b));
        match self.network.probe.reset_between(&pa, &pb) {
            Ok(0) => Ok(()),
            Ok(_) => {
                self.network.dirty = true;
                Ok(())
            }
            Err(e) => Err(Outcome::Uncontrolled { thread: 0, syscall: "connection reset".into(), detail: e.0 }),
        }
    }

    /// The live threads of `node`'s processes (none outside a cluster run).
    pub(super) fn node_threads(&self, node: usize) -> Vec<ThreadId> {
        let Some(nodes) = &self.nodes else { return Vec::new() };
        self.model.live_threads().into_iter().filter(|t| self.processes.threads.get(t).and_then(|p| nodes.node_of.get(p)) == Some(&node)).collect()
    }

    /// The live processes of `node` (none outside a cluster run).
    pub(super) fn live_processes_of(&self, node: usize) -> impl Iterator<Item = (ProcessId, &ProcessRecord)> + '_ {
        let nodes = self.nodes.as_ref();
        self.processes.records.iter().filter(move |(p, r)| r.alive && nodes.and_then(|n| n.node_of.get(p)) == Some(&node)).map(|(&p, r)| (p, r))
    }

    /// The wall-clock skew a `ClockRead` of `thread` shows (its node's, if skewed).
    pub(super) fn clock_skew(&self, thread: ThreadId) -> i64 {
        let Some(nodes) = &self.nodes else { return 0 };
        self.processes.threads.get(&thread).and_then(|p| nodes.node_of.get(p)).map_or(0, |&n| nodes.skew[n])
    }
}
