//! Copies of descriptors: `dup`, `dup2`, `dup3`, and `fcntl` (`fcntl64`) with `F_DUPFD` or
//! `F_DUPFD_CLOEXEC`. Not scheduling points: each tells the descriptor table ([`crate::fd`]) that
//! the new number names what the old one does (bash points descriptor 1 at a socket for
//! `printf ... >&3` and back at its stdout after; a program `dup2`s a socket over a file it
//! opened). Whoever calls them, traced thread or not: the table is the process's.
//!
//! `fcntl` is variadic in C; on x86-64 its optional argument travels in the register a fixed
//! third parameter would use, so declaring it fixed and passing it on unchanged is exact (as for
//! `open`). A blocking lock command (`F_SETLKW`, `F_OFD_SETLKW`) waits in the scheduler
//! ([`super::file_locks`]); every other command goes straight to libc.
use libc::{c_int, c_ulong};

use crate::{fd, real};

/// `to` (a result: -1 on failure) was made a copy of `from`.
fn copied(from: c_int, to: c_int) -> c_int {
    if to >= 0 {
        fd::duplicated(from, to);
    }
    to
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: plain integer.
    copied(fd, unsafe { real::dup(fd) })
}

#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    // SAFETY: plain integers.
    copied(fd, unsafe { real::dup2(fd, to) })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // SAFETY: plain integers.
    copied(fd, unsafe { real::dup3(fd, to, flags) })
}

/// The result `rc` of `fcntl(fd, cmd, ..)`, passed on; a copy made by `F_DUPFD` or
/// `F_DUPFD_CLOEXEC` is noted.
fn after_fcntl(fd: c_int, cmd: c_int, rc: c_int) -> c_int {
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        copied(fd, rc)
    } else {
        rc
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if let Some(rc) = super::file_locks::fcntl_lock(fd, cmd, arg, real::fcntl) {
        return rc;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    after_fcntl(fd, cmd, unsafe { real::fcntl(fd, cmd, arg) })
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if let Some(rc) = super::file_locks::fcntl_lock(fd, cmd, arg, real::fcntl64) {
        return rc;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    after_fcntl(fd, cmd, unsafe { real::fcntl64(fd, cmd, arg) })
}
