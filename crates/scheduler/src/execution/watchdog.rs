//! The watchdog over the thread that holds the run token: nothing else runs while it does, so a
//! holder that sleeps in the kernel on something dara does not model, or computes without ever
//! reaching a scheduling point, would stop the whole system. Called from the scheduler's wait
//! loop, with every other thread parked.
//!
//! Both verdicts are about the thread itself, never about wall time alone, so a loaded machine
//! (someone else on the CPU, dara's own threads starved) cannot produce them:
//! - **hang** (`--busy-limit`): the holder's own CPU time (schedstat, else stat's utime+stime)
//!   since the watchdog first looked at it reaches the limit. Time it spent waiting for a CPU does
//!   not count.
//!   A holder that read its own CPU time shortly before (`Slot::cpu_time_read_ns`) is timing
//!   its work by a clock that does not move under dara while it computes (gpg-agent's S2K
//!   calibration doubles its work until it has taken 100 ms): stopped as uncontrolled, naming
//!   CPU time, not as a hang of the program.
//! - **uncontrolled blocking** (`--watchdog-ms`): the holder sleeps in the kernel (state `S`) for
//!   that long *without being put on a CPU once* (schedstat's run count unchanged), not having
//!   posted, and not writing to the output pipes dara drains (a write there waits for dara, not
//!   for something outside). Uninterruptible sleep (`D`: disk I/O, page faults) gets
//!   [`IO_WAIT_FACTOR`] times longer. A real `wait4`/`waitid` is the program reaping a child
//!   dara already saw end (waits are scheduling points, granted once the child is a zombie): the
//!   kernel's release of it can take seconds on a loaded machine (`release_task` invalidating
//!   its /proc entries), which is no outside event, so it is waited for up to the reaper's own
//!   limit. And a verdict is only given on a thread that is still asleep *now*: the look that
//!   found it asleep long enough is taken again, with its slot, just before, since a thread that
//!   woke meanwhile has moved on (with two test suites at once, bash's reap of memcached slept
//!   500 ms in `wait4`, woke, and had posted its next step by the time the verdict read its
//!   system call, and was reported as "blocked in the kernel in futex(...)" on its own slot).
//!   A thread granted an exec through dara's ptrace agent that waits in `futex` waits for the
//!   agent to attach, dara's own helper: not judged (the preload bounds that wait).
//! - A holder that is **gone** (its thread left the kernel's task list, its tid is another
//!   thread's now, or its process ended by its pidfd) is neither: it computes nothing, and if its
//!   process ended, that end is an exit, waited for and judged like any other.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::coarse_time::CoarseInstant;

use dara_abi::state;

use super::Execution;
use crate::choice::ThreadId;
use crate::outcome::Outcome;
use crate::procfs::{self, ThreadFiles, ThreadSample};

/// How long a token holder runs before the watchdog starts sampling its /proc state (reading
/// /proc costs more than a whole handoff).
pub(super) const WATCHDOG_GRACE: Duration = Duration::from_millis(20);

/// Uninterruptible sleep (disk I/O, page faults, which a loaded machine slows down) counts as
/// uncontrolled blocking only after this many times the watchdog's limit.
const IO_WAIT_FACTOR: u32 = 20;

/// x86_64 numbers of the writes that can wait for dara's output pipes to drain.
const SYS_WRITE: i64 = 1;
const SYS_WRITEV: i64 = 20;
/// x86_64 numbers of the waits that reap a child.
const SYS_WAIT4: i64 = 61;
const SYS_WAITID: i64 = 247;
/// x86_64 number of `futex` (an exec's wait for dara's agent).
const SYS_FUTEX: i64 = 202;

/// Who holds the run token, since when, and what the watchdog has seen of it.
pub(super) struct TokenHolder {
    pub(super) thread: ThreadId,
    since: CoarseInstant,
    /// The thread as the watchdog first saw it: CPU time is counted from there, and a thread
    /// that started at another time is another thread with a recycled tid.
    first_look: Option<ThreadSample>,
    /// Since when it has been seen asleep, and its run count then.
    asleep: Option<(Instant, Option<u64>)>,
    /// Its /proc files, open from the first look on.
    files: Option<ThreadFiles>,
    /// CPU time it had used at the last look.
    cpu: Duration,
}

impl TokenHolder {
    pub(super) fn new(thread: ThreadId) -> TokenHolder {
        TokenHolder { thread, since: CoarseInstant::now(), first_look: None, asleep: None, files: None, cpu: Duration::ZERO }
    }
}

/// What one look at the holder concluded.
pub(super) enum Look {
    Fine,
    Gone,
    Computed(Duration),
    Asleep { state: char, for_: Duration },
}

impl Execution<'_> {
    /// Checks the token holder: asleep in the kernel → uncontrolled; computing too long → hang.
    pub(super) fn watchdog(&mut self) -> Option<Outcome> {
        // Coarse: read at every wake-up of the scheduler, against a limit of many milliseconds.
        let now = CoarseInstant::now();
        if self.handoff.holder.as_ref().is_none_or(|h| now.since(h.since) < WATCHDOG_GRACE) {
            return None;
        }
        // An exit that arrived while this thread was not running (a loaded machine) is not a
        // hang of the exited process.
        if let Some(outcome) = self.drain_exits() {
            return Some(outcome);
        }
        let thread = self.handoff.holder.as_ref()?.thread;
        let slot = self.region.slot(thread as usize);
        if slot.state.load(Ordering::Acquire) == state::POSTED {
            return None; // it waits for the scheduler, which ingests the post next
        }
        let (pid, tid) = self.region.kernel_ids(thread as usize);
        let process = self.processes.threads.get(&thread).copied();
        // /proc answers for whoever has the pid now, and pids are recycled within seconds in a
        // busy search: the process's pidfd says whether *it* has ended.
        let ended = process.and_then(|p| self.processes.records.get(&p)).and_then(|r| r.pidfd.as_ref()).is_some_and(procfs::pidfd_exited);
        let holder = self.handoff.holder.as_mut()?;
        if holder.files.is_none() && !ended {
            holder.files = ThreadFiles::open(pid, tid);
        }
        let sample = if ended { None } else { holder.files.as_ref().and_then(ThreadFiles::sample) };
        match holder.look(sample, Instant::now()) {
            Look::Fine => None,
            Look::Gone => {
                let alive = process.and_then(|p| self.processes.records.get(&p)).is_some_and(|r| r.alive);
                match (ended, process) {
                    // Its end was judged already: nobody holds the token.
                    _ if !alive => self.handoff.holder = None,
                    (true, Some(p)) if !self.processes.exiting.contains(&p) => self.processes.exiting.push(p), // its exit is waited for and judged as such
                    _ => {}
                }
                None
            }
            Look::Computed(cpu) if cpu >= self.cfg.busy_limit => Some(self.busy_outcome(thread)),
            Look::Computed(_) => None,
            Look::Asleep { state, for_ } => {
                if for_ < self.sleep_limit(state) || self.writes_to_output(pid, tid) || reaps_a_child(pid, tid, for_) || self.asks_the_agent(thread, pid, tid) {
                    return None;
                }
                // Still asleep in the same sleep, and not posted since (see the module doc)?
                let again = self.handoff.holder.as_mut()?.look_at(pid, tid, Instant::now());
                if self.handoff.moved_on(&self.region, thread) || !matches!(again, Look::Asleep { .. }) {
                    return None;
                }
                Some(blocked_outside(thread, pid, tid, "holds the run token but", for_, ""))
            }
        }
    }

    /// The end of a run whose token holder computed past the busy limit. A hang of the program
    /// only if no other thread could still move (enabled now, or when its timer fires): a thread
    /// that spins on a flag another thread would set (a spin lock, Go's runtime waiting for a
    /// parked thread) runs beside that thread on real CPUs, and here waits for it forever
    /// because dara cannot take the token from a thread between two scheduling points. That is
    /// dara's limit, not the program's bug: the run stops uncontrolled and says so.
    fn busy_outcome(&self, thread: ThreadId) -> Outcome {
        let limit = self.cfg.busy_limit.as_secs();
        if measures_cpu_time(self.region.slot(thread as usize)) {
            return Outcome::Uncontrolled {
                thread,
                syscall: "waits for its CPU time to grow".into(),
                detail: format!(
                    "it read its own CPU time (times, getrusage, clock or a CPU-time clock) and then computed for {limit} s without a scheduling point; under dara CPU time is virtual and does not move while a thread computes (docs/determinism.md, \"CPU time\"), so a loop that measures its work by CPU time (a calibration, a benchmark) may never end: configure the program not to measure (gpg-agent: s2k-count), or raise --busy-limit if it legitimately computes longer"
                ),
            };
        }
        let mut others: Vec<ThreadId> = self.model.choices().iter().map(|c| c.thread).filter(|&t| t != thread).collect();
        others.extend(self.model.live_threads().into_iter().filter(|&t| t != thread && self.model.timer_deadline(t).is_some()));
        others.sort_unstable();
        others.dedup();
        if others.is_empty() {
            return Outcome::Hang {
                reason: format!("thread {thread} computed for {limit} s of CPU time without reaching a scheduling point, and no other thread could move (a busy loop with no yield, sleep or lock?; raise --busy-limit if it legitimately computes longer)"),
            };
        }
        const NAMED: usize = 4;
        let mut named: Vec<String> = others.iter().take(NAMED).map(|t| format!("thread {t}")).collect();
        if others.len() > NAMED {
            named.push(format!("{} more", others.len() - NAMED));
        }
        Outcome::Uncontrolled {
            thread,
            syscall: "computes without a scheduling point".into(),
            detail: format!(
                "it ran {limit} s of CPU time while {} could still move; it may be spinning on something one of them would do, and dara cannot preempt a thread between scheduling points (plain memory accesses are none: build with sancov coverage and use --preempt-on edges:N or memory; or raise --busy-limit if it legitimately computes longer)",
                named.join(", ")
            ),
        }
    }

    /// How long a watched thread may sleep in the kernel in `state` without running.
    pub(super) fn sleep_limit(&self, state: char) -> Duration {
        if state == 'D' {
            self.cfg.watchdog * IO_WAIT_FACTOR
        } else {
            self.cfg.watchdog
        }
    }

    /// Whether the thread was granted an exec through dara's ptrace agent and sits in a futex
    /// wait: it waits for the agent to attach (`dara_abi::agent::ask`), dara's own helper, which
    /// a loaded machine may delay (seen: 517 ms with two test suites at once, a false verdict in
    /// a replay of `go_kv_test.sh`). The preload bounds that wait itself (30 s, then it says so).
    fn asks_the_agent(&self, thread: ThreadId, pid: u32, tid: u32) -> bool {
        matches!(self.posted(thread), Some(crate::model::Request::ProcessExec { via_agent: true })) && matches!(procfs::blocked_syscall_raw(pid, tid), Some((SYS_FUTEX, _)))
    }

    /// Whether the thread is blocked writing to a pipe dara drains (the target's stdout or
    /// stderr): it waits for dara's output copier, which a loaded machine may delay.
    pub(super) fn writes_to_output(&self, pid: u32, tid: u32) -> bool {
        let Some((nr, [fd, _, _])) = procfs::blocked_syscall_raw(pid, tid) else { return false };
        let pipes = &self.region.header().output_pipes;
        matches!(nr, SYS_WRITE | SYS_WRITEV) && procfs::fd_inode(pid, fd).is_some_and(|inode| inode != 0 && pipes.iter().any(|p| p.load(Ordering::Relaxed) == inode))
    }
}

/// Whether the thread sits in a real `wait4`/`waitid`, reaping a child that already ended (see
/// the module doc), for less than the reaper's limit.
fn reaps_a_child(pid: u32, tid: u32, for_: Duration) -> bool {
    for_ < dara_tracer::launch::REAP_LIMIT && matches!(procfs::blocked_syscall_raw(pid, tid), Some((SYS_WAIT4 | SYS_WAITID, _)))
}

/// Where thread (pid, tid) sleeps in the kernel, as " (kernel function ...)" for a verdict, or
/// nothing when /proc does not say.
pub(super) fn sleeping_where(pid: u32, tid: u32) -> String {
    let place = procfs::sleeping_where(pid, tid);
    if place.is_empty() {
        place
    } else {
        format!(" ({place})")
    }
}

/// The verdict on a watched thread (pid, tid) that slept in the kernel for `for_` without
/// running: `role` says what it is ("holds the run token but"), `waited` what waited for it.
pub(super) fn blocked_outside(thread: ThreadId, pid: u32, tid: u32, role: &str, for_: Duration, waited: &str) -> Outcome {
    let syscall = procfs::blocked_syscall(pid, tid).unwrap_or_else(|| "an unknown system call".into());
    let place = sleeping_where(pid, tid);
    Outcome::Uncontrolled {
        thread,
        syscall: syscall.clone(),
        detail: format!(
            "thread {thread} (pid {pid}, tid {tid}) {role} has been blocked in the kernel in {syscall}{place} for {} ms without running, outside dara's control (--watchdog-ms){waited}; the run was stopped",
            for_.as_millis()
        ),
    }
}

impl TokenHolder {
    /// CPU time the thread had used at the watchdog's last look (zero before the first).
    pub(super) fn cpu_seen(&self) -> Duration {
        self.cpu
    }

    /// Samples thread `tid` of process `pid` through its /proc files (opened at the first look
    /// and kept) and folds the sample in.
    pub(super) fn look_at(&mut self, pid: u32, tid: u32, now: Instant) -> Look {
        if self.files.is_none() {
            self.files = ThreadFiles::open(pid, tid);
        }
        let sample = self.files.as_ref().and_then(ThreadFiles::sample);
        self.look(sample, now)
    }

    /// Folds one sample into what the watchdog knows of the holder.
    fn look(&mut self, sample: Option<ThreadSample>, now: Instant) -> Look {
        let Some(sample) = sample.filter(|s| self.first_look.is_none_or(|f| f.start == s.start)) else {
            return Look::Gone;
        };
        let first = *self.first_look.get_or_insert(sample);
        self.cpu = sample.cpu;
        if !matches!(sample.state, 'S' | 'D') {
            self.asleep = None;
            return Look::Computed(sample.cpu.saturating_sub(first.cpu));
        }
        // Put on a CPU since the last look: it woke up in between, a new sleep starts now.
        let (since, runs) = *self.asleep.get_or_insert((now, sample.runs));
        if runs != sample.runs {
            self.asleep = Some((now, sample.runs));
            return Look::Fine;
        }
        Look::Asleep { state: sample.state, for_: now - since }
    }
}

/// Virtual time within which a CPU-time read before a long computation counts as measuring it: a
/// thousand steps at the default step cost (gpg-agent takes a lock or two between its `times()`
/// and the hashing it times).
const MEASURE_WINDOW_NS: u64 = 1_000_000;

/// Whether the thread read its own CPU time shortly before its last grant
/// ([`dara_abi::Slot::cpu_time_read_ns`]): a computation it is timing by CPU time, which under
/// dara does not move while it computes.
fn measures_cpu_time(slot: &dara_abi::Slot) -> bool {
    let read = slot.cpu_time_read_ns.load(Ordering::Acquire);
    read != 0 && slot.now_ns.load(Ordering::Acquire).saturating_sub(read - 1) <= MEASURE_WINDOW_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: char, cpu_ms: u64, runs: u64) -> Option<ThreadSample> {
        Some(ThreadSample { state, cpu: Duration::from_millis(cpu_ms), start: 7, runs: Some(runs) })
    }

    #[test]
    fn only_the_holders_own_cpu_time_counts() {
        let mut h = TokenHolder::new(1);
        let t0 = Instant::now();
        assert!(matches!(h.look(sample('R', 500, 3), t0), Look::Computed(d) if d.is_zero()));
        // An hour of wall time on a machine that gave it 100 ms of CPU: 100 ms computed.
        assert!(matches!(h.look(sample('R', 600, 90), t0 + Duration::from_secs(3600)), Look::Computed(d) if d == Duration::from_millis(100)));
    }

    #[test]
    fn a_thread_that_is_gone_or_replaced_is_never_busy() {
        let mut h = TokenHolder::new(1);
        let t0 = Instant::now();
        let _ = h.look(sample('R', 0, 1), t0);
        assert!(matches!(h.look(None, t0 + Duration::from_secs(100)), Look::Gone));
        let recycled = Some(ThreadSample { state: 'R', cpu: Duration::from_secs(100), start: 8, runs: Some(1) });
        assert!(matches!(h.look(recycled, t0 + Duration::from_secs(100)), Look::Gone));
    }

    #[test]
    fn a_sleep_counts_only_while_the_thread_is_not_run() {
        let mut h = TokenHolder::new(1);
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let _ = h.look(sample('S', 0, 5), ms(0));
        assert!(matches!(h.look(sample('S', 0, 5), ms(400)), Look::Asleep { for_, .. } if for_ == Duration::from_millis(400)));
        // It ran in between (a short sleep, woken, asleep again): the count starts over.
        assert!(matches!(h.look(sample('S', 1, 6), ms(900)), Look::Fine));
        assert!(matches!(h.look(sample('S', 1, 6), ms(1000)), Look::Asleep { for_, .. } if for_ == Duration::from_millis(100)));
        // Running again ends the sleep.
        assert!(matches!(h.look(sample('R', 2, 7), ms(1100)), Look::Computed(_)));
        assert!(h.asleep.is_none());
    }

    #[test]
    fn a_cpu_time_read_counts_within_the_window() {
        // SAFETY: a Slot is atomics only: all zero is a valid slot that never read anything.
        let slot: dara_abi::Slot = unsafe { core::mem::zeroed() };
        assert!(!measures_cpu_time(&slot), "never read");
        slot.cpu_time_read_ns.store(5_000 + 1, Ordering::Relaxed);
        slot.now_ns.store(5_000 + MEASURE_WINDOW_NS, Ordering::Relaxed);
        assert!(measures_cpu_time(&slot), "read a window before the last grant");
        slot.now_ns.store(5_001 + MEASURE_WINDOW_NS, Ordering::Relaxed);
        assert!(!measures_cpu_time(&slot), "read longer ago");
    }
}
