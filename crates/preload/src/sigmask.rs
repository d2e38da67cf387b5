//! The program's raw `rt_sigprocmask` calls, trapped so that SIGSYS is never blocked.
//!
//! A seccomp trap whose SIGSYS is blocked kills the process. The symbol hooks keep SIGSYS out of
//! the masks the program sets through `sigprocmask`/`pthread_sigmask`, but libc sets masks from
//! its own code with a raw system call: `pthread_create` blocks every signal around the new
//! thread's `clone`, and the new thread starts with that mask and keeps it until glibc restores
//! the creator's, after taking a lock its creator may still hold (a real futex wait, trapped:
//! threads created with `PTHREAD_EXPLICIT_SCHED` did this on a loaded machine); LeakSanitizer's
//! exit check and other libraries do the same. So the filter traps `rt_sigprocmask` too, and
//! the SIGSYS handler performs it on the mask the kernel restores when the handler returns
//! (`uc_sigmask` of the saved context), with SIGSYS left out. `oldset` reports the mask as it
//! was, which never holds SIGSYS.
//!
//! Runs in the SIGSYS handler: no system call, no allocation.
use libc::ucontext_t;

/// The bit of signal `sig` in a kernel signal-set word.
const fn bit(sig: libc::c_int) -> u64 {
    1 << (sig - 1)
}

/// Signals no mask can hold: the kernel ignores SIGKILL and SIGSTOP, dara keeps SIGSYS.
pub(crate) const NEVER_BLOCKED: u64 = bit(libc::SIGKILL) | bit(libc::SIGSTOP) | bit(libc::SIGSYS);

/// The size of the kernel's signal set (64 signals), the only `sigsetsize` it accepts.
const KERNEL_SIGSET_BYTES: u64 = 8;

/// The new mask after `how` with `set`, from `old`; `None` for an unknown `how`.
fn apply(how: u64, set: u64, old: u64) -> Option<u64> {
    let new = match how as libc::c_int {
        libc::SIG_BLOCK => old | set,
        libc::SIG_UNBLOCK => old & !set,
        libc::SIG_SETMASK => set,
        _ => return None,
    };
    // SIGSEGV too while the time-stamp counter faults with it (see `tsc`): an rdtsc under a
    // blocked SIGSEGV kills the process.
    let segv = if crate::fault::program_action::owned() { bit(libc::SIGSEGV) } else { 0 };
    Some(new & !(NEVER_BLOCKED | segv))
}

/// `rt_sigprocmask(how, set, oldset, sigsetsize)` (`a[0..4]`) on the mask `uc` will restore.
/// Returns what the system call returns.
pub fn emulate(uc: &mut ucontext_t, a: [u64; 6]) -> i64 {
    let [how, set, oldset, size, ..] = a;
    if size != KERNEL_SIGSET_BYTES {
        return -(libc::EINVAL as i64);
    }
    let mask = &mut uc.uc_sigmask as *mut libc::sigset_t as *mut u64;
    // SAFETY: `uc_sigmask` is a sigset_t (128 bytes) whose first 8 bytes are the kernel's set.
    let old = unsafe { mask.read() };
    let new = if set == 0 {
        old
    } else {
        // SAFETY: the program passed the kernel an 8-byte signal set to read at `set`.
        match apply(how, unsafe { (set as *const u64).read_unaligned() }, old) {
            Some(new) => new,
            None => return -(libc::EINVAL as i64),
        }
    };
    if oldset != 0 {
        // SAFETY: the program passed the kernel an 8-byte signal set to write at `oldset`.
        unsafe { (oldset as *mut u64).write_unaligned(old) };
    }
    // SAFETY: as for the read above.
    unsafe { mask.write(new) };
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigsys_is_never_blocked() {
        assert_eq!(apply(libc::SIG_SETMASK as u64, !0, 0), Some(!NEVER_BLOCKED));
        assert_eq!(apply(libc::SIG_BLOCK as u64, bit(libc::SIGSYS) | bit(libc::SIGINT), 0), Some(bit(libc::SIGINT)));
        assert_eq!(apply(libc::SIG_UNBLOCK as u64, bit(libc::SIGINT), bit(libc::SIGINT) | bit(libc::SIGTERM)), Some(bit(libc::SIGTERM)));
        assert_eq!(apply(7, 0, 0), None);
    }
}
