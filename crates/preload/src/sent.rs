//! Sends that need no scheduling point: in coarse mode (a recording,
//! [`dara_abi::preempt::COARSE`]) a thread sends on a TCP socket without a post when the kernel
//! takes the bytes at once.
//!
//! A recording runs one schedule, so a send needs no decision; what it needs is what a granted
//! send gets: the scheduler must *settle* it (see the scheduler's `netprobe`: wait until the bytes
//! are in the peer's receive queue) before it looks at any socket again, and must forget the
//! readiness it saw, which the send may change. Between two of its posts only the sending thread
//! runs, so it is enough that the scheduler hears of the send at the thread's next post: every
//! post carries the descriptors sent on since the previous one ([`dara_abi::Slot::sent`]), and
//! the scheduler settles them as it ingests the post, before any decision.
//!
//! The send itself is the real call with `MSG_DONTWAIT`: a non-blocking caller gets what the
//! kernel says; a blocking caller whose bytes did not all fit goes on with the posted path for
//! the rest (the scheduler decides when there is room, as always). A server answering requests
//! (redis: one send per request) loses half of its steps.
//!
//! The table is per thread, emptied into the slot by every post; no allocation, no lock, no
//! syscall.
use core::cell::Cell;
use core::sync::atomic::Ordering;

use dara_abi::{Slot, SENT_MAX};

struct Table {
    len: Cell<usize>,
    fds: [Cell<u32>; SENT_MAX],
}

thread_local! {
    static TABLE: Table = const { Table { len: Cell::new(0), fds: [const { Cell::new(0) }; SENT_MAX] } };
}

/// Whether a send on `fd` may go without a post: coarse mode and room in the table (or `fd` in
/// it already). The caller checks that `fd` is a TCP socket.
#[inline]
pub fn may_skip_post(fd: i32) -> bool {
    crate::solo::coarse() && TABLE.with(|t| t.len.get() < SENT_MAX || t.fds[..t.len.get()].iter().any(|f| f.get() == fd as u32))
}

/// Notes a send on `fd` that went without a post (after [`may_skip_post`]).
pub fn sent(fd: i32) {
    TABLE.with(|t| {
        let len = t.len.get();
        if t.fds[..len].iter().any(|f| f.get() == fd as u32) {
            return;
        }
        if len < SENT_MAX {
            t.fds[len].set(fd as u32);
            t.len.set(len + 1);
        }
    })
}

/// Publishes the table in `slot` (part of every post, before the slot is marked posted) and
/// empties it.
#[inline]
pub fn publish(slot: &Slot) {
    let len = TABLE.with(|t| t.len.replace(0));
    for i in 0..len {
        slot.sent[i].store(TABLE.with(|t| t.fds[i].get()), Ordering::Relaxed);
    }
    slot.sent_count.store(len as u32, Ordering::Relaxed);
}
