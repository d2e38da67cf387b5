//! `RLIMIT_AS` without dara's share: `setrlimit`, `getrlimit`, `prlimit` and their `64` forms.
//!
//! Every traced process maps dara's shared region (`dara_abi::REGION_SIZE`, about 834 MiB of
//! address space, nearly all of it never touched) and this library. A program that bounds its
//! address space (vsftpd gives its session processes 200 MB; test harnesses run under
//! `ulimit -v`) then had that much less than it asked for: its next `mmap` failed with ENOMEM
//! under dara and not without it, a false bug. Here a limit the program sets on its own address
//! space is raised by [`DARA_SHARE`] before it reaches the kernel, and one it reads is lowered by
//! as much, so the program's own mappings get exactly the room it gave them (within the few
//! MiB this library itself takes), and it reads back what it set. Other resources, and other
//! processes' limits, pass unchanged.
use libc::{c_int, pid_t, rlimit, rlimit64, RLIM_INFINITY};

use crate::{real, region, sys};

/// The address space dara adds to every traced process: the shared region, and room for this
/// library and its thread stacks.
const DARA_SHARE: u64 = dara_abi::REGION_SIZE as u64 + (16 << 20);

/// Whether `resource` of the calling process counts dara's share: its address space, while the
/// region is mapped.
fn counts_dara(resource: c_int) -> bool {
    resource == libc::RLIMIT_AS as c_int && region::header().is_some()
}

/// The kernel's value for a limit the program asked for.
fn raised(limit: u64) -> u64 {
    if limit == RLIM_INFINITY { limit } else { limit.saturating_add(DARA_SHARE).min(RLIM_INFINITY - 1) }
}

/// The program's value for a limit the kernel holds.
fn lowered(limit: u64) -> u64 {
    if limit == RLIM_INFINITY { limit } else { limit.saturating_sub(DARA_SHARE) }
}

/// Whether `pid` names the calling process (0, or its own pid).
fn is_self(pid: pid_t) -> bool {
    pid == 0 || pid as u32 == sys::getpid()
}

#[no_mangle]
pub unsafe extern "C" fn setrlimit(resource: c_int, limit: *const rlimit) -> c_int {
    // SAFETY: the program's own pointer, valid or null by setrlimit's contract.
    match (counts_dara(resource), unsafe { limit.as_ref() }) {
        (true, Some(l)) => {
            let adjusted = rlimit { rlim_cur: raised(l.rlim_cur), rlim_max: raised(l.rlim_max) };
            // SAFETY: a live local rlimit.
            unsafe { real::setrlimit(resource, &adjusted) }
        }
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => unsafe { real::setrlimit(resource, limit) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn setrlimit64(resource: c_int, limit: *const rlimit64) -> c_int {
    // SAFETY: on x86_64 rlimit and rlimit64 are the same two u64s.
    unsafe { setrlimit(resource, limit.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn getrlimit(resource: c_int, limit: *mut rlimit) -> c_int {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let rc = unsafe { real::getrlimit(resource, limit) };
    if rc == 0 && counts_dara(resource) {
        // SAFETY: the kernel just filled the program's rlimit.
        if let Some(l) = unsafe { limit.as_mut() } {
            (l.rlim_cur, l.rlim_max) = (lowered(l.rlim_cur), lowered(l.rlim_max));
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn getrlimit64(resource: c_int, limit: *mut rlimit64) -> c_int {
    // SAFETY: on x86_64 rlimit and rlimit64 are the same two u64s.
    unsafe { getrlimit(resource, limit.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn prlimit(pid: pid_t, resource: c_int, new: *const rlimit, old: *mut rlimit) -> c_int {
    if !is_self(pid) || !counts_dara(resource) {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::prlimit(pid, resource, new, old) };
    }
    // SAFETY: the program's own pointer, valid or null by prlimit's contract.
    let adjusted = unsafe { new.as_ref() }.map(|l| rlimit { rlim_cur: raised(l.rlim_cur), rlim_max: raised(l.rlim_max) });
    let new = adjusted.as_ref().map_or(core::ptr::null(), |l| l as *const rlimit);
    // SAFETY: a live local (or null) and the program's out-parameter (or null).
    let rc = unsafe { real::prlimit(pid, resource, new, old) };
    if rc == 0 {
        // SAFETY: the kernel just filled the program's rlimit (or it passed null).
        if let Some(l) = unsafe { old.as_mut() } {
            (l.rlim_cur, l.rlim_max) = (lowered(l.rlim_cur), lowered(l.rlim_max));
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn prlimit64(pid: pid_t, resource: c_int, new: *const rlimit64, old: *mut rlimit64) -> c_int {
    // SAFETY: on x86_64 rlimit and rlimit64 are the same two u64s.
    unsafe { prlimit(pid, resource, new.cast(), old.cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_gets_dara_s_share_and_reads_back_as_set() {
        let asked = 200u64 << 20;
        assert_eq!(raised(asked), asked + DARA_SHARE);
        assert_eq!(lowered(raised(asked)), asked);
        assert_eq!(raised(RLIM_INFINITY), RLIM_INFINITY, "no limit stays no limit");
        assert_eq!(lowered(RLIM_INFINITY), RLIM_INFINITY);
        assert_eq!(lowered(1 << 20), 0, "a limit inherited below dara's share reads as none left");
        assert!(raised(RLIM_INFINITY - 2) < RLIM_INFINITY, "a huge limit never turns into no limit");
    }
}
