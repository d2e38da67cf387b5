//! `sendmmsg` and `recvmmsg`: several messages in one call, as one `sendmsg` or `recvmsg` each
//! (a step each where those are steps), so a batch is seen and modelled message by message. A
//! batch may end early as the kernel's does: the count of messages moved so far is returned,
//! and an error only when the first message failed.
//!
//! `recvmmsg` waits for the first message as `recvmsg` would; later ones are waited for only
//! without `MSG_WAITFORONE` and without a timeout (with a timeout the kernel itself looks at it
//! only between messages, so the batch ends with what is there once one message came).
use libc::{c_int, c_uint, mmsghdr, timespec};

use super::net::{recvmsg, sendmsg};
use super::set_errno;
use crate::gate::Gated;
use crate::real;

/// The kernel's bound on a batch (`UIO_MAXIOV`).
const BATCH_MAX: c_uint = 1024;

#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    if Gated::enter().is_none() {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::sendmmsg(fd, msgs, vlen, flags) };
    }
    let mut sent = 0;
    while sent < vlen.min(BATCH_MAX) {
        // SAFETY: `msgs` holds `vlen` messages (sendmmsg's contract).
        let message = unsafe { &mut *msgs.add(sent as usize) };
        let errno = real::errno();
        // SAFETY: the program's message, valid for the call.
        let n = unsafe { sendmsg(fd, &message.msg_hdr, flags) };
        if n < 0 {
            if sent == 0 {
                return -1;
            }
            set_errno(errno); // the messages sent are the answer; the error comes again next call
            break;
        }
        message.msg_len = n as c_uint;
        sent += 1;
    }
    sent as c_int
}

#[no_mangle]
pub unsafe extern "C" fn recvmmsg(fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int, timeout: *mut timespec) -> c_int {
    if Gated::enter().is_none() {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::recvmmsg(fd, msgs, vlen, flags, timeout) };
    }
    let wait_for_each = flags & libc::MSG_WAITFORONE == 0 && timeout.is_null();
    let mut received = 0;
    while received < vlen.min(BATCH_MAX) {
        let now = if received == 0 || wait_for_each { flags } else { flags | libc::MSG_DONTWAIT };
        // SAFETY: `msgs` holds `vlen` messages (recvmmsg's contract).
        let message = unsafe { &mut *msgs.add(received as usize) };
        let errno = real::errno();
        // SAFETY: the program's message, valid for the call.
        let n = unsafe { recvmsg(fd, &mut message.msg_hdr, now & !libc::MSG_WAITFORONE) };
        if n < 0 {
            if received == 0 {
                return -1;
            }
            set_errno(errno);
            break;
        }
        message.msg_len = n as c_uint;
        received += 1;
    }
    received as c_int
}
