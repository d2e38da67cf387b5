//! Finishing a call: what the agent does to a stopped tracee once the call's answer is known
//! (on the spot, or from the scheduler's grant): set its result and skip the call, run it for
//! real, or run it and look at what it returned. Also what a fresh program image gets before
//! its first instruction: its `AT_RANDOM` bytes from the run's seed, and no vDSO.
use dara_abi::clock::{self, ClockBase};
use dara_abi::{Request, Unsupported};

use super::calls::{ClockAnswer, Then, Vfork};
use super::tracees::{Birth, CallStop, ExitCheck};
use super::whole_grant::Taken;
use super::{resume, resume_to_exit, Agent};
use crate::ptrace::remote::{self, Registers};

const NS_PER_SEC: u64 = 1_000_000_000;
/// What a sleep or wait a signal ended returns.
const INTERRUPTED: i64 = -(libc::EINTR as i64);

/// Makes the call `tid` stopped in return `value` without running it, and resumes it.
pub fn answer(tid: i32, stop: CallStop, mut regs: Registers, value: i64) {
    let done = match stop {
        CallStop::Seccomp => regs.skip_with(value),
        // The call did not run; the thread is past it already.
        CallStop::Trapped { .. } => {
            regs.regs.rax = value as u64;
            regs.write()
        }
    };
    if done.is_ok() {
        resume(tid, 0);
    }
}

/// Answers a clock read at virtual time `now` (realtime clocks shifted by `skew` ns).
pub fn clock(tid: i32, stop: CallStop, pid: i32, mut regs: Registers, how: ClockAnswer, now: u64, skew: i64, epoch: u64) {
    let read = |base: ClockBase| {
        let reading = base.read_at(now, epoch);
        if base == ClockBase::Realtime {
            reading.saturating_add_signed(skew)
        } else {
            reading
        }
    };
    let efault = -(libc::EFAULT as i64);
    let value = match how {
        ClockAnswer::Timespec { base, addr } => match remote::write_pair(pid, addr, clock::ns_timespec(read(base))) {
            Ok(()) => 0,
            Err(_) => efault,
        },
        ClockAnswer::Timeval { tv, tz } => {
            let ns = read(ClockBase::Realtime);
            let tv_ok = tv == 0 || remote::write_pair(pid, tv, ((ns / NS_PER_SEC) as i64, (ns % NS_PER_SEC / 1_000) as i64)).is_ok();
            let tz_ok = tz == 0 || remote::write(pid, tz, &[0u8; 8]).is_ok();
            if tv_ok && tz_ok {
                0
            } else {
                efault
            }
        }
        ClockAnswer::Counter(instruction) => {
            let ticks = read(ClockBase::Monotonic);
            regs.regs.rax = ticks & 0xffff_ffff;
            regs.regs.rdx = ticks >> 32;
            if instruction == dara_abi::counter::CounterRead::Rdtscp {
                regs.regs.rcx = 0; // the CPU getcpu reports
            }
            regs.regs.rip += instruction.len() as u64;
            if regs.write().is_ok() {
                resume(tid, 0);
            }
            return;
        }
        ClockAnswer::Seconds { addr } => {
            let secs = (read(ClockBase::Realtime) / NS_PER_SEC) as i64;
            if addr == 0 || remote::write(pid, addr, &secs.to_le_bytes()).is_ok() {
                secs
            } else {
                efault
            }
        }
    };
    answer(tid, stop, regs, value);
}

/// `sched_getaffinity` as dara shows it: CPUs 0..cpus, in a mask of `size` bytes at `addr`.
pub fn affinity(pid: i32, addr: u64, size: u64, cpus: u32) -> i64 {
    // The kernel's mask is a whole number of longs: 8 bytes for up to 64 CPUs.
    let bytes = (cpus.max(1) as usize).div_ceil(64) * 8;
    if (size as usize) < bytes {
        return -(libc::EINVAL as i64);
    }
    let mut mask = vec![0u8; bytes];
    for cpu in 0..cpus.max(1) as usize {
        mask[cpu / 8] |= 1 << (cpu % 8);
    }
    match remote::write(pid, addr, &mask) {
        Ok(()) => bytes as i64,
        Err(_) => -(libc::EFAULT as i64),
    }
}

/// A wait run with a zero timeout came back: a blocking one that found nothing is set up to be
/// made again (it stops at the filter and posts again); ready events are put in the order of
/// their data words, as the preload orders them.
pub fn ready_wait_came_back(pid: i32, regs: &mut Registers, check: ExitCheck) {
    let result = regs.result();
    if let Some(select) = check.select {
        match super::select::came_back(pid, &select, result, check.only_entry) {
            Some(value) => regs.regs.rax = value as u64,
            None if check.interrupted => regs.regs.rax = INTERRUPTED as u64,
            None => {
                // Made again as the program made it: its own number and arguments.
                for (i, &arg) in select.call.args.iter().enumerate() {
                    let _ = regs.set_arg(i, arg);
                }
                let _ = regs.restart(select.call.nr);
                return;
            }
        }
        let _ = regs.write();
        return;
    }
    if result == 0 && check.blocking && check.interrupted {
        // A signal ended the wait and nothing was ready: EINTR (the handler runs next).
        regs.regs.rax = INTERRUPTED as u64;
        let _ = regs.write();
        return;
    }
    if result == 0 && check.blocking {
        let _ = regs.restart(check.nr).and_then(|()| regs.set_arg(check.timeout_arg, check.timeout));
        return;
    }
    let is_epoll = matches!(check.nr, libc::SYS_epoll_wait | libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2);
    if is_epoll && result > 1 {
        sort_epoll_events(pid, regs.syscall().args[1], result as usize);
    }
    if let (Some(keep), true) = (check.only_entry, result > 1) {
        let args = regs.syscall().args;
        if keep_only_entry(pid, args[0], args[1], keep) {
            regs.regs.rax = 1;
        }
    }
    let _ = regs.write();
}

/// A zeroed `timespec` the call stopped in `regs` can be given as its timeout: below the
/// thread's stack pointer and the 128 bytes of red zone its code may use there (where a signal
/// frame would go: memory nothing else holds). None when it cannot be written.
fn zero_timespec(pid: i32, regs: &Registers) -> Option<u64> {
    let at = (regs.regs.rsp - 128 - 16) & !15;
    remote::write(pid, at, &[0u8; 16]).ok().map(|()| at)
}

/// `struct pollfd`: descriptor, events, revents (at byte 6).
const POLLFD_BYTES: usize = 8;

/// Clears the `revents` of every ready entry of the `count` `pollfd`s at `addr` but the
/// `keep`-th ready one, as the preload's `keep_only`; false if they could not be rewritten.
fn keep_only_entry(pid: i32, addr: u64, count: u64, keep: usize) -> bool {
    let mut raw = vec![0u8; (count as usize).min(1 << 16) * POLLFD_BYTES];
    if remote::read(pid, addr, &mut raw).is_err() {
        return false;
    }
    let mut seen = 0;
    for entry in raw.chunks_mut(POLLFD_BYTES) {
        if entry[6..8] != [0, 0] {
            if seen != keep {
                entry[6..8].fill(0);
            }
            seen += 1;
        }
    }
    remote::write(pid, addr, &raw).is_ok()
}

/// `struct epoll_event` is packed on x86-64: a 32-bit mask then the 64-bit data word.
const EPOLL_EVENT_BYTES: usize = 12;

fn sort_epoll_events(pid: i32, addr: u64, count: usize) {
    let mut raw = vec![0u8; count * EPOLL_EVENT_BYTES];
    if remote::read(pid, addr, &mut raw).is_err() {
        return;
    }
    let mut events: Vec<&[u8]> = raw.chunks(EPOLL_EVENT_BYTES).collect();
    events.sort_by_key(|e| u64::from_le_bytes(e[4..12].try_into().expect("8 bytes")));
    let sorted: Vec<u8> = events.concat();
    let _ = remote::write(pid, addr, &sorted);
}

impl Agent {
    /// Finishes the call `tid` posted, now that it was granted with `result`.
    pub(super) fn finish(&mut self, tid: i32, then: Then, result: i64) {
        let Ok(mut regs) = Registers::read(tid) else { return };
        let (pid, now, stop) = (self.tracees[&tid].pid, self.tracees[&tid].last_now, self.tracees[&tid].stop);
        match then {
            Then::Return => answer(tid, stop, regs, result),
            Then::Slept => answer(tid, stop, regs, if result == INTERRUPTED { INTERRUPTED } else { 0 }),
            Then::Run => {
                // A connect to an outside peer dara relays for goes to dara's socket instead.
                if !self.send_to_relay(tid, &mut regs) {
                    self.run_call(tid, regs);
                }
            }
            Then::Receive { timed: true, .. } if result == -(libc::EAGAIN as i64) => answer(tid, stop, regs, result),
            Then::Receive { into: Some(buf), len_arg, .. } => {
                // Not all queued yet: the agent takes the grant for the program (`whole_grant`).
                let call = regs.syscall();
                let most = dara_abi::request::grant_limit(result).map(|n| n.min(call.args[2]) as usize);
                let fd = call.args[0] as i32;
                match most.and_then(|most| Some((most, super::whole_grant::take(pid, fd, buf, most)?))) {
                    Some((_, Taken::Answer(value))) => answer(tid, stop, regs, value),
                    Some((most, Taken::Stalled(received))) => {
                        // Never granted: the run ends at this post.
                        let stalled = Unsupported::GrantStalled { fd, granted: most as u32, received: received as u32 };
                        self.post(tid, Request::Unsupported(stalled), Then::Return);
                    }
                    None => self.run_cut(tid, regs, len_arg, result),
                }
            }
            Then::Receive { len_arg, .. } | Then::Send { len_arg } => self.run_cut(tid, regs, len_arg, result),
            Then::Started => {
                if std::mem::take(&mut self.tracees.get_mut(&tid).expect("granted tracee").fresh_image) {
                    self.prepare_image(tid, pid, &regs);
                }
                resume(tid, 0);
            }
            Then::Clock(how) => {
                let epoch = self.region.header().realtime_epoch_ns.load(std::sync::atomic::Ordering::Relaxed);
                clock(tid, stop, pid, regs, how, now, result, epoch);
            }
            Then::CreateThread | Then::CreateProcess { .. } if result != 0 => answer(tid, stop, regs, -result.abs()),
            Then::CreateThread => {
                // The kernel would clear and wake the new thread's tid word as it exits, a wake
                // the scheduler would not see (a join waits on that word): the agent does it
                // itself at the thread's exit, as a scheduling point.
                let call = regs.syscall();
                let clears = call.args[0] & libc::CLONE_CHILD_CLEARTID as u64 != 0;
                let clear_tid = clears.then_some(call.args[3]);
                if clears && regs.set_arg(0, call.args[0] & !(libc::CLONE_CHILD_CLEARTID as u64)).is_err() {
                    return;
                }
                if let Some(mut birth) = self.claim_child(tid, true) {
                    if let Birth::Thread { clear_tid: ref mut slot_clear, .. } = birth {
                        *slot_clear = clear_tid;
                    }
                    self.tracees.get_mut(&tid).expect("granted tracee").birth = Some(birth);
                }
                self.run_call(tid, regs);
            }
            Then::StepOver { addr } => self.step_over(tid, addr, regs),
            Then::SwapTwin { fd, twin, cloexec } => self.swap_twin(tid, fd, twin, cloexec),
            Then::WokeJoiners => self.post(tid, dara_abi::Request::ThreadExit, Then::ExitThread),
            Then::CreateProcess { vfork } => {
                let made_fork = match (vfork, stop) {
                    (Vfork::No, _) => Ok(()),
                    (Vfork::Call, CallStop::Trapped { ret, .. }) => {
                        self.tracees.get_mut(&tid).expect("granted tracee").stop = CallStop::Trapped { nr: libc::SYS_fork, ret };
                        Ok(())
                    }
                    (Vfork::Call, CallStop::Seccomp) => regs.set_nr(libc::SYS_fork),
                    (Vfork::CloneFlags, _) => {
                        let flags = regs.syscall().args[0] & !((libc::CLONE_VM | libc::CLONE_VFORK) as u64);
                        regs.set_arg(0, flags)
                    }
                };
                if made_fork.is_ok() {
                    if let Some(birth) = self.claim_child(tid, false) {
                        self.tracees.get_mut(&tid).expect("granted tracee").birth = Some(birth);
                    }
                }
                self.run_call(tid, regs);
            }
            Then::ExitThread => {
                let tracee = self.tracees.get_mut(&tid).expect("granted tracee");
                tracee.exiting = true;
                if tid == tracee.pid {
                    super::report_leader_exit(tid);
                }
                self.run_call(tid, regs);
            }
            Then::ReadyWait { timeout_arg, blocking, timespec } => {
                if result == 0 && blocking {
                    answer(tid, stop, regs, 0); // the timeout came first
                    return;
                }
                let call = regs.syscall();
                let nr = match stop {
                    CallStop::Trapped { nr, .. } => nr,
                    CallStop::Seccomp => call.nr,
                };
                // A poll's grant of 2 + k: the program sees only its k-th ready entry.
                let polls = matches!(nr, libc::SYS_poll | libc::SYS_ppoll);
                let only_entry = (polls && result >= 2).then(|| (result - 2) as usize);
                let interrupted = result == INTERRUPTED;
                if let Some(check) = interrupted.then(|| interrupted_epoll_as_ppoll(pid, &mut regs, nr)).flatten() {
                    self.run_as(tid, stop, regs, libc::SYS_ppoll, check);
                    return;
                }
                let check = ExitCheck { nr, timeout_arg, timeout: call.args[timeout_arg], blocking, only_entry, select: None, interrupted };
                let zero = if timespec { zero_timespec(pid, &regs) } else { Some(0) };
                if zero.is_some_and(|z| regs.set_arg(timeout_arg, z).is_ok()) {
                    self.tracees.get_mut(&tid).expect("granted tracee").exit_check = Some(check);
                    match stop {
                        CallStop::Seccomp => resume_to_exit(tid),
                        CallStop::Trapped { .. } => self.run_call(tid, regs),
                    }
                }
            }
            Then::Select(select) => {
                if result == 0 && select.blocking {
                    answer(tid, stop, regs, super::select::timed_out(pid, &select)); // the timeout came first
                    return;
                }
                // Run as `poll(entries, count, 0)` (a `ppoll` under a `pselect6`'s mask), looked
                // at on return.
                let only_entry = (result >= 2).then(|| (result - 2) as usize);
                let check = ExitCheck { nr: libc::SYS_poll, timeout_arg: 2, timeout: 0, blocking: select.blocking, only_entry, select: Some(select), interrupted: result == INTERRUPTED };
                let Some((nr, args)) = super::select::as_poll(pid, &select) else { return };
                if args.into_iter().enumerate().try_for_each(|(i, arg)| regs.set_arg(i, arg)).is_err() {
                    return;
                }
                self.run_as(tid, stop, regs, nr, check);
            }
            Then::Exec => self.exec_granted(tid, regs),
            Then::Transfer(step) => self.transfer_granted(tid, regs, step, result),
            Then::Kill => self.kill_granted(tid, regs, result),
            Then::SigSuspend { mask } => match super::signals::suspend_granted(pid, tid, mask) {
                super::signals::Ending::Run => self.run_call(tid, regs),
                super::signals::Ending::Return(value) => answer(tid, stop, regs, value),
            },
            Then::SigWait { set } => match super::signals::wait_granted(pid, tid, set, result) {
                super::signals::Ending::Run => self.run_call(tid, regs),
                super::signals::Ending::Return(value) => answer(tid, stop, regs, value),
            },
            Then::Collect(wait) => match result {
                collect if collect > 0 => {
                    let Some(&child) = self.processes.seen_as.get(&(collect as u32 - 1)) else {
                        answer(tid, stop, regs, -(libc::ECHILD as i64));
                        return;
                    };
                    // Collect exactly the child the model chose; it has exited, so this never
                    // blocks.
                    let args = wait.collect(regs.syscall().args, child);
                    for (i, &arg) in args.iter().enumerate() {
                        if regs.set_arg(i, arg).is_err() {
                            return;
                        }
                    }
                    self.run_call(tid, regs);
                }
                0 => {
                    if let Some((info, size)) = wait.info_to_clear(regs.syscall().args) {
                        let _ = remote::write(pid, info, &vec![0u8; size]);
                    }
                    answer(tid, stop, regs, 0);
                }
                err => answer(tid, stop, regs, err),
            },
        }
    }

    /// Runs the granted call as call `nr` (its arguments already rewritten in `regs`), looked at
    /// on return with `check`.
    fn run_as(&mut self, tid: i32, stop: CallStop, mut regs: Registers, nr: i64, check: ExitCheck) {
        self.tracees.get_mut(&tid).expect("granted tracee").exit_check = Some(check);
        match stop {
            CallStop::Seccomp => {
                if regs.set_nr(nr).is_ok() {
                    resume_to_exit(tid);
                }
            }
            CallStop::Trapped { ret, .. } => {
                self.tracees.get_mut(&tid).expect("granted tracee").stop = CallStop::Trapped { nr, ret };
                self.run_call(tid, regs);
            }
        }
    }

    /// Runs a granted receive or send, its length argument `len_arg` (if it names one) cut to
    /// the most bytes the grant `result` lets it move.
    fn run_cut(&mut self, tid: i32, mut regs: Registers, len_arg: Option<usize>, result: i64) {
        if let (Some(arg), Some(most)) = (len_arg, dara_abi::request::grant_limit(result)) {
            if most < regs.syscall().args[arg] && regs.set_arg(arg, most).is_err() {
                return;
            }
        }
        if !self.send_to_relay(tid, &mut regs) && !self.peer_shown_on_return(tid, &regs) {
            self.run_call(tid, regs);
        }
    }

    /// Lets the call `tid` stopped in run for real: on at the agent's filter; from the process's
    /// stub at the preload's (the thread goes on at `ret` once the stub's `int3` stops it).
    pub(super) fn run_call(&mut self, tid: i32, mut regs: Registers) {
        let tracee = self.tracees.get_mut(&tid).expect("a known tracee");
        let CallStop::Trapped { nr, ret } = tracee.stop else {
            resume(tid, 0);
            return;
        };
        let Some(&stub) = self.processes.stubs.get(&tracee.process) else {
            answer(tid, tracee.stop, regs, -(libc::ENOSYS as i64));
            return;
        };
        regs.regs.rax = nr as u64;
        regs.regs.orig_rax = u64::MAX;
        regs.regs.rip = stub - 2;
        tracee.in_stub = Some(ret);
        if regs.write().is_ok() {
            resume(tid, 0);
        }
    }

    /// Claims the slot (and for a process, the logical process) of the child `tid` is about to
    /// create, as the preload's hooks do after their `ThreadCreate`/`ProcessFork` grant.
    fn claim_child(&mut self, tid: i32, thread: bool) -> Option<Birth> {
        let header = self.region.header();
        let creator = &self.tracees[&tid];
        let index = dara_abi::handoff::next_free(&header.next_slot);
        let slot = self.region.slot(index)?;
        let via_stub = match creator.stop {
            CallStop::Trapped { ret, .. } => Some(ret),
            CallStop::Seccomp => None,
        };
        let birth = if thread {
            Birth::Thread { slot: index, creator: creator.slot, pid: creator.pid, process: creator.process, clear_tid: None, via_stub }
        } else {
            let process = header.next_process.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            Birth::Process { slot: index, parent: creator.process, process, via_stub }
        };
        let (process, pid) = match birth {
            Birth::Thread { process, pid, .. } => (process, pid),
            Birth::Process { process, .. } => (process, 0),
        };
        slot.process.store(process, std::sync::atomic::Ordering::Relaxed);
        slot.pid.store(pid as u32, std::sync::atomic::Ordering::Relaxed);
        dara_abi::handoff::claim(slot);
        Some(birth)
    }

    /// Before a fresh image's first instruction: its `AT_RANDOM` bytes come from the process's
    /// stream (glibc's stack guard, Go's map seeds and `fastrand`), and the vDSO is hidden from
    /// it (`AT_SYSINFO_EHDR` becomes `AT_IGNORE`), so its clock reads are system calls the
    /// filter stops.
    fn prepare_image(&mut self, tid: i32, pid: i32, regs: &Registers) {
        let process = self.tracees[&tid].process;
        let mut entry = None;
        for (_, kind, value, at) in crate::ptrace::auxv::entries(pid, regs.regs.rsp) {
            match kind {
                libc::AT_RANDOM => {
                    self.processes.fill_random(process, pid, &[(value, 16)], &self.region);
                }
                libc::AT_SYSINFO_EHDR => crate::ptrace::auxv::ignore(pid, at),
                libc::AT_ENTRY => entry = Some(value),
                _ => {}
            }
        }
        // The program's own synchronisation functions become preemption points; a
        // position-independent program is loaded above its link addresses by AT_ENTRY - e_entry.
        let mut at_exec = match crate::ptrace::inject::AtExec::begin(tid) {
            Ok(at_exec) => at_exec,
            Err(e) => {
                eprintln!("dara-agent: cannot prepare process {pid} after its exec: {e}");
                return;
            }
        };
        // `cpuid` faults from the image's first instruction on, so that dara answers it with the
        // random-number instructions hidden (`cpuid_answered`); `execve` had reset the setting.
        // Where the CPU cannot fault on `cpuid` they stay visible (docs/determinism.md).
        let _ = at_exec.syscall(libc::SYS_arch_prctl, [dara_abi::cpuid::ARCH_SET_CPUID, dara_abi::cpuid::CPUID_FAULTS, 0, 0, 0, 0]);
        if let Ok(exe) = std::fs::read(format!("/proc/{pid}/exe")) {
            let linked_entry = goblin::elf::Elf::parse(&exe).map(|e| e.header.e_entry).unwrap_or(0);
            let bias = entry.map_or(0, |e| e.wrapping_sub(linked_entry));
            let set = if self.coarse { crate::ptrace::probes::ProbeSet::Spins } else { crate::ptrace::probes::ProbeSet::All };
            let atomics = self.region.header().preempt_flags & dara_abi::preempt::ATOMICS != 0;
            let probes = crate::ptrace::probes::Probes::arm(&mut at_exec, tid, &exe, bias, set, atomics);
            self.processes.probes.insert(process, probes);
        }
        // An image exec'd by a preload keeps the preload's filter: the calls it traps are made
        // from a stub at the one address it lets through.
        if let Some(&allowed_ip) = self.processes.allowed_ip.get(&process) {
            match crate::ptrace::inject::map_stub(&mut at_exec, allowed_ip) {
                Ok(stub) => {
                    self.processes.stubs.insert(process, stub);
                }
                Err(e) => eprintln!("dara-agent: cannot map the call stub into process {pid}: {e}"),
            }
        }
    }
}

/// An `epoll_pwait` or `epoll_pwait2` whose wait a signal ended (an `Interrupt` grant) and that
/// gives its own signal mask, its arguments rewritten for `ppoll(NULL, 0, {0, 0}, mask)`: the
/// check for its return, or None (nothing rewritten) for any other call. With a zero timeout
/// `epoll_pwait` returns 0 before it looks for signals and puts the thread's mask back, so the
/// signal its mask let through stayed pending and its handler never ran (make's jobserver
/// pattern, `masked_wait_sigchld.c epoll_pwait`); `ppoll` looks, returns EINTR under the call's
/// mask, and the handler runs as it would have in the real wait.
fn interrupted_epoll_as_ppoll(pid: i32, regs: &mut Registers, nr: i64) -> Option<ExitCheck> {
    let args = regs.syscall().args;
    if !matches!(nr, libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2) || args[4] == 0 {
        return None;
    }
    let zero = zero_timespec(pid, regs)?;
    [0, 0, zero, args[4], args[5]].into_iter().enumerate().try_for_each(|(i, arg)| regs.set_arg(i, arg)).ok()?;
    Some(ExitCheck { nr: libc::SYS_ppoll, timeout_arg: 2, timeout: 0, blocking: true, only_entry: None, select: None, interrupted: true })
}
