//! The cluster world (docs/cluster.md): launching the nodes one by one, then the workload once
//! the nodes have settled, then the check (or, during the liveness walk, the `--eventually`
//! command until it holds); knowing which process is which node; judging their
//! exits; and injecting the faults a strategy chose (crash, restart, partition, heal, connection
//! reset, clock skew, node pause, dropped datagram). The books of nodes and budgets are pure and
//! live in [`crate::cluster`]; this is where they meet the processes.
//!
//! Launches are deterministic: dara starts one command at a time and takes no decision until its
//! `ProcessStart` has arrived, so logical process ids follow the launch order on every run.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dara_abi::Op;
use dara_tracer::reaper::ExitStatus;

use super::driver::Execution;
use super::processes::ProcessRecord;
use super::world::{Advance, World};
use crate::choice::{Choice, ChoiceKind, NetObject, ProcessId, ThreadId};
use crate::cluster::{ClusterSpec, Nodes, Phase, Role};
use crate::model::net::kind as net_kind;
use crate::model::ThreadStatus;
use crate::outcome::Outcome;
use crate::procfs;

/// How long a launched command may take to reach dara's preload.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(10);

/// A command dara launched that has not posted its `ProcessStart` yet.
#[derive(Debug)]
struct Arrival {
    pid: u32,
    role: Role,
    command: Vec<String>,
    since: Instant,
}

/// Decisions of the liveness walk between the end of a failed `--eventually` command and the
/// next run of it (at least; more for long walks, see [`EventuallyCommand::spacing`]), unless
/// nothing else can run.
const EVENTUALLY_SPACING: u64 = 200;

/// Runs of the `--eventually` command one walk makes at most (each is a process).
const EVENTUALLY_RUNS: u64 = 100;

/// The `--eventually` command during the liveness walk: run once the walk starts, again
/// [`EVENTUALLY_SPACING`] decisions after each failure (or as soon as nothing else can run), and
/// its exit 0 is the property holding.
#[derive(Debug, Default)]
struct EventuallyCommand {
    /// Its process while it runs.
    process: Option<ProcessId>,
    /// The step its last run ended at (failed); None before the first run ended.
    failed_at: Option<u64>,
}

impl EventuallyCommand {
    /// Decisions between two runs in a walk of `length` decisions.
    fn spacing(length: u64) -> u64 {
        EVENTUALLY_SPACING.max(length / EVENTUALLY_RUNS)
    }

    /// Whether the command runs now, at `step`, in a walk of `length` (`idle`: nothing else can
    /// run).
    fn due(&self, step: u64, length: u64, idle: bool) -> bool {
        self.process.is_none()
            && match self.failed_at {
                // Not run yet: while it runs its process is known, and while it is on its way
                // nothing is launched (see `run_eventually`).
                None => true,
                Some(at) => idle || step >= at + Self::spacing(length),
            }
    }
}

/// One cluster run's nodes and phase, and the command on its way.
pub(super) struct ClusterWorld {
    nodes: Nodes,
    /// A command dara launched whose `ProcessStart` has not come yet: no decision until it does.
    arriving: Option<Arrival>,
    eventually: EventuallyCommand,
}

impl ClusterWorld {
    pub(super) fn new(spec: ClusterSpec) -> ClusterWorld {
        ClusterWorld { nodes: Nodes::new(spec), arriving: None, eventually: EventuallyCommand::default() }
    }

    /// Runs the `--eventually` command if the walk is on and it is due (see [`EventuallyCommand`]).
    fn run_eventually(&mut self, ex: &mut Execution<'_>, idle: bool) -> Option<Advance> {
        if self.nodes.spec.eventually.is_none() || !ex.walk.walking() || self.arriving.is_some() {
            return None;
        }
        let step = ex.steps.len() as u64;
        if !self.eventually.due(step, ex.walk.length(), idle) {
            return None;
        }
        Some(match self.launch(ex, Role::Eventually, false) {
            Ok(()) => Advance::Again,
            Err(outcome) => Advance::End(outcome),
        })
    }

    /// A connection made across a partition is reset as soon as it is established.
    fn enforce_partitions(&mut self, ex: &mut Execution<'_>) -> Advance {
        if self.nodes.partitions.is_empty() || !std::mem::take(&mut ex.network.new_connections) {
            return Advance::Decide;
        }
        match self.reset_partitioned(ex) {
            Ok(()) => Advance::Decide,
            Err(outcome) => Advance::End(outcome),
        }
    }

    /// Whether `node` has reached the point where it serves: each of its live threads waits for
    /// input, a connection, a timer or a child (a receive, accept, poll, sleep or wait, whether
    /// or not something is ready for it), or is blocked on a lock or condition.
    fn node_waits(&self, ex: &Execution<'_>, node: usize) -> bool {
        let serving = |op: Op| matches!(op, Op::NetRecv | Op::NetAccept | Op::NetPoll | Op::NetEpollWait | Op::Sleep | Op::ProcessWait);
        self.node_threads(ex, node).into_iter().all(|t| match ex.model.status(t) {
            Some(ThreadStatus::Pending(r)) => serving(r.op()),
            Some(ThreadStatus::Blocked(_)) => true,
            _ => false,
        })
    }

    /// Launches `role`'s command into the tree and waits for it before the next decision.
    fn launch(&mut self, ex: &mut Execution<'_>, role: Role, restart: bool) -> Result<(), Outcome> {
        let nodes = &mut self.nodes;
        let command = match role {
            Role::Node(n) => nodes.command(n, restart),
            Role::Workload => ex.cfg.command.clone(),
            Role::Check => nodes.spec.check.clone().unwrap_or_default(),
            Role::Eventually => nodes.spec.eventually.clone().unwrap_or_default(),
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
            Role::Node(_) | Role::Eventually => {}
        }
        match ex.tree.launch(&command) {
            Ok(pid) => {
                ex.processes.launched.push(pid);
                self.arriving = Some(Arrival { pid, role, command, since: Instant::now() });
                Ok(())
            }
            Err(e) => Err(Outcome::Uncontrolled { thread: 0, syscall: "exec".into(), detail: format!("cannot start {}: {e}", self.role_name(role)) }),
        }
    }

    fn role_name(&self, role: Role) -> String {
        match role {
            Role::Node(n) => format!("node {}", self.nodes.name(n)),
            Role::Workload => "the workload".into(),
            Role::Check => "the check command".into(),
            Role::Eventually => "the --eventually command".into(),
        }
    }

    /// Resets every connection between the nodes of a partition (after new connections).
    fn reset_partitioned(&mut self, ex: &mut Execution<'_>) -> Result<(), Outcome> {
        let pairs: Vec<(usize, usize)> = self.nodes.partitions.iter().copied().collect();
        for (a, b) in pairs {
            self.reset_between(ex, a, b)?;
        }
        Ok(())
    }

    fn reset_between(&self, ex: &mut Execution<'_>, a: usize, b: usize) -> Result<(), Outcome> {
        let pids = |node: usize| -> Vec<u32> { self.live_processes_of(ex, node).map(|(_, r)| r.pid).collect() };
        let (pa, pb) = (pids(a), pids(b));
        match ex.network.probe.reset_between(&pa, &pb) {
            Ok(0) => Ok(()),
            Ok(_) => {
                ex.network.dirty = true;
                Ok(())
            }
            Err(e) => Err(Outcome::Uncontrolled { thread: 0, syscall: "connection reset".into(), detail: e.0 }),
        }
    }

    /// The live threads of `node`'s processes.
    fn node_threads(&self, ex: &Execution<'_>, node: usize) -> Vec<ThreadId> {
        ex.model.live_threads().into_iter().filter(|t| ex.processes.of(*t).and_then(|p| self.nodes.node_of.get(&p)) == Some(&node)).collect()
    }

    /// The live processes of `node`.
    fn live_processes_of<'e>(&'e self, ex: &'e Execution<'_>, node: usize) -> impl Iterator<Item = (ProcessId, &'e ProcessRecord)> + 'e {
        ex.processes.records.iter().filter(move |(p, r)| r.alive && self.nodes.node_of.get(p) == Some(&node)).map(|(&p, r)| (p, r))
    }
}

impl World for ClusterWorld {
    /// Starts the next node once the one before it first waits (no choice but timers: listening,
    /// waiting for input), and the workload once the last node does, so the start order means
    /// what it says (a node is listening before the next one starts) without waiting for a busy
    /// cluster to fall silent.
    fn before_choosing(&mut self, ex: &mut Execution<'_>) -> Advance {
        if let Some(arrival) = &self.arriving {
            // Still on its way after the limit (quiet checks stopped waiting for it).
            let who = self.role_name(arrival.role);
            return Advance::End(Outcome::Uncontrolled {
                thread: 0,
                syscall: "exec".into(),
                detail: format!("{who} (`{}`) did not reach dara's preload within {} s (a static binary, or a launcher that clears LD_PRELOAD?)", arrival.command.join(" "), ARRIVAL_LIMIT.as_secs()),
            });
        }
        if let Some(advance) = self.run_eventually(ex, false) {
            return advance;
        }
        let nodes = &self.nodes;
        let role = match nodes.phase {
            Phase::StartingNodes if nodes.launched < nodes.spec.nodes.len() => Role::Node(nodes.launched),
            Phase::Settling => Role::Workload,
            _ => return self.enforce_partitions(ex),
        };
        if nodes.launched > 0 && !self.node_waits(ex, nodes.launched - 1) {
            return Advance::Decide;
        }
        match self.launch(ex, role, false) {
            Ok(()) => Advance::Again,
            Err(outcome) => Advance::End(outcome),
        }
    }

    /// A cluster run whose workload runs and that has a check runs the check now, under
    /// control, with the nodes and the workload still up; the check then gives the verdict
    /// (passing, the run ends as ran-for). Otherwise the run ends here.
    fn run_for_reached(&mut self, ex: &mut Execution<'_>, end: u64) -> Advance {
        match self.nodes.phase {
            Phase::Check => Advance::Decide, // the check is on its way or running: it decides
            Phase::Workload if self.nodes.spec.check.is_some() => {
                self.nodes.ran_for = Some(end);
                ex.verdict = None;
                match self.launch(ex, Role::Check, false) {
                    Ok(()) => Advance::Again,
                    Err(outcome) => Advance::End(outcome),
                }
            }
            _ => Advance::End(Outcome::RanFor { virtual_ns: end }),
        }
    }

    /// Nothing can run and no timer is pending: a failed `--eventually` command runs again now
    /// rather than after its spacing (the system has nothing more to do, and without it the run
    /// would end as a deadlock).
    fn when_idle(&mut self, ex: &mut Execution<'_>, choices: &[Choice], _stop: &std::sync::atomic::AtomicBool) -> Result<bool, Outcome> {
        if !choices.is_empty() || ex.model.next_deadline(None).is_some() {
            return Ok(false);
        }
        match self.run_eventually(ex, true) {
            Some(Advance::End(outcome)) => Err(outcome),
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }

    /// The node faults of this step, within their budgets.
    fn add_choices(&self, ex: &Execution<'_>, choices: &mut Vec<Choice>) {
        let nodes = &self.nodes;
        nodes.fault_choices(|n| self.live_processes_of(ex, n).next().is_some(), choices);
        if nodes.may_pause_node() {
            for node in 0..nodes.spec.nodes.len() {
                if ex.model.may_pause_group(&self.node_threads(ex, node)) {
                    choices.push(Choice { thread: crate::choice::FAULT_THREAD, kind: ChoiceKind::Fault, alt: 0, op: Op::NodePause, obj: node as u64 });
                }
            }
        }
        if nodes.may_drop() {
            // A ready datagram receive may instead lose the datagram it would get.
            for (thread, request) in ex.model.net_requests() {
                let view = ex.model.probed_view(thread).filter(|v| v.ready && request.op() == Op::NetRecv && NetObject::decode(v.obj).kind == net_kind::UDP);
                if let Some(view) = view {
                    choices.push(Choice { thread, kind: ChoiceKind::Fault, alt: 0, op: Op::DropDatagram, obj: view.obj });
                }
            }
        }
    }

    fn inject(&mut self, ex: &mut Execution<'_>, choice: &Choice) -> Option<Outcome> {
        self.nodes.note_fault(choice);
        ex.network.dirty = true;
        match choice.op {
            Op::NodeCrash => {
                let node = choice.node()?;
                let now = Instant::now();
                let victims: Vec<ProcessId> = self.live_processes_of(ex, node).map(|(p, _)| p).collect();
                for process in victims {
                    if let Some(pidfd) = ex.processes.records.get(&process).and_then(|r| r.pidfd.as_ref()) {
                        procfs::pidfd_kill(pidfd);
                    }
                    ex.processes.crashing.push(process);
                    ex.processes.dies(process, now);
                }
                None
            }
            Op::NodeRestart => self.launch(ex, Role::Node(choice.node()?), true).err(),
            Op::DropDatagram => {
                let fd = ex.model.net_requests().into_iter().find(|(t, _)| *t == choice.thread).and_then(|(_, r)| r.fd())?;
                let pid = ex.processes.pid_of(choice.thread);
                ex.network.probe.drop_datagram(pid, fd).err().map(|e| Outcome::Uncontrolled { thread: choice.thread, syscall: "drop".into(), detail: e.0 })
            }
            Op::Partition | Op::ConnReset => {
                let (a, b) = choice.node_pair()?;
                self.reset_between(ex, a, b).err()
            }
            Op::NodePause => {
                let threads = self.node_threads(ex, choice.node()?);
                ex.model.pause_group(&threads);
                None
            }
            _ => None, // heal and skew only change the books
        }
    }

    /// Whether a launched command is still due (bounded by [`ARRIVAL_LIMIT`]).
    fn awaiting_arrival(&self) -> bool {
        self.arriving.as_ref().is_some_and(|a| a.since.elapsed() < ARRIVAL_LIMIT)
    }

    /// An unknown pid exited: if it is the command on its way, it ended before reaching dara.
    fn unknown_exit(&mut self, _ex: &mut Execution<'_>, pid: u32, status: ExitStatus) -> Option<Outcome> {
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
    fn process_started(&mut self, ex: &mut Execution<'_>, process: ProcessId, pid: u32, parent: Option<ProcessId>) {
        let nodes = &mut self.nodes;
        let role = self.arriving.take_if(|a| a.pid == pid).map(|a| a.role);
        match (role, parent) {
            (Some(Role::Node(n)), _) => {
                nodes.node_of.insert(process, n);
            }
            (Some(Role::Eventually), _) => {
                self.eventually.process = Some(process);
                nodes.others.insert(process, "eventually");
            }
            (Some(role @ (Role::Workload | Role::Check)), _) => {
                ex.verdict = Some(process);
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

    /// The workload's status launches the check or ends the run, the check's is the verdict,
    /// and a node's own process failing is a bug.
    fn judge_exit(&mut self, ex: &mut Execution<'_>, process: ProcessId, status: ExitStatus) -> Option<Outcome> {
        let code = match status {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(_) => return None, // judged like any process's signal
        };
        if self.eventually.process == Some(process) {
            self.eventually.process = None;
            let step = ex.steps.len() as u64;
            if code == 0 {
                return Some(Outcome::Recovered { walk_steps: ex.walk.walked(step) });
            }
            self.eventually.failed_at = Some(step);
            return None;
        }
        if ex.verdict == Some(process) {
            return match self.nodes.phase {
                Phase::Workload if code == 0 && self.nodes.spec.check.is_some() => {
                    ex.verdict = None;
                    self.launch(ex, Role::Check, false).err()
                }
                // The workload is over: the walk runs the --eventually command.
                Phase::Workload if code == 0 && self.nodes.spec.eventually.is_some() => match ex.start_walk() {
                    Ok(true) => {
                        ex.verdict = None;
                        None
                    }
                    Ok(false) => Some(Outcome::Exited { code, location: None }),
                    Err(outcome) => Some(outcome),
                },
                Phase::Check if code != 0 => Some(Outcome::CheckFailed { code }),
                Phase::Check if let Some(virtual_ns) = self.nodes.ran_for => Some(Outcome::RanFor { virtual_ns }),
                _ => Some(Outcome::Exited { code, location: None }),
            };
        }
        let node = *self.nodes.node_of.get(&process)?;
        let is_node_root = ex.processes.records.get(&process).is_some_and(|r| ex.processes.launched.contains(&r.pid));
        (code != 0 && is_node_root).then(|| Outcome::NodeExited { node: self.nodes.name(node).to_string(), code })
    }

    /// The skew of `thread`'s node, if skewed.
    fn clock_skew(&self, ex: &Execution<'_>, thread: ThreadId) -> i64 {
        ex.processes.of(thread).and_then(|p| self.nodes.node_of.get(&p)).map_or(0, |&n| self.nodes.skew[n])
    }

    fn finish(&mut self, _steps: u64, _outcome: &mut Outcome, _stopped_as_recorded: bool) -> super::world::WorldReport {
        let n = &self.nodes;
        let nodes: BTreeMap<ProcessId, String> = n.node_of.iter().map(|(&p, &node)| (p, n.name(node).to_string())).chain(n.others.iter().map(|(&p, &r)| (p, r.to_string()))).collect();
        super::world::WorldReport { nodes, ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::EventuallyCommand;

    #[test]
    fn the_eventually_command_runs_once_at_first_then_spaced_or_when_idle() {
        let mut command = EventuallyCommand::default();
        assert!(command.due(10, 600, false), "the first run is due at once");
        command.process = Some(3);
        assert!(!command.due(10, 600, true), "never two at a time");
        command.process = None;
        command.failed_at = Some(40);
        assert!(!command.due(239, 600, false) && command.due(240, 600, false), "200 decisions after a failure");
        assert!(command.due(41, 600, true), "at once when nothing else can run");
        assert_eq!(EventuallyCommand::spacing(100_000), 1000, "about 100 runs in a long walk");
    }
}
