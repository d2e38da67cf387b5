//! `rf` on simulated programs: it learns reads-from pairs, finds planted reorder and two-stage
//! bugs within a bound, and repeats itself for a seed.
use dara_abi::Op;

use super::super::sim::{executions_to_torn, reorder, two_stage};
use super::super::testkit::{run_choice, Search};
use super::*;

/// Mean executions to the bug over seeds 1..=`seeds`; panics if a seed misses within `limit`.
fn mean_executions(program: &super::super::sim::Sim, seeds: u64, limit: u64, strategy: impl Fn(u64) -> Box<dyn Strategy>) -> f64 {
    let total: u64 = (1..=seeds)
        .map(|seed| executions_to_torn(&mut *strategy(seed), program, limit).unwrap_or_else(|| panic!("seed {seed}: not found in {limit}")))
        .sum();
    total as f64 / seeds as f64
}

#[test]
fn learns_which_write_each_read_read_from() {
    let mut knowledge = Knowledge::default();
    let w = run_choice(0, Op::MemoryWrite, 0x100);
    let r = run_choice(1, Op::MemoryRead, 0x104);
    assert!(knowledge.learn(&[r, w, r]));
    assert_eq!(knowledge.seen.len(), 2, "the first read saw the initial value, the second the write");
    assert!(knowledge.seen.iter().any(|p| p.write.is_none()));
    assert!(!knowledge.learn(&[r, w, r]), "nothing new the second time");
    // The same code in another thread makes the same events.
    let r2 = run_choice(2, Op::MemoryRead, 0x100);
    assert!(!knowledge.learn(&[r2]));
}

#[test]
fn a_write_in_a_section_the_read_needs_is_held_back_at_its_lock() {
    let mut knowledge = Knowledge::default();
    let (m, data) = (0x10, 0x100);
    let writer = [run_choice(0, Op::MutexLock, m), run_choice(0, Op::MemoryWrite, data), run_choice(0, Op::MutexUnlock, m)];
    let reader = [run_choice(1, Op::MemoryRead, 0x200), run_choice(1, Op::MutexLock, m), run_choice(1, Op::MemoryRead, data), run_choice(1, Op::MutexUnlock, m)];
    knowledge.learn(&writer.iter().chain(&reader).copied().collect::<Vec<_>>());
    let write = *knowledge.writes[&(data >> 3)].iter().next().unwrap();
    let read = *knowledge.reads[&(data >> 3)].iter().next().unwrap();
    let points = knowledge.delay_points(write, read);
    assert_eq!(points.len(), 1);
    assert_eq!((points[0].op, points[0].obj), (Op::MutexLock, m));
    // The two threads' locks of m are different events (different accesses before them).
    assert!(!knowledge.delay_points(read, read).contains(&points[0]));
    // Outside a section, the write itself.
    let free = run_choice(2, Op::MemoryWrite, 0x300);
    let r3 = run_choice(3, Op::MemoryRead, 0x300);
    knowledge.learn(&[free, r3]);
    let w3 = *knowledge.writes[&(0x300 >> 3)].iter().next().unwrap();
    assert_eq!(knowledge.delay_points(w3, read), vec![w3]);
}

#[test]
fn finds_the_planted_reorder_and_two_stage_bugs_within_a_bound() {
    for setters in [3, 10, 20] {
        let mean = mean_executions(&reorder(setters), 10, 100, |seed| Box::new(Rf::new(seed)));
        assert!(mean <= 10.0, "reorder with {setters} setters: mean {mean}");
    }
    let mean = mean_executions(&two_stage(20), 10, 100, |seed| Box::new(Rf::new(seed)));
    assert!(mean <= 15.0, "two-stage with 20 writers: mean {mean}");
}

#[test]
fn the_two_stage_bug_needs_the_feedback() {
    // Without constraints (POS alone) the late reader almost never sees stage 1 alone.
    let found = (1..=10).filter(|&seed| executions_to_torn(&mut Pos::new(seed), &two_stage(20), 30).is_some()).count();
    let with_rf = (1..=10).filter(|&seed| executions_to_torn(&mut Rf::new(seed), &two_stage(20), 30).is_some()).count();
    assert!(with_rf > found, "rf {with_rf}/10 vs pos {found}/10 within 30 executions");
}

#[test]
fn same_seed_same_decisions() {
    let decisions = |seed| {
        let mut rf = Rf::new(seed);
        let mut search = Search::new();
        (0..20).map(|k| search.run(&mut rf, k, &mut two_stage(5), 1000).0).collect::<Vec<_>>()
    };
    assert_eq!(decisions(4), decisions(4));
    assert_ne!(decisions(4), decisions(5));
}


#[test]
fn an_impossible_pair_falls_back_and_every_execution_finishes() {
    use super::super::sim::{Instr, Sim};
    // Each thread reads x before it writes it: "thread 0's first read reads from a write" needs
    // another thread's write first, and "a read after a write by the same code" cannot exist in
    // a single thread; rf aims at such pairs and must fall back to running whatever is offered.
    let x = 0x100;
    let program = Sim::new(vec![vec![Instr::MemRead(x), Instr::MemAdd(x, 1)], vec![Instr::Lock(1), Instr::MemRead(x), Instr::MemAdd(x, 1), Instr::Unlock(1)]]);
    let mut rf = Rf::new(3);
    let mut search = Search::new();
    for k in 0..40 {
        let (_, finished) = search.run(&mut rf, k, &mut program.clone(), 100);
        assert!(finished, "execution {k}");
    }
    assert_eq!(rf.pairs_seen(), 2, "the initial value and the other thread's write");
}

#[test]
fn candidates_are_bounded() {
    let mut knowledge = Knowledge::default();
    // One thread writing and reading the same granule many times makes many distinct events.
    let steps: Vec<_> = (0..400).flat_map(|_| [run_choice(0, Op::MemoryWrite, 0x100), run_choice(0, Op::MemoryRead, 0x100)]).collect();
    knowledge.learn(&steps);
    assert_eq!(knowledge.candidates().len(), events::MAX_CANDIDATES.min(400 * 401));
}
