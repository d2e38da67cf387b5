//! Network operations: receives, polls, accepts and connects against the views the probe gives.
use super::*;
use crate::choice::{ChoiceObject, NetObject};
use crate::model::net::{describe, kind, NetView, NO_ENDPOINT};
use dara_abi::net_flags;

fn ready(obj: u64) -> NetView {
    NetView { ready: true, ready_entries: 1, size: 5, obj }
}

#[test]
fn blocking_recv_waits_for_a_ready_view() {
    let mut s = Sim::with_threads(2);
    s.post(1, Op::NetRecv, [3, 0, NO_DEADLINE, 64]);
    assert_eq!(s.m.net_requests().len(), 1);
    s.m.set_net_view(1, NetView::default());
    assert!(s.offered(1).is_empty(), "not ready: disabled");
    s.m.forget_net_views();
    assert!(!s.m.has_net_view(1));
    s.m.set_net_view(1, ready(describe(2, 1, kind::TCP, b"abc")));
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0)]);
    let c = s.m.choices().into_iter().find(|c| c.thread == 1).unwrap();
    let ChoiceObject::Net(net) = c.object() else { panic!("a receive's object is a network object") };
    assert_eq!(net, NetObject::decode(describe(2, 1, kind::TCP, b"abc")));
    assert_eq!((net.endpoint, net.peer, net.kind, net.preview()), (Some(2), Some(1), kind::TCP, &b"abc"[..]));
    assert_eq!(s.m.apply(&c, &mut s.mem), Effect::Grant { result: 5 });
}

#[test]
fn nonblocking_recv_is_always_enabled() {
    let mut s = Sim::with_threads(1);
    s.post(1, Op::NetRecv, [3, net_flags::NONBLOCK, NO_DEADLINE, 64]);
    s.m.set_net_view(1, NetView { size: -EAGAIN, ..NetView::default() });
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0)]);
    assert_eq!(s.run(1), Effect::Grant { result: -EAGAIN });
}

#[test]
fn poll_timer_races_a_ready_entry_and_ready_entries_are_choices() {
    let mut s = Sim::with_threads(1);
    s.post(1, Op::NetPoll, [0x7000, 3, 5_000_000, 0]);
    s.m.set_net_view(1, NetView::default());
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)], "nothing ready: only the timer");
    s.m.set_net_view(1, NetView { ready: true, ready_entries: 2, size: 2, obj: describe(4, NO_ENDPOINT, kind::POLL, &[]) });
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0), (ChoiceKind::Run, 1), (ChoiceKind::Run, 2), (ChoiceKind::Timeout, 0)]);
    let only_second = s.m.choices().into_iter().find(|c| c.alt == 2).unwrap();
    assert_eq!(s.m.apply(&only_second, &mut s.mem), Effect::Grant { result: 3 });
    s.post(1, Op::NetPoll, [0x7000, 3, s.m.now() + 5_000_000, 0]);
    s.m.set_net_view(1, ready(0));
    let timeout = s.m.choices().into_iter().find(|c| c.kind == ChoiceKind::Timeout).unwrap();
    assert_eq!(s.m.apply(&timeout, &mut s.mem), Effect::Grant { result: 0 }, "the timer wins although data is there");
}

#[test]
fn rcvtimeo_fires_as_eagain_and_a_nonblocking_connect_needs_no_view() {
    let mut s = Sim::with_threads(2);
    s.post(1, Op::NetAccept, [3, 0, 1_000, 0]);
    s.post(2, Op::NetConnect, [4, net_flags::NONBLOCK, 0x7000, 16]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Run, 0)]);
    let t = s.m.choices().into_iter().find(|c| c.thread == 1).unwrap();
    assert_eq!(s.m.apply(&t, &mut s.mem), Effect::Grant { result: -EAGAIN });
}

#[test]
fn a_recv_nobody_answers_is_a_deadlock_naming_the_endpoint() {
    let mut s = Sim::with_threads(1);
    s.post(1, Op::NetRecv, [3, 0, NO_DEADLINE, 1]);
    s.m.set_net_view(1, NetView { obj: describe(7, 8, kind::UNIX_STREAM, &[]), ..NetView::default() });
    assert!(s.m.choices().is_empty());
    let report = s.m.blocked_report();
    assert!(report[0].detail.contains("waits for data on endpoint e7 (peer e8)"), "{:?}", report);
}

#[test]
fn a_blocking_connect_waits_while_the_backlog_is_full_and_a_signal_ends_it() {
    let mut s = Sim::with_threads(1);
    s.post(1, Op::NetConnect, [4, net_flags::INTERRUPTIBLE, 0x7000, 16]);
    s.m.set_net_view(1, NetView { obj: describe(3, 2, kind::TCP, &[]), ..NetView::default() });
    assert!(s.m.choices().is_empty(), "the listener's backlog is full");
    let report = s.m.blocked_report();
    assert!(report[0].detail.contains("waits in connect for room in the backlog of listener e2"), "{report:?}");
    s.m.set_signalled(1, true);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Interrupt, 0)]);
    s.m.set_net_view(1, ready(0));
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0), (ChoiceKind::Interrupt, 0)], "room now");
}
