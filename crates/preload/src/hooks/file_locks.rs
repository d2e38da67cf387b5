//! Blocking file locks: `flock` (`LOCK_SH`/`LOCK_EX` without `LOCK_NB`), `fcntl` (`fcntl64`) with
//! `F_SETLKW` or `F_OFD_SETLKW`, and `lockf(F_LOCK)`. Left to the kernel, a lock another holder
//! has puts the token holder to sleep in the kernel, and the run stops as uncontrolled
//! (`locks_lock_inode_wait`). A traced thread instead tries the lock without blocking (`LOCK_NB`,
//! `F_SETLK`, `F_OFD_SETLK`, `F_TLOCK`); when it is taken, the thread posts `FileLock` and tries
//! again once the scheduler grants it, which it does after another thread has taken a step (see
//! the scheduler's `model/file_locks.rs`). A lock nobody left can release is a deadlock.
//!
//! Every other command, and any call of an untraced thread, goes to libc unchanged.
use libc::{c_int, c_ulong};

use dara_abi::{FileLockKind, Request};

use crate::gate::Gated;
use crate::real;

/// Takes a file lock on `fd` by `try_once` (a non-blocking attempt), waiting in the scheduler
/// while it fails with an errno `taken` says means "another holder has it". `None`: the thread
/// is not gated, so the caller makes the real blocking call.
fn wait_for_lock(fd: c_int, kind: FileLockKind, try_once: impl Fn() -> c_int, taken: impl Fn(c_int) -> bool) -> Option<c_int> {
    let gate = Gated::enter()?;
    loop {
        let rc = try_once();
        if rc == 0 || !taken(real::errno()) {
            return Some(rc); // errno as the try left it
        }
        gate.post(Request::FileLock { fd, kind });
    }
}

/// The non-blocking twin of a blocking lock command of `fcntl`, with the kind of lock it takes.
fn nonblocking_fcntl(cmd: c_int) -> Option<(c_int, FileLockKind)> {
    match cmd {
        libc::F_SETLKW => Some((libc::F_SETLK, FileLockKind::Posix)),
        libc::F_OFD_SETLKW => Some((libc::F_OFD_SETLK, FileLockKind::OpenFile)),
        _ => None,
    }
}

/// A record lock that is taken fails with EACCES or EAGAIN (POSIX allows either).
fn record_lock_taken(err: c_int) -> bool {
    err == libc::EACCES || err == libc::EAGAIN
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, operation: c_int) -> c_int {
    let blocking = operation & libc::LOCK_NB == 0 && operation & (libc::LOCK_SH | libc::LOCK_EX) != 0;
    // SAFETY: plain integers, the program's own.
    let try_once = || unsafe { real::flock(fd, operation | libc::LOCK_NB) };
    let waited = blocking.then(|| wait_for_lock(fd, FileLockKind::Flock, try_once, |err| err == libc::EWOULDBLOCK)).flatten();
    // SAFETY: as above.
    waited.unwrap_or_else(|| unsafe { real::flock(fd, operation) })
}

/// `fcntl`/`fcntl64` with a lock command: a blocking one waits in the scheduler; `None` for any
/// other command (the caller passes it on, as the descriptor hooks do).
pub fn fcntl_lock(fd: c_int, cmd: c_int, arg: c_ulong, real_fcntl: unsafe fn(c_int, c_int, c_ulong) -> c_int) -> Option<c_int> {
    let (try_cmd, kind) = nonblocking_fcntl(cmd)?;
    // SAFETY: `arg` is the program's `struct flock` pointer, passed on unchanged.
    wait_for_lock(fd, kind, || unsafe { real_fcntl(fd, try_cmd, arg) }, record_lock_taken)
}

#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int {
    // SAFETY: plain integers, the program's own.
    let try_once = || unsafe { real::lockf(fd, libc::F_TLOCK, len) };
    let waited = (cmd == libc::F_LOCK).then(|| wait_for_lock(fd, FileLockKind::Posix, try_once, record_lock_taken)).flatten();
    // SAFETY: as above.
    waited.unwrap_or_else(|| unsafe { real::lockf(fd, cmd, len) })
}
