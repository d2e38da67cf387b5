//! Posts and grants: what a thread's post means (the one place a posted slot's words become a
//! [`Request`]; process and thread starts, faults, signals, locks taken without a scheduling
//! point, calls dara cannot model), and what handing the token to a thread involves beyond the
//! slot write (a `kill`'s targets, a skewed clock, a listening socket taken over, a name lookup's
//! answer written, a thread's exit waited for).
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dara_abi::{splitmix64, Op, StartKind, Unsupported, MAX_PROCESSES};

use super::processes::{ProcessRecord, StartFacts};
use super::Execution;
use crate::choice::{ProcessId, ThreadId};
use crate::model::Request;
use crate::outcome::Outcome;
use crate::procfs;

impl Execution<'_> {
    /// The request `thread` posted last, decoded again from its slot (where it stays until the
    /// thread's next post); `None` if the slot holds no request (it decoded when it was posted).
    pub(super) fn posted(&self, thread: ThreadId) -> Option<Request> {
        let (op, args) = self.region.posted_words(thread as usize);
        Request::decode(Op::from_u32(op)?, args).ok()
    }

    /// `thread`'s granted name lookup: the question read from its memory, the world's answer
    /// written back next to it before the grant; the lookup's status (0 or an `EAI_*` code).
    pub(super) fn answer_lookup(&mut self, thread: ThreadId) -> Result<i64, Outcome> {
        let Some(Request::NameLookup { query, answer }) = self.posted(thread) else { return Ok(0) };
        let pid = self.processes.pid_of(thread);
        let lost = |what: &str| Outcome::Uncontrolled { thread, syscall: "getaddrinfo".into(), detail: format!("dara could not {what} the memory of the thread's name lookup (process {pid}); the run was stopped") };
        let question = crate::names::read_question(pid, query.0).ok_or_else(|| lost("read"))?;
        let step = self.steps.len() as u64 + 1;
        let reply = self.with_world(|world, ex| world.name_lookup(ex, thread, step, &question))?;
        let record = reply.to_record();
        match procfs::write_memory(pid, answer.0, record.as_bytes()) {
            Ok(n) if n == record.as_bytes().len() => Ok(i64::from(reply.status)),
            _ => Err(lost("write")),
        }
    }

    /// Hands the token to `thread` with `result`.
    pub(super) fn grant(&mut self, thread: ThreadId, op: Op, mut result: i64) {
        if op == Op::ProcessKill {
            // Before the thread goes on to send it: the targets are still there to look at. The
            // result tells the sender how many processes the signal ends (it waits for them).
            if let Some(Request::ProcessKill { signal, pid, .. }) = self.posted(thread) {
                result = self.processes.note_kill(thread, signal, i64::from(pid)) as i64;
            }
            self.signals_may_be_pending();
        }
        if op == Op::ClockRead {
            result = self.world().clock_skew(self, thread);
        }
        if matches!(op, Op::ThreadCreate | Op::ProcessFork) {
            // Nothing else is born before the thread's own birth: it holds the token.
            self.pids.before_birth(&mut *self.tree);
        }
        if let (Op::NetListen, Some(request)) = (op, self.posted(thread)) {
            // Before the grant: both descriptors of the split socket are still the program's.
            if let Err(detail) = self.with_world(|world, ex| world.listening(ex, thread, request)) {
                self.pending_end.get_or_insert(Outcome::Uncontrolled { thread, syscall: "listen".into(), detail: format!("dara could not take over a listening socket: {detail}") });
            }
        }
        // Edges this thread reaches first are stamped with the step that granted it.
        let step = self.steps.len().saturating_sub(1) as u32;
        self.handoff.grant(&self.region, thread, result, self.model.now(), step);
        if op == Op::ProcessExit {
            if let Some(process) = self.processes.of(thread) {
                self.processes.exits_soon(process);
            }
        }
        if op == Op::ThreadExit {
            // The thread now runs libc's teardown. Wait until it is really gone, so nothing of it
            // runs concurrently with the next granted thread.
            let (pid, tid) = self.region.kernel_ids(thread as usize);
            if pid != tid {
                procfs::wait_thread_exit(pid, tid, dara_tracer::placement::RESCUE_AFTER, THREAD_EXIT_LIMIT);
            }
            self.handoff.finish(thread);
            self.handoff.posted(thread);
        }
    }

    /// A thread posted: tell the model.
    pub(super) fn ingest(&mut self, thread: ThreadId) -> Option<Outcome> {
        let slot = self.region.slot(thread as usize);
        let (raw_op, args) = self.region.posted_words(thread as usize);
        let process = slot.process.load(Ordering::Acquire);
        self.handoff.posted(thread);
        // Sends and receives the thread made without a post since its last one (coarse steps, the
        // preload's `unposted`): the sends are settled before the next decision, like granted
        // ones, and the readiness views are looked at again.
        if slot.received_unposted.load(Ordering::Acquire) != 0 {
            self.network.dirty = true;
        }
        // A signal from outside held back to this post is pending: it may end the wait posted.
        if slot.held_signals.load(Ordering::Acquire) != 0 {
            self.signals_dirty = true;
        }
        let sent = (slot.sent_count.load(Ordering::Acquire) as usize).min(dara_abi::SENT_MAX);
        if sent > 0 {
            let pid = slot.pid.load(Ordering::Acquire);
            for on in &slot.sent[..sent] {
                let ports = on.ports.load(Ordering::Acquire);
                let total = (ports != 0).then(|| ((ports >> 16) as u16, ports as u16, on.bytes_sent.load(Ordering::Acquire)));
                self.network.probe.sent_unposted(pid, on.fd.load(Ordering::Acquire) as i32, total);
            }
            self.network.dirty = true;
        }
        let Some(op) = Op::from_u32(raw_op) else {
            return Some(Outcome::Uncontrolled { thread, syscall: format!("op {raw_op}"), detail: "the preload posted an operation this dara does not know (version mismatch?)".into() });
        };
        // The one place a posted slot's words become a request.
        let request = match Request::decode(op, args) {
            Ok(request) => request,
            Err(e) => return Some(Outcome::Uncontrolled { thread, syscall: op.name().into(), detail: e.to_string() }),
        };
        if op == Op::FifoOpen {
            // A reader posts holding its end open: a writer waiting for a reader may go on now.
            self.network.dirty = true;
        }
        match request {
            Request::ProcessStart { parent, kind } => {
                if let Err(outcome) = self.process_started(thread, process, parent, kind) {
                    return Some(outcome);
                }
            }
            Request::ThreadStart { .. } => {
                if let Err(outcome) = self.born(thread, None, "a thread") {
                    return Some(outcome);
                }
                self.processes.threads.insert(thread, process);
                self.model.add_thread(thread, process);
            }
            Request::Fault { signal, pc, addr, sp } => {
                self.note_fault(thread, process, signal, pc.0, addr.0, sp.0);
                return None;
            }
            Request::SignalArrived { signal, sender, code, value } => {
                self.signals_may_be_pending(); // the thread took one: others may have none left
                if let Some(outcome) = self.signal_arrived(thread, signal, sender, code, value) {
                    return Some(outcome);
                }
                self.grant(thread, Op::SignalArrived, 0);
                return None;
            }
            Request::Held { lock, what, depth, .. } => {
                // A lock taken without a post (see the preload's `solo`): the model learns its
                // owner, and the thread goes on, with no decision and no step.
                if let Err(detail) = self.model.adopt(thread, lock, what, depth) {
                    return Some(Outcome::Uncontrolled { thread, syscall: "a lock taken without a scheduling point".into(), detail });
                }
                self.grant(thread, Op::Held, 0);
                return None;
            }
            Request::ProcessExec { via_agent: true } => {
                if let Err(detail) = self.tree.ensure_agent() {
                    return Some(Outcome::Uncontrolled { thread, syscall: "execve".into(), detail: format!("a statically linked program is about to start: {detail}") });
                }
            }
            Request::TimerCreate { .. } | Request::TimerSet { .. } | Request::TimerGet { .. } => {
                // A timerfd call: answered with no decision and no step (see `timerfds.rs`).
                match self.timer_request(thread, process, request) {
                    Ok(result) => self.grant(thread, op, result),
                    Err(outcome) => return Some(outcome),
                }
                return None;
            }
            Request::Unsupported(call) => {
                let pid = self.processes.records.get(&process).map_or(0, |p| p.pid);
                return Some(unsupported(thread, pid, call));
            }
            _ => {}
        }
        let pid = self.processes.records.get(&process).map(|p| p.pid);
        if let (true, Some(pid)) = (self.cfg.symbolize, pid) {
            self.observed.note_symbol(process, pid, request.subject());
            let site = self.region.slot(thread as usize).call_site.load(Ordering::Acquire);
            self.observed.note_call_site(thread, process, pid, site);
        }
        self.observed.note_modules(&self.region, process, pid);
        if matches!(op, Op::SigSuspend | Op::SigWait) {
            self.signals_may_be_pending(); // a signal it lets through may be pending already
        }
        self.model.post(thread, request, &mut self.memory);
        None
    }

    /// A thread is dying of a fault: name the faulting function while the process still exists,
    /// then let the thread go (no decision, no step: the fault is not a scheduling choice).
    pub(super) fn note_fault(&mut self, thread: ThreadId, process: ProcessId, signal: i32, pc: u64, addr: u64, sp: u64) {
        if let Some(pid) = self.processes.records.get(&process).map(|p| p.pid) {
            self.observed.note_fault(process, pid, signal, pc, addr, sp);
        }
        self.processes.exits_soon(process);
        self.grant(thread, Op::Fault, 0);
    }

    /// Process `process` exec'd a new program whose main thread is `thread`: the old image's
    /// threads are gone (the kernel ended them), the process lives on.
    pub(super) fn image_replaced(&mut self, process: ProcessId, thread: ThreadId) {
        for (&t, &p) in &self.processes.threads {
            if p == process && t != thread {
                self.handoff.finish(t);
            }
        }
        if let Some(holder) = self.handoff.holder().filter(|&h| self.processes.of(h) == Some(process)) {
            self.handoff.posted(holder);
        }
        self.model.process_replaced_image(process);
        // The exec closed the process's close-on-exec descriptors: a pipe whose last writer that
        // was now reads end-of-file (git's start_command waits for exactly that to learn that its
        // child's exec succeeded). A timerfd among them may be gone.
        self.network.dirty = true;
        self.timerfds.recheck = true;
        self.observed.image_replaced(process);
    }

    /// `thread` posted `ProcessStart`: process `process` began (`kind`: forked from `parent`,
    /// launched, or exec'd a new program). Registers it (or its new image) everywhere.
    fn process_started(&mut self, thread: ThreadId, process: ProcessId, parent: Option<ProcessId>, kind: StartKind) -> Result<(), Outcome> {
        if process as usize >= self.cfg.max_processes.min(MAX_PROCESSES) {
            return Err(Outcome::Uncontrolled { thread, syscall: "fork".into(), detail: too_many_processes(self.cfg.max_processes) });
        }
        let pid = self.region.slot(thread as usize).pid.load(Ordering::Acquire);
        // The root launched ahead was looked at then; any other process now.
        let mut known = self.processes.known_ahead.take_if(|k| k.pid == pid && kind == StartKind::Launched);
        if kind == StartKind::Exec {
            self.image_replaced(process, thread);
        } else {
            let parent = parent.filter(|_| kind == StartKind::Fork);
            self.with_world(|world, ex| world.process_started(ex, process, pid, parent));
            let entry = &self.region.header().processes[process as usize];
            entry.random_seed.store(splitmix64(self.cfg.random_seed ^ splitmix64(process as u64)), Ordering::Release);
            let known = known.get_or_insert_with(|| StartFacts::learn(pid, self.tree.pids_virtual()));
            let own_pid = known.own_pid.clone().map_err(|detail| Outcome::Uncontrolled { thread, syscall: "fork".into(), detail })?;
            self.born(thread, Some(own_pid), "a process")?;
            if let Some(pidfd) = &known.pidfd {
                self.tree.keep(process as usize, pidfd.as_raw_fd());
            }
            self.processes.records.insert(process, ProcessRecord { pid, own_pid, alive: true, exit: None, pidfd: known.pidfd.take(), program: String::new() });
            self.network.probe.add_traced(pid);
            self.model.add_process(process, parent);
            self.memory.set_pid(process, pid);
        }
        let instrumented = known.as_ref().map_or_else(|| crate::coverage::executable_is_instrumented(pid), |k| k.instrumented);
        self.observed.process_started(process, pid, instrumented);
        let program = match known {
            Some(known) => known.program,
            None => procfs::program_name(pid).unwrap_or_default(),
        };
        if kind != StartKind::Fork {
            if let Some(dir) = self.region.atomic_plans() {
                // Before the grant: the preload reads the plan once its start is granted (the
                // ptrace agent found its program's own sites at the exec).
                let summary = crate::atomic_plans::ensure(&dir, pid).map_err(|detail| Outcome::Uncontrolled { thread, syscall: "--preempt-on atomics".into(), detail: format!("{detail}; the run was stopped") })?;
                self.observed.atomic_sites.insert(program.clone(), summary);
            }
        }
        if self.cfg.symbolize && !program.is_empty() {
            self.observed.programs.insert(thread, program.clone());
        }
        if let Some(record) = self.processes.records.get_mut(&process) {
            record.program = program;
        }
        self.processes.threads.insert(thread, process);
        self.model.add_thread(thread, process);
        Ok(())
    }
}

impl Execution<'_> {
    /// `thread` was born (a process's main thread if `own_pid` is given, the pid it sees itself
    /// as): the pid ledger notes it (a recording) or checks it against the recording (its replay).
    fn born(&mut self, thread: ThreadId, own_pid: Option<u32>, what: &str) -> Result<(), Outcome> {
        if !self.pids.notes_births() {
            return Ok(());
        }
        if !self.tree.pids_virtual() && self.pids.replays() {
            // No namespace (dara is not root): the pids are the host's, whatever the recording's.
            self.pids.cannot_give_pids();
            return Ok(());
        }
        let own = own_pid.unwrap_or_else(|| {
            let (_, tid) = self.region.kernel_ids(thread as usize);
            // In a namespace the thread sees the innermost of its ids.
            if self.tree.pids_virtual() { procfs::namespace_pids(tid).and_then(|ids| ids.last().copied()).unwrap_or(0) } else { tid }
        });
        let step = self.steps.len() as u64;
        self.pids.born(step, own, what).map_err(|d| Outcome::Diverged { step: d.step, expected: d.expected, seen: d.seen })
    }
}

/// The run's end when `thread` (of the process with kernel pid `pid`) made a call dara cannot
/// model.
fn unsupported(thread: ThreadId, pid: u32, call: Unsupported) -> Outcome {
    let name = procfs::syscall_name(call.nr() as i64);
    let detail = match call {
        Unsupported::Clone3 { flags, .. } => {
            let what = if flags & libc::CLONE_THREAD as u64 != 0 { "thread" } else { "process" };
            format!("a raw clone3 system call (flags {flags:#x}) would start a {what} that bypasses pthread_create and fork, which dara cannot follow; the run was stopped rather than left with an untraced {what}")
        }
        Unsupported::Syscall { nr, args: [flags, stack, _] } if nr == libc::SYS_clone as u64 && flags & libc::CLONE_THREAD as u64 != 0 => {
            let how = if stack == 0 {
                "on its creator's own stack"
            } else if flags & libc::CLONE_SETTLS as u64 == 0 {
                "without thread-local storage of its own (no CLONE_SETTLS)"
            } else {
                "with thread-local storage glibc did not set up (a runtime's own)"
            };
            format!("a raw clone system call (flags {flags:#x}) starts a thread {how}; dara keeps each thread's state in its thread-local storage and starts it on its own stack, so it cannot follow such a thread; the run was stopped rather than left with an untraced thread (threads from pthread_create and thrd_create are followed, however they are reached)")
        }
        Unsupported::Syscall { nr: 56 | 57 | 58, .. } => "a raw clone system call that makes a process on a stack of its own or sharing memory (not a fork, nor libc's posix_spawn, which dara runs itself) is not supported; the run was stopped rather than left with an untraced process".to_string(),
        Unsupported::Syscall { nr: 33 | 292, .. } => format!("the program asked for descriptor {} ({name} onto it), which dara keeps for its shared region in every traced process; the run was stopped rather than lose the region", dara_abi::SHM_FD),
        Unsupported::GrantStalled { fd, granted, received } => format!(
            "a receive on descriptor {fd} was granted {granted} bytes a traced peer wrote, took {received}, and the rest did not arrive within {} ms after its own read reopened the window; the run was stopped rather than give the program a count no replay would give",
            crate::netprobe::SETTLE_LIMIT.as_millis()
        ),
        Unsupported::StaticExec { path } => {
            let program = procfs::c_string_of(pid, path.0).unwrap_or_else(|| "the program to run".into());
            let dynamic = matches!(dara_tracer::binary::classify(std::path::Path::new(&program)), Ok(dara_tracer::binary::BinaryKind::Dynamic));
            let why = if dynamic && !dara_tracer::binary::is_go(std::path::Path::new(&program)) {
                "starts as a secure exec (set-user-ID, set-group-ID or file capabilities), for which the dynamic loader ignores dara's preload"
            } else {
                "is statically linked or a Go program, which dara's preload cannot enter"
            };
            format!("{program} {why}, and dara's ptrace agent, which runs such programs, did not take it over; the run was stopped rather than leave it uncontrolled")
        }
        Unsupported::Syscall { args: [first, second, _], .. } => format!("{name} cannot be modelled by dara (arguments {first:#x}, {second:#x}); the run was stopped rather than left uncontrolled"),
    };
    Outcome::Uncontrolled { thread, syscall: name, detail }
}

/// How long the scheduler waits for an exiting thread to be gone before it goes on anyway.
const THREAD_EXIT_LIMIT: Duration = Duration::from_secs(2);

/// What a run that reached the process limit says.
pub(super) fn too_many_processes(limit: usize) -> String {
    if limit >= MAX_PROCESSES {
        format!("the program started more than {limit} processes in one execution, the most dara can follow (--max-processes is at its maximum); the run was stopped")
    } else {
        format!("the program started more than {limit} processes in one execution, the limit set by --max-processes (at most {MAX_PROCESSES}); the run was stopped: raise --max-processes if it needs more")
    }
}
