//! The process table of one execution: every traced process dara has heard of (its kernel pid,
//! the pid it sees itself as, its pidfd, its end), which process each thread belongs to, and the
//! processes on their way out — granted `ProcessExit`, killed by a granted `kill`, by a crash
//! fault, or by a signal dara passed on — which the driver watches until they are gone.
//!
//! The rules that need only this table live here (who is dying and for how long the next
//! decision waits for it, what a `kill` hits, killing the strays at the end); judging an end is
//! the driver's (`exits.rs`), since the verdict depends on the run's roles.
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use dara_tracer::reaper::ExitStatus;

use super::outside_deaths::OutsideDeaths;
use crate::choice::{ProcessId, ThreadId};
use crate::procfs;

/// How long a killed process may take before dara asks the kernel whether the signal is really
/// taking it down. One that is keeps the next decision waiting however long its end takes (the
/// stall bound, `stall.rs`, is the reap limit then): deciding without it would let a decision
/// depend on the machine's load — a crashed Raft node whose sockets were still open on a loaded
/// CI machine gave one seed two different executions. One that is not (the signal was caught or
/// blocked after all) is no longer waited for: the same in every run.
const DYING_LIMIT: Duration = Duration::from_secs(2);

/// A process a granted `kill` or a crash fault terminates, until it is gone.
pub(super) struct Death {
    process: ProcessId,
    since: Instant,
    /// Let run on any CPU (after `placement::RESCUE_AFTER`: beside a busy thread on the
    /// execution's CPU it may wait there for minutes).
    let_run: bool,
    /// Past [`DYING_LIMIT`] the kernel was asked: the signal takes it down (waited for to the end).
    taken_down: bool,
}

pub(super) struct ProcessRecord {
    /// Kernel pid in dara's namespace: what /proc, pidfds and tgkill take.
    pub(super) pid: u32,
    /// The pid the program sees (its `getpid`, what it passes to `kill`): `pid` unless the
    /// execution runs in a PID namespace. The only place the two meet is [`own_pid`].
    pub(super) own_pid: u32,
    pub(super) alive: bool,
    pub(super) exit: Option<ExitStatus>,
    /// A pidfd, so the process can be killed at the end even if it left dara's process group
    /// (setsid), without ever signalling a recycled pid.
    pub(super) pidfd: Option<OwnedFd>,
    /// The file name of the program the process runs (its latest image), for messages.
    pub(super) program: String,
}

#[derive(Default)]
pub(super) struct ProcessTable {
    pub(super) records: BTreeMap<ProcessId, ProcessRecord>,
    /// Logical process of each thread seen.
    pub(super) threads: BTreeMap<ThreadId, ProcessId>,
    /// Processes known to be on their way out (granted `ProcessExit`, or took a fault): checked
    /// often until they are zombies.
    pub(super) exiting: Vec<ProcessId>,
    /// Processes a granted `kill` or a crash fault terminates: no decision is taken until they
    /// are gone, so a killed process never takes part in one, nor its open sockets.
    pub(super) dying: Vec<Death>,
    /// Pids dara launched itself: its reaper reports their exits with their status.
    pub(super) launched: Vec<u32>,
    /// Processes a crash fault killed: their end is not judged.
    pub(super) crashing: Vec<ProcessId>,
    /// Which signal deaths came from outside the program (see `outside_deaths.rs`).
    pub(super) deaths: OutsideDeaths,
    /// The root, learnt while it was launched ahead; taken at its `ProcessStart`.
    pub(super) known_ahead: Option<StartFacts>,
}

/// What a `ProcessStart` needs to know of a new process from /proc. Learnt at the start, or, for
/// a program launched ahead (`launched.rs`), on the launching thread's CPU while the execution
/// before ran: about 50 µs of /proc reads less on the execution's own CPU.
pub struct StartFacts {
    /// Kernel pid: the facts hold for the process that posts it.
    pub(super) pid: u32,
    pub(super) pidfd: Option<OwnedFd>,
    pub(super) own_pid: Result<u32, String>,
    /// Its program's file name ([`procfs::program_name`]).
    pub(super) program: String,
    /// Its executable calls a sancov receiver (`coverage::executable_is_instrumented`).
    pub(super) instrumented: bool,
}

impl StartFacts {
    /// Learns what process `pid` will post at its start (`virtual_pids`: it runs in a PID
    /// namespace). Call while it is parked at its start barrier.
    pub(super) fn learn(pid: u32, virtual_pids: bool) -> StartFacts {
        let pidfd = procfs::pidfd_open(pid);
        let own_pid = own_pid(pid, pidfd.as_ref(), virtual_pids);
        let program = procfs::program_name(pid).unwrap_or_default();
        StartFacts { pid, pidfd, own_pid, program, instrumented: crate::coverage::executable_is_instrumented(pid) }
    }
}

impl ProcessTable {
    /// The logical process of `thread`.
    pub(super) fn of(&self, thread: ThreadId) -> Option<ProcessId> {
        self.threads.get(&thread).copied()
    }

    /// Kernel pid of `thread`'s process (0 if unknown).
    pub(super) fn pid_of(&self, thread: ThreadId) -> u32 {
        self.threads.get(&thread).and_then(|p| self.records.get(p)).map_or(0, |p| p.pid)
    }

    /// The live process with kernel pid `pid`.
    pub(super) fn live_with_pid(&self, pid: u32) -> Option<ProcessId> {
        self.records.iter().find(|(_, r)| r.pid == pid && r.alive).map(|(&p, _)| p)
    }

    /// Whether `pid` is a process of this execution that has ended.
    pub(super) fn pid_is_dead(&self, pid: u32) -> bool {
        self.records.values().any(|p| p.pid == pid && !p.alive)
    }

    /// Kernel pids of the live processes.
    pub(super) fn live_pids(&self) -> Vec<u32> {
        self.records.values().filter(|r| r.alive).map(|r| r.pid).collect()
    }

    /// The live processes (and their kernel pids) whose end `check_exits` looks for: those on
    /// their way out, or (`all`) every one but the commands dara launched, which its reaper
    /// reports.
    pub(super) fn to_check(&self, all: bool) -> Vec<(ProcessId, u32)> {
        let exiting = |p: &ProcessId| self.exiting.contains(p);
        self.records.iter().filter(|(p, r)| r.alive && (all || exiting(p)) && (!self.launched.contains(&r.pid) || exiting(p))).map(|(&p, r)| (p, r.pid)).collect()
    }

    /// `process` is on its way out: watch it closely until it is gone.
    pub(super) fn exits_soon(&mut self, process: ProcessId) {
        self.exiting.push(process);
    }

    /// `process` was sent a signal that ends it (at `since`): no decision until it is gone.
    pub(super) fn dies(&mut self, process: ProcessId, since: Instant) {
        self.dying.push(Death { process, since, let_run: false, taken_down: false });
        self.exiting.push(process);
    }

    /// Processes killed by a granted signal that have not ended yet.
    pub(super) fn dying_now(&self) -> Vec<ProcessId> {
        self.dying.iter().map(|d| d.process).filter(|p| self.records.get(p).is_some_and(|r| r.alive)).collect()
    }

    /// Whether a killed process the kernel is known to be taking down has not ended yet (the
    /// wait for it is bounded by the reap limit, not the busy limit).
    pub(super) fn awaiting_taken_down(&self) -> bool {
        self.dying.iter().any(|d| d.taken_down && self.records.get(&d.process).is_some_and(|r| r.alive))
    }

    /// Whether a killed process is still on its way out (the next decision waits for it): until
    /// it is gone, or, past [`DYING_LIMIT`], found not to be ending after all.
    pub(super) fn awaiting_deaths(&mut self) -> bool {
        let records = &self.records;
        self.dying.retain_mut(|death| {
            let Some(record) = records.get(&death.process).filter(|r| r.alive) else { return false };
            let waited = death.since.elapsed();
            if waited >= dara_tracer::placement::RESCUE_AFTER && !death.let_run {
                death.let_run = true;
                dara_tracer::placement::let_run_anywhere(record.pid);
            }
            if waited >= DYING_LIMIT && !death.taken_down {
                // Asked once: a process the kernel takes down does not come back, and /proc is
                // best left alone while the kernel releases it (see `check_exits`).
                if !procfs::signal_takes_down(record.pid) {
                    return false;
                }
                death.taken_down = true;
            }
            true
        });
        !self.dying.is_empty()
    }

    /// `sender`'s process was granted `kill(pid, sig)` and sends it next: notes every traced
    /// process the signal will terminate (it is not caught, ignored or blocked there), and
    /// returns how many.
    pub(super) fn note_kill(&mut self, sender: ThreadId, sig: i32, pid: i64) -> usize {
        let sender = self.of(sender);
        let sender_group = sender.and_then(|p| self.records.get(&p)).and_then(|r| procfs::process_group(r.pid));
        let now = Instant::now();
        let mut ended = Vec::new();
        for (&process, record) in &self.records {
            if !record.alive {
                continue;
            }
            let hit = match pid {
                p if p > 0 => record.own_pid as i64 == p,
                0 => sender_group.is_some() && procfs::process_group(record.pid) == sender_group,
                -1 => Some(process) != sender,
                g => procfs::process_group(record.pid) == Some((-g) as u32),
            };
            if hit {
                self.deaths.note_kill(process, sig);
            }
            if hit && procfs::signal_terminates(record.pid, sig) {
                ended.push(process);
            }
        }
        for &process in &ended {
            self.dies(process, now);
        }
        ended.len()
    }

    /// SIGKILLs every traced process still alive through its pidfd but `root`: those that left
    /// the process group (which the tree's `kill_all` reaches) included. Orphans among them are
    /// dara's children (it is the subreaper) and are reaped here; the others are reaped by their
    /// own dying parents.
    pub(super) fn kill_strays(&mut self, root: u32) {
        let mut strays = Vec::new();
        for record in self.records.values().filter(|r| r.alive && r.pid != root) {
            if let Some(fd) = &record.pidfd {
                procfs::pidfd_kill(fd);
                strays.push((record.pid, fd));
            }
        }
        // Their pidfds say when they have ended: their /proc entries are not looked up while the
        // kernel tears them down.
        let deadline = Instant::now() + Duration::from_millis(200);
        while !strays.is_empty() && Instant::now() < deadline {
            strays.retain(|&(pid, fd)| !procfs::pidfd_exited(fd) || !procfs::reap_if_child(pid));
            if !strays.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// The pid a new process (kernel pid `pid`, which its preload read through dara's /proc;
/// `pidfd`: dara's pidfd of it, if one could be opened) sees itself as. In a PID namespace
/// (`virtual_pids`) it must be in exactly one namespace below dara's: a preload without dara's
/// /proc descriptor (a program that closed it) would have posted its own namespace pid, which
/// names some other process here.
pub(super) fn own_pid(pid: u32, pidfd: Option<&OwnedFd>, virtual_pids: bool) -> Result<u32, String> {
    if !virtual_pids {
        return Ok(pid);
    }
    let pids = pidfd.and_then(procfs::namespace_pids_of).or_else(|| procfs::namespace_pids(pid));
    match pids.as_deref() {
        Some(&[_, own]) => Ok(own),
        _ => Err(format!("a new process posted pid {pid}, which is not a process in this execution's PID namespace: dara's /proc descriptor ({}) was closed or replaced by the program", dara_abi::HOST_PROC_FD)),
    }
}
