//! The CPU count the target observes is a dara setting (`header.cpus`), the same on every run,
//! whatever CPU dara actually pins the execution to. Setting affinity succeeds and does nothing.
//! `sched_getcpu` reads CPU 0 (glibc would read the real CPU from the thread's rseq area). A raw
//! `sched_getaffinity` system call is not answered (see `trap::TRAPPED`): it sees the one CPU
//! dara pins the execution to.
use libc::{c_int, c_long, cpu_set_t, pid_t, pthread_t, size_t};

use super::Obj;
use crate::{real, region};

/// Fills `mask` (`size` bytes) with the first `cpus` CPUs.
fn fill_mask(mask: Obj<cpu_set_t>, size: usize, cpus: u32) -> c_int {
    if mask.ptr().is_null() {
        return libc::EFAULT;
    }
    // SAFETY: the program passed a mask of `size` bytes (the contract of sched_getaffinity).
    let bytes = unsafe { core::slice::from_raw_parts_mut(mask.ptr() as *mut u8, size) };
    bytes.fill(0);
    for cpu in 0..(cpus as usize).min(size * 8) {
        bytes[cpu / 8] |= 1 << (cpu % 8);
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn sched_getcpu() -> c_int {
    match region::cpus() {
        Some(_) => crate::timecalls::VIRTUAL_CPU as c_int,
        // SAFETY: no arguments.
        None => unsafe { real::sched_getcpu() },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sysconf(name: c_int) -> c_long {
    match (name, region::cpus()) {
        (libc::_SC_NPROCESSORS_ONLN | libc::_SC_NPROCESSORS_CONF, Some(cpus)) => cpus as c_long,
        // SAFETY: plain integer argument, forwarded unchanged.
        _ => unsafe { real::sysconf(name) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn get_nprocs() -> c_int {
    match region::cpus() {
        Some(cpus) => cpus as c_int,
        // SAFETY: no arguments.
        None => unsafe { real::get_nprocs() },
    }
}

#[no_mangle]
pub unsafe extern "C" fn get_nprocs_conf() -> c_int {
    match region::cpus() {
        Some(cpus) => cpus as c_int,
        // SAFETY: no arguments.
        None => unsafe { real::get_nprocs_conf() },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sched_getaffinity(
    pid: pid_t,
    size: size_t,
    mask: *mut cpu_set_t,
) -> c_int {
    match region::cpus() {
        // SAFETY: the program's own out-parameter of `size` bytes.
        Some(cpus) => match fill_mask(unsafe { Obj::new(mask) }, size, cpus) {
            0 => 0,
            e => {
                super::set_errno(e);
                -1
            }
        },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::sched_getaffinity(pid, size, mask) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn sched_setaffinity(
    pid: pid_t,
    size: size_t,
    mask: *const cpu_set_t,
) -> c_int {
    if region::active() {
        return 0;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::sched_setaffinity(pid, size, mask) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_getaffinity_np(
    thread: pthread_t,
    size: size_t,
    mask: *mut cpu_set_t,
) -> c_int {
    match region::cpus() {
        // SAFETY: the program's own out-parameter of `size` bytes.
        Some(cpus) => fill_mask(unsafe { Obj::new(mask) }, size, cpus),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::pthread_getaffinity_np(thread, size, mask) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_setaffinity_np(
    thread: pthread_t,
    size: size_t,
    mask: *const cpu_set_t,
) -> c_int {
    if region::active() {
        return 0;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::pthread_setaffinity_np(thread, size, mask) }
}
