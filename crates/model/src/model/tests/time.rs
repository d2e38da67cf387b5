//! Virtual time: sleeps and timed waits, deadline timers, and pausing a thread or node while time
//! passes.
use super::*;

#[test]
fn sleep_only_times_out_and_jumps_the_clock() {
    let mut s = Sim::with_threads(1);
    s.post(1, Op::Sleep, [60_000_000_000, 0, 0, 0]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(1), grant(0));
    assert_eq!(s.m.now(), 60_000_000_000);
    // A deadline already in the past does not move time back.
    s.post(1, Op::Sleep, [5, 0, 0, 0]);
    let cost = s.m.clock.next_step_cost();
    assert_eq!(s.timeout(1), grant(0));
    assert_eq!(s.m.now(), 60_000_000_000 + cost);
    assert!((TICK_NS / 2..=TICK_NS * 3 / 2).contains(&cost));
    // No deadline at all: stuck forever.
    s.post(1, Op::Sleep, [NO_DEADLINE, 0, 0, 0]);
    assert!(s.m.choices().is_empty());
    assert_eq!(s.detail(1), "sleeps forever");
}

#[test]
fn timed_lock_times_out_only_when_it_has_to_wait() {
    let mut s = Sim::with_threads(2);
    let k = mutex_kind::NORMAL;
    let deadline = 7_000_000;
    assert_eq!(s.lock(1, M, k), grant(0));
    s.post(2, Op::MutexLock, [M, k, deadline, 0]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(2), grant(ETIMEDOUT));
    assert_eq!(s.m.now(), deadline);
    assert_eq!(s.m.status(2), Some(ThreadStatus::Running));

    // Free mutex: both Run and Timeout are offered, and a Timeout still takes the lock (POSIX:
    // never ETIMEDOUT when the mutex can be locked immediately), only later.
    assert_eq!(s.unlock(1, M, k), grant(0));
    s.post(2, Op::MutexLock, [M, k, 2 * deadline, 0]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Run, 0), (ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(2), grant(0));
    assert_eq!(s.m.now(), 2 * deadline);
    s.post(1, Op::MutexLock, [M, k, NO_DEADLINE, 0]);
    assert!(s.m.choices().is_empty(), "thread 2 holds the mutex after its timed lock");
}

#[test]
fn timed_cond_wait_times_out_then_reacquires() {
    let mut s = Sim::with_threads(2);
    let k = mutex_kind::NORMAL;
    let deadline = 3_000_000_000;
    assert_eq!(s.lock(1, M, k), grant(0));
    s.post(1, Op::CondWait, [C, M, deadline, k]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0), (ChoiceKind::Timeout, 0)]);
    assert_eq!(s.run(1), Effect::Blocked);
    // Waiting: only the timer can end the wait.
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    // The mutex was released in the model: thread 2 gets it.
    assert_eq!(s.lock(2, M, k), grant(0));
    assert_eq!(s.timeout(1), Effect::Blocked, "timed out but the mutex is held");
    assert_eq!(s.m.now(), deadline);
    assert!(s.offered(1).is_empty());
    // A signal now finds nobody: thread 1 already left the queue.
    s.post(2, Op::CondSignal, [C, 0, 0, 0]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Run, 0)]);
    assert_eq!(s.run(2), grant(0));
    assert!(!s.can_run(1));
    assert_eq!(s.unlock(2, M, k), grant(0));
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0)]);
    assert_eq!(s.run(1), grant(ETIMEDOUT));
    s.post(2, Op::MutexLock, [M, k, NO_DEADLINE, 0]);
    assert!(!s.can_run(2), "thread 1 holds the mutex again");

    // Timeout taken before the wait even started: the mutex stays with the waiter.
    let mut s = Sim::with_threads(1);
    assert_eq!(s.lock(1, M, k), grant(0));
    s.post(1, Op::CondWait, [C, M, deadline, k]);
    assert_eq!(s.timeout(1), grant(ETIMEDOUT));
    assert_eq!(s.op(1, Op::MutexTryLock, [M, k, 0, 0]), grant(EBUSY));
}

#[test]
fn signalled_waiter_returns_zero_and_offers_no_timeout() {
    let mut s = Sim::with_threads(2);
    let k = mutex_kind::NORMAL;
    s.lock(1, M, k);
    assert_eq!(s.op(1, Op::CondWait, [C, M, 1_000_000_000, k]), Effect::Blocked);
    assert_eq!(s.op(2, Op::CondSignal, [C, 0, 0, 0]), grant(0));
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0)]);
    assert_eq!(s.run(1), grant(0));
}

#[test]
fn deadline_timers_are_offered_only_once_the_clock_reaches_them() {
    let mut s = Sim::at_deadlines(2);
    s.post(1, Op::Sleep, [5_000_000, 0, 0, 0]);
    s.post(2, Op::Yield, [0; 4]);
    assert_eq!(s.offered(1), vec![], "a sleep 5 ms ahead is not due");
    assert_eq!(s.offered(2), vec![(ChoiceKind::Run, 0)]);
    s.run(2);
    s.post(2, Op::Sleep, [9_000_000, 0, 0, 0]);
    assert!(s.m.choices().is_empty(), "nothing due: nothing to choose");
    assert_eq!(s.m.jump_to_next_deadline(), Some(5_000_000), "the earliest deadline first");
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.offered(2), vec![], "the later one is still ahead");
    let cost = s.m.clock.next_step_cost();
    assert_eq!(s.timeout(1), grant(0));
    assert_eq!(s.m.now(), 5_000_000 + cost, "firing a due timer moves the clock by one step only");
    s.post(1, Op::Sleep, [NO_DEADLINE, 0, 0, 0]);
    assert_eq!(s.m.jump_to_next_deadline(), Some(9_000_000));
    assert_eq!(s.timeout(2), grant(0));
    assert_eq!(s.m.jump_to_next_deadline(), None, "no timer left: a deadlock, not a jump");
}

#[test]
fn deadline_timers_due_at_the_same_instant_are_a_choice() {
    let mut s = Sim::at_deadlines(2);
    s.post(1, Op::Sleep, [7_000, 0, 0, 0]);
    s.post(2, Op::Sleep, [7_000, 0, 0, 0]);
    assert_eq!(s.m.jump_to_next_deadline(), Some(7_000));
    let due: Vec<_> = s.m.choices().iter().map(|c| (c.thread, c.kind)).collect();
    assert_eq!(due, vec![(1, ChoiceKind::Timeout), (2, ChoiceKind::Timeout)]);
}

#[test]
fn a_timed_wait_does_not_time_out_while_its_signaller_can_still_run() {
    // The helper sleeps 10 ms and then signals; the waiter gives up after 1 s. In real time the
    // wait cannot time out, and at deadlines it never does.
    let mut s = Sim::at_deadlines(2);
    s.op(1, Op::MutexLock, [M, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    s.post(1, Op::CondWait, [C, M, 1_000_000_000, mutex_kind::NORMAL]);
    assert_eq!(s.run(1), Effect::Blocked);
    s.post(2, Op::Sleep, [10_000_000, 0, 0, 0]);
    assert_eq!(s.m.jump_to_next_deadline(), Some(10_000_000));
    assert_eq!(s.offered(1), vec![], "the waiter's 1 s is far ahead");
    assert_eq!(s.offered(2), vec![(ChoiceKind::Timeout, 0)]);
}

#[test]
fn pause_lets_time_pass_the_others_deadline_while_the_paused_thread_stands_still() {
    let mut s = Sim::at_deadlines(2);
    s.op(1, Op::MutexLock, [M, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    s.post(1, Op::CondWait, [C, M, 1_000_000_000, mutex_kind::NORMAL]);
    assert_eq!(s.run(1), Effect::Blocked);
    s.post(2, Op::Sleep, [10_000_000, 0, 0, 0]);
    s.m.jump_to_next_deadline();
    assert_eq!(s.m.pausable(), vec![(2, 1_000_000_000)], "the helper can be paused past the waiter's deadline");
    assert_eq!(s.m.pause(2), Some(1_000_000_000));
    assert!(s.m.is_paused(2));
    assert_eq!(s.offered(2), vec![], "paused while the waiter can move");
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(1), grant(ETIMEDOUT), "the waiter timed out (its mutex was free)");
    s.post(1, Op::MutexUnlock, [M, mutex_kind::NORMAL, 0, 0]);
    assert_eq!(s.offered(2), vec![], "still paused: the waiter can move");
    s.run(1);
    s.post(1, Op::Sleep, [NO_DEADLINE, 0, 0, 0]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Timeout, 0)], "nobody else can move: the paused thread goes on");
    assert_eq!(s.timeout(2), grant(0));
    assert!(!s.m.is_paused(2));
}

#[test]
fn pause_needs_another_thread_with_a_timer_ahead() {
    let mut s = Sim::at_deadlines(2);
    s.post(1, Op::Yield, [0; 4]);
    s.post(2, Op::Yield, [0; 4]);
    assert_eq!(s.m.pausable(), vec![]);
    assert_eq!(s.m.pause(1), None);
    assert!(!s.m.is_paused(1));
}

/// A node pause: both threads of one node stand still (one could move, one sleeps with a timer
/// before the other node's); the others finish what they can do at this instant, then the clock
/// jumps past the node's own timer to the others' next deadline, and once they are quiet again
/// the paused node goes on as a whole.
#[test]
fn a_node_pause_stops_all_its_threads_and_ends_for_all_of_them() {
    let mut s = Sim::at_deadlines(4);
    // Threads 1 and 2 are "the node"; thread 3 waits 300 ms, thread 4 can still move.
    s.post(1, Op::Yield, [0; 4]);
    s.post(2, Op::Sleep, [50_000_000, 0, 0, 0]);
    s.post(3, Op::Sleep, [300_000_000, 0, 0, 0]);
    s.post(4, Op::Yield, [0; 4]);
    assert!(s.m.may_pause_group(&[1, 2]), "thread 3 has a timer ahead");
    let before = s.m.now();
    assert!(s.m.pause_group(&[1, 2]));
    assert!(!s.m.may_pause_group(&[1, 2]), "already paused");
    assert!(!s.m.pause_group(&[2]));
    assert_eq!(s.m.now(), before, "no jump while the others can move");
    assert_eq!(s.offered(1), vec![]);
    assert_eq!(s.run(4), grant(0));
    s.post(4, Op::Sleep, [NO_DEADLINE, 0, 0, 0]);
    assert_eq!(s.m.choices(), vec![], "nobody else can move: the jump is due");
    assert_eq!(s.m.jump_to_next_deadline(), Some(300_000_000), "past the node's own 50 ms timer");
    assert_eq!(s.offered(1), vec![]);
    assert_eq!(s.offered(2), vec![], "its timer is due, but the node stands still");
    assert_eq!(s.offered(3), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(3), grant(0));
    s.post(3, Op::Sleep, [NO_DEADLINE, 0, 0, 0]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0)], "nobody else can move: the node goes on");
    assert_eq!(s.offered(2), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(2), grant(0));
    assert!(!s.m.is_paused(1) && !s.m.is_paused(2), "the pause ended for the whole node");
    assert_eq!(s.m.pauses_taken(), 0, "a node pause is not a thread pause");
}

#[test]
fn a_node_pause_needs_a_timer_ahead_outside_the_node() {
    let mut s = Sim::at_deadlines(3);
    s.post(1, Op::Yield, [0; 4]);
    s.post(2, Op::Sleep, [50_000_000, 0, 0, 0]);
    s.post(3, Op::Yield, [0; 4]);
    assert!(!s.m.may_pause_group(&[1, 2]));
    assert!(!s.m.pause_group(&[1, 2]));
    assert!(!s.m.is_paused(1));
    assert!(!s.m.may_pause_group(&[]), "a node with no live thread");
}

#[test]
fn the_clock_jumps_to_a_timerfd_only_for_a_thread_that_waits_on_a_descriptor() {
    let mut s = Sim::at_deadlines(2);
    let timer = s.m.timer_create(0);
    s.m.timer_set(timer, Some(10_000_000), 10_000_000);
    // Thread 1 waits for a lock thread 2 holds, thread 2 for a signal: no expiry can wake them.
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0));
    s.post(1, Op::MutexLock, [M, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    s.post(2, Op::SigSuspend, [0; 4]);
    assert!(s.m.choices().is_empty());
    assert_eq!(s.m.next_deadline(None), None, "a deadlock, not a wait for the clock");
    assert_eq!(s.m.jump_to_next_deadline(), None);

    // A thread blocked on a descriptor (the timer's, for all the model knows) makes it count.
    let mut s = Sim::at_deadlines(1);
    let timer = s.m.timer_create(0);
    s.m.timer_set(timer, Some(10_000_000), 10_000_000);
    s.post(1, Op::NetRecv, [3, 0, NO_DEADLINE, 8]);
    assert_eq!(s.m.next_deadline(None), Some(10_000_000));
    assert_eq!(s.m.jump_to_next_deadline(), Some(10_000_000));
    assert!(s.m.timerfd_due());
    assert_eq!(s.m.fire_due_timers(), vec![(timer, 1)]);
    assert!(!s.m.timerfd_due());
    assert_eq!(s.m.next_deadline(None), Some(20_000_000), "armed for the next period");
}
