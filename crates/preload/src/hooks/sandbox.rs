//! A program's own seccomp sandbox, refused as by a kernel built without seccomp filters.
//!
//! A filter the program installs is stacked on dara's trap and sees every system call of the
//! thread, dara's own included: the SIGSYS handler's `rt_sigreturn` and the raw calls it makes
//! from the preload's trampoline. OpenSSH's pre-authentication sandbox allows neither, and the
//! kernel killed sshd at its first trapped call after the sandbox went on (dara then blamed a
//! blocked SIGSYS). dara cannot keep control under such a filter, so installing one fails with
//! EINVAL, what a kernel without `CONFIG_SECCOMP_FILTER` answers; sshd, like most sandboxed
//! programs, logs that and goes on without its sandbox (docs/limits.md, "A program's own seccomp
//! sandbox"). Both ways in are covered: `prctl(PR_SET_SECCOMP, ...)` here, and the `seccomp`
//! system call, trapped ([`trapped_seccomp`]).
use libc::{c_int, c_ulong};

use crate::sys;

/// `prctl` with `PR_SET_SECCOMP` fails with EINVAL; any other option is the real call.
#[no_mangle]
pub unsafe extern "C" fn prctl(option: c_int, a2: c_ulong, a3: c_ulong, a4: c_ulong, a5: c_ulong) -> c_int {
    if option == libc::PR_SET_SECCOMP {
        super::set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the program's own arguments, passed to the system call unchanged (glibc's prctl
    // is this system call).
    let rc = unsafe { sys::syscall(libc::SYS_prctl, &[option as u64, a2, a3, a4, a5]) };
    if rc < 0 {
        super::set_errno((-rc) as c_int);
        return -1;
    }
    rc as c_int
}

/// A trapped `seccomp(op, flags, args)`: setting a mode (strict or filter) fails with EINVAL;
/// the queries (`SECCOMP_GET_ACTION_AVAIL`, `SECCOMP_GET_NOTIF_SIZES`) are the real call.
pub fn trapped_seccomp(a: [u64; 6]) -> i64 {
    const SECCOMP_SET_MODE_STRICT: u64 = 0;
    const SECCOMP_SET_MODE_FILTER: u64 = 1;
    if a[0] == SECCOMP_SET_MODE_STRICT || a[0] == SECCOMP_SET_MODE_FILTER {
        return -(libc::EINVAL as i64);
    }
    crate::trap::passthrough(libc::SYS_seccomp, a)
}
