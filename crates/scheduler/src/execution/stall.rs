//! The last bound on the scheduler's wait for a quiet point: a wait in which nothing moves at all.
//!
//! The watchdogs judge the token holder and the threads being born by their own evidence (CPU
//! time used, a sleep in the kernel without running); the wait for a launched command is
//! bounded where it is kept, and a killed process is waited for until it is gone (here, like an
//! exiting holder, by the reap limit) or found to live on (`processes.rs`). What none of them
//! sees would make `dara-trace` sit silent for good: a holder whose thread vanished while its
//! process lives on (the watchdog then judges nothing), a slot that says "running" for a thread
//! that does not hold the token, a slot claimed for a thread that never starts. So the wait also
//! watches for *progress*: a post, a new thread, a process ending, the wake-up counter moving,
//! or the holder using CPU time (so a holder that loops on short kernel sleeps, using a little
//! CPU each time, is not caught here, and the watchdog's sleep count restarts at each wake-up: a
//! known gap). With none of these for [`STALL_NOTICE`], dara says in one line
//! what it waits for; with none for the busy limit (`--busy-limit`, the same bound a computing
//! holder gets; for a holder in uninterruptible sleep, at least what the watchdog tolerates),
//! the run stops as uncontrolled with that line as its reason.
//!
//! A holder stopped by a debugger (`dara-replay --gdb`, or job control: state `t`/`T`) is a
//! person looking at the program, and one blocked writing to dara's output pipes waits for
//! whoever reads dara's output: neither wait is judged. A holder whose process has exited and
//! that the kernel is still taking down waits for the kernel: bounded by the reap limit instead.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dara_abi::state;

use super::Execution;
use crate::choice::ThreadId;
use crate::outcome::Outcome;
use crate::procfs;

/// Nothing moved for this long: dara says what it waits for, once a stall.
pub(super) const STALL_NOTICE: Duration = Duration::from_secs(10);

/// How often the progress marks are compared (they cost a pass over the process table).
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// What counts as movement, compared between two looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marks {
    wakes: u32,
    posts: u64,
    slots: usize,
    live_processes: usize,
    holder: Option<(ThreadId, Duration)>,
}

/// The state of the current wait: since when nothing moved, and whether that was said.
#[derive(Debug)]
pub(super) struct Stall {
    marks: Option<Marks>,
    since: Instant,
    looked: Instant,
    told: bool,
    /// The holder's exiting process was let run on any CPU (once a stall).
    let_run: bool,
}

impl Default for Stall {
    fn default() -> Stall {
        let now = Instant::now();
        Stall { marks: None, since: now, looked: now, told: false, let_run: false }
    }
}

impl Execution<'_> {
    /// Called on every turn of the wait for a quiet point: ends the run when nothing has moved
    /// for the busy limit, naming what the wait was for.
    pub(super) fn stalled(&mut self) -> Option<Outcome> {
        let now = Instant::now();
        if now - self.stall.looked < LOOK_EVERY {
            return None;
        }
        self.stall.looked = now;
        let marks = self.progress_marks();
        let holder_state = self.holder_state();
        // A holder stopped by a debugger or by job control (`t`, `T`) is a person looking.
        if self.stall.marks != Some(marks) || matches!(holder_state, Some('t' | 'T')) || self.holder_writes_output() {
            self.stall = Stall { marks: Some(marks), since: now, looked: now, told: false, let_run: false };
            return None;
        }
        let still = now - self.stall.since;
        let exiting = self.exiting_holder();
        if let (Some(pid), false) = (exiting, self.stall.let_run) {
            // It only has to end: on any CPU (see `placement::let_run_anywhere`).
            dara_tracer::placement::let_run_anywhere(pid);
            self.stall.let_run = true;
        }
        if let (Some('R'), false) = (holder_state, self.stall.let_run) {
            // Runnable and given no CPU time since the last look: starved on the execution's CPU
            // (a postgres search under two test suites' load stopped so after 60 s). It is
            // still the only thread that runs, so it may run on any CPU.
            if let Some(thread) = self.handoff.holder() {
                dara_tracer::placement::let_run_anywhere(self.region.kernel_ids(thread as usize).0);
                self.stall.let_run = true;
            }
        }
        // A killed process the kernel is taking down is waited for like an exiting holder.
        let exiting = exiting.is_some() || self.processes.awaiting_taken_down();
        let limit = self.stall_limit(holder_state, exiting);
        if still >= limit {
            let (thread, what) = self.unmoved();
            return Some(Outcome::Uncontrolled {
                thread,
                syscall: "none: dara's wait for the next scheduling point".into(),
                detail: format!(
                    "dara waited {} s and nothing moved (no post, no thread or process started or ended, no CPU time used): {what}; the run was stopped (a limit of dara, not a bug of the program: please report it with this line)",
                    still.as_secs()
                ),
            });
        }
        if still >= STALL_NOTICE && !self.stall.told {
            self.stall.told = true;
            let (_, what) = self.unmoved();
            let bound = if exiting { "the kernel is taking a process down (it has exited or was killed)" } else { "--busy-limit" };
            eprintln!("dara: nothing has moved for {} s: {what}; waiting up to {} s ({bound})", still.as_secs(), limit.as_secs());
        }
        None
    }

    /// How long nothing may move: the busy limit; for a holder in uninterruptible sleep (a
    /// slow disk), never less than the watchdog lets it sleep (`sleep_limit`), so that under a
    /// low `--busy-limit` the watchdog judges it, not this bound; for a holder whose process the
    /// kernel is taking down (`exiting`), never less than the reap limit.
    fn stall_limit(&self, holder_state: Option<char>, exiting: bool) -> Duration {
        match holder_state {
            _ if exiting => self.cfg.busy_limit.max(dara_tracer::launch::REAP_LIMIT),
            Some(state @ 'D') => self.cfg.busy_limit.max(self.sleep_limit(state)),
            _ => self.cfg.busy_limit,
        }
    }

    /// A wait that reached a quiet point (or another end) starts the next one afresh.
    pub(super) fn stall_over(&mut self) {
        self.stall.marks = None;
    }

    fn progress_marks(&self) -> Marks {
        Marks {
            wakes: self.region.wake_count(),
            posts: self.handoff.ingested(),
            slots: self.handoff.known_slots(),
            live_processes: self.processes.records.values().filter(|r| r.alive).count(),
            holder: self.handoff.holder.as_ref().map(|h| (h.thread, h.cpu_seen())),
        }
    }

    /// The token holder's scheduler state letter (`R`, `S`, `D`, `t`, ...), if there is one.
    fn holder_state(&self) -> Option<char> {
        let (pid, tid) = self.region.kernel_ids(self.handoff.holder()? as usize);
        procfs::thread_state(pid, tid)
    }

    /// Whether the token holder's process has exited and the kernel is still taking it down
    /// (`PF_EXITING`, not a zombie yet): a postgres backend granted its `exit` sat there, runnable
    /// and using no CPU time, for over 60 s while the test suite ran, and was called a stall of
    /// dara. The kernel's pace is not the program's nor dara's: the wait goes on as for a slow
    /// reap (`REAP_LIMIT`), saying so.
    /// The holder's process (kernel pid) if so.
    fn exiting_holder(&self) -> Option<u32> {
        let (pid, _) = self.region.kernel_ids(self.handoff.holder()? as usize);
        procfs::exiting(pid).then_some(pid)
    }

    /// Whether the token holder is blocked writing to the output pipes dara drains: it waits for
    /// whoever reads dara's own output (a paused terminal, a pager), not for the program.
    fn holder_writes_output(&self) -> bool {
        let Some(thread) = self.handoff.holder() else { return false };
        let (pid, tid) = self.region.kernel_ids(thread as usize);
        self.writes_to_output(pid, tid)
    }

    /// What the wait for a quiet point waits for, for a person: every thread that is not parked
    /// (the token holder first) with what the kernel says of it, killed processes not gone yet,
    /// a command on its way. The thread the verdict names comes first.
    fn unmoved(&self) -> (ThreadId, String) {
        let mut parts = Vec::new();
        let holder = self.handoff.holder();
        if let Some(thread) = holder {
            parts.push(format!("thread {thread} holds the run token and {}", self.kernel_view(thread)));
        }
        let unparked = self.handoff.unparked(&self.region);
        for &thread in &unparked {
            if Some(thread) != holder {
                let how = if self.region.slot(thread as usize).state.load(Ordering::Acquire) == state::STARTING { "is being created" } else { "runs without the run token" };
                parts.push(format!("thread {thread} {how} and {}", self.kernel_view(thread)));
            }
        }
        for process in self.processes.dying_now() {
            parts.push(format!("process {process} was killed and has not ended yet"));
        }
        if self.world().awaiting_arrival() {
            parts.push("a command dara launched has not reached dara's preload yet".into());
        }
        if parts.is_empty() {
            parts.push("no thread is running, yet the wait did not end (a slot claimed for a thread that never started?)".into());
        }
        let first = holder.or_else(|| unparked.first().copied()).unwrap_or(0);
        (first, parts.join("; "))
    }

    /// What the kernel says of `thread`: its state and the system call it sits in.
    fn kernel_view(&self, thread: ThreadId) -> String {
        let (pid, tid) = self.region.kernel_ids(thread as usize);
        let Some(letter) = procfs::thread_state(pid, tid) else {
            let process_alive = self.processes.of(thread).and_then(|p| self.processes.records.get(&p)).is_some_and(|r| r.alive);
            let process = if process_alive { "its process lives on" } else { "its process ended" };
            return format!("is gone from the kernel (pid {pid}, tid {tid}; {process})");
        };
        let state = match letter {
            'R' => "is runnable".to_string(),
            'S' => "sleeps in the kernel".to_string(),
            'D' => "waits in the kernel (uninterruptible)".to_string(),
            'Z' => "is a zombie".to_string(),
            other => format!("is in state {other}"),
        };
        let call = procfs::blocked_syscall(pid, tid).map(|c| format!(" in {c}")).unwrap_or_default();
        format!("{state}{call}{} (pid {pid}, tid {tid})", super::watchdog::sleeping_where(pid, tid))
    }
}
