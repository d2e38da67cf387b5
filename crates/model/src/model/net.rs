//! Readiness of network operations (sockets, pipes, eventfds, poll/epoll/select) in the model.
//!
//! The model does not simulate a network stack. The kernel's loopback objects are the state; the
//! driver (the scheduler's `netprobe`) probes them without blocking while every thread is parked and tells
//! the model what it saw as a [`NetView`] per waiting thread. The model turns views into enabled
//! choices, timers and results:
//!
//! * a blocking `NetRecv`/`NetAccept`/`NetSend`/`NetPoll`/`NetEpollWait` is enabled only while its
//!   view says ready; a non-blocking one (flag [`dara_abi::net_flags::NONBLOCK`]) always is (the preload then
//!   returns EAGAIN when the kernel has nothing, as the program expects);
//! * a blocking `NetConnect` is enabled while the listener it goes to has room in its backlog
//!   (or there is none: it fails at once), which the driver's view says; a loopback connect then
//!   completes or fails at once. A non-blocking one, `NetClose` and `NetListen` are always enabled;
//! * a request with a deadline (poll/epoll/select timeouts, SO_RCVTIMEO) offers `Timeout` whether
//!   or not it is ready: the strategy may let the timer win against data that is on its way;
//! * a ready `NetPoll` with several ready entries offers one `Run` alternative per entry next to
//!   "report all": which ready peer the program sees first is a choice.
//!
//! Views are facts about kernel state at this step. The driver drops them all whenever a thread
//! performed a network operation or a process exited ([`Model::forget_net_views`]) and probes again,
//! so a thread disabled on a descriptor is re-examined exactly when another thread's operation could
//! have changed it. Determinism rests on the probes: the driver makes the kernel state settled
//! before it probes (see the scheduler's `netprobe`), so the same history gives the same views.
use dara_abi::Op;

use super::{Model, Request};
use crate::choice::ThreadId;

/// What the driver saw for one thread's pending network request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetView {
    /// The operation can complete now without blocking.
    pub ready: bool,
    /// For `NetPoll`: how many entries are ready (0 when not ready).
    pub ready_entries: u32,
    /// The predicted result recorded in the trace: bytes a receive will get, bytes a send offers,
    /// ready entries of a poll.
    pub size: i64,
    /// The readable description of the operation that stands in the choice's `obj`
    /// (see [`describe`]).
    pub obj: u64,
}

pub use crate::choice::object::{describe, kind, NO_ENDPOINT};

/// Whether a network request must not block (its `Run` is always enabled).
pub(crate) fn nonblocking(r: &Request) -> bool {
    r.net_flags().nonblocking()
}

impl Model {
    /// Threads parked on a network request, with the request, in thread order: what the driver
    /// must probe before asking for choices.
    pub fn net_requests(&self) -> Vec<(ThreadId, Request)> {
        self.threads
            .iter()
            .filter_map(|(&id, t)| t.request().filter(|r| r.op().is_net() && t.is_pending()).map(|r| (id, r)))
            .collect()
    }

    /// Whether `thread` has a view for its current request.
    pub fn has_net_view(&self, thread: ThreadId) -> bool {
        self.net.contains_key(&thread)
    }

    /// What the driver saw for `thread`'s pending network request, if it looked.
    pub fn probed_view(&self, thread: ThreadId) -> Option<NetView> {
        self.net.get(&thread).copied()
    }

    /// Records what the driver saw for `thread`'s pending network request.
    pub fn set_net_view(&mut self, thread: ThreadId, view: NetView) {
        self.net.insert(thread, view);
    }

    /// Drops every view: kernel state may have changed (a network operation ran, a process died).
    pub fn forget_net_views(&mut self) {
        self.net.clear();
    }

    pub(super) fn net_view(&self, thread: ThreadId) -> NetView {
        self.net.get(&thread).copied().unwrap_or_default()
    }

    /// Whether a pending network request's `Run` can be taken now.
    pub(super) fn net_enabled(&self, me: ThreadId, r: &Request) -> bool {
        match r.op() {
            Op::NetClose | Op::NetListen => true,
            _ => nonblocking(r) || self.net_view(me).ready,
        }
    }

    /// `Run` alternatives of a network request: a ready poll with several ready entries offers
    /// "report all" plus "report only entry i" for each.
    pub(super) fn net_alternatives(&self, me: ThreadId, r: &Request) -> u32 {
        if !self.net_enabled(me, r) {
            return 0;
        }
        let view = self.net_view(me);
        if r.op() == Op::NetPoll && view.ready_entries >= 2 {
            1 + view.ready_entries
        } else {
            1
        }
    }

    /// Result of `Run` alternative `alt` (see `Op::NetPoll` for the poll encoding).
    pub(super) fn net_run(&mut self, me: ThreadId, r: &Request, alt: u32) -> i64 {
        let view = self.net.remove(&me).unwrap_or_default();
        match r.op() {
            Op::NetPoll if !view.ready => 0,
            Op::NetPoll if alt == 0 => 1,
            Op::NetPoll => 1 + i64::from(alt),
            Op::NetEpollWait => i64::from(view.ready),
            _ => view.size,
        }
    }

    /// Result of a fired timer: poll/epoll report nothing, a receive or accept with SO_RCVTIMEO
    /// fails with EAGAIN (what Linux returns).
    pub(super) fn net_timeout(&mut self, me: ThreadId, r: &Request) -> i64 {
        self.net.remove(&me);
        match r.op() {
            Op::NetPoll | Op::NetEpollWait => 0,
            _ => -(libc::EAGAIN as i64),
        }
    }

    /// The `obj` a network choice carries: the driver's description, else the raw first argument.
    pub(super) fn net_obj(&self, me: ThreadId) -> u64 {
        self.net.get(&me).map_or(describe(NO_ENDPOINT, NO_ENDPOINT, kind::UNKNOWN, &[]), |v| v.obj)
    }
}
