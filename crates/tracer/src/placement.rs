//! Which CPU a thread or process runs on: an execution's threads, dara's and the target's, share
//! one CPU (a futex handoff across CPUs costs about ten times one on a CPU: DESIGN.md, 2.1).
//! Async-signal-safe: also called between fork and exec.

/// Pins thread or process `tid` (0: the calling thread) to `cpu`. Failure (an offline CPU, a
/// thread that has ended) only costs speed, so it is not reported.
pub fn pin(tid: libc::pid_t, cpu: usize) {
    // SAFETY: cpu_set_t is plain data, zeroed then filled by CPU_SET; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
