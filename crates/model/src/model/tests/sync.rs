//! Barriers, once, semaphores, futexes and join.
use super::*;

#[test]
fn barrier_releases_a_round_with_one_serial_thread() {
    let mut s = Sim::with_threads(3);
    assert_eq!(s.op(1, Op::BarrierInit, [B, 3, 0, 0]), grant(0));
    for round in 0..2 {
        assert_eq!(s.op(1, Op::BarrierWait, [B, 0, 0, 0]), Effect::Blocked, "round {round}");
        assert_eq!(s.op(2, Op::BarrierWait, [B, 0, 0, 0]), Effect::Blocked, "round {round}");
        assert!(s.m.choices().iter().all(|c| c.thread == 3 || c.kind != ChoiceKind::Run));
        assert_eq!(s.detail(1), format!("waits at barrier {B:#x} (2 of 3 arrived)"));
        assert_eq!(s.op(3, Op::BarrierWait, [B, 0, 0, 0]), grant(ops::BARRIER_SERIAL_THREAD));
        assert_eq!(s.run(1), grant(0));
        assert_eq!(s.run(2), grant(0));
    }
}

#[test]
fn barrier_count_is_read_from_memory_when_init_was_not_seen() {
    let mut s = Sim::with_threads(2);
    s.mem.0.insert((0, B + 8), 2);
    assert_eq!(s.op(2, Op::BarrierWait, [B, 0, 0, 0]), Effect::Blocked);
    assert_eq!(s.op(1, Op::BarrierWait, [B, 0, 0, 0]), grant(-1));
    assert_eq!(s.run(2), grant(0));
}

#[test]
fn once_runs_init_in_one_thread() {
    let mut s = Sim::with_threads(2);
    const O: u64 = 0x6000;
    assert_eq!(s.op(1, Op::OnceBegin, [O, 0, 0, 0]), grant(1));
    s.post(2, Op::OnceBegin, [O, 0, 0, 0]);
    assert!(!s.can_run(2));
    assert!(s.detail(2).contains("init routine runs in thread 1"), "{}", s.detail(2));
    assert_eq!(s.op(1, Op::OnceDone, [O, 0, 0, 0]), grant(0));
    assert_eq!(s.run(2), grant(0));
    assert_eq!(s.op(1, Op::OnceBegin, [O, 0, 0, 0]), grant(0));
}

#[test]
fn semaphore_counts() {
    let mut s = Sim::with_threads(2);
    assert_eq!(s.op(1, Op::SemInit, [S, 1, 0, 0]), grant(0));
    assert_eq!(s.op(1, Op::SemWait, [S, NO_DEADLINE, 0, 0]), grant(0));
    assert_eq!(s.op(2, Op::SemTryWait, [S, 0, 0, 0]), grant(EAGAIN));
    s.post(2, Op::SemWait, [S, NO_DEADLINE, 0, 0]);
    assert!(s.m.choices().iter().all(|c| c.thread != 2));
    assert!(s.detail(2).contains("semaphore"), "{}", s.detail(2));
    assert_eq!(s.op(1, Op::SemPost, [S, 0, 0, 0]), grant(0));
    assert_eq!(s.run(2), grant(0));
    // Timed wait on an empty semaphore.
    s.post(2, Op::SemWait, [S, 4_000_000, 0, 0]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(2), grant(ETIMEDOUT));
    assert_eq!(s.m.now(), 4_000_000);
}

#[test]
fn semaphore_value_is_read_from_memory_when_init_was_not_seen() {
    let mut s = Sim::with_threads(2);
    s.mem.0.insert((0, S), 0);
    // Unknown: Run is offered; applying it learns the value is 0 and parks the thread.
    s.post(1, Op::SemWait, [S, NO_DEADLINE, 0, 0]);
    assert!(s.can_run(1));
    assert_eq!(s.run(1), Effect::Blocked);
    assert!(!s.can_run(1));
    assert_eq!(s.op(2, Op::SemPost, [S, 0, 0, 0]), grant(0));
    assert_eq!(s.run(1), grant(0));

    let mut s = Sim::with_threads(1);
    s.mem.0.insert((0, S), 2);
    assert_eq!(s.op(1, Op::SemWait, [S, NO_DEADLINE, 0, 0]), grant(0));
    assert_eq!(s.op(1, Op::SemTryWait, [S, 0, 0, 0]), grant(0));
    assert_eq!(s.op(1, Op::SemTryWait, [S, 0, 0, 0]), grant(EAGAIN));
}

#[test]
fn futex_wait_checks_the_word_then_blocks_until_woken() {
    let mut s = Sim::with_threads(3);
    const ANY: u64 = 0xffff_ffff;
    s.mem.0.insert((0, F), 1);
    // Value differs (or unreadable): EAGAIN right away.
    assert_eq!(s.op(1, Op::FutexWait, [F, 0, NO_DEADLINE, ANY]), grant(-EAGAIN));
    assert_eq!(s.op(1, Op::FutexWait, [F + 4, 0, NO_DEADLINE, ANY]), grant(-EAGAIN));
    // Equal: both block, in order.
    assert_eq!(s.op(1, Op::FutexWait, [F, 1, NO_DEADLINE, 0b01]), Effect::Blocked);
    assert_eq!(s.op(2, Op::FutexWait, [F, 1, NO_DEADLINE, ANY]), Effect::Blocked);
    assert!(s.detail(1).contains("waits on futex 0x55555555c000"), "{}", s.detail(1));
    // A wake whose bitset matches nobody.
    assert_eq!(s.op(3, Op::FutexWake, [F, 10, 0b10, 0]), grant(1), "thread 2's bitset is ANY");
    assert!(s.can_run(2) && !s.can_run(1));
    assert_eq!(s.run(2), grant(0));
    assert_eq!(s.op(3, Op::FutexWake, [F, 10, 0b10, 0]), grant(0));
    assert_eq!(s.op(3, Op::FutexWake, [F, 1, ANY, 0]), grant(1));
    assert_eq!(s.run(1), grant(0));
    assert!(s.m.choices().iter().all(|c| c.kind == ChoiceKind::Run));
}

#[test]
fn futex_wake_is_fifo_and_bounded() {
    let mut s = Sim::with_threads(4);
    s.mem.0.insert((0, F), 0);
    for t in [3, 1, 2] {
        assert_eq!(s.op(t, Op::FutexWait, [F, 0, NO_DEADLINE, 0]), Effect::Blocked);
    }
    assert_eq!(s.op(4, Op::FutexWake, [F, 2, 0, 0]), grant(2));
    assert!(s.can_run(3) && s.can_run(1) && !s.can_run(2), "the two oldest waiters wake");
}

#[test]
fn futex_wait_times_out() {
    let mut s = Sim::with_threads(2);
    s.mem.0.insert((0, F), 0);
    assert_eq!(s.op(1, Op::FutexWait, [F, 0, 2_000_000, 0]), Effect::Blocked);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(1), grant(-ETIMEDOUT));
    assert_eq!(s.m.now(), 2_000_000);
    // It left the queue: a wake finds nobody.
    assert_eq!(s.op(2, Op::FutexWake, [F, 1, 0, 0]), grant(0));
    // Timeout chosen before the word was compared: the comparison still comes first.
    s.mem.0.insert((0, F), 5);
    s.post(1, Op::FutexWait, [F, 0, 9_000_000, 0]);
    assert_eq!(s.timeout(1), grant(-EAGAIN));
}

#[test]
fn join_is_enabled_once_the_target_exits() {
    let mut s = Sim::with_threads(2);
    s.post(1, Op::ThreadJoin, [2, 0, 0, 0]);
    assert!(!s.can_run(1));
    assert_eq!(s.detail(1), "waits to join thread 2");
    assert_eq!(s.m.blocked_report()[0].addr, 0, "a thread slot is not an address");
    s.exit(2);
    assert_eq!(s.m.status(2), Some(ThreadStatus::Exited));
    assert_eq!(s.m.live_threads(), vec![1]);
    assert_eq!(s.run(1), grant(0));
    assert_eq!(s.op(1, Op::ThreadJoin, [1, 0, 0, 0]), grant(EDEADLK), "joining oneself");
}
