//! Tests of the coverage strategies on synthetic programs with synthetic coverage feedback: the
//! history steers toward actions that reached new code, the fallbacks come in order (unseen
//! action, new path, random), decisions are a function of (seed, history), and guidance climbs a
//! staged program that a random walk rarely gets through.
use std::collections::{BTreeMap, HashSet};

use dara_abi::Op;
use dara_model::coverage::{EdgeHit, ProcessCoverage};
use dara_model::Choice;

use super::super::testkit::{run, run_choice, Program, Straight};
use super::super::{Feedback, Random, Start, Strategy};
use super::history::{action, key, History, START};
use super::*;

const M: u64 = 0x4040;

/// `threads` threads each take the mutex `rounds` times. The lock holder advances a stage
/// machine: it moves from stage s to s+1 when thread `order[s]` takes the lock, and falls back to
/// 0 (without reaching any code of its own) when another thread does. Reaching stage s first
/// reaches blocks 100+2s and 101+2s (every lock reaches block 1); the last stage is the bug.
struct Staged {
    order: Vec<u32>,
    rounds: usize,
    /// Per thread: operations done (even: next is lock, odd: next is unlock).
    done: Vec<usize>,
    holder: Option<u32>,
    stage: usize,
    step: u32,
    /// Block -> (first step, count).
    hits: BTreeMap<u32, (u32, u8)>,
    bug: bool,
}

impl Staged {
    fn new(threads: usize, rounds: usize, order: Vec<u32>) -> Staged {
        Staged { order, rounds, done: vec![0; threads], holder: None, stage: 0, step: 0, hits: BTreeMap::new(), bug: false }
    }

    fn hit(&mut self, block: u32) {
        let e = self.hits.entry(block).or_insert((self.step, 0));
        e.1 = e.1.saturating_add(1);
    }

}

impl Program for Staged {
    fn choices(&self) -> Vec<Choice> {
        if self.bug {
            return Vec::new();
        }
        (0..self.done.len() as u32)
            .filter(|&t| self.done[t as usize] < 2 * self.rounds)
            .filter_map(|t| match self.done[t as usize] % 2 {
                0 if self.holder.is_none() => Some(run_choice(t, Op::MutexLock, M)),
                0 => None,
                _ => Some(run_choice(t, Op::MutexUnlock, M)),
            })
            .collect()
    }

    fn coverage(&self) -> BTreeMap<u32, ProcessCoverage> {
        let edges = self.hits.iter().map(|(&edge, &(first_step, count))| EdgeHit { edge, pc: 0x1000 + u64::from(edge), count, first_step }).collect();
        BTreeMap::from([(0, ProcessCoverage { guards: 0, edges, modules: vec![] })])
    }

    fn apply(&mut self, c: &Choice) {
        let t = c.thread;
        if self.done[t as usize] % 2 == 0 {
            self.holder = Some(t);
            self.hit(1);
            self.stage = if self.order.get(self.stage) == Some(&t) { self.stage + 1 } else { 0 };
            if self.stage > 0 {
                self.hit(100 + 2 * self.stage as u32);
                self.hit(101 + 2 * self.stage as u32);
            }
            self.bug = self.stage == self.order.len();
        } else {
            self.holder = None;
        }
        self.done[t as usize] += 1;
        self.step += 1;
    }
}

/// Runs one execution of a fresh `Staged` under `s`, its coverage fed back at the end. Returns
/// the decisions and whether the bug was reached.
fn staged_execution(s: &mut dyn Strategy, k: u64, order: &[u32]) -> (Vec<Choice>, bool) {
    let mut p = Staged::new(3, 4, order.to_vec());
    let (taken, _) = run(s, Start::at(k), &mut p, 1000);
    (taken, p.bug)
}

/// Executions until the bug (1-based), or None within `limit`.
fn executions_to_bug(s: &mut dyn Strategy, order: &[u32], limit: u64) -> Option<u64> {
    (0..limit).find(|&k| staged_execution(s, k, order).1).map(|k| k + 1)
}

const ORDER: [u32; 6] = [2, 0, 1, 2, 1, 0];

#[test]
fn guidance_climbs_a_staged_program_that_random_rarely_gets_through() {
    let limit = 3000;
    let mean = |make: &dyn Fn(u64) -> Box<dyn Strategy>| -> f64 {
        let total: u64 = (1..=10).map(|seed| executions_to_bug(&mut *make(seed), &ORDER, limit).unwrap_or(limit)).sum();
        total as f64 / 10.0
    };
    let random = mean(&|seed| Box::new(Random::new(seed)));
    for objective in [Objective::Unique, Objective::Frequency, Objective::NodeFrequency] {
        let guided = mean(&|seed| Box::new(Coverage::new(objective, seed)));
        eprintln!("{objective:?}: {guided} executions on average, random {random}");
        assert!(guided * 3.0 < random, "{objective:?}: {guided} executions on average, random {random}");
    }
}

#[test]
fn steers_toward_the_action_that_reached_new_code() {
    let offered: Vec<Choice> = (0..3).map(|t| run_choice(t, Op::Yield, 0)).collect();
    for seed in 0..20 {
        let mut s = Coverage::new(Objective::Unique, seed);
        // Execution 0 ran thread 2 first, and that reached block 7.
        let taken = [offered[2], offered[0], offered[1]];
        let coverage = BTreeMap::from([(0, ProcessCoverage { guards: 0, edges: vec![EdgeHit { edge: 7, pc: 0x700, count: 1, first_step: 0 }], modules: vec![] })]);
        s.begin_execution(Start::at(0));
        let _ = s.end_execution(&Feedback::with_coverage(&taken, &coverage));
        s.begin_execution(Start::at(1));
        assert_eq!(s.choose(0, &offered).unwrap(), 2, "seed {seed}");
        assert_eq!(s.reasons().guided, 1);
        // Block 7 is now predicted reached: nothing promises more, the next step falls back.
        let rest = &offered[..2];
        s.choose(1, rest).unwrap();
        assert_eq!(s.reasons().guided, 1);
    }
}

#[test]
fn falls_back_to_unseen_actions_first() {
    // Two threads, one step each: the second execution must take the order the first did not.
    for seed in 0..20 {
        let mut s = Coverage::new(Objective::Frequency, seed);
        let program = || Straight::new(vec![vec![Op::Yield], vec![Op::Yield]]);
        let (first, _) = run(&mut s, Start::at(0), &mut program(), 10);
        let (second, _) = run(&mut s, Start::at(1), &mut program(), 10);
        assert_ne!(first[0].thread, second[0].thread, "seed {seed}");
        assert_eq!(s.reasons(), Reasons { unseen: 4, ..Reasons::default() }, "seed {seed}");
    }
}

#[test]
fn then_to_new_paths_then_random() {
    let t = |i: u32| run_choice(i, Op::Yield, 0x1000 * (u64::from(i) + 1));
    let program = || Straight::new(vec![vec![Op::Yield], vec![Op::Yield], vec![Op::Yield]]);
    let mut ended_at_the_missing_path = 0;
    for seed in 0..30 {
        let mut s = Coverage::new(Objective::Unique, seed);
        // Five of the six orders ran: every action key (thread after thread) has been taken, only
        // the path 2,1,0 has not.
        for (k, order) in [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [1, 0, 2]].iter().enumerate() {
            s.begin_execution(Start::at(k as u64));
            let choices: Vec<Choice> = order.iter().map(|&i| t(i)).collect();
            let _ = s.end_execution(&Feedback::without_coverage(&choices));
        }
        let (taken, _) = run(&mut s, Start::at(5), &mut program(), 10);
        let order: Vec<u32> = taken.iter().map(|c| c.thread).collect();
        let r = s.reasons();
        assert_eq!((r.guided, r.unseen), (0, 0), "seed {seed}: {r:?}");
        // Every one-step prefix was taken: the first step is random.
        assert!(r.random >= 1, "seed {seed}: {r:?}");
        if order[0] == 2 {
            // After 2, only 2,1 is a new path.
            assert_eq!(order, [2, 1, 0], "seed {seed}");
            assert!(r.new_path >= 1, "seed {seed}: {r:?}");
            ended_at_the_missing_path += 1;
        }
    }
    assert!(ended_at_the_missing_path > 0, "the random first step sometimes picks thread 2");
}

#[test]
fn decisions_depend_only_on_seed_and_history() {
    let decisions = |seed: u64| -> Vec<Vec<Choice>> {
        let mut s = Coverage::new(Objective::Frequency, seed);
        (0..30).map(|k| staged_execution(&mut s, k, &[2, 0, 1, 2, 1, 0, 2, 2]).0).collect()
    };
    assert_eq!(decisions(5), decisions(5));
    assert_ne!(decisions(5), decisions(6));
}

#[test]
fn node_frequency_with_one_process_is_frequency() {
    for seed in 0..5 {
        let mut f = Coverage::new(Objective::Frequency, seed);
        let mut n = Coverage::new(Objective::NodeFrequency, seed);
        for k in 0..20 {
            assert_eq!(staged_execution(&mut f, k, &ORDER).0, staged_execution(&mut n, k, &ORDER).0, "seed {seed} execution {k}");
        }
    }
}

#[test]
fn objectives_weigh_blocks_as_documented() {
    let mut h = History::default();
    let c = run_choice(0, Op::Yield, 0);
    let k = key(action(&c), START);
    let hit = |edge, pc| EdgeHit { edge, pc, count: 1, first_step: 0 };
    // Two executions: block 1 of process 0 reached in both, block 2 of process 0 once, and
    // block 2's code (pc 0x20) also in process 1 once.
    let both = BTreeMap::from([(0, ProcessCoverage { guards: 0, edges: vec![hit(1, 0x10), hit(2, 0x20)], modules: vec![] }), (1, ProcessCoverage { guards: 0, edges: vec![hit(2, 0x20)], modules: vec![] })]);
    let one = BTreeMap::from([(0, ProcessCoverage { guards: 0, edges: vec![hit(1, 0x10)], modules: vec![] })]);
    h.record(&Feedback::with_coverage(&[c], &both));
    h.record(&Feedback::with_coverage(&[c], &one));
    let none = HashSet::new();
    // Credited to k: (0,1), (0,2), (1,2).
    assert_eq!(h.promise(k, &none, Objective::Unique), 3.0);
    assert_eq!(h.promise(k, &none, Objective::Frequency), 0.5 + 1.0 + 1.0);
    // P = 2 processes; pc 0x10 reached by 1 node, pc 0x20 by 2.
    assert_eq!(h.promise(k, &none, Objective::NodeFrequency), 2.0 / 2.0 + 2.0 / 2.0 + 2.0 / 2.0);
    let reached: HashSet<_> = [(0, 1)].into_iter().collect();
    assert_eq!(h.promise(k, &reached, Objective::Unique), 2.0);
    assert_eq!(h.promise(key(action(&c), 42), &none, Objective::Unique), 0.0, "another context promises nothing");
}

#[test]
fn says_when_the_program_reports_no_coverage() {
    let mut s = Coverage::new(Objective::Unique, 1);
    assert!(s.notes().is_empty(), "nothing to say before any execution");
    let program = || Straight::new(vec![vec![Op::Yield; 2], vec![Op::Yield]]);
    let (_, finished) = run(&mut s, Start::at(0), &mut program(), 10);
    assert!(finished);
    assert_eq!(s.notes().len(), 1);
    assert!(s.notes()[0].contains("reports no coverage") && s.notes()[0].contains("coverage:unique"), "{:?}", s.notes());
    let mut g = Coverage::new(Objective::Unique, 1);
    staged_execution(&mut g, 0, &ORDER);
    assert!(g.notes().is_empty(), "{:?}", g.notes());
}
