//! Whole runs: the order of choices, the clock tick per decision, a process that dies, and a
//! seeded script that gives the same choices every time.
use super::*;

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
    let first = s.m.clock.next_step_cost();
    s.op(1, Op::Yield, [0; 4]);
    let second = s.m.clock.next_step_cost();
    s.op(1, Op::ClockRead, [0; 4]);
    assert_eq!(s.m.now(), before + first + second);
    assert!(first + second >= TICK_NS, "a decision costs at least half the step cost");
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
