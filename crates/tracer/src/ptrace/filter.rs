//! The seccomp filter of a process on the ptrace path: the system calls that matter to dara stop
//! the process for the agent (`SECCOMP_RET_TRACE`, a `PTRACE_EVENT_SECCOMP` stop), everything else
//! runs at full speed. Installed by the process itself just before its `execve` (by the launcher
//! between fork and exec), once the agent has attached: a traced call without a tracer fails
//! with ENOSYS. The filter is inherited by every thread and child and survives `execve`.
//!
//! The list is the calls through which a program without dara's preload can block, read the
//! time or randomness, or make threads and processes. Calls not listed that could block in the
//! kernel (a `read` of an empty pipe) are caught by the scheduler's watchdog and end the run as
//! uncontrolled, never silently.

/// Calls that stop for the agent.
pub const TRACED: [i64; 34] = [
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_times,
    libc::SYS_getrusage,
    libc::SYS_getcpu,
    libc::SYS_getrandom,
    libc::SYS_sched_getaffinity,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_pause,
    libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait,
];

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// The BPF program: kill a foreign architecture's calls, trace [`TRACED`], allow the rest.
pub fn program() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let stmt = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let jump = |k: u32, jt: u8, jf: u8| libc::sock_filter { code: (BPF_JMP | BPF_JEQ | BPF_K) as u16, jt, jf, k };
    let n = TRACED.len();
    let mut p = vec![stmt(BPF_LD | BPF_W | BPF_ABS, DATA_ARCH), jump(AUDIT_ARCH_X86_64, 1, 0), stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS), stmt(BPF_LD | BPF_W | BPF_ABS, DATA_NR)];
    for (i, &nr) in TRACED.iter().enumerate() {
        // Jump to the TRACE return (after the remaining comparisons and the ALLOW return).
        p.push(jump(nr as u32, (n - i) as u8, 0));
    }
    p.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_TRACE));
    p
}

/// Installs `program` for the calling process (no_new_privs first, as an unprivileged filter
/// needs). Async-signal-safe: only `prctl` and `seccomp`, no allocation.
pub fn install(program: &[libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut libc::sock_filter };
    // SAFETY: prctl with integer arguments; seccomp reads the program, which outlives the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &fprog as *const libc::sock_fprog) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_traced_call_jumps_to_the_trace_return() {
        let p = program();
        let trace_at = p.len() - 1;
        assert_eq!(p[trace_at].k, libc::SECCOMP_RET_TRACE);
        assert_eq!(p[trace_at - 1].k, libc::SECCOMP_RET_ALLOW);
        for (i, &nr) in TRACED.iter().enumerate() {
            let at = 4 + i;
            assert_eq!(p[at].k, nr as u32);
            assert_eq!(at + 1 + p[at].jt as usize, trace_at, "call {nr}");
        }
    }
}
