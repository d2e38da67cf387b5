//! `sendmmsg` and `recvmmsg`: several messages in one call, as one `sendmsg` or `recvmsg` each
//! (a step each where those are steps), so a batch is seen and modelled message by message. A
//! batch may end early as the kernel's does: the count of messages moved so far is returned,
//! and an error only when the first message failed.
//!
//! `recvmmsg` waits for the first message as `recvmsg` would; later ones are waited for only
//! without `MSG_WAITFORONE` and without a timeout (with a timeout the kernel itself looks at it
//! only between messages, so the batch ends with what is there once one message came).
//!
//! One implementation, two ways in: the symbol hooks catch libc's wrappers, the syscall trap
//! ([`crate::trapped`]) raw calls (libuv 1.44, hence BIND 9.18's `named`, makes them with
//! `syscall(2)`); on a gated thread both are [`send_batch`] or [`receive_batch`]. Anywhere else
//! the call is made as it is through the preload's trampoline, which the trap lets through (so a
//! hooked call is never trapped again). The messages themselves go through the `sendmsg` and
//! `recvmsg` system calls, which the trap does not catch.
//!
//! Runs in hooks and in the SIGSYS handler: no allocation, and the program's `errno` is left as
//! it was (the per-message calls set it; a system call does not).
use libc::{c_int, c_uint, mmsghdr, msghdr, ssize_t, timespec};

use super::net::{receive_message, send_message};
use super::set_errno;
use crate::gate::Gated;
use crate::{real, sys};

/// The kernel's bound on a batch (`UIO_MAXIOV`).
const BATCH_MAX: c_uint = 1024;

/// Runs `one(i, message)` on the messages of the batch of `vlen` at `msgs`, in order, until one
/// fails, and records each one's length: the number that succeeded, or `-errno` when the first
/// failed (the error of a later message comes again on the next call, as the kernel does).
/// `one` returns as libc does (-1 and errno); the caller's errno is restored.
///
/// # Safety
/// `msgs` is null or holds `vlen` valid messages (the contract of `sendmmsg` and `recvmmsg`).
unsafe fn each_message(msgs: *mut mmsghdr, vlen: c_uint, mut one: impl FnMut(c_uint, &mut msghdr) -> ssize_t) -> i64 {
    if msgs.is_null() && vlen > 0 {
        return -(libc::EFAULT as i64);
    }
    let errno = real::errno();
    let mut done = 0;
    let mut failed = 0;
    while done < vlen.min(BATCH_MAX) {
        // SAFETY: `msgs` holds `vlen` messages (the function contract).
        let message = unsafe { &mut *msgs.add(done as usize) };
        let n = one(done, &mut message.msg_hdr);
        if n < 0 {
            failed = real::errno();
            break;
        }
        message.msg_len = n as c_uint;
        done += 1;
    }
    set_errno(errno);
    if done == 0 && failed != 0 {
        -i64::from(failed)
    } else {
        i64::from(done)
    }
}

/// `sendmmsg` on a gated thread: the messages sent, or `-errno`.
///
/// # Safety
/// `sendmmsg`'s contract: `msgs` holds `vlen` valid messages.
pub unsafe fn send_batch(gate: &Gated, fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int) -> i64 {
    // SAFETY: the caller's messages, each one valid for `sendmsg`.
    unsafe { each_message(msgs, vlen, |_, message| send_message(gate, fd, message, flags)) }
}

/// `recvmmsg` on a gated thread: the messages received, or `-errno`.
///
/// # Safety
/// `recvmmsg`'s contract: `msgs` holds `vlen` valid messages whose buffers may be written.
pub unsafe fn receive_batch(gate: &Gated, fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int, timeout: *const timespec) -> i64 {
    let wait_for_each = flags & libc::MSG_WAITFORONE == 0 && timeout.is_null();
    let each = |i: c_uint, message: &mut msghdr| {
        let now = if i == 0 || wait_for_each { flags } else { flags | libc::MSG_DONTWAIT };
        // SAFETY: the caller's message, valid for `recvmsg`.
        unsafe { receive_message(gate, fd, message, now & !libc::MSG_WAITFORONE) }
    };
    // SAFETY: the caller's messages.
    unsafe { each_message(msgs, vlen, each) }
}

/// A raw `sendmmsg` the syscall trap caught on a gated thread (arguments `a`): its raw result.
pub fn trapped_send(gate: &Gated, a: [u64; 6]) -> i64 {
    // SAFETY: the arguments the program gave the kernel, under the same contract.
    unsafe { send_batch(gate, a[0] as c_int, a[1] as *mut mmsghdr, a[2] as c_uint, a[3] as c_int) }
}

/// A raw `recvmmsg` the syscall trap caught on a gated thread (arguments `a`): its raw result.
pub fn trapped_receive(gate: &Gated, a: [u64; 6]) -> i64 {
    // SAFETY: the arguments the program gave the kernel, under the same contract.
    unsafe { receive_batch(gate, a[0] as c_int, a[1] as *mut mmsghdr, a[2] as c_uint, a[3] as c_int, a[4] as *const timespec) }
}

/// A hook's return value from a raw result: the count, or -1 with errno set.
fn libc_result(r: i64) -> c_int {
    if r < 0 {
        set_errno(-r as c_int);
        -1
    } else {
        r as c_int
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    let r = match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe { send_batch(&gate, fd, msgs, vlen, flags) },
        // SAFETY: the program's own arguments, as the system call it asked for.
        None => unsafe { sys::syscall6(libc::SYS_sendmmsg, [fd as u64, msgs as u64, u64::from(vlen), flags as u64, 0, 0]) },
    };
    libc_result(r)
}

#[no_mangle]
pub unsafe extern "C" fn recvmmsg(fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int, timeout: *mut timespec) -> c_int {
    let r = match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe { receive_batch(&gate, fd, msgs, vlen, flags, timeout) },
        // SAFETY: the program's own arguments, as the system call it asked for.
        None => unsafe { sys::syscall6(libc::SYS_recvmmsg, [fd as u64, msgs as u64, u64::from(vlen), flags as u64, timeout as u64, 0]) },
    };
    libc_result(r)
}
