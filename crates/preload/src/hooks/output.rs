//! Writes to dara's output pipes (the program's stdout and stderr, the SDK's lines) on an
//! `O_NONBLOCK` description: the pipe is drained first, so the write takes what an empty pipe
//! takes (all of it, or the pipe's size), never `EAGAIN` or a part that depends on how fast dara's
//! forwarder copied the pipe out in real time (`dara_tracer::output_drain` says why; the scheduler
//! drains the pipes before a poll that asks one for room). A blocking write needs nothing: it
//! takes everything, waiting for the forwarder in the kernel (which the watchdog allows).
//!
//! The wait is the token holder's own, in short sleeps (the forwarder may need this CPU): like a
//! blocking write's, it lasts as long as dara's output is not read. Runs in hooks and in the
//! SIGSYS handler: raw system calls only.
use libc::c_int;

use super::write_now::status_flags;
use crate::fd::is_output;
use crate::sys;

/// Between two looks at the pipe.
const LOOK_EVERY_NS: i64 = 50_000;

/// Before the program's write to `fd`: when `fd` is an output pipe opened `O_NONBLOCK` with
/// unread bytes in it, waits until dara has read them.
pub fn drain_before_write(fd: c_int) {
    if !is_output(fd) || unread(fd) == 0 {
        return;
    }
    let flags = status_flags(fd);
    if flags < 0 || flags as c_int & libc::O_NONBLOCK == 0 {
        return;
    }
    let pause = libc::timespec { tv_sec: 0, tv_nsec: LOOK_EVERY_NS };
    while unread(fd) > 0 {
        // SAFETY: nanosleep reads one live timespec; no remainder wanted. From the preload's own
        // code, so the syscall trap lets it through.
        unsafe { sys::syscall(libc::SYS_nanosleep, &[&pause as *const libc::timespec as u64, 0]) };
    }
}

/// Bytes queued in the pipe behind `fd` (0 when it cannot say).
fn unread(fd: c_int) -> usize {
    let mut n: c_int = 0;
    // SAFETY: FIONREAD writes one int into the live local.
    let rc = unsafe { sys::syscall(libc::SYS_ioctl, &[fd as u64, libc::FIONREAD, &mut n as *mut c_int as u64]) };
    if rc == 0 {
        n.max(0) as usize
    } else {
        0
    }
}
