//! `dara-agent`: one process per execution that stands in for the preload in processes the
//! preload cannot enter (statically linked programs, Go programs). It ptraces them, turns each
//! system call their seccomp filter ([`super::filter`]) stops into the request the preload would
//! post for it ([`calls`]), posts it on the thread's slot exactly as the preload's thread would
//! ([`region`]), and finishes the call the way the grant says ([`finish`]). The scheduler sees
//! slots, posts and grants, and cannot tell the two paths apart: one event model, one trace.
//!
//! # Why a process of its own
//! ptrace events are reported to every thread of the tracer's process that waits for children,
//! and dara's reaper waits on the target's process group: in dara's own process it would take
//! the agent's stops. A separate process also keeps the scheduler's thread free of ptrace calls,
//! which must all come from the one thread that attached.
//!
//! # The loop
//! Only one thread of the whole system runs at a time, so the agent is in one of two modes:
//! * one of its tracees holds the run token (the *runner*): it waits for that tracee's next stop
//!   (`waitpid`), as do the stops of threads and processes it creates meanwhile;
//! * none does: it waits on the futex words of its parked tracees' slots and its doorbell
//!   (`futex_waitv`) for a grant or a request to attach, and every 50 ms looks for tracees that
//!   died while parked (a kill from outside) or hold a signal that ends their process
//!   (`signals.rs`: a Ctrl-C dara passes on to a program without a handler).
mod calls;
mod datagrams;
mod finish;
mod listeners;
mod net;
mod region;
mod select;
mod signals;
mod tracees;
mod transfer;
mod whole_grant;

use std::collections::{BTreeMap, BTreeSet};

use dara_abi::agent::SeizeRequest;
use dara_abi::{preempt, Request, StartKind};

use calls::{Action, Then};
use region::Region;
pub use tracees::Tracee;
use tracees::{Birth, CallStop, Processes};

/// How often a waiting agent looks for tracees that died while parked.
const DEATH_CHECK_MS: u64 = 50;

/// Options of every attach: children and threads are traced from birth, the filter's stops are
/// reported, syscall-exit stops are told apart, and every tracee dies with the agent.
const OPTIONS: i32 = libc::PTRACE_O_TRACESECCOMP | libc::PTRACE_O_TRACECLONE | libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK | libc::PTRACE_O_TRACEEXEC | libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL;

/// The agent's state.
pub struct Agent {
    region: Region,
    tracees: BTreeMap<i32, Tracee>,
    processes: Processes,
    /// The tracee holding the run token, if one of ours does.
    runner: Option<i32>,
    /// Children named by a creation event whose first stop has not come yet.
    expected: BTreeMap<i32, Birth>,
    /// First stops of children no creation event has named yet.
    early: BTreeSet<i32>,
    /// Attached, not yet exec'd into the program (their stops before the exec are let through).
    seized: BTreeMap<i32, SeizeRequest>,
    coarse: bool,
}

/// Runs the agent on the region behind descriptor `fd` until the execution is over.
pub fn run(fd: i32) -> Result<(), String> {
    let region = Region::map(fd)?;
    let header = region.header();
    header.agent.pid.store(std::process::id(), std::sync::atomic::Ordering::Release);
    let coarse = header.preempt_flags & preempt::COARSE != 0;
    wake_on_child_events();
    let mut agent = Agent { region, tracees: BTreeMap::new(), processes: Processes::default(), runner: None, expected: BTreeMap::new(), early: BTreeSet::new(), seized: BTreeMap::new(), coarse };
    agent.serve();
    Ok(())
}

impl Agent {
    fn over(&self) -> bool {
        self.region.header().shutdown.load(std::sync::atomic::Ordering::Acquire) != 0
    }

    fn serve(&mut self) {
        loop {
            if self.runner.is_some() || !self.expected.is_empty() {
                match wait_event(0) {
                    Some((tid, status)) => self.event(tid, status),
                    None => {
                        // No tracee left at all.
                        self.runner = None;
                        self.expected.clear();
                    }
                }
                continue;
            }
            if self.over() {
                return;
            }
            // Read before looking for a request: one rung after this look ends the wait below.
            let doorbell = self.region.header().agent.doorbell.load(std::sync::atomic::Ordering::Acquire);
            self.attach_requested();
            if self.take_grant() {
                continue;
            }
            while let Some((tid, status)) = wait_event(libc::WNOHANG) {
                self.event(tid, status);
            }
            if self.runner.is_some() {
                continue;
            }
            let header = self.region.header();
            let mut words = vec![(&header.agent.doorbell, doorbell)];
            for tracee in self.tracees.values().filter(|t| t.parked.is_some()) {
                if let Some(slot) = self.region.slot(tracee.slot) {
                    words.push((&slot.state, dara_abi::state::POSTED));
                }
            }
            // Nothing happened for a while: the scheduler may be waiting for a process to end.
            if region::wait_any(&words, DEATH_CHECK_MS) {
                self.let_fatal_signals_in();
            }
        }
    }

    /// Attaches to a thread that asked ([`seize`]).
    fn attach_requested(&mut self) {
        let words = &self.region.header().agent;
        let Some(request) = dara_abi::agent::pending(words) else { return };
        // SAFETY: PTRACE_SEIZE takes a pid and an options word; no memory is passed.
        let attached = unsafe { libc::ptrace(libc::PTRACE_SEIZE, request.tid as i32, 0usize, OPTIONS as usize) } == 0;
        if attached {
            self.seized.insert(request.tid as i32, request);
        }
        dara_abi::agent::answer(words, request.tid, attached, &region::Kernel);
    }

    /// Hands the token to a parked tracee whose slot was granted; true if one was.
    fn take_grant(&mut self) -> bool {
        let granted = self.tracees.iter().find_map(|(&tid, t)| {
            let then = t.parked?;
            let answer = self.region.slot(t.slot).and_then(|slot| self.region.granted(slot))?;
            Some((tid, then, answer))
        });
        let Some((tid, then, answer)) = granted else { return false };
        if let Some(t) = self.tracees.get_mut(&tid) {
            t.parked = None;
            t.last_now = answer.now_ns;
            t.unposted_clock_reads = 0;
        }
        self.runner = Some(tid);
        self.finish(tid, then, answer.result as i64);
        true
    }

    /// Posts `request` for `tid`, which waits for the grant; `then` finishes it.
    fn post(&mut self, tid: i32, request: Request, then: Then) {
        let Some(tracee) = self.tracees.get_mut(&tid) else { return };
        tracee.parked = Some(then);
        // The signals its wait leaves blocked: the call's own mask, else the thread's (unknown,
        // or a request no signal ends: all).
        let wait_mask = tracee.wait_mask.take();
        let mask = match signals::may_be_interrupted(&request) {
            true => wait_mask.or_else(|| crate::ptrace::remote::signal_mask(tid).ok()),
            false => None,
        };
        let mask = mask.unwrap_or(u64::MAX);
        if let Some(slot) = self.region.slot(tracee.slot) {
            self.region.post(slot, request, mask);
        }
        if self.runner == Some(tid) {
            self.runner = None;
        }
    }

    /// One `waitpid` report.
    fn event(&mut self, tid: i32, status: i32) {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            self.gone(tid);
            return;
        }
        if !libc::WIFSTOPPED(status) {
            return;
        }
        let signal = libc::WSTOPSIG(status);
        if status >> 16 == 0 && self.step_ended(tid, signal) {
            return;
        }
        match status >> 16 {
            libc::PTRACE_EVENT_SECCOMP => self.syscall_stop(tid),
            libc::PTRACE_EVENT_EXEC => self.exec_stop(tid),
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => self.creation_stop(tid),
            libc::PTRACE_EVENT_STOP => self.first_or_group_stop(tid),
            libc::PTRACE_EVENT_EXIT => self.leader_exit_stop(tid),
            _ if signal == (libc::SIGTRAP | 0x80) => self.syscall_exit_stop(tid),
            _ if signal == libc::SIGSEGV && self.counter_read(tid) => {}
            _ if signal == libc::SIGSEGV && cpuid_answered(tid) => {}
            _ if signal == libc::SIGSYS && self.trapped_call(tid) => {}
            _ if signal == libc::SIGTRAP && self.stub_returned(tid) => {}
            _ if signal == libc::SIGTRAP && self.probe_hit(tid) => {}
            // A signal on its way to the tracee: deliver it.
            _ => resume(tid, signal),
        }
    }

    /// A tracee is gone (exited, or killed with its process).
    fn gone(&mut self, tid: i32) {
        self.seized.remove(&tid);
        self.early.remove(&tid);
        if self.runner == Some(tid) {
            self.runner = None;
        }
        if let Some(tracee) = self.tracees.remove(&tid) {
            if tracee.exiting {
                if let Some(slot) = self.region.slot(tracee.slot) {
                    self.region.finish(slot);
                }
            }
        }
        self.deaths_seen();
    }

    /// A main thread that ended with `exit` (`pthread_exit`) stops on its way out
    /// ([`report_leader_exit`]): the kernel reports its end to `waitpid` only once every other
    /// thread of its process has ended too, and those stay parked until the scheduler hears that
    /// this one is gone. It is gone as far as the schedule goes: its slot is finished now.
    fn leader_exit_stop(&mut self, tid: i32) {
        self.gone(tid);
        resume(tid, 0);
    }

    /// The filter stopped `tid` on a call.
    fn syscall_stop(&mut self, tid: i32) {
        // Before its exec into the program (the launcher's own calls), or a call the agent is
        // making from the stub (decided already, and also one the agent's filter stops).
        if self.tracees.get(&tid).is_none_or(|t| t.in_stub.is_some()) {
            resume(tid, 0);
            return;
        }
        let regs = match crate::ptrace::remote::Registers::read(tid) {
            Ok(regs) => regs,
            Err(_) => return, // gone meanwhile: its exit is reported next
        };
        let call = regs.syscall();
        self.call_stop(tid, regs, call, CallStop::Seccomp);
    }

    /// The preload's inherited filter trapped a call of `tid` (SIGSYS, `si_code` SYS_SECCOMP):
    /// the call did not run. Finished like a call the agent's filter stops; a call the agent
    /// would not stop runs from the stub. True if it was such a trap (the signal is swallowed).
    fn trapped_call(&mut self, tid: i32) -> bool {
        const SYS_SECCOMP: i32 = 1;
        if !self.tracees.contains_key(&tid) || signal_code(tid) != Some(SYS_SECCOMP) {
            return false;
        }
        let Ok(regs) = crate::ptrace::remote::Registers::read(tid) else { return false };
        // The kernel puts the call's number back in rax for the handler to see.
        let nr = regs.regs.rax as i64;
        let mut call = regs.syscall();
        call.nr = nr;
        let stop = CallStop::Trapped { nr, ret: regs.regs.rip };
        if !dara_abi::agent::TRACED.contains(&(nr as u32)) {
            self.tracees.get_mut(&tid).expect("checked above").stop = stop;
            self.run_call(tid, regs);
            return true;
        }
        self.call_stop(tid, regs, call, stop);
        true
    }

    /// The stub's `int3` after a call made from it: the thread goes back to its own code, past
    /// the call it made (a wait for readiness is looked at first, as at the end of a call the
    /// agent's filter stopped).
    fn stub_returned(&mut self, tid: i32) -> bool {
        let Some(tracee) = self.tracees.get_mut(&tid) else { return false };
        let Some(ret) = tracee.in_stub else { return false };
        let Ok(mut regs) = crate::ptrace::remote::Registers::read(tid) else { return false };
        if self.processes.stubs.get(&tracee.process) != Some(&regs.regs.rip.wrapping_sub(1)) {
            return false;
        }
        tracee.in_stub = None;
        regs.regs.rip = ret;
        if tracee.exec_slot.is_some() {
            let _ = regs.write();
            self.exec_failed(tid);
            resume(tid, 0);
            return true;
        }
        if let Some(listeners::AfterCall::Transfer(running)) = tracee.after {
            tracee.after = None;
            self.transfer_returned(tid, regs, running);
            return true;
        }
        match tracee.exit_check.take() {
            Some(check) => finish::ready_wait_came_back(tracee.pid, &mut regs, check),
            None => {
                let _ = regs.write();
            }
        }
        resume(tid, 0);
        true
    }

    /// `tid` stopped in `call` (at either filter, `stop`): run it, answer it, or post it.
    fn call_stop(&mut self, tid: i32, regs: crate::ptrace::remote::Registers, call: crate::ptrace::remote::Syscall, stop: CallStop) {
        self.birth_failed(tid);
        let tracee = self.tracees.get_mut(&tid).expect("a known tracee");
        tracee.stop = stop;
        tracee.wait_mask = signals::wait_mask(call, tracee.pid);
        let tracee = &self.tracees[&tid];
        let epoch = self.region.header().realtime_epoch_ns.load(std::sync::atomic::Ordering::Relaxed);
        let output_pipes = self.region.header().output_pipes.each_ref().map(|p| p.load(std::sync::atomic::Ordering::Relaxed));
        let action = net::decode(call, tracee.pid, output_pipes, tracee.last_now)
            .or_else(|| transfer::decode(call, tracee.pid, output_pipes))
            .or_else(|| select::decode(call, tracee.pid, regs.regs.rsp, tracee.last_now))
            .or_else(|| signals::decode(call, tid, tracee.pid, tracee.last_now))
            .unwrap_or_else(|| calls::decode(call, tracee.pid, tracee.last_now, epoch));
        let action = self.post_to_relay(tracee.pid, &call, action);
        let tracee = &self.tracees[&tid];
        match action {
            Action::Run => self.run_call(tid, regs),
            Action::Answer(value) => finish::answer(tid, stop, regs, value),
            Action::Clock(answer) => self.clock_read(tid, regs, answer),
            Action::Random { addr, len } => {
                let value = self.processes.fill_random(tracee.process, tracee.pid, &[(addr, len)], &self.region);
                finish::answer(tid, stop, regs, value);
            }
            Action::RandomVector { iov, count } => {
                let buffers = net::iovec_list(tracee.pid, iov, count);
                let value = self.processes.fill_random(tracee.process, tracee.pid, &buffers, &self.region);
                finish::answer(tid, stop, regs, value);
            }
            Action::Affinity { addr, size } => {
                let cpus = self.region.header().cpus;
                let value = finish::affinity(tracee.pid, addr, size, cpus);
                finish::answer(tid, stop, regs, value);
            }
            Action::Listen { fd, backlog } => self.listen_stop(tid, regs, fd, backlog),
            Action::Bind { fd } => self.bind_stop(tid, regs, fd),
            Action::LocalName { fd, addr } => self.local_name_stop(tid, regs, fd, addr),
            Action::PeerName => {
                if !self.peer_shown_on_return(tid, &regs) {
                    self.run_call(tid, regs);
                }
            }
            Action::Post(Request::ThreadExit, then) => self.exit_thread(tid, then),
            Action::Exec { path } => self.exec_call(tid, path),
            Action::Wait(wait) => {
                // Decisions name processes by logical id, never by pid.
                let target = match wait.pid {
                    Some(pid) => self.logical_process(pid).map_or(dara_abi::ProcessTarget::Untraced, dara_abi::ProcessTarget::Process),
                    None => dara_abi::ProcessTarget::Any,
                };
                self.post(tid, Request::ProcessWait { target, options: wait.options }, Then::Collect(wait));
            }
            Action::Kill { pid, signal } => {
                // Decisions name processes by logical id, never by pid.
                let (target, pid) = match pid {
                    None => (dara_abi::ProcessTarget::Process(tracee.process), self.processes.seen_as.get(&tracee.process).map_or(tracee.pid, |&p| p as i32)),
                    Some(pid) if pid > 0 => (self.logical_process(pid as u32).map_or(dara_abi::ProcessTarget::Untraced, dara_abi::ProcessTarget::Process), pid),
                    Some(pid) => (dara_abi::ProcessTarget::Any, pid),
                };
                self.post(tid, Request::ProcessKill { target, signal, pid }, Then::Kill);
            }
            Action::Post(request, then) => self.post(tid, request, then),
        }
    }

    /// An `execve` by `tid` of the program at `path` (in its memory), followed as the preload
    /// follows an exec (`ProcessExec`, then the new image's `ProcessStart` at its exec stop).
    /// Whatever a traced program execs stays with the agent: static and Go programs, and also a
    /// dynamically linked program or a script (Go's `os/exec` of `/bin/sh`), which the agent runs
    /// as it runs a dynamically linked Go program (its system calls and the vDSO's clock, hidden,
    /// are the scheduling points; dara's library is not in its `LD_PRELOAD`: neither dara's
    /// launcher nor the preload's exec of an agent program passes it on).
    fn exec_call(&mut self, tid: i32, path: u64) {
        let pid = self.tracees[&tid].pid;
        let program = crate::ptrace::remote::read_c_string(pid, path).map(|p| as_seen_by(pid, tid, &p));
        match program {
            Ok(program) if program.is_file() => self.post(tid, Request::ProcessExec { via_agent: true }, Then::Exec),
            // A program that is not there, or a path that is no string: the kernel says so.
            _ => {
                if let Ok(regs) = crate::ptrace::remote::Registers::read(tid) {
                    self.run_call(tid, regs);
                }
            }
        }
    }

    /// The `execve` `tid` was granted: the new image's main thread gets a slot of the same
    /// logical process, which its exec stop takes ([`Agent::exec_stop`]); the call runs, looked
    /// at on return (only a failed exec returns).
    fn exec_granted(&mut self, tid: i32, regs: crate::ptrace::remote::Registers) {
        let header = self.region.header();
        let tracee = &self.tracees[&tid];
        let (pid, process, stop) = (tracee.pid, tracee.process, tracee.stop);
        let index = dara_abi::handoff::next_free(&header.next_slot);
        let Some(slot) = self.region.slot(index) else {
            finish::answer(tid, stop, regs, -(libc::EAGAIN as i64));
            return;
        };
        slot.process.store(process, std::sync::atomic::Ordering::Relaxed);
        slot.pid.store(pid as u32, std::sync::atomic::Ordering::Relaxed);
        // The new image starts with this thread's mask (see `exec_stop`), as a preload's exec
        // leaves it in the slot it claims.
        let mask = crate::ptrace::remote::signal_mask(tid).unwrap_or(0);
        slot.program_mask.store(mask, std::sync::atomic::Ordering::Relaxed);
        dara_abi::handoff::claim(slot);
        let allowed_ip = self.processes.allowed_ip.get(&process).copied();
        self.seized.insert(tid, SeizeRequest { tid: tid as u32, process: Some(process), exec_slot: Some(index), allowed_ip });
        self.tracees.get_mut(&tid).expect("granted tracee").exec_slot = Some(index);
        match stop {
            CallStop::Seccomp => resume_to_exit(tid),
            CallStop::Trapped { .. } => self.run_call(tid, regs),
        }
    }

    /// `tid`'s `execve` returned: it failed, and the slot claimed for the new image is given
    /// back. True if `tid` was making one.
    fn exec_failed(&mut self, tid: i32) -> bool {
        let Some(index) = self.tracees.get_mut(&tid).and_then(|t| t.exec_slot.take()) else { return false };
        self.seized.remove(&tid);
        if let Some(slot) = self.region.slot(index) {
            self.region.finish(slot);
        }
        true
    }

    /// The logical process of the agent's that the programs name `pid`, if there is one (a
    /// program only waits for its own children, which are the agent's too).
    fn logical_process(&self, pid: u32) -> Option<u32> {
        self.processes.seen_as.iter().find_map(|(&process, &seen)| (seen == pid).then_some(process))
    }

    /// A thread's `exit`: first what the kernel would do as it exits, clear its tid word and
    /// wake one waiter there (how a join learns of it), as a `FutexWake` the model sees; then
    /// its `ThreadExit`.
    fn exit_thread(&mut self, tid: i32, then: Then) {
        let tracee = self.tracees.get_mut(&tid).expect("a known tracee");
        let Some(word) = tracee.clear_tid.take() else {
            self.post(tid, Request::ThreadExit, then);
            return;
        };
        let _ = crate::ptrace::remote::write(tracee.pid, word, &0u32.to_le_bytes());
        let wake = Request::FutexWake { addr: dara_abi::Addr(word), count: 1, matching: dara_abi::FutexMatch { bitset: u32::MAX, shared: true } };
        self.post(tid, wake, Then::WokeJoiners);
    }

    /// A SIGSEGV on its way to `tid`: if it is the fault of a counter instruction (the
    /// launcher made the counter fault, `PR_TSC_SIGSEGV`), answered as a clock read and
    /// swallowed; true then.
    fn counter_read(&mut self, tid: i32) -> bool {
        let Some(tracee) = self.tracees.get(&tid) else { return false };
        let Ok(regs) = crate::ptrace::remote::Registers::read(tid) else { return false };
        let mut bytes = [0u8; 3];
        if crate::ptrace::remote::read(tracee.pid, regs.regs.rip, &mut bytes).is_err() {
            return false;
        }
        let Some(instruction) = dara_abi::counter::CounterRead::of_bytes(bytes) else { return false };
        self.clock_read(tid, regs, calls::ClockAnswer::Counter(instruction));
        true
    }

    /// A signal stop of `tid` while it single-steps a probed instruction: the probe is armed
    /// again either way. The step's own trap (`TRAP_TRACE`) is swallowed (true); any other
    /// signal came before the instruction ran (false: it is delivered as usual, and the thread
    /// reaches the probe again when its handler returns, a new scheduling point).
    fn step_ended(&mut self, tid: i32, signal: i32) -> bool {
        let Some(tracee) = self.tracees.get_mut(&tid) else { return false };
        let Some(addr) = tracee.stepping.take() else { return false };
        if let Some(probes) = self.processes.probes.get(&tracee.process) {
            let _ = probes.rearm(tid, addr);
        }
        if signal == libc::SIGTRAP && signal_code(tid) == Some(TRAP_TRACE) {
            resume(tid, 0);
            return true;
        }
        false
    }

    /// A SIGTRAP on its way to `tid`: a probe reached (a scheduling point); true then, and the
    /// signal is swallowed.
    fn probe_hit(&mut self, tid: i32) -> bool {
        let Some(tracee) = self.tracees.get(&tid) else { return false };
        let process = tracee.process;
        let Ok(mut regs) = crate::ptrace::remote::Registers::read(tid) else { return false };
        let addr = regs.regs.rip.wrapping_sub(1);
        if !self.processes.probes.get(&process).is_some_and(|p| p.at(addr)) {
            return false;
        }
        regs.regs.rip = addr;
        if regs.write().is_err() {
            return false;
        }
        if let Some((operand, size)) = self.processes.probes.get(&process).and_then(|p| p.atomic_access(addr, &regs.regs)) {
            self.atomic_reached(tid, addr, operand, size, regs);
            return true;
        }
        let yields = self.processes.probes.get(&process).is_some_and(|p| p.yields_at(addr));
        let request = if yields { Request::Yield } else { Request::Probe { at: dara_abi::Addr(addr) } };
        self.post(tid, request, Then::StepOver { addr });
        true
    }

    /// `tid` stopped at the atomic instruction at `addr`, which accesses `size` bytes at
    /// `operand` (`--preempt-on atomics`): a profiling run records the access, a search posts it
    /// as a `MemoryWrite` point when its granule is watched, as the preload does for the
    /// programs it runs (`dara_preload::atomics`); otherwise the thread goes straight on.
    fn atomic_reached(&mut self, tid: i32, addr: u64, operand: u64, size: u64, regs: crate::ptrace::remote::Registers) {
        let header = self.region.header();
        let table = self.region.access_table();
        let slot = self.tracees[&tid].slot;
        if header.preempt_flags & preempt::PROFILE != 0 {
            dara_abi::access::record(&table.entries, operand, slot, true);
            header.instrumented.fetch_or(dara_abi::instrumented::TRAPPED_ATOMIC, std::sync::atomic::Ordering::Relaxed);
        } else if header.preempt_flags & preempt::MEMORY != 0 && dara_abi::access::is_watched(&table.entries, operand) {
            self.post(tid, Request::MemoryWrite { addr: dara_abi::Addr(operand), size }, Then::StepOver { addr });
            return;
        }
        self.step_over(tid, addr, regs);
    }
    /// Lets stopped thread `tid` run the instruction under the probe at `addr` (its pc) and go
    /// on: at the instruction's copy out of line, else stepped in place with the probe disarmed.
    pub(super) fn step_over(&mut self, tid: i32, addr: u64, mut regs: crate::ptrace::remote::Registers) {
        let process = self.tracees[&tid].process;
        let probes = self.processes.probes.get(&process);
        if let Some(copy) = probes.and_then(|p| p.displaced(addr)) {
            regs.regs.rip = copy;
            if regs.write().is_ok() {
                resume(tid, 0);
                return;
            }
        }
        if probes.is_some_and(|p| p.disarm(tid, addr).is_ok()) {
            self.tracees.get_mut(&tid).expect("a stopped tracee").stepping = Some(addr);
            crate::ptrace::probes::single_step(tid);
        } else {
            resume(tid, 0);
        }
    }

    /// A clock read by `tid`: answered from its last grant (coarse steps, a few in a row) or
    /// posted as a `ClockRead`.
    fn clock_read(&mut self, tid: i32, regs: crate::ptrace::remote::Registers, answer: calls::ClockAnswer) {
        let epoch = self.region.header().realtime_epoch_ns.load(std::sync::atomic::Ordering::Relaxed);
        let tracee = self.tracees.get_mut(&tid).expect("a known tracee");
        if self.coarse && tracee.unposted_clock_reads < dara_abi::clock::READS_PER_POST {
            tracee.unposted_clock_reads += 1;
            let (pid, now, stop) = (tracee.pid, tracee.last_now, tracee.stop);
            finish::clock(tid, stop, pid, regs, answer, now, 0, epoch);
        } else {
            self.post(tid, Request::ClockRead, Then::Clock(answer));
        }
    }

    /// A creator stopped again while the child it claimed a slot for never came: its call
    /// failed, and the slot is given up (else the scheduler would wait for it).
    fn birth_failed(&mut self, tid: i32) {
        if let Some(birth) = self.tracees.get_mut(&tid).and_then(|t| t.birth.take()) {
            if let Some(slot) = self.region.slot(birth.slot()) {
                self.region.finish(slot);
            }
        }
    }

    /// `tid` created a thread or process (named by the event message). A new process is known by
    /// the pid the programs see from here on: its creator goes on only after this stop, and may
    /// name it at once (`kill $!`), before the child's own first stop comes to the agent (before,
    /// whether the shell's kill named process 1 or an untraced pid followed that race, and a
    /// replay of `busybox sh -c 'sleep 5 & kill $!'` diverged).
    fn creation_stop(&mut self, tid: i32) {
        let child = event_message(tid) as i32;
        if let Some(birth) = self.tracees.get_mut(&tid).and_then(|t| t.birth.take()) {
            if let Birth::Process { process, .. } = birth {
                self.processes.known_as(process, child);
            }
            self.expected.insert(child, birth);
            if self.early.remove(&child) {
                self.born(child);
            }
        }
        resume(tid, 0);
    }

    /// An attached child's first stop, or a group stop of a tracee.
    fn first_or_group_stop(&mut self, tid: i32) {
        if self.expected.contains_key(&tid) {
            self.born(tid);
        } else if self.tracees.contains_key(&tid) || self.seized.contains_key(&tid) {
            resume(tid, 0);
        } else {
            self.early.insert(tid);
        }
    }

    /// Child `tid` has stopped for the first time: it takes the slot its creator claimed and
    /// posts its start, as a thread the preload starts does.
    fn born(&mut self, tid: i32) {
        let Some(birth) = self.expected.remove(&tid) else { return };
        let Some(slot) = self.region.slot(birth.slot()) else { return };
        let (pid, process, request) = match birth {
            Birth::Thread { creator, pid, process, .. } => (pid, process, Request::ThreadStart { creator }),
            Birth::Process { parent, process, .. } => {
                self.processes.started(process, tid, &self.region);
                // Its memory is a copy of its parent's, probes and stub included, and it has its
                // parent's seccomp filters: an image it execs needs the stub where the preload's
                // inherited filter lets calls through (a fork of a static program that a preload
                // exec'd, running `cat`, jumped to an unmapped stub before).
                if let Some(probes) = self.processes.probes.get(&parent).cloned() {
                    self.processes.probes.insert(process, probes);
                }
                if let Some(stub) = self.processes.stubs.get(&parent).copied() {
                    self.processes.stubs.insert(process, stub);
                }
                if let Some(ip) = self.processes.allowed_ip.get(&parent).copied() {
                    self.processes.allowed_ip.insert(process, ip);
                }
                self.processes.listeners.forked(parent, process);
                (tid, process, Request::ProcessStart { parent: Some(parent), kind: StartKind::Fork })
            }
        };
        slot.pid.store(pid as u32, std::sync::atomic::Ordering::Relaxed);
        slot.tid.store(tid as u32, std::sync::atomic::Ordering::Relaxed);
        let last_now = self.tracees.values().find(|t| t.process == process || t.pid == pid).map_or(0, |t| t.last_now);
        let mut tracee = Tracee::new(pid, birth.slot(), process, last_now);
        if let Birth::Thread { clear_tid, .. } = birth {
            tracee.clear_tid = clear_tid;
        }
        // Made through the stub, it starts at the stub's int3, like its creator.
        tracee.in_stub = birth.via_stub();
        self.tracees.insert(tid, tracee);
        self.post(tid, request, Then::Started);
    }

    /// The launched command's exec into the program: it becomes a process of the execution.
    /// The exec of a thread that asked to be traced: a command dara launched becomes a new
    /// process; a preload's process keeps its logical process and takes the slot its preload
    /// claimed for the new image (the exec'ing thread may not be the main one: the kernel gives
    /// it the process's pid, and names its former tid in the event message).
    fn exec_stop(&mut self, tid: i32) {
        let former = event_message(tid) as i32;
        if former != tid {
            // The exec'ing thread took the process's pid: its former tid is gone.
            self.tracees.remove(&former);
        }
        let Some(request) = self.seized.remove(&former).or_else(|| self.seized.remove(&tid)) else {
            // An exec of a process already known: refused at its execve stop, so not reached.
            resume(tid, 0);
            return;
        };
        let header = self.region.header();
        let (process, index, kind) = match (request.process, request.exec_slot) {
            (Some(process), Some(slot)) => (process, slot, StartKind::Exec),
            _ => (header.next_process.fetch_add(1, std::sync::atomic::Ordering::AcqRel), dara_abi::handoff::next_free(&header.next_slot), StartKind::Launched),
        };
        let Some(slot) = self.region.slot(index) else { return };
        slot.process.store(process, std::sync::atomic::Ordering::Relaxed);
        slot.pid.store(tid as u32, std::sync::atomic::Ordering::Relaxed);
        slot.tid.store(tid as u32, std::sync::atomic::Ordering::Relaxed);
        if kind == StartKind::Launched {
            dara_abi::handoff::claim(slot);
            self.processes.started(process, tid, &self.region);
        } else {
            // The exec'ing thread left the program's mask at its execve in the slot; the
            // thread's mask at the exec was dara's (a preload's SIGSYS handler, parked).
            let mask = slot.program_mask.load(std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = crate::ptrace::remote::set_signal_mask(tid, mask) {
                eprintln!("dara-agent: cannot set the signal mask of process {tid} after its exec: {e}");
            }
        }
        if let Some(ip) = request.allowed_ip {
            self.processes.allowed_ip.insert(process, ip);
        }
        self.processes.listeners.new_image(process);
        let mut tracee = Tracee::new(tid, index, process, 0);
        tracee.fresh_image = true;
        self.tracees.insert(tid, tracee);
        self.post(tid, Request::ProcessStart { parent: None, kind }, Then::Started);
    }

    /// A call run with a look at its result came back (see [`Then::ReadyWait`]).
    fn syscall_exit_stop(&mut self, tid: i32) {
        if self.kill_returned(tid) {
            return;
        }
        if let Some(after) = self.tracees.get_mut(&tid).and_then(|t| t.after.take()) {
            self.after_call(tid, after);
            return;
        }
        if self.exec_failed(tid) {
            resume(tid, 0);
            return;
        }
        let Some(check) = self.tracees.get_mut(&tid).and_then(|t| t.exit_check.take()) else {
            resume(tid, 0);
            return;
        };
        let Ok(mut regs) = crate::ptrace::remote::Registers::read(tid) else { return };
        let pid = self.tracees[&tid].pid;
        // A blocking wait that found nothing is made again: it stops at the filter and posts.
        finish::ready_wait_came_back(pid, &mut regs, check);
        resume(tid, 0);
    }
}

/// Makes every change of a tracee's state (a stop, an exit, a kill from outside) end the agent's
/// futex wait at once: the kernel sends the tracer SIGCHLD for each, and a handler installed
/// without `SA_RESTART` makes `futex_waitv` return EINTR. (A SIGCHLD that comes between the
/// agent's last `waitpid` and its wait is seen by the next timed look, 50 ms later.)
fn wake_on_child_events() {
    extern "C" fn noted(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction is "no flags, empty mask"; the handler does nothing, so it is
    // async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = noted as extern "C" fn(libc::c_int) as usize;
        libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut());
    }
}

/// Resumes a stopped tracee, delivering `signal` (0: none).
pub(crate) fn resume(tid: i32, signal: i32) {
    // SAFETY: PTRACE_CONT takes a pid and a signal number; no memory is passed.
    unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0usize, signal as usize) };
}

/// Makes the main thread `tid`, granted its `exit`, stop once more as it exits
/// (`PTRACE_EVENT_EXIT`; see [`Agent::leader_exit_stop`]). Only for a main thread: any other
/// thread's end is reported as it happens.
fn report_leader_exit(tid: i32) {
    // SAFETY: PTRACE_SETOPTIONS takes a stopped tracee's tid and an option mask; no memory.
    unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, tid, 0usize, (OPTIONS | libc::PTRACE_O_TRACEEXIT) as usize) };
}

/// Resumes a stopped tracee until the end of the call it is in.
pub(crate) fn resume_to_exit(tid: i32) {
    // SAFETY: PTRACE_SYSCALL takes a pid and a signal number; no memory is passed.
    unsafe { libc::ptrace(libc::PTRACE_SYSCALL, tid, 0usize, 0usize) };
}

/// `si_code` of a single-step trap.
const TRAP_TRACE: i32 = 2;

/// The `si_code` of the signal `tid` is stopped with.
fn signal_code(tid: i32) -> Option<i32> {
    // SAFETY: all-zero is a valid siginfo_t; PTRACE_GETSIGINFO fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes one siginfo_t into the live local.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, tid, 0usize, &mut info as *mut libc::siginfo_t) };
    (rc == 0).then_some(info.si_code)
}

/// The event message of `tid`'s last ptrace event (a new child's pid, a former thread id).
fn event_message(tid: i32) -> u64 {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: the kernel writes one unsigned long into the live local.
    unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0usize, &mut msg as *mut libc::c_ulong) };
    msg
}

/// The next report of any tracee (`flags`: WNOHANG or 0); None when there is none to wait for.
fn wait_event(flags: i32) -> Option<(i32, i32)> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into the live local.
        let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | flags) };
        match tid {
            0 => return None,
            -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            -1 => return None,
            tid => return Some((tid, status)),
        }
    }
}

/// The file `path` names for thread `tid` of process `pid`, as the agent can open it: relative
/// to the thread's working directory, and `/proc/self` or `/proc/thread-self` as the thread's
/// own (busybox's shell runs its applets by exec'ing `/proc/self/exe`, which the agent would
/// otherwise read as its own executable).
fn as_seen_by(pid: i32, tid: i32, path: &str) -> std::path::PathBuf {
    if let Some(rest) = path.strip_prefix("/proc/self/") {
        return format!("/proc/{pid}/{rest}").into();
    }
    if let Some(rest) = path.strip_prefix("/proc/thread-self/") {
        return format!("/proc/{pid}/task/{tid}/{rest}").into();
    }
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        // The thread's own: the main thread's is unreadable once it has ended.
        std::path::Path::new(&format!("/proc/{pid}/task/{tid}/cwd")).join(p)
    }
}

/// A SIGSEGV on its way to `tid`: if it is the fault of a `cpuid` (the agent made `cpuid` fault
/// at the process's exec, see `prepare_image`), answered as the preload answers it, the random
/// number instructions hidden (`dara_abi::cpuid`), the instruction stepped over and the signal
/// swallowed; true then.
fn cpuid_answered(tid: i32) -> bool {
    use dara_abi::cpuid::{CpuidAnswer, CPUID};
    let Ok(mut regs) = crate::ptrace::remote::Registers::read(tid) else { return false };
    let mut bytes = [0u8; 2];
    if crate::ptrace::remote::read(tid, regs.regs.rip, &mut bytes).is_err() || bytes != CPUID {
        return false;
    }
    let (leaf, subleaf) = (regs.regs.rax as u32, regs.regs.rcx as u32);
    // The agent's own `cpuid` runs: only the traced processes fault on it.
    let real = core::arch::x86_64::__cpuid_count(leaf, subleaf);
    let answer = CpuidAnswer { eax: real.eax, ebx: real.ebx, ecx: real.ecx, edx: real.edx }.for_program(leaf, subleaf);
    // cpuid writes the low 32 bits and zeroes the high ones.
    let r = &mut regs.regs;
    (r.rax, r.rbx, r.rcx, r.rdx) = (u64::from(answer.eax), u64::from(answer.ebx), u64::from(answer.ecx), u64::from(answer.edx));
    r.rip += CPUID.len() as u64;
    if regs.write().is_err() {
        return false;
    }
    resume(tid, 0);
    true
}
