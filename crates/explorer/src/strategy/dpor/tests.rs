//! DPOR against DFS on simulated programs: the same outcomes, in fewer executions.
use super::super::sim::{
    exhaust, explore, random_memory_program, random_program, with_exits, Explored, Instr, Sim,
    TIMED_OUT,
};
use super::super::{Dfs, Feedback, Start};
use super::*;

const M: u64 = 0x100;
const A: u64 = 0x108;
const B: u64 = 0x110;
const X: u64 = 0x200;
const Y: u64 = 0x208;

/// Both strategies to the end; DPOR must reach exactly DFS's outcomes (each of its
/// executions is one of DFS's, and it may miss none) in at most as many executions.
fn compare(program: &Sim) -> (Explored, Explored) {
    let dfs = exhaust(&mut Dfs::unbounded(), program, 200_000);
    let dpor = exhaust(&mut Dpor::new(), program, 200_000);
    assert_eq!(
        dpor.outcomes, dfs.outcomes,
        "DPOR's outcomes differ from DFS's"
    );
    assert_eq!(
        dpor.executions as usize,
        dpor.schedules.len(),
        "DPOR ran a schedule twice"
    );
    assert!(dpor.executions <= dfs.executions);
    (dfs, dpor)
}

#[test]
fn independent_threads_need_one_execution() {
    let different_mutexes = Sim::new(with_exits(vec![
        vec![Instr::Lock(A), Instr::Unlock(A)],
        vec![Instr::Lock(B), Instr::Unlock(B)],
    ]));
    let (dfs, dpor) = compare(&different_mutexes);
    assert_eq!((dfs.executions, dpor.executions), (20, 1));
    assert_eq!(
        dpor.note.as_deref(),
        Some("explored all schedules up to reordering of independent steps in 1 executions")
    );

    let three = Sim::new(with_exits(vec![
        vec![Instr::Write(X, 1)],
        vec![Instr::Write(Y, 1)],
        vec![Instr::Yield],
    ]));
    let (dfs, dpor) = compare(&three);
    assert_eq!((dfs.executions, dpor.executions), (90, 1));
}

#[test]
fn dependent_steps_are_all_interleaved() {
    // Four writes of one variable: every order is a different result order.
    let same_variable = Sim::new(vec![
        vec![Instr::Write(X, 1), Instr::Write(X, 2)],
        vec![Instr::Write(X, 3), Instr::Write(X, 4)],
    ]);
    let (dfs, dpor) = compare(&same_variable);
    assert_eq!((dfs.executions, dpor.executions), (6, 6));
    // One mutex: two orders of the critical sections.
    let one_mutex = Sim::new(vec![
        vec![Instr::Lock(M), Instr::Unlock(M)],
        vec![Instr::Lock(M), Instr::Unlock(M)],
    ]);
    let (dfs, dpor) = compare(&one_mutex);
    assert_eq!((dfs.executions, dpor.executions), (2, 2));
}

#[test]
fn finds_a_lost_update_between_two_critical_sections() {
    let increment = vec![
        Instr::Lock(M),
        Instr::Load(X),
        Instr::Unlock(M),
        Instr::Lock(M),
        Instr::Store(X, 1),
        Instr::Unlock(M),
    ];
    let program = Sim::new(with_exits(vec![increment.clone(), increment]));
    let (dfs, dpor) = compare(&program);
    assert!(
        dpor.outcomes.iter().any(|o| o.vars == [(X, 1)]),
        "{:?}",
        dpor.outcomes
    );
    // The four critical sections in any order that keeps each thread's two in order.
    assert_eq!((dfs.executions, dpor.executions), (36, 6));
}

#[test]
fn finds_an_abba_deadlock() {
    let program = Sim::new(with_exits(vec![
        vec![
            Instr::Lock(A),
            Instr::Lock(B),
            Instr::Unlock(B),
            Instr::Unlock(A),
        ],
        vec![
            Instr::Write(X, 1),
            Instr::Lock(B),
            Instr::Lock(A),
            Instr::Unlock(A),
            Instr::Unlock(B),
        ],
    ]));
    let (dfs, dpor) = compare(&program);
    assert!(
        dpor.outcomes.iter().any(|o| o.stuck == [0, 1]),
        "{:?}",
        dpor.outcomes
    );
    assert_eq!((dfs.executions, dpor.executions), (65, 6));
}

#[test]
fn finds_an_order_violation_across_thread_creation() {
    // Main creates a thread that reads X, then initialises X; the child can read it before.
    let program = Sim::new(vec![
        vec![
            Instr::Spawn(1),
            Instr::Lock(M),
            Instr::Write(X, 7),
            Instr::Unlock(M),
            Instr::Join(1),
            Instr::Exit,
        ],
        vec![
            Instr::Lock(M),
            Instr::Load(X),
            Instr::Unlock(M),
            Instr::Exit,
        ],
    ]);
    let (dfs, dpor) = compare(&program);
    let regs: Vec<i64> = dpor.outcomes.iter().map(|o| o.regs[1]).collect();
    assert_eq!(regs, [0, 7]);
    assert_eq!((dfs.executions, dpor.executions), (8, 5));
}

#[test]
fn a_race_with_a_thread_not_yet_created_moves_its_creator() {
    // Thread 2 does not exist when thread 0 writes X; to write X first it needs thread 1's
    // spawn moved before thread 0's write (Flanagan & Godefroid's fallback set).
    let program = Sim::new(vec![
        vec![Instr::Write(X, 1), Instr::Exit],
        vec![Instr::Spawn(2), Instr::Exit],
        vec![Instr::Write(X, 2), Instr::Exit],
    ]);
    let (dfs, dpor) = compare(&program);
    assert_eq!(
        dpor.outcomes
            .iter()
            .map(|o| o.vars[0].1)
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!((dfs.executions, dpor.executions), (84, 2));
}

#[test]
fn a_racing_thread_asleep_at_the_race_does_not_hide_the_reversal() {
    // Found by the random programs. Thread 1's timed lock puts both of its choices in the
    // root's backtrack set; the lock branch is then asleep under thread 2's branch, so the
    // lock branch itself must find "2 writes Y, 0 reads Y and writes X, 1 writes X". There,
    // reversing 1's write of X with 0's needs thread 2 first (0 is asleep after 1's lock and
    // 0's read needs 2's write anyway): adding 0, as Flanagan & Godefroid's rule does, is
    // not enough.
    let program = Sim::new(with_exits(vec![
        vec![Instr::Load(Y), Instr::Store(X, 1)],
        vec![Instr::TimedLock(M), Instr::Write(X, 2), Instr::Unlock(M)],
        vec![Instr::Write(Y, 2)],
    ]));
    let (dfs, dpor) = compare(&program);
    assert_eq!((dfs.executions, dpor.executions), (2520, 33));
    let wanted = super::super::sim::Outcome {
        vars: vec![(X, 2), (Y, 2)],
        regs: vec![2, 0, 0],
        stuck: vec![],
    };
    assert!(dpor.outcomes.contains(&wanted), "{:?}", dpor.outcomes);
}

#[test]
fn explores_every_choice_of_a_thread() {
    let picks = Sim::new(with_exits(vec![
        vec![Instr::Pick(X, 3)],
        vec![Instr::Write(Y, 1)],
    ]));
    let (_, dpor) = compare(&picks);
    assert_eq!(dpor.executions, 3);

    // A timed lock against a holder: acquired before, after, or timed out.
    let timed = Sim::new(with_exits(vec![
        vec![Instr::TimedLock(M), Instr::Unlock(M)],
        vec![Instr::Lock(M), Instr::Write(Y, 1), Instr::Unlock(M)],
    ]));
    let (dfs, dpor) = compare(&timed);
    assert_eq!((dfs.executions, dpor.executions), (44, 12));
    assert!(dpor.outcomes.iter().any(|o| o.regs[0] == TIMED_OUT));
    assert!(dpor.outcomes.iter().any(|o| o.regs[0] == 0));
}

#[test]
fn never_misses_what_dfs_finds_on_random_programs() {
    // DPOR_SEEDS=N checks N random programs instead of 200 (20,000 take about 75 s with
    // `cargo test --release`; that many passed when this was written).
    let seeds: u64 = std::env::var("DPOR_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let (mut dfs_total, mut dpor_total) = (0, 0);
    for seed in 0..seeds {
        // As generated (threads that run out of code leave their next step unknown, the
        // conservative case) and with every thread ending in `ThreadExit`, as real ones do.
        for program in [random_program(seed, 9), random_program(seed, 6).exiting()] {
            let (dfs, dpor) = compare(&program);
            dfs_total += dfs.executions;
            dpor_total += dpor.executions;
        }
    }
    assert!(
        dpor_total * 4 < dfs_total,
        "DPOR reduces: {dpor_total} vs {dfs_total}"
    );
}

#[test]
fn dependence_follows_the_objects_touched() {
    let c = |thread, op, obj| Choice {
        thread,
        kind: ChoiceKind::Run,
        alt: 0,
        op,
        obj,
    };
    let timeout = Choice {
        kind: ChoiceKind::Timeout,
        ..c(2, Op::Sleep, 99)
    };
    let table = [
        (c(1, Op::MutexLock, A), c(2, Op::MutexUnlock, A), true),
        (c(1, Op::MutexLock, A), c(2, Op::MutexLock, B), false),
        (c(1, Op::FutexWake, A), c(2, Op::SemPost, A), true),
        (c(1, Op::CondWait, A), c(2, Op::MutexLock, B), true),
        (c(1, Op::CondWait, A), c(2, Op::Yield, 0), false),
        (c(1, Op::ThreadExit, 0), c(2, Op::ThreadJoin, 1), true),
        (c(1, Op::ThreadExit, 0), c(2, Op::ThreadJoin, 3), false),
        (c(1, Op::ClockRead, 0), c(2, Op::ClockRead, 0), false),
        (c(1, Op::ThreadCreate, 0), c(2, Op::ThreadStart, 1), false),
        (c(1, Op::ProcessExit, 0), c(2, Op::Yield, 0), true),
        (c(1, Op::Yield, 0), timeout, true),
        (c(1, Op::Yield, 0), c(1, Op::ClockRead, 0), true),
        (c(1, Op::MemoryRead, X), c(2, Op::MemoryWrite, X), true),
        (c(1, Op::MemoryWrite, X), c(2, Op::MemoryWrite, X + 4), true),
        (c(1, Op::MemoryRead, X), c(2, Op::MemoryRead, X), false),
        (c(1, Op::MemoryWrite, X), c(2, Op::MemoryWrite, Y), false),
        (c(1, Op::MemoryWrite, A), c(2, Op::MutexLock, A), false),
        (c(1, Op::MemoryRead, X), c(2, Op::FutexWake, X), false),
        (c(1, Op::MemoryRead, X), c(1, Op::MemoryRead, Y), true),
        (c(1, Op::MemoryRead, X), c(2, Op::ProcessExit, 0), true),
        (c(1, Op::MemoryRead, X), timeout, true),
    ];
    for (a, b, want) in table {
        assert_eq!(dependent(&a, &b), want, "{a:?} vs {b:?}");
        assert_eq!(dependent(&b, &a), want, "symmetric: {b:?} vs {a:?}");
    }
}

#[test]
fn a_changed_program_is_a_divergence_not_a_panic() {
    let program = Sim::new(vec![
        vec![Instr::Write(X, 1), Instr::Write(X, 2)],
        vec![Instr::Write(X, 3)],
    ]);
    let changed = program.clone().with(1, 0, Instr::Write(Y, 3));
    let mut dpor = Dpor::new();
    let d = explore(
        &mut dpor,
        |k| {
            if k == 0 {
                program.clone()
            } else {
                changed.clone()
            }
        },
        10,
    )
    .unwrap_err();
    assert_eq!(d.step, 0);
    assert!(
        d.expected.contains("<thread 1 run futex-wake 0x200>"),
        "{}",
        d.expected
    );
    assert!(
        d.seen.contains("<thread 1 run futex-wake 0x208>"),
        "{}",
        d.seen
    );

    // Execution 1 replays the write and the pick, but the program now ends after the write.
    let program = Sim::new(vec![vec![
        Instr::Write(X, 1),
        Instr::Pick(Y, 2),
        Instr::Write(X, 2),
    ]]);
    let shorter = Sim::new(vec![vec![Instr::Write(X, 1)]]);
    let mut dpor = Dpor::new();
    let d = explore(
        &mut dpor,
        |k| {
            if k == 0 {
                program.clone()
            } else {
                shorter.clone()
            }
        },
        10,
    )
    .unwrap_err();
    assert_eq!(d.step, 1);
    assert_eq!(d.seen, "nothing: execution 1 ended after 1 steps");
}

#[test]
fn a_lost_update_on_plain_memory_is_found_and_reads_commute() {
    let lost_update = Sim::new(with_exits(vec![
        vec![Instr::MemRead(X), Instr::MemAdd(X, 1)],
        vec![Instr::MemRead(X), Instr::MemAdd(X, 1)],
    ]));
    let (dfs, dpor) = compare(&lost_update);
    let finals: std::collections::BTreeSet<i64> = dpor
        .outcomes
        .iter()
        .map(|o| o.vars.iter().find(|(v, _)| *v == X).map_or(0, |(_, n)| *n))
        .collect();
    assert_eq!(finals, [1, 2].into(), "both the lost update and the correct sum");
    assert!(dpor.executions < dfs.executions);

    let readers = Sim::new(with_exits(vec![
        vec![Instr::MemRead(X), Instr::MemRead(Y)],
        vec![Instr::MemRead(X), Instr::MemRead(Y)],
    ]));
    let (_, dpor) = compare(&readers);
    assert_eq!(dpor.executions, 1, "reads of the same variable commute");
}

#[test]
fn dpor_matches_dfs_on_random_plain_memory_programs() {
    let (mut dpor_total, mut dfs_total) = (0, 0);
    for seed in 0..40 {
        let (dfs, dpor) = compare(&random_memory_program(seed, 7));
        dpor_total += dpor.executions;
        dfs_total += dfs.executions;
    }
    assert!(dpor_total < dfs_total, "DPOR reduces: {dpor_total} vs {dfs_total}");
}

#[test]
fn a_race_analysis_out_of_budget_ends_and_says_the_search_is_no_proof() {
    // Two threads each writing one variable four times: 70 orders, many races.
    let racy = Sim::new(vec![vec![Instr::Write(X, 1); 4], vec![Instr::Write(X, 2); 4]]);
    let full = exhaust(&mut Dpor::new(), &racy, 10_000);
    assert!(full.note.as_deref().is_some_and(|n| n.starts_with("explored all schedules")), "{:?}", full.note);
    let mut starved = Dpor::with_analysis_work(10);
    let cut = exhaust(&mut starved, &racy, 10_000);
    assert!(cut.executions < full.executions, "a cut analysis asks for fewer schedules");
    assert!(cut.note.as_deref().is_some_and(|n| n.contains("not a proof")), "{:?}", cut.note);
    assert!(!cut.notes.is_empty());
    assert!(full.notes.is_empty());
}

#[test]
fn a_long_execution_is_analysed_within_the_budget() {
    // 2 x 20,000 dependent steps: a full analysis would visit billions of events; the budget
    // ends it after ANALYSIS_WORK visits (counted, not timed).
    use super::super::testkit::Program;
    let mut long = Sim::new(vec![vec![Instr::Write(X, 1); 20_000], vec![Instr::Write(X, 2); 20_000]]);
    let mut dpor = Dpor::new();
    dpor.begin_execution(Start::at(0));
    let mut taken = Vec::new();
    loop {
        let choices = long.choices();
        if choices.is_empty() {
            break;
        }
        let i = dpor.choose(taken.len() as u64, &choices).unwrap();
        long.apply(&choices[i]);
        taken.push(choices[i]);
    }
    assert!(taken.len() >= 40_000, "{} steps", taken.len());
    let status = dpor.end_execution(&Feedback::without_coverage(&taken));
    assert_eq!(status.notes.len(), 1, "{status:?}");
    assert_eq!(dpor.analyses_cut, 1);
}
