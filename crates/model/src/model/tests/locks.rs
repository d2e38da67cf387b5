//! Mutexes, condition variables and rwlocks: their semantics, the deadlocks and lost wakeups they
//! lead to, and a condition wait under coarse steps.
use super::*;

#[test]
fn lost_wakeup_deadlocks_with_a_report() {
    let mut s = Sim::with_threads(2);
    // Thread 2 signals before thread 1 waits: the signal finds nobody.
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0));
    s.post(2, Op::CondSignal, [C, 0, 0, 0]);
    assert_eq!(s.offered(2), vec![(ChoiceKind::Run, 0)]);
    assert_eq!(s.run(2), grant(0));
    assert_eq!(s.unlock(2, M, mutex_kind::NORMAL), grant(0));
    s.exit(2);

    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.op(1, Op::CondWait, [C, M, NO_DEADLINE, mutex_kind::NORMAL]), Effect::Blocked);

    assert!(s.m.choices().is_empty());
    assert_eq!(s.m.live_threads(), vec![1]);
    let report = s.m.blocked_report();
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].op, "cond-wait");
    assert_eq!(report[0].addr, C);
    assert_eq!(report[0].symbol, None);
    assert!(report[0].detail.contains("condition variable 0x555555559000"), "{}", report[0].detail);
    assert!(report[0].detail.contains("not signalled since it started waiting"), "{}", report[0].detail);
    assert!(report[0].detail.contains("1 signal(s) found no waiter"), "{}", report[0].detail);
}

#[test]
fn cond_wait_never_signalled_is_reported_as_such() {
    let mut s = Sim::with_threads(1);
    s.lock(1, M, mutex_kind::NORMAL);
    assert_eq!(s.op(1, Op::CondWait, [C, M, NO_DEADLINE, mutex_kind::NORMAL]), Effect::Blocked);
    assert!(s.m.choices().is_empty());
    assert!(s.detail(1).ends_with("(never signalled)"), "{}", s.detail(1));
}

#[test]
fn abba_deadlock_names_the_holders() {
    let mut s = Sim::with_threads(2);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.lock(2, M2, mutex_kind::NORMAL), grant(0));
    s.post(1, Op::MutexLock, [M2, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    s.post(2, Op::MutexLock, [M, mutex_kind::NORMAL, NO_DEADLINE, 0]);

    assert!(s.m.choices().is_empty());
    assert_eq!(s.m.live_threads(), vec![1, 2]);
    let report = s.m.blocked_report();
    assert_eq!(report.iter().map(|b| (b.thread, b.op.as_str(), b.addr)).collect::<Vec<_>>(), vec![
        (1, "mutex-lock", M2),
        (2, "mutex-lock", M)
    ]);
    assert_eq!(report[0].detail, "waits for mutex 0x555555558080 held by thread 2");
    assert_eq!(report[1].detail, "waits for mutex 0x555555558040 held by thread 1");
}

#[test]
fn normal_mutex_semantics() {
    let mut s = Sim::with_threads(2);
    let k = mutex_kind::NORMAL;
    assert_eq!(s.lock(1, M, k), grant(0));
    // Another thread: lock waits, trylock fails.
    s.post(2, Op::MutexLock, [M, k, NO_DEADLINE, 0]);
    assert!(!s.can_run(2));
    // Relock by the owner is a self-deadlock: never enabled.
    s.post(1, Op::MutexLock, [M, k, NO_DEADLINE, 0]);
    assert!(s.m.choices().is_empty());
    assert!(s.detail(1).contains("already holds"), "{}", s.detail(1));

    // Trylock by the owner of a normal mutex: EBUSY; unlock by a non-owner releases it.
    let mut s = Sim::with_threads(2);
    assert_eq!(s.lock(1, M, k), grant(0));
    assert_eq!(s.op(1, Op::MutexTryLock, [M, k, 0, 0]), grant(EBUSY));
    assert_eq!(s.op(2, Op::MutexTryLock, [M, k, 0, 0]), grant(EBUSY));
    assert_eq!(s.unlock(2, M, k), grant(0));
    assert_eq!(s.op(2, Op::MutexTryLock, [M, k, 0, 0]), grant(0));
}

#[test]
fn recursive_mutex_counts_its_depth() {
    let mut s = Sim::with_threads(2);
    let k = mutex_kind::RECURSIVE;
    assert_eq!(s.lock(1, M, k), grant(0));
    assert_eq!(s.lock(1, M, k), grant(0));
    assert_eq!(s.op(1, Op::MutexTryLock, [M, k, 0, 0]), grant(0));
    assert_eq!(s.unlock(2, M, k), grant(EPERM));
    s.post(2, Op::MutexLock, [M, k, NO_DEADLINE, 0]);
    for _ in 0..2 {
        assert_eq!(s.unlock(1, M, k), grant(0));
        assert!(!s.can_run(2), "released before the depth reached 0");
    }
    assert_eq!(s.unlock(1, M, k), grant(0));
    assert_eq!(s.run(2), grant(0));
}

#[test]
fn errorcheck_mutex_reports_misuse() {
    let mut s = Sim::with_threads(2);
    let k = mutex_kind::ERRORCHECK;
    assert_eq!(s.unlock(1, M, k), grant(EPERM), "unlocking a free errorcheck mutex");
    assert_eq!(s.lock(1, M, k), grant(0));
    assert_eq!(s.lock(1, M, k), grant(EDEADLK));
    assert_eq!(s.op(1, Op::MutexTryLock, [M, k, 0, 0]), grant(EBUSY));
    assert_eq!(s.unlock(2, M, k), grant(EPERM));
    s.post(2, Op::MutexLock, [M, k, NO_DEADLINE, 0]);
    assert!(!s.can_run(2));
    assert_eq!(s.unlock(1, M, k), grant(0));
    assert_eq!(s.run(2), grant(0));
}

#[test]
fn cond_signal_offers_one_choice_per_waiter() {
    let mut s = Sim::with_threads(4);
    let k = mutex_kind::NORMAL;
    for t in [2, 3, 4] {
        assert_eq!(s.lock(t, M, k), grant(0));
        assert_eq!(s.op(t, Op::CondWait, [C, M, NO_DEADLINE, k]), Effect::Blocked);
    }
    assert_eq!(s.lock(1, M, k), grant(0));
    s.post(1, Op::CondSignal, [C, 0, 0, 0]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0), (ChoiceKind::Run, 1), (ChoiceKind::Run, 2)]);
    // Wake the second waiter in FIFO order: thread 3.
    assert_eq!(s.pick(1, ChoiceKind::Run, 1), grant(0));
    assert_eq!(s.m.status(3), Some(ThreadStatus::Blocked(req(Op::CondWait, [C, M, NO_DEADLINE, k]))));
    // It needs the mutex, which the signaller still holds.
    assert!(!s.can_run(3));
    assert!(s.detail(3).contains("was woken on condition variable"), "{}", s.detail(3));
    assert!(s.detail(3).contains("held by thread 1"), "{}", s.detail(3));
    assert!(s.detail(2).contains("later signals woke other waiters"), "{}", s.detail(2));
    // Two waiters left: two alternatives.
    s.post(1, Op::CondSignal, [C, 0, 0, 0]);
    assert_eq!(s.offered(1).len(), 2);
    assert_eq!(s.pick(1, ChoiceKind::Run, 1), grant(0)); // thread 4
    assert_eq!(s.unlock(1, M, k), grant(0));
    assert!(s.can_run(3) && s.can_run(4) && !s.can_run(2));
    assert_eq!(s.run(4), grant(0));
    assert!(!s.can_run(3), "thread 4 re-acquired the mutex");
    assert_eq!(s.unlock(4, M, k), grant(0));
    assert_eq!(s.run(3), grant(0));
    assert_eq!(s.unlock(3, M, k), grant(0));
    // Broadcast wakes the rest.
    s.post(1, Op::CondBroadcast, [C, 0, 0, 0]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Run, 0)]);
    assert_eq!(s.run(1), grant(0));
    assert_eq!(s.run(2), grant(0));
}

#[test]
fn rwlock_readers_share_writers_exclude() {
    let mut s = Sim::with_threads(3);
    assert_eq!(s.op(1, Op::RwReadLock, [R, NO_DEADLINE, 0, 0]), grant(0));
    assert_eq!(s.op(1, Op::RwReadLock, [R, NO_DEADLINE, 0, 0]), grant(0));
    assert_eq!(s.op(2, Op::RwReadLock, [R, NO_DEADLINE, 0, 0]), grant(0));
    assert_eq!(s.op(3, Op::RwTryWriteLock, [R, 0, 0, 0]), grant(EBUSY));
    s.post(3, Op::RwWriteLock, [R, NO_DEADLINE, 0, 0]);
    assert!(!s.can_run(3));
    assert_eq!(s.detail(3), format!("waits for rwlock {R:#x} read-locked by thread 1, thread 2"));
    assert_eq!(s.op(2, Op::RwUnlock, [R, 0, 0, 0]), grant(0));
    assert_eq!(s.op(1, Op::RwUnlock, [R, 0, 0, 0]), grant(0));
    assert!(!s.can_run(3), "thread 1 still holds one read lock");
    assert_eq!(s.op(1, Op::RwUnlock, [R, 0, 0, 0]), grant(0));
    assert_eq!(s.run(3), grant(0));
    assert_eq!(s.op(1, Op::RwTryReadLock, [R, 0, 0, 0]), grant(EBUSY));
    assert_eq!(s.op(3, Op::RwReadLock, [R, NO_DEADLINE, 0, 0]), grant(EDEADLK));
    s.post(1, Op::RwReadLock, [R, 5_000, 0, 0]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(1), grant(ETIMEDOUT));
    assert_eq!(s.op(3, Op::RwUnlock, [R, 0, 0, 0]), grant(0));
    assert_eq!(s.op(1, Op::RwTryReadLock, [R, 0, 0, 0]), grant(0));
}

/// Coarse steps (a recording): a condition wait takes effect when posted, because the real mutex
/// is already free and other threads take it without a post. The next owner's signal finds the
/// waiter; the waiter's timer is still a choice.
#[test]
fn a_coarse_cond_wait_takes_effect_when_posted() {
    let k = mutex_kind::NORMAL;
    let mut s = Sim::default();
    s.m = s.m.with_coarse_steps();
    for t in 1..=2 {
        s.m.add_thread(t, 0);
        s.post(t, if t == 1 { Op::ProcessStart } else { Op::ThreadStart }, [0; 4]);
        assert_eq!(s.run(t), grant(0));
    }
    assert_eq!(s.lock(1, M, k), grant(0));
    s.post(1, Op::CondWait, [C, M, 5_000_000, k]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)], "already waiting: only its timer");
    // Thread 2 took the mutex without a post (Op::Held): the model has it free.
    assert_eq!(s.m.adopt(2, dara_abi::Addr(M), dara_abi::HeldKind::Mutex, 1), Ok(()));
    assert_eq!(s.op(2, Op::CondSignal, [C, 0, 0, 0]), grant(0));
    assert!(!s.can_run(1), "signalled, waits for the mutex thread 2 holds");
    assert_eq!(s.unlock(2, M, k), grant(0));
    assert_eq!(s.run(1), grant(0));

    // A search keeps the decision before the wait: the mutex stays the waiter's until then.
    let mut s = Sim::with_threads(2);
    assert_eq!(s.lock(1, M, k), grant(0));
    s.post(1, Op::CondWait, [C, M, 5_000_000, k]);
    assert!(s.m.adopt(2, dara_abi::Addr(M), dara_abi::HeldKind::Mutex, 1).is_err());
}

/// A robust mutex (glibc's `__kind` bit 16, `__owner` at offset 8) as glibc has it after its
/// owner died: EOWNERDEAD once, then not recoverable when unlocked inconsistent, with waiters
/// and later lockers failing; a condition wait re-taking it reports the death.
#[test]
fn a_robust_mutex_left_inconsistent_becomes_not_recoverable() {
    const ROBUST: u32 = 16;
    const INCONSISTENT: u32 = i32::MAX as u32;
    const NOTRECOVERABLE: u32 = i32::MAX as u32 - 1;
    let mut s = Sim::with_threads(3);
    s.mem.0.insert((0, M + 16), ROBUST);
    assert_eq!(s.lock(3, M, mutex_kind::NORMAL), grant(0));
    s.exit(3);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(libc::EOWNERDEAD as i64));
    s.mem.0.insert((0, M + 8), INCONSISTENT);
    s.post(2, Op::MutexLock, [M, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    assert!(s.offered(2).is_empty(), "held by thread 1");
    assert_eq!(s.unlock(1, M, mutex_kind::NORMAL), grant(0));
    s.mem.0.insert((0, M + 8), NOTRECOVERABLE);
    assert_eq!(s.run(2), grant(libc::ENOTRECOVERABLE as i64), "the waiter");
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(libc::ENOTRECOVERABLE as i64));
    assert_eq!(s.op(1, Op::MutexTryLock, [M, mutex_kind::NORMAL, 0, 0]), grant(libc::ENOTRECOVERABLE as i64));
    assert_eq!(s.unlock(1, M, mutex_kind::NORMAL), grant(EPERM), "a robust mutex checks its owner");
    // Initialised again: recoverable.
    s.mem.0.insert((0, M + 8), 0);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
}

#[test]
fn a_condition_wait_re_taking_a_robust_mutex_whose_owner_died_returns_eownerdead() {
    let mut s = Sim::with_threads(2);
    s.mem.0.insert((0, M + 16), 16);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.op(1, Op::CondWait, [C, M, NO_DEADLINE, mutex_kind::NORMAL]), Effect::Blocked);
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0));
    s.post(2, Op::CondSignal, [C, 0, 0, 0]);
    assert_eq!(s.run(2), grant(0));
    s.exit(2);
    assert_eq!(s.run(1), grant(libc::EOWNERDEAD as i64));
    assert_eq!(s.unlock(1, M, mutex_kind::NORMAL), grant(0), "held: taken with EOWNERDEAD");
}
