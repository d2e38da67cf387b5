//! Ends of processes and of the run: exits the reaper reports, processes found dead through their
//! pidfds, and how each end is judged — the launched program's status is the verdict; a crash
//! signal anywhere is a bug; a process dara's trap could not stop (SIGSYS) is lost control, not a
//! crash; ends by a crash fault or the user's passed-on Ctrl-C are not the program's doing.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dara_tracer::reaper::ExitStatus;

use super::{signal_name, Execution};
use crate::choice::{ChoiceKind, ProcessId, ThreadId};
use crate::outcome::Outcome;
use crate::procfs;

impl Execution<'_> {
    /// Applies queued process exits; returns an outcome if one ends the execution.
    pub(super) fn drain_exits(&mut self) -> Option<Outcome> {
        while let Some(event) = self.tree.try_exit() {
            let known = self.processes.live_with_pid(event.pid);
            let Some(process) = known else {
                if let Some(outcome) = self.with_world(|world, ex| world.unknown_exit(ex, event.pid, event.status)) {
                    return Some(outcome);
                }
                if event.pid == self.tree.root_pid() && self.processes.records.is_empty() && event.status == ExitStatus::Code(PRELOAD_REFUSED) {
                    return Some(Outcome::Uncontrolled {
                        thread: 0,
                        syscall: "exec".into(),
                        detail: "libdara_preload.so refused to attach: it was built for another dara version than this dara-trace; rebuild the workspace (cargo build --release)".into(),
                    });
                }
                if event.pid == self.tree.root_pid() && self.processes.records.is_empty() {
                    return Some(Outcome::Uncontrolled {
                        thread: 0,
                        syscall: "exec".into(),
                        detail: "the program exited without ever reaching dara's preload: LD_PRELOAD did not take effect (static binary, setuid, or a launcher that clears the environment)".into(),
                    });
                }
                continue;
            };
            if let Some(outcome) = self.process_ended(process, Some(event.status)) {
                return Some(outcome);
            }
        }
        None
    }

    /// Process `process` is gone (`status` when known): update the model and the records, and
    /// judge the exit. The launched program's exit status is the verdict and it may die of any
    /// signal only as a bug; the processes it started may exit with any status (a test script's
    /// `grep` that finds nothing is not a bug) or be terminated by a signal, but dying of a
    /// crash signal (SIGSEGV, SIGABRT, ...) is a bug wherever it happens.
    pub(super) fn process_ended(&mut self, process: ProcessId, status: Option<ExitStatus>) -> Option<Outcome> {
        let record = self.processes.records.get_mut(&process)?;
        if !record.alive {
            return None;
        }
        record.alive = false;
        record.exit = status;
        self.processes.exiting.retain(|&p| p != process);
        self.model.process_exited(process);
        self.network.dirty = true;
        self.timerfds.recheck = true; // its descriptors are closed
        self.signals_may_be_pending(); // the parent's SIGCHLD
        self.with_world(|world, _| world.process_gone(process));
        let running = self.handoff.holder.as_ref().map(|h| h.thread).filter(|t| self.processes.threads.get(t) == Some(&process));
        if running.is_some() {
            self.handoff.holder = None;
        }
        if let Some(at) = self.processes.crashing.iter().position(|&p| p == process) {
            self.processes.crashing.swap_remove(at);
            self.network.probe.forget_owed_to_closed_ports();
            return None; // killed by a crash fault: not the program's doing
        }
        let status = status?;
        if let ExitStatus::Signal(signal) = status {
            if let Some(outcome) = self.processes.deaths.outside_kill(process, signal) {
                return Some(outcome);
            }
            if self.processes.deaths.stopped_by_user(process, signal) {
                return None; // the user's Ctrl-C, passed on: judged with the run (final_outcome)
            }
        }
        if let Some(outcome) = self.with_world(|world, ex| world.judge_exit(ex, process, status)) {
            return Some(outcome);
        }
        match status {
            ExitStatus::Signal(libc::SIGSYS) => Some(self.killed_by_trap(process, running)),
            ExitStatus::Signal(signal) if self.verdict == Some(process) || is_crash_signal(signal) => {
                Some(Outcome::Crashed { process, signal, name: signal_name(signal), location: self.observed.faults.remove(&process) })
            }
            ExitStatus::Signal(_) | ExitStatus::Code(_) => None,
        }
    }

    /// Process `process` died of SIGSYS: the kernel found the syscall trap's signal blocked (or
    /// its handler gone) when the process made a call the filter traps, so dara lost control;
    /// the program did not crash. The call itself died with the process: name the program, the
    /// thread that was running and where it last was.
    pub(super) fn killed_by_trap(&self, process: ProcessId, running: Option<ThreadId>) -> Outcome {
        let program = self.processes.records.get(&process).map_or("", |r| r.program.as_str());
        let program = if program.is_empty() { String::new() } else { format!(" ({program})") };
        let thread = running.unwrap_or(0);
        let last = running.and_then(|t| self.steps.iter().rev().find(|s| s.choice.thread == t && s.choice.kind != ChoiceKind::Fault));
        let place = match (running, last) {
            (Some(t), Some(step)) => format!(" while its thread {t} ran on from its {:?}", step.choice.op),
            (Some(t), None) => format!(" while its thread {t} was starting"),
            (None, _) => " in a thread dara was not running (one being created, or one inside a library that blocks every signal)".to_string(),
        };
        Outcome::Uncontrolled {
            thread,
            syscall: "a trapped system call with SIGSYS blocked".into(),
            detail: format!("process {process}{program} was killed by the kernel{place}: it made a system call dara intercepts (futex, clock, sleep, getrandom, fork, exec or wait) with SIGSYS blocked, so dara's trap could not run (dara keeps SIGSYS out of the masks set through libc, so something set the mask without it: a signal handler's saved context, or a raw system call dara does not trap)"),
        }
    }

    /// Notices processes that died without dara's reaper hearing of it (children of traced
    /// processes are reaped by their parents): an exiting process once it is a zombie, and any
    /// other whose pid is a zombie or gone.
    ///
    /// A process's pidfd says whether it ended; /proc is read only after that, once, not every
    /// 200 µs while the process is on its way out: reaping a process makes the kernel invalidate
    /// its /proc dentries (`release_task` → `shrink_dcache_parent`), and lookups under them at the
    /// same time only make that loop longer. dara's own children give their status through
    /// `waitid(WNOWAIT)` on the pidfd and are left for the reaper.
    pub(super) fn check_exits(&mut self, all: bool) -> Option<Outcome> {
        for (process, pid) in self.processes.to_check(all) {
            let pidfd = self.processes.records.get(&process).and_then(|r| r.pidfd.as_ref());
            let end = match pidfd {
                Some(fd) if !procfs::pidfd_exited(fd) => procfs::ProcessEnd::Running,
                // Launched commands are dara's children: the status without reaping, so their
                // end never waits on the reaper thread's timing.
                Some(fd) if self.processes.launched.contains(&pid) => procfs::child_status(fd).map_or(procfs::ProcessEnd::Gone, procfs::ProcessEnd::Zombie),
                _ => procfs::process_end(pid),
            };
            match end {
                procfs::ProcessEnd::Running => {}
                procfs::ProcessEnd::Zombie(status) => {
                    let status = ExitStatus::from_wait(status);
                    if let Some(outcome) = self.process_ended(process, Some(status)) {
                        return Some(outcome);
                    }
                }
                // Reaped, or being reaped: the reaper's event has its status, or, while the
                // kernel's release of it is under way (it can take minutes), the reaper has.
                procfs::ProcessEnd::Gone if self.processes.launched.contains(&pid) => {
                    if let Some(status) = self.tree.status_being_reaped(pid) {
                        if let Some(outcome) = self.process_ended(process, Some(status)) {
                            return Some(outcome);
                        }
                    }
                }
                procfs::ProcessEnd::Gone => {
                    if let Some(outcome) = self.process_ended(process, None) {
                        return Some(outcome);
                    }
                }
            }
        }
        None
    }

    pub(super) fn final_outcome(&self) -> Outcome {
        let process = self.verdict.unwrap_or(0);
        match self.verdict.and_then(|v| self.processes.records.get(&v)).and_then(|p| p.exit) {
            Some(ExitStatus::Code(code)) if code != 0 && self.processes.deaths.asked_to_stop(process).is_some() => {
                let signal = self.processes.deaths.asked_to_stop(process).unwrap_or(0);
                Outcome::ExitedAfterStop { process, code, signal, name: signal_name(signal) }
            }
            Some(ExitStatus::Code(code)) => Outcome::Exited { code, location: None },
            Some(ExitStatus::Signal(signal)) if self.processes.deaths.stopped_by_user(self.verdict.unwrap_or(0), signal) => {
                Outcome::StoppedBySignal { process: self.verdict.unwrap_or(0), signal, name: signal_name(signal) }
            }
            Some(ExitStatus::Signal(signal)) => {
                let process = self.verdict.unwrap_or(0);
                Outcome::Crashed { process, signal, name: signal_name(signal), location: self.observed.faults.get(&process).cloned() }
            }
            None => Outcome::Uncontrolled {
                thread: 0,
                syscall: "exec".into(),
                detail: "the program ended without ever reaching dara's preload".into(),
            },
        }
    }

    /// Nothing can be scheduled and no thread is live: wait (bounded) for the processes to end.
    pub(super) fn wait_for_exits(&mut self, stop: &AtomicBool) -> Option<Outcome> {
        let deadline = Instant::now() + self.cfg.busy_limit;
        // The kernel still taking an ended process down, or releasing it (told in one line), is
        // no hang of the program (bounded: a process stuck in its exit is one).
        let exit_limit = deadline + dara_tracer::launch::REAP_LIMIT;
        let (started, mut let_run) = (Instant::now(), false);
        let cpu_at_start = cpu_time(&self.processes.live_pids());
        // Since when the processes have looked stuck rather than on their way out: one look at a
        // thread between two states of its exit is no verdict.
        let mut stuck_since: Option<Instant> = None;
        let mut going_on = |ex: &mut Self| {
            if Instant::now() < deadline || ex.tree.kernel_still_reaping() {
                return true;
            }
            if Instant::now() >= exit_limit {
                return false;
            }
            if ex.on_its_way_out(cpu_at_start) {
                stuck_since = None;
                return true;
            }
            stuck_since.get_or_insert_with(Instant::now).elapsed() < STUCK_FOR
        };
        while going_on(self) {
            // Every thread has finished: what is left only has to end, which a CPU hog on the
            // execution's CPU may hold up for minutes (see `placement::let_run_anywhere`; seen as
            // a false "every thread finished but the process did not exit" next to a hog).
            if !let_run && started.elapsed() >= dara_tracer::placement::RESCUE_AFTER {
                let_run = true;
                for pid in self.processes.live_pids() {
                    dara_tracer::placement::let_run_anywhere(pid);
                }
            }
            let seen = self.region.wake_count();
            if let Some(outcome) = self.drain_exits() {
                return Some(outcome);
            }
            if self.tree.all_gone() {
                return Some(self.final_outcome());
            }
            if stop.load(Ordering::Relaxed) {
                return Some(Outcome::Interrupted);
            }
            if self.region.claimed_slots() > self.processes.threads.len() {
                return None; // a thread is being born after all
            }
            self.region.sleep(seen, Duration::from_millis(20));
        }
        // One last look: on a loaded machine the last process may have ended during the sleep
        // (seen as "these did not end:" naming none).
        if let Some(outcome) = self.drain_exits() {
            return Some(outcome);
        }
        if self.tree.all_gone() {
            return Some(self.final_outcome());
        }
        eprintln!("dara: every thread finished but these did not end: {}", self.left_over());
        Some(Outcome::Hang { reason: "every thread finished but the process did not exit".into() })
    }

    /// The live processes and what the kernel says of each of their threads, for a person.
    fn left_over(&self) -> String {
        let threads = |pid: u32| -> String {
            let states = procfs::thread_ids(pid).into_iter().map(|tid| {
                let state = procfs::thread_state(pid, tid).map_or('?', |s| s);
                let call = procfs::blocked_syscall(pid, tid).map(|c| format!(" in {c}")).unwrap_or_default();
                format!("tid {tid} {state}{call}")
            });
            states.collect::<Vec<_>>().join(", ")
        };
        let live = self.processes.records.iter().filter(|(_, r)| r.alive);
        live.map(|(p, r)| format!("process {p} ({}, pid {}: {})", r.program, r.pid, threads(r.pid))).collect::<Vec<_>>().join("; ")
    }

    /// Whether a live process of the execution has exited and is being taken down by the kernel,
    /// or has a thread at work (runnable, in the kernel's uninterruptible sleep, or blocked
    /// writing to dara's output pipes, waiting for dara's output copier) while the live processes
    /// have used less than `--busy-limit` of CPU time since `cpu_at_start`: every thread
    /// finished, so it is on its way out (its last thread leaving the preload, or the kernel
    /// tearing it down), and on a loaded machine it may wait for a CPU longer than
    /// `--busy-limit`, which measures the program's own CPU time, not the machine's (a hog on the
    /// execution's CPU made "every thread finished but the process did not exit" a false bug 2
    /// times in 14 `limits.rs` runs beside other tests; a postgres process logging its shutdown
    /// did, with two test suites at once).
    fn on_its_way_out(&self, cpu_at_start: Duration) -> bool {
        let pids = self.processes.live_pids();
        let at_work = |pid: u32| procfs::has_thread_at_work(pid) || procfs::thread_ids(pid).into_iter().any(|tid| self.writes_to_output(pid, tid));
        pids.iter().any(|&pid| procfs::exiting(pid)) || (pids.iter().any(|&pid| at_work(pid)) && cpu_time(&pids).saturating_sub(cpu_at_start) < self.cfg.busy_limit)
    }
}

/// CPU time processes `pids` have used in all.
fn cpu_time(pids: &[u32]) -> Duration {
    pids.iter().filter_map(|&pid| procfs::process_cpu_time(pid)).sum()
}

/// How long processes past the busy limit must look stuck (no thread at work, not exiting) before
/// the wait for their end calls it a hang.
const STUCK_FOR: Duration = Duration::from_millis(300);

/// Exit status of a target whose preload found a region of another layout version.
const PRELOAD_REFUSED: i32 = 125;

/// Signals that mean the program crashed (as opposed to being told to stop).
pub(super) fn is_crash_signal(signal: i32) -> bool {
    matches!(signal, libc::SIGSEGV | libc::SIGABRT | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGTRAP | libc::SIGSYS)
}
