//! Names of x86_64 system calls, for diagnostics (a thread blocked in the kernel, an unsupported
//! call), from the `syscalls` crate's complete table.

/// Name of an x86_64 syscall number, for diagnostics ("syscall N" for a number no kernel names).
pub fn syscall_name(nr: i64) -> String {
    match usize::try_from(nr).ok().and_then(syscalls::x86_64::Sysno::new) {
        Some(sysno) => sysno.name().to_string(),
        None => format!("syscall {nr}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_call_a_blocked_thread_may_sit_in() {
        assert_eq!(syscall_name(0), "read");
        assert_eq!(syscall_name(40), "sendfile");
        assert_eq!(syscall_name(202), "futex");
        assert_eq!(syscall_name(275), "splice");
        assert_eq!(syscall_name(449), "futex_waitv");
        assert_eq!(syscall_name(-1), "syscall -1");
        assert_eq!(syscall_name(100_000), "syscall 100000");
    }
}
