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

/// Pins `thread` (one of dara's, started or not yet) to `cpu`; as [`pin`], failure only costs speed.
pub fn pin_thread<T>(thread: &std::thread::JoinHandle<T>, cpu: usize) {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: as in `pin`; the handle keeps the thread joinable, so its pthread_t is valid.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::pthread_setaffinity_np(thread.as_pthread_t(), std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
