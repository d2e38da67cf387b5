//! Which CPU a thread or process runs on: an execution's threads, dara's and the target's, share
//! one CPU (a futex handoff across CPUs costs about ten times one on a CPU: DESIGN.md, 2.1).
//! Async-signal-safe (but [`let_run_anywhere`]): also called between fork and exec.
//!
//! A process that only has to end is let run on any CPU ([`let_run_anywhere`]): on the 6.18
//! kernels of the project's machines, a task woken on a CPU where another task computes without
//! pause was seen to wait there, runnable, for 40 s to several minutes with a tenth of a
//! millisecond of CPU time (its EEVDF vruntime tens of thousands of seconds ahead of the CPU hog's,
//! so never eligible while the hog runs). Let onto the other CPU it ran within 0.12 s.

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

/// How long something that only has to end (a killed process, one whose threads all finished,
/// an exiting thread) waits on its CPU before it may run on any CPU.
pub const RESCUE_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Lets every thread of process `pid` run on any CPU (for a process that is to end: its end no
/// longer waits for the one CPU it was pinned to). Failure (the process is gone) is ignored.
pub fn let_run_anywhere(pid: u32) {
    for tid in crate::procfs::thread_ids(pid) {
        let_thread_run_anywhere(tid);
    }
}

/// Lets thread `tid` run on any CPU (one that is to end). Failure (it is gone) is ignored.
pub fn let_thread_run_anywhere(tid: u32) {
    // SAFETY: cpu_set_t is plain data; every bit set means every CPU the kernel has.
    let mut all: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in 0..libc::CPU_SETSIZE as usize {
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's size.
        unsafe { libc::CPU_SET(cpu, &mut all) };
    }
    // SAFETY: sched_setaffinity reads the live set.
    unsafe { libc::sched_setaffinity(tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &all) };
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


#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(pid: u32) -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
    }

    #[test]
    fn a_process_let_run_anywhere_may_use_every_cpu() {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap().trim().to_string();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        pin(child.id() as libc::pid_t, 0);
        assert_eq!(allowed(child.id()), "0");
        let_run_anywhere(child.id());
        let now = allowed(child.id());
        let _ = child.kill();
        let _ = child.wait();
        // Every CPU the kernel lets it have (a cpuset may hold fewer than are online).
        assert!(online == "0" || now != "0", "still pinned: {now} (online: {online})");
    }
}
