//! Keeping dara's region descriptor ([`dara_abi::SHM_FD`]) open whatever the program closes.
//!
//! Every image of a traced process finds dara through that descriptor (`DARA_SHM` names
//! `/proc/self/fd/1000`). Launchers close what they inherited before they exec: `closefrom`,
//! `close_range`, Python's `subprocess` (close_fds), a loop of `close` over /proc/self/fd. The
//! exec'd program then could not map the region and exited 125. So the filter traps
//! `close_range` and `close` of that one descriptor: a `close` of it reports success and leaves
//! it open, a range that holds it is closed as the two ranges around it. (A `dup2`/`dup3` onto it
//! cannot be honoured: the trap refuses it, see `trap`.)
//!
//! Runs in the SIGSYS handler: raw system calls through the trampoline only.
use crate::sys;

const REGION_FD: u64 = dara_abi::SHM_FD as u64;
/// The largest descriptor number `close_range` takes.
const LAST_FD: u64 = u32::MAX as u64;

/// `close(fd)` trapped because `fd` is the region's descriptor: pretend it is closed.
pub fn close(fd: u64) -> i64 {
    debug_assert_eq!(fd as u32 as u64, REGION_FD);
    0
}

/// `close_range(first, last, flags)`, with the region's descriptor left out.
pub fn close_range(first: u64, last: u64, flags: u64) -> i64 {
    let (first, last) = (first as u32 as u64, last as u32 as u64);
    if first > last {
        return -(libc::EINVAL as i64);
    }
    let below = (first < REGION_FD).then(|| (first, last.min(REGION_FD - 1)));
    let above = (last > REGION_FD).then(|| (first.max(REGION_FD + 1), last.min(LAST_FD)));
    if below.is_none() && above.is_none() {
        return 0; // exactly the region's descriptor
    }
    for (from, to) in below.into_iter().chain(above) {
        // SAFETY: close_range takes plain integers; the range leaves the region's descriptor out.
        let rc = unsafe { sys::syscall(libc::SYS_close_range, &[from, to, flags]) };
        if rc < 0 {
            return rc;
        }
    }
    0
}
