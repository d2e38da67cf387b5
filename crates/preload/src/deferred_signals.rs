//! Signals from outside that reached a thread while it ran, held back to its next post.
//!
//! A signal someone outside the run sends (`kill <server pid>`) while the thread runs program
//! code would run its handler at whatever instruction it landed on, unseen: a recording could not
//! note it and its replay would never send it (a recorded server stopped so did not stop in its
//! replay, and one that answers the stop with an exit status of its own was called buggy). dara's
//! signal entry (`hooks::signal_entry`) queues such a signal to the thread again and blocks it
//! until the thread's next post ([`defer`]). That post saves the program's mask without the held
//! signals ([`take_deferred`]). From there the signal is one that arrived while the thread was
//! parked: coming back, the thread tells dara who sent it, and queues it again as *released*
//! ([`release`]). The entry then runs the program's handler for it at once ([`take_released`]).
//! The handler runs at the same step of the recording and of its replay.
//!
//! Per thread, in `Cell`s: read and written in signal handlers and on posts of this thread only.
use core::cell::Cell;

thread_local! {
    /// Signals held back to this thread's next post (kernel signal-set bits).
    static DEFERRED: Cell<u64> = const { Cell::new(0) };
    /// Signals queued again after dara was told of them: their handlers run when delivered.
    static RELEASED: Cell<u64> = const { Cell::new(0) };
}

/// The kernel signal-set bit of `sig` (0 for a number out of range).
pub fn bit(sig: i32) -> u64 {
    if (1..=64).contains(&sig) {
        1 << (sig - 1)
    } else {
        0
    }
}

/// Holds `sig` back to this thread's next post (the caller blocks it and queues it again).
pub fn defer(sig: i32) {
    DEFERRED.with(|d| d.set(d.get() | bit(sig)));
}

/// The signals held back since the last post. The SIGSYS handler leaves them out of the mask its
/// return restores: a trapped call's post is the thread's next post.
pub fn held() -> u64 {
    DEFERRED.with(|d| d.get())
}

/// The signals held back since the last post, forgotten: the post saving the program's mask
/// leaves them out of it.
pub fn take_deferred() -> u64 {
    DEFERRED.with(|d| d.replace(0))
}

/// `sig` was told to dara and queued again: its handler runs when it is delivered.
pub fn release(sig: i32) {
    RELEASED.with(|r| r.set(r.get() | bit(sig)));
}

/// Whether `sig` was released (and forgets it).
pub fn take_released(sig: i32) -> bool {
    let b = bit(sig);
    RELEASED.with(|r| {
        let was = r.get();
        r.set(was & !b);
        was & b != 0
    })
}
