//! Signals: which waits a pending signal ends, a handler inside a condition wait, sigwait.
use super::*;

#[test]
fn a_pending_signal_ends_a_sigsuspend_and_only_a_signal_does() {
    let mut s = Sim::at_deadlines(2);
    s.post(1, Op::SigSuspend, [0, 0, 0, 0]);
    assert!(s.offered(1).is_empty(), "a sigsuspend with no signal pending offers nothing");
    assert_eq!(s.m.interruptible_waits().iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![1]);
    assert!(s.detail(1).contains("waits in sigsuspend"), "{}", s.detail(1));
    s.m.set_signalled(1, true);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Interrupt, 0)]);
    assert_eq!(s.pick(1, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    assert!(!s.m.has_signalled(), "the interrupt took the mark");
    s.post(1, Op::SigSuspend, [0, 0, 0, 0]);
    assert!(s.offered(1).is_empty(), "a new wait waits for a new signal");
}

#[test]
fn a_pending_signal_ends_a_blocking_epoll_wait_and_a_sleep_but_not_a_lock() {
    let mut s = Sim::at_deadlines(5);
    assert_eq!(s.lock(5, M, mutex_kind::NORMAL), grant(0));
    s.post(1, Op::NetEpollWait, [5, 0, NO_DEADLINE, 0]);
    s.post(2, Op::NetEpollWait, [6, 0, NO_DEADLINE, dara_abi::net_flags::NONBLOCK]);
    s.post(3, Op::Sleep, [60_000_000_000, 0, 0, 0]);
    s.post(4, Op::MutexLock, [M, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    assert!(!s.can_run(4));
    let waits: Vec<ThreadId> = s.m.interruptible_waits().iter().map(|(t, _)| *t).collect();
    assert_eq!(waits, vec![1, 3], "a non-blocking poll and a mutex lock are not interruptible waits");
    for t in 1..=4 {
        s.m.set_signalled(t, true);
    }
    assert!(s.offered(1).contains(&(ChoiceKind::Interrupt, 0)));
    assert!(!s.offered(4).contains(&(ChoiceKind::Interrupt, 0)), "pthread_mutex_lock is never interrupted");
    assert_eq!(s.pick(1, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    assert_eq!(s.pick(3, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    assert_eq!(s.m.jump_to_next_deadline(), None, "the interrupted sleep's timer is gone");
}

#[test]
fn a_signal_ends_a_semaphore_wait_and_a_futex_wait_which_leaves_its_queue() {
    let mut s = Sim::at_deadlines(3);
    s.mem.0.insert((0, F), 7);
    assert_eq!(s.op(1, Op::SemInit, [S, 0, 0, 0]), grant(0));
    s.post(1, Op::SemWait, [S, NO_DEADLINE, 0, 0]);
    s.post(2, Op::FutexWait, [F, 7, NO_DEADLINE, 0]);
    assert_eq!(s.run(2), Effect::Blocked);
    s.m.set_signalled(1, true);
    s.m.set_signalled(2, true);
    assert_eq!(s.pick(1, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    assert_eq!(s.pick(2, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    assert_eq!(s.op(3, Op::FutexWake, [F, 1, 0, 0]), grant(0), "the interrupted waiter left the futex queue");
}

/// glibc's condition wait runs the handler inside the wait and goes on waiting: a signal the
/// handler sends to the condvar wakes the very thread that runs it.
#[test]
fn a_handler_runs_inside_a_condition_wait_which_goes_on() {
    let k = mutex_kind::NORMAL;
    let mut s = Sim::at_deadlines(2);
    assert_eq!(s.lock(1, M, k), grant(0));
    let wait = [C, M, NO_DEADLINE, k];
    s.post(1, Op::CondWait, wait);
    assert_eq!(s.run(1), Effect::Blocked);
    assert!(s.offered(1).is_empty());
    s.m.set_signalled(1, true);
    assert_eq!(s.pick(1, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    // The handler signals the condvar: the waiter is still in its queue, and is woken.
    assert_eq!(s.op(1, Op::CondSignal, [C, 0, 0, 0]), grant(0));
    s.post(1, Op::CondWait, wait);
    assert_eq!(s.run(1), grant(0), "resumed woken: re-takes the mutex and returns");

    // A handler that does not signal: the wait goes on until someone else does.
    s.post(1, Op::CondWait, wait);
    assert_eq!(s.run(1), Effect::Blocked);
    s.m.set_signalled(1, true);
    assert_eq!(s.pick(1, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    assert_eq!(s.op(1, Op::Yield, [0; 4]), grant(0), "the handler's own steps");
    s.post(1, Op::CondWait, wait);
    assert!(s.offered(1).is_empty(), "back in the queue, not woken");
    assert_eq!(s.op(2, Op::CondSignal, [C, 0, 0, 0]), grant(0));
    assert_eq!(s.run(1), grant(0));
}

#[test]
fn a_sigwait_ends_by_a_signal_or_its_timeout() {
    let mut s = Sim::at_deadlines(1);
    s.post(1, Op::SigWait, [1 << (libc::SIGUSR1 - 1), 5_000, 0, 0]);
    assert!(s.offered(1).is_empty(), "nothing before its signal or its deadline");
    s.m.set_signalled(1, true);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Interrupt, 0)]);
    assert_eq!(s.pick(1, ChoiceKind::Interrupt, 0), grant(INTERRUPTED));
    s.post(1, Op::SigWait, [1 << (libc::SIGUSR1 - 1), 5_000, 0, 0]);
    assert_eq!(s.m.jump_to_next_deadline(), Some(5_000));
    assert_eq!(s.timeout(1), grant(-EAGAIN));
}
