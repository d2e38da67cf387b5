//! `killpg`: glibc's calls its internal `kill`, where the `kill` hook never sees it. Sent through
//! the hook instead, a `killpg` is the same scheduling point as `kill(-group)`, and dara knows
//! the SIGKILLs it sends (a SIGKILL nobody inside sent is a kill from outside).
use libc::{c_int, pid_t};

use super::set_errno;

#[no_mangle]
pub unsafe extern "C" fn killpg(group: pid_t, sig: c_int) -> c_int {
    if group < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: `kill` is the preload's own hook (or libc's when dara is not active), given what
    // glibc's killpg gives it.
    unsafe { libc::kill(-group, sig) }
}
