//! The signals `dara-trace` receives (SIGINT, SIGTERM, SIGHUP) during a recording, on their way
//! to the program: the first of each kind is taken here by the tool's signal handler and passed
//! on to every traced process at the next quiet point; a second one (or any outside a recording)
//! is refused, and the tool stops dara.
//!
//! A [`SignalInbox`] is a handle (atomics only, so the handler may touch it): the tool creates
//! one, gives its signal handler a clone and the recording another (through
//! [`OutsideMode::Live`](super::OutsideMode::Live)); the recording opens it for its run and
//! closes it at the end. Nothing here is process-wide.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Signals received for a recording and not yet passed on (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct SignalInbox(Arc<Bits>);

#[derive(Debug, Default)]
struct Bits {
    /// A recording is going on: signals are passed on rather than stopping dara.
    open: AtomicBool,
    /// Signals (bit `sig`) received and not yet passed on.
    pending: AtomicU64,
    /// Signals (bit `sig`) passed on at least once during this recording.
    passed: AtomicU64,
}

impl SignalInbox {
    /// Called from the tool's SIGINT/SIGTERM handler (async-signal-safe: atomics only). During a
    /// recording the first signal of each kind is taken, to be passed on to the program at the
    /// next quiet point: returns true. Otherwise (no recording, or the same signal a second
    /// time) returns false: the caller stops dara.
    pub fn take(&self, sig: i32) -> bool {
        if !(1..64).contains(&sig) || !self.0.open.load(Ordering::SeqCst) {
            return false;
        }
        let bit = 1u64 << sig;
        if self.0.passed.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
            return false;
        }
        self.0.pending.fetch_or(bit, Ordering::SeqCst);
        true
    }

    /// Starts a recording's window: nothing received before counts.
    pub(super) fn open(&self) {
        self.0.pending.store(0, Ordering::SeqCst);
        self.0.passed.store(0, Ordering::SeqCst);
        self.0.open.store(true, Ordering::SeqCst);
    }

    /// Ends the window (the run is over): signals stop dara again.
    pub(super) fn close(&self) {
        self.0.open.store(false, Ordering::SeqCst);
    }

    /// Whether a signal waits to be passed on.
    pub(super) fn has_pending(&self) -> bool {
        self.0.pending.load(Ordering::SeqCst) != 0
    }

    /// Signals received since the last call, in signal-number order.
    pub(super) fn take_pending(&self) -> Vec<i32> {
        let bits = self.0.pending.swap(0, Ordering::SeqCst);
        (1..64).filter(|s| bits & (1u64 << s) != 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_each_signal_is_passed_on_the_second_stops_dara() {
        let inbox = SignalInbox::default();
        assert!(!inbox.take(libc::SIGINT), "no recording: stop");
        inbox.open();
        let handler = inbox.clone();
        assert!(handler.take(libc::SIGINT));
        assert!(handler.take(libc::SIGTERM));
        assert!(!handler.take(libc::SIGINT), "a second Ctrl-C stops dara");
        assert!(inbox.has_pending());
        assert_eq!(inbox.take_pending(), vec![libc::SIGINT, libc::SIGTERM]);
        assert!(!inbox.has_pending());
        inbox.close();
        assert!(!handler.take(libc::SIGHUP), "the recording is over");
    }
}
