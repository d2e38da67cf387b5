//! Unit tests of the model: synthetic post/choose scripts against a fake target memory.
//! `tests/sharing.rs`: objects shared between processes.
use std::collections::BTreeMap;

use dara_abi::{mutex_kind, Op, NO_DEADLINE};

use super::*;
use crate::choice::{ChoiceKind, ProcessId, ThreadId};

const EBUSY: i64 = libc::EBUSY as i64;
const EDEADLK: i64 = libc::EDEADLK as i64;
const EPERM: i64 = libc::EPERM as i64;
const EAGAIN: i64 = libc::EAGAIN as i64;
const ETIMEDOUT: i64 = libc::ETIMEDOUT as i64;

const M: u64 = 0x5555_5555_8040;
const M2: u64 = 0x5555_5555_8080;
const C: u64 = 0x5555_5555_9000;
const B: u64 = 0x5555_5555_a000;
const S: u64 = 0x5555_5555_b000;
const F: u64 = 0x5555_5555_c000;
const R: u64 = 0x5555_5555_d000;

/// Words of target memory by process and address, and which addresses lie in shared memory.
#[derive(Default)]
struct FakeMem(BTreeMap<(ProcessId, u64), u32>, BTreeMap<(ProcessId, u64), SharedLocation>);

impl MemoryReader for FakeMem {
    fn read_u32(&mut self, process: ProcessId, addr: u64) -> Option<u32> {
        self.0.get(&(process, addr)).copied()
    }

    fn shared_location(&mut self, process: ProcessId, addr: u64) -> Option<SharedLocation> {
        self.1.get(&(process, addr)).copied()
    }
}

/// A model plus fake memory, driven one thread at a time like the real scheduler would.
///
/// The tests of what each operation does use `TimerPolicy::Any`, so that a timeout can be taken
/// at any point of an operation's life; `deadline_*` and `pause_*` tests use the default policy.
struct Sim {
    m: Model,
    mem: FakeMem,
}

impl Default for Sim {
    fn default() -> Sim {
        Sim::with_policy(TimerPolicy::Any)
    }
}

mod sharing;

const TICK_NS: u64 = crate::time::DEFAULT_STEP_NS;

impl Sim {
    fn with_policy(timers: TimerPolicy) -> Sim {
        Sim { m: Model::with_time(&TimeConfig { timers, ..TimeConfig::default() }), mem: FakeMem::default() }
    }

    /// Threads 1..=n in process 0, all started and running (thread 1 is the main thread).
    fn with_threads(n: ThreadId) -> Sim {
        Sim::started(Sim::default(), n)
    }

    /// Like `with_threads`, with timers that fire at their deadlines (the default policy).
    fn at_deadlines(n: ThreadId) -> Sim {
        Sim::started(Sim::with_policy(TimerPolicy::Deadline), n)
    }

    fn started(mut s: Sim, n: ThreadId) -> Sim {
        for t in 1..=n {
            s.m.add_thread(t, 0);
            let op = if t == 1 { Op::ProcessStart } else { Op::ThreadStart };
            s.m.post(t, req(op, [0; 4]), &mut s.mem);
            assert_eq!(s.run(t), Effect::Grant { result: 0 });
        }
        s
    }

    fn post(&mut self, t: ThreadId, op: Op, args: [u64; 4]) {
        self.m.post(t, req(op, args), &mut self.mem);
    }

    /// The (kind, alt) pairs thread `t` offers.
    fn offered(&self, t: ThreadId) -> Vec<(ChoiceKind, u32)> {
        self.m.choices().iter().filter(|c| c.thread == t).map(|c| (c.kind, c.alt)).collect()
    }

    fn can_run(&self, t: ThreadId) -> bool {
        self.offered(t).iter().any(|&(k, _)| k == ChoiceKind::Run)
    }

    fn pick(&mut self, t: ThreadId, kind: ChoiceKind, alt: u32) -> Effect {
        let choice = self
            .m
            .choices()
            .into_iter()
            .find(|c| c.thread == t && c.kind == kind && c.alt == alt)
            .unwrap_or_else(|| panic!("thread {t} does not offer {kind:?}/{alt}; offered: {:?}", self.m.choices()));
        self.m.apply(&choice, &mut self.mem)
    }

    fn run(&mut self, t: ThreadId) -> Effect {
        self.pick(t, ChoiceKind::Run, 0)
    }

    fn timeout(&mut self, t: ThreadId) -> Effect {
        self.pick(t, ChoiceKind::Timeout, 0)
    }

    /// Post and run at once; the operation must be enabled.
    fn op(&mut self, t: ThreadId, op: Op, args: [u64; 4]) -> Effect {
        self.post(t, op, args);
        self.run(t)
    }

    fn lock(&mut self, t: ThreadId, addr: u64, kind: u64) -> Effect {
        self.op(t, Op::MutexLock, [addr, kind, NO_DEADLINE, 0])
    }

    fn unlock(&mut self, t: ThreadId, addr: u64, kind: u64) -> Effect {
        self.op(t, Op::MutexUnlock, [addr, kind, 0, 0])
    }

    fn exit(&mut self, t: ThreadId) {
        assert_eq!(self.op(t, Op::ThreadExit, [0; 4]), Effect::Grant { result: 0 });
    }

    fn detail(&self, t: ThreadId) -> String {
        let report = self.m.blocked_report();
        report.into_iter().find(|b| b.thread == t).map(|b| b.detail).unwrap_or_default()
    }
}

/// The request `op` posts with `args` (as the driver decodes it).
fn req(op: Op, args: [u64; 4]) -> Request {
    Request::decode(op, args).expect("a test request decodes")
}

fn grant(result: i64) -> Effect {
    Effect::Grant { result }
}

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
fn choices_are_ordered_by_thread_kind_alt() {
    let mut s = Sim::with_threads(3);
    s.post(3, Op::Yield, [0; 4]);
    s.post(1, Op::Sleep, [5_000_000, 0, 0, 0]);
    s.post(2, Op::MutexLock, [M, 0, 9_000_000, 0]);
    let got: Vec<_> = s.m.choices().iter().map(|c| (c.thread, c.kind, c.alt, c.op, c.obj)).collect();
    assert_eq!(got, vec![
        (1, ChoiceKind::Timeout, 0, Op::Sleep, 5_000_000),
        (2, ChoiceKind::Run, 0, Op::MutexLock, M),
        (2, ChoiceKind::Timeout, 0, Op::MutexLock, M),
        (3, ChoiceKind::Run, 0, Op::Yield, 0),
    ]);
}

#[test]
fn every_decision_ticks_the_clock() {
    let mut s = Sim::with_threads(1);
    let before = s.m.now();
    s.op(1, Op::Yield, [0; 4]);
    s.op(1, Op::ClockRead, [0; 4]);
    assert_eq!(s.m.now(), before + 2 * TICK_NS);
}

#[test]
fn sleep_only_times_out_and_jumps_the_clock() {
    let mut s = Sim::with_threads(1);
    s.post(1, Op::Sleep, [60_000_000_000, 0, 0, 0]);
    assert_eq!(s.offered(1), vec![(ChoiceKind::Timeout, 0)]);
    assert_eq!(s.timeout(1), grant(0));
    assert_eq!(s.m.now(), 60_000_000_000);
    // A deadline already in the past does not move time back.
    s.post(1, Op::Sleep, [5, 0, 0, 0]);
    assert_eq!(s.timeout(1), grant(0));
    assert_eq!(s.m.now(), 60_000_000_000 + TICK_NS);
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

#[test]
fn dead_process_keeps_its_locks_and_leaves_the_live_set() {
    let mut s = Sim::with_threads(2);
    s.m.add_thread(3, 1);
    s.post(3, Op::ProcessStart, [0, 0, 0, 0]);
    assert_eq!(s.run(3), grant(0));
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0));
    s.post(2, Op::Yield, [0; 4]);
    s.post(1, Op::ProcessExit, [0; 4]);
    assert_eq!(s.run(1), grant(0));
    s.m.process_exited(0);
    assert_eq!(s.m.live_threads(), vec![3]);
    assert_eq!(s.m.process_of(3), Some(1));
    assert!(s.m.choices().is_empty(), "the dead thread's pending yield is gone");
    assert_eq!(s.m.blocked_report().iter().map(|b| b.thread).collect::<Vec<_>>(), vec![3]);
}

/// Runs a fixed script of thread bodies, picking choices with a seeded generator, and records
/// every enabled set and effect.
fn scripted_run(seed: u64) -> Vec<(Vec<Choice>, Effect)> {
    let k = mutex_kind::NORMAL;
    let bodies: Vec<Vec<(Op, [u64; 4])>> = (0..3u64)
        .map(|i| {
            vec![
                (Op::MutexLock, [M, k, NO_DEADLINE, 0]),
                (Op::CondSignal, [C, 0, 0, 0]),
                (Op::MutexUnlock, [M, k, 0, 0]),
                (Op::Sleep, [1_000_000 * (i + 1), 0, 0, 0]),
                (Op::MutexLock, [M, k, NO_DEADLINE, 0]),
                (Op::CondWait, [C, M, 5_000_000, k]),
                (Op::MutexUnlock, [M, k, 0, 0]),
                (Op::ThreadExit, [0; 4]),
            ]
        })
        .collect();
    let mut s = Sim::with_threads(3);
    let mut next = [0usize; 3];
    for t in 1..=3u32 {
        let (op, args) = bodies[t as usize - 1][0];
        s.post(t, op, args);
        next[t as usize - 1] = 1;
    }
    let mut log = Vec::new();
    let mut rng = seed;
    loop {
        let choices = s.m.choices();
        if choices.is_empty() {
            break;
        }
        rng = dara_abi::splitmix64(rng);
        let choice = choices[(rng % choices.len() as u64) as usize];
        let effect = s.m.apply(&choice, &mut s.mem);
        log.push((choices, effect));
        let t = choice.thread;
        if let Effect::Grant { .. } = effect {
            let i = t as usize - 1;
            if let Some(&(op, args)) = bodies[i].get(next[i]) {
                s.post(t, op, args);
                next[i] += 1;
            }
        }
    }
    log
}

#[test]
fn same_script_same_choices() {
    for seed in 0..20 {
        let a = scripted_run(seed);
        let b = scripted_run(seed);
        assert_eq!(a, b, "seed {seed}");
        assert!(a.iter().any(|(c, _)| c.len() > 1), "the script should offer real choices");
    }
    assert_ne!(scripted_run(1), scripted_run(2), "different picks should lead to different runs");
}

mod net {
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
    fn rcvtimeo_fires_as_eagain_and_connect_close_need_no_view() {
        let mut s = Sim::with_threads(2);
        s.post(1, Op::NetAccept, [3, 0, 1_000, 0]);
        s.post(2, Op::NetConnect, [4, 0, 0, 0]);
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
    assert_eq!(s.timeout(1), grant(0));
    assert_eq!(s.m.now(), 5_000_000 + TICK_NS, "firing a due timer moves the clock by one step only");
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
