//! The pure model of one execution: threads and what each waits for, synchronization objects
//! (mutexes, rwlocks, condition variables, semaphores, barriers, once-controls, futex words),
//! timers and the virtual clock. It turns pending operations into the enabled set and applies a
//! chosen [`Choice`]. No I/O: the only window on the target is [`MemoryReader`], used to read a
//! futex word or an object that was initialised statically.
//!
//! * `thread.rs`: a thread's life cycle (running, pending, waiting, exited).
//! * `objects.rs`: each kind of object and its rules taken alone (glibc's answers included).
//! * `sharing.rs`: which objects are process-shared, so keyed by the memory behind them.
//! * `ops.rs`: what every [`Op`] does: when its `Run` is enabled, and what applying `Run` or
//!   `Timeout` changes and returns.
//! * `report.rs`: the deadlock report (who waits for what, held by whom).
//! * `clock.rs`: the virtual clock.
//! * `net.rs`: readiness of sockets, pipes and poll/epoll as probed by the driver.
//! * `pause.rs`: which threads a `pause` fault stopped, and in which pause.
//! * `signals.rs`: which waits a pending caught signal ends (`Interrupt`), and a condition wait
//!   whose waiter runs its handler inside the wait.
//!
//! Timers: a thread whose request has a deadline offers `Timeout` next to (or instead of) `Run`
//! once its timer is *due* — the clock has reached the deadline (`TimerPolicy::Deadline`, the
//! default) or at any time (`TimerPolicy::Any`). When nothing can move, the driver jumps the
//! clock to the earliest pending deadline ([`Model::jump_to_next_deadline`]); timers due at the
//! same instant are then a choice. A *paused* thread ([`Model::pause`], the `pause` fault) offers
//! nothing while any other thread can move: virtual time passes the others' next deadline while it
//! stands still, as a thread stopped by a GC pause or a starved VM would. A node pause
//! ([`Model::pause_group`]) stops a set of threads (a node's) the same way, all at once; its
//! clock jump comes once the others cannot move (see `pause.rs`).
//!
//! Timers of `timerfd`s (`timerfds.rs`) belong to no thread: their deadlines count among the
//! pending ones the clock jumps to, and the driver fires them ([`Model::fire_due_timers`]) before
//! each decision, writing their expirations where the program reads them.
//!
//! Determinism: every collection that is iterated is ordered (BTreeMap / Vec in arrival order),
//! so the same sequence of posts and choices yields the same enabled sets on every run.
use std::collections::{BTreeMap, BTreeSet};

use dara_abi::Op;

use crate::choice::{Choice, ChoiceKind, ProcessId, ThreadId};
use crate::outcome::BlockedThread;
use crate::time::{TimeConfig, TimerPolicy};

mod clock;
mod file_locks;
pub mod net;
mod objects;
mod ops;
mod pause;
mod process;
mod report;
mod robust;
mod sharing;
mod signals;
mod thread;
mod timerfds;
#[cfg(test)]
mod tests;

use clock::VirtualClock;
use objects::Objects;
pub use objects::{SharedBacking, SharedLocation};
use thread::{Phase, Thread};
pub use signals::INTERRUPTED;
pub use thread::ThreadStatus;
pub use timerfds::{TimerId, TimerValue};

/// Reads target memory (the scheduler implements it with `process_vm_readv`).
pub trait MemoryReader {
    fn read_u32(&mut self, process: ProcessId, addr: u64) -> Option<u32>;
    /// Where `addr` of `process` lies in memory shared with other processes; `None` for private
    /// memory (or when it cannot be told).
    fn shared_location(&mut self, _process: ProcessId, _addr: u64) -> Option<SharedLocation> {
        None
    }
}

/// A pending operation as posted by a thread, decoded from its slot once, where the driver
/// reads the post.
pub use dara_abi::{Addr, Request};

/// What applying a choice did to the chosen thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The thread may continue: write `result` into its slot and wake it. It holds the run token
    /// until its next post.
    Grant { result: i64 },
    /// The thread stays parked (it now waits for an object or its timer); nobody holds the token.
    Blocked,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    clock: VirtualClock,
    timers: TimerPolicy,
    /// Threads a `pause` fault stopped: they offer choices only when nobody else can move.
    paused: pause::Pauses,
    /// A pause never moves the clock past this: where the execution ends (its virtual-time bound
    /// or `--run-for`; None: no end). A pause past it would end the run as a hang of dara's making.
    pause_horizon: Option<u64>,
    /// Every thread ever registered, by slot. Slots are never reused within an execution.
    threads: BTreeMap<ThreadId, Thread>,
    objects: Objects,
    /// Every process registered, for `wait`.
    processes: BTreeMap<ProcessId, process::ProcessInfo>,
    /// What the driver saw for each thread parked on a network request (see `net.rs`).
    net: BTreeMap<ThreadId, net::NetView>,
    /// Coarse steps (a recording): other threads take and release private locks for real without
    /// a post, so a condition wait takes effect when it is posted (see [`Model::post`]).
    coarse: bool,
    /// Threads whose wait a pending signal may end (see `signals.rs`).
    signalled: BTreeSet<ThreadId>,
    /// Threads running a signal handler in the middle of a condition wait, with the wait and
    /// where it stood: they resume it when the handler returns (see `signals.rs`).
    in_handler: BTreeMap<ThreadId, (Request, thread::Wait)>,
    /// Threads waiting for a file lock another holder has (see `file_locks.rs`).
    file_locks: file_locks::FileLockWaits,
    /// The timers of `timerfd`s (see `timerfds.rs`).
    timerfds: timerfds::TimerFds,
}

impl Model {
    pub fn new() -> Model {
        Model::default()
    }

    /// A model whose clock and timers follow `time`.
    pub fn with_time(time: &TimeConfig) -> Model {
        Model { clock: VirtualClock::new(time.step_ns), timers: time.timers, ..Model::default() }
    }

    /// The same model with pauses that never move the clock past `horizon` (the end of the run).
    pub fn with_pause_horizon(self, horizon: u64) -> Model {
        Model { pause_horizon: Some(horizon), ..self }
    }

    /// The same model for an execution that takes coarse steps (see [`Model::post`]).
    pub fn with_coarse_steps(self) -> Model {
        Model { coarse: true, ..self }
    }

    /// Current virtual time.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// A thread (new process's main thread or a new thread) has posted its start op.
    pub fn add_thread(&mut self, thread: ThreadId, process: ProcessId) {
        debug_assert!(!self.threads.contains_key(&thread), "slot {thread} registered twice");
        self.threads.insert(thread, Thread { process, phase: Phase::Running });
    }

    /// `thread` stopped at a scheduling point with `request` pending. `mem` tells whether the
    /// objects it names are process-shared (see `sharing.rs`).
    ///
    /// With coarse steps a `CondWait` takes effect here, not at a decision: the preload released
    /// the real mutex before it posted, and the other threads take private locks for real without
    /// a post (the preload's `solo`), trusting that a free real lock is free in the model too. A
    /// pending wait would leave the mutex held in the model while it is free for real, and the
    /// next thread's lock would contradict the model. Releasing only the mutex would not do
    /// either: glibc queues the waiter before it releases the mutex, so a signal sent by whoever
    /// takes it next must find the waiter. A search keeps the decision before the wait (its
    /// threads take no lock without a post, so the mutex stays where the model has it).
    pub fn post(&mut self, thread: ThreadId, request: Request, mem: &mut dyn MemoryReader) {
        if let Some(process) = self.process_of(thread) {
            self.place_objects(process, &request, mem);
            self.note_robust(process, &request, mem);
        }
        if self.resume_after_handler(thread, request) {
            self.signalled.remove(&thread);
            return;
        }
        match self.threads.get_mut(&thread) {
            Some(t) if t.phase == Phase::Running => {
                t.phase = Phase::Pending(request);
                self.signalled.remove(&thread);
                if let Request::FileLock { .. } = request {
                    self.file_locks.wait(thread);
                }
            }
            other => {
                debug_assert!(false, "post by thread {thread} in state {other:?}");
                return;
            }
        }
        if self.coarse && request.op() == Op::CondWait {
            let step = self.begin_cond_wait(thread, request);
            self.finish(thread, step);
        }
    }

    /// The enabled choices, in deterministic order. Empty means: nothing can move (deadlock if
    /// `live_threads()` is non-empty).
    pub fn choices(&self) -> Vec<Choice> {
        let mut out = Vec::new();
        for (&id, thread) in &self.threads {
            if !self.paused.contains(id) {
                self.thread_choices(id, thread, &mut out);
            }
        }
        if out.is_empty() && !self.paused.jump_due() {
            // Paused threads go on once nobody else can move at this instant (after a node
            // pause's jump: until then, nothing is offered and the driver jumps).
            for id in self.paused.threads() {
                if let Some(thread) = self.threads.get(&id) {
                    self.thread_choices(id, thread, &mut out);
                }
            }
        }
        out
    }

    /// The deadline of `thread`'s timer (the one its `Timeout` choice fires), if it has one.
    pub fn timer_deadline(&self, thread: ThreadId) -> Option<u64> {
        self.threads.get(&thread).and_then(ops::timer)
    }

    /// Every thread's timer: (thread, deadline).
    pub fn timers(&self) -> impl Iterator<Item = (ThreadId, u64)> + '_ {
        self.threads.iter().filter_map(|(&id, t)| ops::timer(t).map(|deadline| (id, deadline)))
    }

    /// The earliest deadline still ahead of the clock among the live threads' timers, leaving
    /// out `except`'s, and the `timerfd`s' (a paused thread's process's too: they fire while it
    /// stands still).
    pub fn next_deadline(&self, except: Option<ThreadId>) -> Option<u64> {
        self.next_deadline_outside(&|id| Some(id) == except, &|_| false)
    }

    /// The earliest deadline still ahead of the clock among the timers of the threads that are
    /// not `inside` and the `timerfd`s of the processes that are not `inside_process`.
    fn next_deadline_outside(&self, inside: &dyn Fn(ThreadId) -> bool, inside_process: &dyn Fn(ProcessId) -> bool) -> Option<u64> {
        let now = self.clock.now();
        let threads = self.threads.iter().filter(|(&id, _)| !inside(id)).filter_map(|(_, t)| ops::timer(t)).filter(|&d| d > now).min();
        // A timerfd's expiry can only end a wait on a descriptor (a read, poll, select or
        // epoll_wait): with no such wait, it moves nothing, and threads stuck otherwise are
        // deadlocked, not waiting for the clock. (Expirations the clock passes meanwhile are
        // counted when the timer next fires.)
        let waits_on_descriptors = self.threads.iter().any(|(&id, t)| !inside(id) && t.request().is_some_and(|r| r.op().is_net()));
        let timerfds = self.timerfds.next_deadline(now, inside_process).filter(|_| waits_on_descriptors);
        threads.into_iter().chain(timerfds).min()
    }

    /// The `timerfd`s of `threads`' processes: a node pause leaves them out of the clock's jump
    /// (the node's own timers are late when it comes back).
    fn processes_of(&self, threads: &[ThreadId]) -> BTreeSet<ProcessId> {
        threads.iter().filter_map(|t| self.process_of(*t)).collect()
    }

    /// A new, disarmed `timerfd` timer created by `process`.
    pub fn timer_create(&mut self, process: ProcessId) -> TimerId {
        self.timerfds.create(process)
    }

    /// Arms `timer` to expire at virtual time `deadline` and every `interval_ns` after (0: once),
    /// or disarms it (`None`). The previous setting; `None` for an unknown timer.
    pub fn timer_set(&mut self, timer: TimerId, deadline: Option<u64>, interval_ns: u64) -> Option<TimerValue> {
        self.timerfds.set(timer, deadline, interval_ns, self.clock.now())
    }

    /// The current setting of `timer`; `None` for an unknown timer.
    pub fn timer_get(&self, timer: TimerId) -> Option<TimerValue> {
        self.timerfds.get(timer, self.clock.now())
    }

    /// Forgets `timer`: no traced process holds its descriptor any more.
    pub fn timer_forget(&mut self, timer: TimerId) {
        self.timerfds.forget(timer);
    }

    /// Whether some `timerfd` timer is due (its deadline reached, not fired yet).
    pub fn timerfd_due(&self) -> bool {
        self.timerfds.any_due(self.clock.now())
    }

    /// Fires the `timerfd` timers that are due: each with its count of expirations, which the
    /// driver adds to what the program reads from the timer's descriptor.
    pub fn fire_due_timers(&mut self) -> Vec<(TimerId, u64)> {
        self.timerfds.fire_due(self.clock.now())
    }

    /// Nothing can move: the clock jumps to the earliest pending deadline, whose timers are now
    /// due. Returns the new time, or None when no timer is pending (a deadlock).
    ///
    /// A node pause whose jump is due takes it instead: to the earliest deadline of the threads
    /// that are not paused (if they have none before the pause horizon, the clock stays), after
    /// which the paused threads are offered again.
    pub fn jump_to_next_deadline(&mut self) -> Option<u64> {
        if self.paused.jump_due() {
            self.paused.jumped();
            let paused: Vec<ThreadId> = self.paused.threads().collect();
            let processes = self.processes_of(&paused);
            if let Some(deadline) = self.next_deadline_outside(&|id| self.paused.contains(id), &|p| processes.contains(&p)).filter(|&d| self.before_pause_horizon(d)) {
                self.clock.advance_to(deadline);
            }
            return Some(self.clock.now());
        }
        let deadline = self.next_deadline(None)?;
        self.clock.advance_to(deadline);
        Some(deadline)
    }

    /// Moves the clock forward to `t` (a recording keeping pace with real time); never back.
    pub fn advance_clock(&mut self, t: u64) {
        self.clock.advance_to(t);
    }

    /// The threads a `pause` fault could stop now, each with the time the clock would jump to:
    /// threads that could move, while another thread has a timer ahead (before the pause
    /// horizon).
    pub fn pausable(&self) -> Vec<(ThreadId, u64)> {
        let mut movers: Vec<ThreadId> = self.choices().iter().map(|c| c.thread).collect();
        movers.dedup();
        movers.into_iter().filter(|&t| !self.paused.contains(t)).filter_map(|t| self.next_deadline(Some(t)).map(|d| (t, d))).filter(|&(_, d)| self.before_pause_horizon(d)).collect()
    }

    /// The `pause` fault: `thread` stops being scheduled and virtual time passes the other
    /// threads' next deadline, whose timers become due; the thread goes on once nobody else can
    /// move. Returns the new time (None, and nothing changes, when no other timer is ahead).
    pub fn pause(&mut self, thread: ThreadId) -> Option<u64> {
        let deadline = self.next_deadline(Some(thread))?;
        self.paused.start_thread_pause(thread);
        self.clock.advance_to(deadline);
        Some(deadline)
    }

    /// Whether a node pause of `threads` (a node's live threads) may be taken now: one of them is
    /// live, none stands still already, and another thread has a timer ahead, past which the
    /// clock could move while they stand still.
    pub fn may_pause_group(&self, threads: &[ThreadId]) -> bool {
        let live = threads.iter().any(|t| self.threads.get(t).is_some_and(Thread::is_live));
        let processes = self.processes_of(threads);
        live && !threads.iter().any(|&t| self.paused.contains(t)) && self.next_deadline_outside(&|id| threads.contains(&id), &|p| processes.contains(&p)).is_some()
    }

    /// The node pause: every one of `threads` stops being scheduled; the others go on, and once
    /// none of them can move the clock jumps to their next deadline (see `pause.rs`); the paused
    /// threads go on together once nobody else can move after that (a pause ends when one of its
    /// threads is chosen). False, and nothing changes, unless [`Model::may_pause_group`]. Not
    /// booked against the thread pause budget.
    pub fn pause_group(&mut self, threads: &[ThreadId]) -> bool {
        if !self.may_pause_group(threads) {
            return false;
        }
        self.paused.start_node_pause(threads);
        true
    }

    /// How many thread `pause` faults this execution took (node pauses are the cluster's to count).
    pub fn pauses_taken(&self) -> u32 {
        self.paused.thread_pauses()
    }

    fn before_pause_horizon(&self, t: u64) -> bool {
        self.pause_horizon.is_none_or(|h| t <= h)
    }

    /// Whether `thread` is stopped by a `pause` fault.
    pub fn is_paused(&self, thread: ThreadId) -> bool {
        self.paused.contains(thread)
    }

    /// Applies a choice previously returned by `choices()`; advances the clock.
    ///
    /// A choice that is not currently enabled changes nothing and yields `Blocked` (and trips a
    /// debug assertion): callers replaying a trace must check `choices()` first.
    pub fn apply(&mut self, choice: &Choice, mem: &mut dyn MemoryReader) -> Effect {
        if !self.offers(choice) {
            debug_assert!(false, "applied a choice that is not enabled: {choice:?}");
            return Effect::Blocked;
        }
        self.clock.tick();
        if choice.op != Op::FileLock {
            self.file_locks.step(); // a retry that fails again releases nothing
        }
        self.paused.chosen(choice.thread);
        let step = match choice.kind {
            ChoiceKind::Run => self.run(choice.thread, choice.alt, mem),
            ChoiceKind::Timeout => self.time_out(choice.thread, mem),
            ChoiceKind::Interrupt => self.interrupt(choice.thread),
            // Faults are the driver's choices, never the model's (`offers` refused it above).
            ChoiceKind::Fault => return Effect::Blocked,
        };
        self.finish(choice.thread, step)
    }

    /// Every thread of `process` is gone (the process exited or was killed). What its threads
    /// held stays held: a lock that died with its owner blocks its other users forever, which
    /// is what happens for real.
    pub fn process_exited(&mut self, process: ProcessId) {
        self.mark_exited(process);
        self.threads_gone(process);
    }

    /// Every thread of `process` is gone but the process lives on in a new program image
    /// (`execve`); the new image's main thread registers next.
    pub fn process_replaced_image(&mut self, process: ProcessId) {
        self.threads_gone(process);
    }

    fn threads_gone(&mut self, process: ProcessId) {
        let dead: Vec<ThreadId> =
            self.threads.iter().filter(|(_, t)| t.process == process && t.is_live()).map(|(&id, _)| id).collect();
        for id in dead {
            self.in_handler.remove(&id);
            self.file_locks.forget(id);
            self.objects.robust_owner_gone(id);
            self.objects.forget_waiter(id);
            self.paused.forget(id);
            if let Some(t) = self.threads.get_mut(&id) {
                t.phase = Phase::Exited;
            }
        }
    }

    /// Threads that have not exited.
    pub fn live_threads(&self) -> Vec<ThreadId> {
        self.threads.iter().filter(|(_, t)| t.is_live()).map(|(&id, _)| id).collect()
    }

    /// For a deadlock report: each live thread, what it waits on, and who holds it.
    pub fn blocked_report(&self) -> Vec<BlockedThread> {
        self.threads
            .iter()
            .filter(|(_, t)| t.is_live())
            .map(|(&id, t)| self.describe(id, t))
            .collect()
    }

    /// Where `thread` stands, `None` if it was never registered.
    pub fn status(&self, thread: ThreadId) -> Option<ThreadStatus> {
        self.threads.get(&thread).map(Thread::status)
    }

    /// The process `thread` belongs to.
    pub fn process_of(&self, thread: ThreadId) -> Option<ProcessId> {
        self.threads.get(&thread).map(|t| t.process)
    }

    /// Appends `thread`'s enabled choices: its `Run` alternatives, then its `Timeout`, then its
    /// `Interrupt`.
    fn thread_choices(&self, id: ThreadId, thread: &Thread, out: &mut Vec<Choice>) {
        let Some(request) = thread.request() else { return };
        let obj = if request.op().is_net() {
            self.net_obj(id)
        } else if let Some((addr, _)) = sharing::named_objects(&request)[0] {
            self.objects.name(thread.process, addr)
        } else {
            request.subject()
        };
        let choice = |kind, alt| Choice { thread: id, kind, alt, op: request.op(), obj };
        for alt in 0..self.run_alternatives(id, thread) {
            out.push(choice(ChoiceKind::Run, alt));
        }
        if ops::timer(thread).is_some_and(|deadline| self.timer_due(deadline)) {
            out.push(choice(ChoiceKind::Timeout, 0));
        }
        if self.offers_interrupt(id) {
            out.push(choice(ChoiceKind::Interrupt, 0));
        }
    }

    /// Whether a timer with this deadline may fire now.
    fn timer_due(&self, deadline: u64) -> bool {
        match self.timers {
            TimerPolicy::Deadline => deadline <= self.clock.now(),
            TimerPolicy::Any => true,
        }
    }

    fn offers(&self, choice: &Choice) -> bool {
        if self.paused.contains(choice.thread) {
            return self.choices().contains(choice);
        }
        let Some(thread) = self.threads.get(&choice.thread) else { return false };
        let mut mine = Vec::new();
        self.thread_choices(choice.thread, thread, &mut mine);
        mine.contains(choice)
    }

    /// Moves the chosen thread to its next phase and tells the driver what to do with it.
    fn finish(&mut self, id: ThreadId, step: ops::Step) -> Effect {
        let Some(thread) = self.threads.get_mut(&id) else { return Effect::Blocked };
        let Some(request) = thread.request() else { return Effect::Blocked };
        match step {
            ops::Step::Grant(result) => {
                thread.phase = if request == Request::ThreadExit { Phase::Exited } else { Phase::Running };
                if request == Request::ThreadExit {
                    self.objects.robust_owner_gone(id);
                }
                Effect::Grant { result }
            }
            ops::Step::Park(wait) => {
                thread.phase = Phase::Waiting(request, wait);
                Effect::Blocked
            }
            ops::Step::StayPending => {
                thread.phase = Phase::Pending(request);
                Effect::Blocked
            }
        }
    }
}
