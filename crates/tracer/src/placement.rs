//! Which CPU a thread or process runs on: an execution's threads, dara's and the target's, share
//! one CPU (a futex handoff across CPUs costs about ten times one on a CPU: DESIGN.md, 2.1).
//! Async-signal-safe: also called between fork and exec.

/// Pins thread or process `tid` (0: the calling thread) to `cpu`. Failure (an offline CPU, a
/// thread that has ended) only costs speed, so it is not reported.
pub fn pin(tid: libc::pid_t, cpu: usize) {
    pin_to(tid, &[cpu]);
}

/// Lets thread or process `tid` (0: the calling thread) run on `cpus` only (none: left alone).
pub fn pin_to(tid: libc::pid_t, cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: cpu_set_t is plain data, zeroed then filled by CPU_SET; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Makes the calling thread one that waits for the CPU it is woken on rather than taking it from
/// the thread that woke it (`SCHED_BATCH`): for a helper whose wake-ups are not urgent (the
/// output thread: a program's write, or dara closing the pipes one after another at the end,
/// would otherwise switch to it at each). Failure only costs speed.
pub fn never_preempt() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads the live param; SCHED_BATCH needs no privilege.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
}

/// Lets thread or process `tid` run where the calling thread may.
pub fn share_own(tid: libc::pid_t) {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it, sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

