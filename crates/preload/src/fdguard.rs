//! Keeping dara's descriptors open whatever the program closes: the region's
//! ([`dara_abi::SHM_FD`]), dara's own /proc ([`dara_abi::HOST_PROC_FD`], next to it) and the
//! SDK's property pipe ([`dara_abi::SDK_FD`], next to that).
//!
//! Every image of a traced process finds dara through the first (`DARA_SHM` names
//! `/proc/self/fd/1000`) and tells dara its pids through the second. Launchers close what they
//! inherited before they exec: `closefrom`, `close_range`, Python's `subprocess` (close_fds), a
//! loop of `close` over /proc/self/fd. The exec'd program then could not map the region and exited
//! 125. So the filter traps `close_range` and `close` of these descriptors: a `close` of one
//! reports success and leaves it open, a range that holds them is closed as the two ranges
//! around them. (A `dup2`/`dup3` onto one cannot be honoured: the trap refuses it, see `trap`.)
//! The numbers a range closed are forgotten in the descriptor table ([`crate::fd`]).
//!
//! Runs in the SIGSYS handler: raw system calls through the trampoline only.
use crate::{fd, sys};

/// The first and last of dara's descriptors (adjacent numbers).
pub const FIRST_KEPT: u64 = dara_abi::SHM_FD as u64;
pub const LAST_KEPT: u64 = dara_abi::SDK_FD as u64;
const _: () = assert!(LAST_KEPT == FIRST_KEPT + 2, "dara's descriptors must be adjacent");
/// The largest descriptor number `close_range` takes.
const LAST_FD: u64 = u32::MAX as u64;

/// `close(fd)` trapped because `fd` is one of dara's descriptors: pretend it is closed.
pub fn close(fd: u64) -> i64 {
    debug_assert!((FIRST_KEPT..=LAST_KEPT).contains(&(fd as u32 as u64)));
    0
}

/// `close_range(first, last, flags)`, with dara's descriptors left out.
pub fn close_range(first: u64, last: u64, flags: u64) -> i64 {
    let (first, last) = (first as u32 as u64, last as u32 as u64);
    if first > last {
        return -(libc::EINVAL as i64);
    }
    let below = (first < FIRST_KEPT).then(|| (first, last.min(FIRST_KEPT - 1)));
    let above = (last > LAST_KEPT).then(|| (first.max(LAST_KEPT + 1), last.min(LAST_FD)));
    if below.is_none() && above.is_none() {
        return 0; // only dara's descriptors
    }
    for (from, to) in below.into_iter().chain(above) {
        // SAFETY: close_range takes plain integers; the range leaves dara's descriptors out.
        let rc = unsafe { sys::syscall(libc::SYS_close_range, &[from, to, flags]) };
        if rc < 0 {
            return rc;
        }
        // Closed (not only marked close-on-exec): the numbers name nothing now.
        if flags & u64::from(libc::CLOSE_RANGE_CLOEXEC) == 0 {
            fd::closed_range(from, to);
        }
    }
    0
}
