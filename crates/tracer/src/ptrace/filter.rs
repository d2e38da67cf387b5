//! Installing the agent's seccomp filter ([`dara_abi::agent::filter_program`]: the system calls
//! that matter stop the process for the agent, a `PTRACE_EVENT_SECCOMP` stop; everything else runs
//! at full speed) in the launcher's child, between fork and exec, once the agent has attached.
//! The filter is inherited by every thread and child and survives `execve`.
use dara_abi::agent::{filter_program, SockFilter, FILTER_LEN};

/// The filter, as the launcher's child installs it.
pub fn program() -> [SockFilter; FILTER_LEN] {
    filter_program()
}

/// Installs `program` for the calling process (no_new_privs first, as an unprivileged filter
/// needs). Async-signal-safe: only `prctl` and `seccomp`, no allocation.
pub fn install(program: &[SockFilter]) -> std::io::Result<()> {
    // `SockFilter` is `struct sock_filter`, field for field.
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
    use dara_abi::agent::TRACED;

    #[test]
    fn the_abi_s_numbers_are_the_calls_they_name() {
        let named = [
            libc::SYS_futex, libc::SYS_futex_waitv, libc::SYS_sched_yield, libc::SYS_nanosleep, libc::SYS_clock_nanosleep, libc::SYS_clock_gettime, libc::SYS_clock_getres,
            libc::SYS_gettimeofday, libc::SYS_time, libc::SYS_times, libc::SYS_getrusage, libc::SYS_getcpu, libc::SYS_getrandom, libc::SYS_sched_getaffinity,
            libc::SYS_clone, libc::SYS_clone3, libc::SYS_fork, libc::SYS_vfork, libc::SYS_execve, libc::SYS_execveat, libc::SYS_exit, libc::SYS_exit_group,
            libc::SYS_wait4, libc::SYS_waitid, libc::SYS_epoll_wait, libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2, libc::SYS_poll, libc::SYS_ppoll, libc::SYS_select,
            libc::SYS_pselect6, libc::SYS_pause, libc::SYS_rt_sigsuspend, libc::SYS_rt_sigtimedwait, libc::SYS_kill, libc::SYS_tkill, libc::SYS_tgkill, libc::SYS_read, libc::SYS_write, libc::SYS_readv, libc::SYS_writev,
            libc::SYS_close, libc::SYS_connect, libc::SYS_accept, libc::SYS_accept4, libc::SYS_sendto, libc::SYS_recvfrom, libc::SYS_sendmsg, libc::SYS_recvmsg, libc::SYS_shutdown, libc::SYS_bind, libc::SYS_listen, libc::SYS_getsockname,
            libc::SYS_getpeername,
            libc::SYS_sendfile, libc::SYS_splice, libc::SYS_tee, libc::SYS_io_uring_setup, libc::SYS_io_setup,
        ];
        assert_eq!(TRACED.map(i64::from), named);
        use dara_abi::transfer as t;
        assert_eq!([t::SYS_SENDFILE, t::SYS_SPLICE, t::SYS_TEE, t::SYS_COPY_FILE_RANGE], [libc::SYS_sendfile, libc::SYS_splice, libc::SYS_tee, libc::SYS_copy_file_range]);
        assert_eq!(t::SPLICE_F_NONBLOCK, libc::SPLICE_F_NONBLOCK as u64);
    }
}
