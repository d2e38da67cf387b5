//! Objects shared between processes (`sharing.rs`): one object wherever each process maps it when
//! it says it is process-shared, one per process otherwise.
use dara_abi::FutexMatch;

use super::*;

const SHARED_FILE: SharedBacking = SharedBacking { device: 0x1a, inode: 99 };
/// A futex bitset argument that matches every waiter, private or shared.
const PRIVATE_ANY: u64 = FutexMatch { bitset: u32::MAX, shared: false }.to_arg();
const SHARED_ANY: u64 = FutexMatch { bitset: u32::MAX, shared: true }.to_arg();

/// Threads 1 (process 0) and 2 (process 1), started. Object `i` of `objects` (its address in
/// process 0, its address in process 1) lies in one shared file at offset `0x100 * (i + 1)`.
fn two_processes(objects: &[(u64, u64)]) -> Sim {
    let mut s = Sim::default();
    for (t, process) in [(1, 0), (2, 1)] {
        s.m.add_thread(t, process);
        s.post(t, Op::ProcessStart, [0; 4]);
        assert_eq!(s.run(t), grant(0));
    }
    for (i, &(a0, a1)) in objects.iter().enumerate() {
        let at = SharedLocation { backing: SHARED_FILE, offset: 0x100 * (i as u64 + 1) };
        s.mem.1.insert((0, a0), at);
        s.mem.1.insert((1, a1), at);
    }
    s
}

/// Writes `value` at `addr + offset` in both processes (the object's memory as glibc left it).
fn word(s: &mut Sim, addr: u64, offset: u64, value: u32) {
    for process in [0, 1] {
        s.mem.0.insert((process, addr + offset), value);
    }
}

/// glibc's marks of a process-shared object (see `sharing.rs`).
fn shared_mutex(s: &mut Sim, addr: u64) {
    word(s, addr, 16, 128);
}

#[test]
fn a_process_shared_semaphore_is_one_object_in_every_process() {
    // multiprocessing's locks: sem_open'd (or inherited over fork), waited for in one process
    // and posted in another.
    for (private, one_object) in [(128, true), (0, false)] {
        let mut s = two_processes(&[(S, S)]);
        word(&mut s, S, 0, 0);
        word(&mut s, S, 8, private);
        s.post(1, Op::SemWait, [S, NO_DEADLINE, 0, 0]);
        assert_eq!(s.run(1), Effect::Blocked);
        assert_eq!(s.op(2, Op::SemPost, [S, 0, 0, 0]), grant(0));
        assert_eq!(s.can_run(1), one_object, "private word {private}: a fork copies a private semaphore");
    }
}

#[test]
fn a_process_shared_mutex_is_one_mutex_wherever_each_process_maps_it() {
    // Process 1 maps the lock file at another address (LMDB's readers and writers do).
    let mut s = two_processes(&[(M, M2)]);
    shared_mutex(&mut s, M);
    shared_mutex(&mut s, M2);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.op(2, Op::MutexTryLock, [M2, mutex_kind::NORMAL, 0, 0]), grant(EBUSY));
    s.post(2, Op::MutexLock, [M2, mutex_kind::NORMAL, NO_DEADLINE, 0]);
    assert!(!s.can_run(2), "held by the other process");
    assert!(s.detail(2).contains("held by thread 1"), "{}", s.detail(2));
    assert_eq!(s.unlock(1, M, mutex_kind::NORMAL), grant(0));
    // Named in choices by the address where the execution first met it, in every process.
    assert_eq!(s.m.choices().iter().filter(|c| c.thread == 2).map(|c| c.obj).collect::<Vec<_>>(), [M]);
    assert_eq!(s.run(2), grant(0));
    // A normal mutex may be unlocked by another process's thread (glibc does not check).
    assert_eq!(s.unlock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
}

#[test]
fn a_private_mutex_in_shared_memory_is_one_per_process() {
    let mut s = two_processes(&[(M, M)]);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0), "no PTHREAD_MUTEX_PSHARED_BIT: each process's own");
}

#[test]
fn a_shared_mutex_outside_shared_memory_is_one_per_process() {
    // pshared attribute on private memory: a fork copies the mutex.
    let mut s = two_processes(&[]);
    shared_mutex(&mut s, M);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0));
}

#[test]
fn a_mutex_initialised_again_as_private_is_keyed_per_process_again() {
    let mut s = two_processes(&[(M, M)]);
    shared_mutex(&mut s, M);
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.unlock(1, M, mutex_kind::NORMAL), grant(0));
    word(&mut s, M, 16, 0); // pthread_mutex_destroy + init without the attribute
    assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
    assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0));
}

#[test]
fn a_condvar_signalled_in_another_process_wakes_the_waiter() {
    for (wrefs, one_object) in [(1, true), (0, false)] {
        let mut s = two_processes(&[(M, M), (C, C)]);
        shared_mutex(&mut s, M);
        word(&mut s, C, 36, wrefs); // __wrefs bit 0: __PTHREAD_COND_SHARED_MASK
        assert_eq!(s.lock(1, M, mutex_kind::NORMAL), grant(0));
        assert_eq!(s.op(1, Op::CondWait, [C, M, NO_DEADLINE, mutex_kind::NORMAL]), Effect::Blocked);
        assert_eq!(s.lock(2, M, mutex_kind::NORMAL), grant(0), "the wait released the shared mutex");
        assert_eq!(s.op(2, Op::CondSignal, [C, 0, 0, 0]), grant(0));
        assert_eq!(s.can_run(1), false, "thread 2 holds the mutex");
        assert_eq!(s.unlock(2, M, mutex_kind::NORMAL), grant(0));
        assert_eq!(s.can_run(1), one_object, "__wrefs {wrefs}");
        if one_object {
            assert_eq!(s.run(1), grant(0));
        } else {
            assert!(s.detail(1).contains("never signalled"), "{}", s.detail(1));
        }
    }
}

#[test]
fn a_shared_rwlock_write_locked_in_one_process_keeps_the_other_out() {
    let mut s = two_processes(&[(R, R)]);
    word(&mut s, R, 28, 1); // __shared
    assert_eq!(s.op(1, Op::RwWriteLock, [R, NO_DEADLINE, 0, 0]), grant(0));
    s.post(2, Op::RwReadLock, [R, NO_DEADLINE, 0, 0]);
    assert!(!s.can_run(2));
    assert!(s.detail(2).contains("write-locked by thread 1"), "{}", s.detail(2));
    assert_eq!(s.op(1, Op::RwUnlock, [R, 0, 0, 0]), grant(0));
    assert_eq!(s.run(2), grant(0));
}

#[test]
fn a_shared_barrier_gathers_threads_of_two_processes() {
    let mut s = two_processes(&[(B, B)]);
    word(&mut s, B, 8, 2); // count, read from memory: the init was not seen
    word(&mut s, B, 12, 128); // shared: FUTEX_SHARED
    assert_eq!(s.op(1, Op::BarrierWait, [B, 0, 0, 0]), Effect::Blocked);
    assert_eq!(s.op(2, Op::BarrierWait, [B, 0, 0, 0]), grant(ops::BARRIER_SERIAL_THREAD));
    assert_eq!(s.run(1), grant(0));
}

#[test]
fn a_raw_futex_is_shared_between_processes_unless_the_call_says_private() {
    let mut s = two_processes(&[(F, F)]);
    word(&mut s, F, 0, 7);
    assert_eq!(s.op(1, Op::FutexWait, [F, 7, NO_DEADLINE, SHARED_ANY]), Effect::Blocked);
    assert_eq!(s.op(2, Op::FutexWake, [F, 1, PRIVATE_ANY, 0]), grant(0), "a private wake is process 1's own futex");
    assert_eq!(s.op(2, Op::FutexWake, [F, 1, SHARED_ANY, 0]), grant(1));
    assert_eq!(s.run(1), grant(0));

    // Both private: two futexes, even on shared memory (the kernel keys them by address space).
    assert_eq!(s.op(1, Op::FutexWait, [F, 7, NO_DEADLINE, PRIVATE_ANY]), Effect::Blocked);
    assert_eq!(s.op(2, Op::FutexWake, [F, 1, PRIVATE_ANY, 0]), grant(0));
    assert!(!s.can_run(1), "thread 1 still waits");
}
