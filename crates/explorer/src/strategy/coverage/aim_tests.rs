//! Tests of aiming at goals on simulated programs that report properties: an aimed execution
//! follows its seed to a fork and departs there, seeds are ranked as documented and bounded,
//! programs without goals get exactly the decisions they got before, and on a relay whose goal
//! needs two unlikely phases in a row aiming meets the goal in fewer executions than the same
//! strategy without it.
use std::collections::BTreeMap;

use dara_abi::Op;
use dara_model::coverage::{EdgeHit, ProcessCoverage};
use dara_model::property::ExecutionProperties;
use dara_model::Choice;

use super::super::testkit::{run, run_choice, Program, Straight};
use super::super::{Feedback, Random, Start, Strategy};
use super::goals::{Goals, Rank, Run, MAX_SEEDS};
use super::*;

const REGISTER: u64 = 0x100;
const BARRIER: u64 = 0x200;
const BATON: u64 = 0x300;
const GOAL: &str = "the baton went round in order";

/// The simulated twin of tests/fixtures/goal_relay.c: `runners` threads register one by one,
/// wait at a barrier, then each takes the baton `laps` times. The relay is open only if they
/// registered in reverse order (the last runner first); then each baton pass advances a stage
/// machine (the runner `order[stage]` expected next: one stage on, anyone else: back to 0), and
/// the goal is evaluated at every pass: `sometimes(stage == order.len())`. Coverage: block 1 at
/// every pass, block 2 at the first pass of an open relay (the goal's site).
struct Relay {
    order: Vec<u32>,
    laps: usize,
    /// Registration order.
    lineup: Vec<u32>,
    /// Per runner: 0 before registering, 1 at the barrier, then 2 + passes done.
    phase: Vec<usize>,
    stage: usize,
    step: u32,
    hits: BTreeMap<u32, u32>,
    properties: ExecutionProperties,
    /// Whether it reports its goal (the SDK's lines).
    reports: bool,
}

impl Relay {
    fn new(runners: usize, laps: usize, order: &[u32]) -> Relay {
        let mut properties = ExecutionProperties::default();
        properties.record(format!("declare sometimes {GOAL}").as_bytes());
        Relay { order: order.to_vec(), laps, lineup: Vec::new(), phase: vec![0; runners], stage: 0, step: 0, hits: BTreeMap::new(), properties, reports: true }
    }

    /// The same relay built without the SDK: no properties.
    fn silent(mut self) -> Relay {
        self.reports = false;
        self.properties = ExecutionProperties::default();
        self
    }

    fn open(&self) -> bool {
        let n = self.phase.len() as u32;
        self.lineup.iter().copied().eq((0..n).rev())
    }

    fn met(&self) -> bool {
        self.properties.tallies.values().any(|t| t.held > 0)
    }
}

impl Program for Relay {
    fn choices(&self) -> Vec<Choice> {
        let all_registered = self.lineup.len() == self.phase.len();
        (0..self.phase.len() as u32)
            .filter_map(|t| match self.phase[t as usize] {
                0 => Some(run_choice(t, Op::MutexLock, REGISTER)),
                1 if all_registered => Some(run_choice(t, Op::BarrierWait, BARRIER)),
                1 => None,
                p if p < 2 + self.laps => Some(run_choice(t, Op::MutexLock, BATON)),
                _ => None,
            })
            .collect()
    }

    fn apply(&mut self, c: &Choice) {
        let t = c.thread;
        match self.phase[t as usize] {
            0 => self.lineup.push(t),
            1 => {}
            _ => {
                self.hits.entry(1).or_insert(self.step);
                if self.open() {
                    self.hits.entry(2).or_insert(self.step);
                    if self.stage < self.order.len() {
                        self.stage = if self.order[self.stage] == t { self.stage + 1 } else { 0 };
                    }
                    let held = u8::from(self.stage == self.order.len());
                    if self.reports {
                        self.properties.record(format!("sometimes {held} {GOAL}").as_bytes());
                    }
                }
            }
        }
        self.phase[t as usize] += 1;
        self.step += 1;
    }

    fn coverage(&self) -> BTreeMap<u32, ProcessCoverage> {
        let edges = self.hits.iter().map(|(&edge, &first_step)| EdgeHit { edge, pc: 0x1000 + u64::from(edge), count: 1, first_step }).collect();
        BTreeMap::from([(0, ProcessCoverage { guards: 0, edges, modules: vec![] })])
    }

    fn properties(&self) -> ExecutionProperties {
        self.properties.clone()
    }
}

const RUNNERS: usize = 4;
const LAPS: usize = 3;
const ORDER: [u32; 4] = [1, 3, 0, 2];

/// Executions until the relay's goal is met (1-based), or None within `limit`.
fn executions_to_goal(s: &mut dyn Strategy, limit: u64) -> Option<u64> {
    (0..limit)
        .find(|&k| {
            let mut relay = Relay::new(RUNNERS, LAPS, &ORDER);
            run(s, Start::at(k), &mut relay, 1000);
            relay.met()
        })
        .map(|k| k + 1)
}

#[test]
fn aiming_meets_a_goal_behind_two_unlikely_phases_in_fewer_executions() {
    let limit = 3000;
    let seeds = 1..=12u64;
    let mean = |make: &dyn Fn(u64) -> Box<dyn Strategy>| -> f64 {
        let total: u64 = seeds.clone().map(|seed| executions_to_goal(&mut *make(seed), limit).unwrap_or(limit)).sum();
        total as f64 / seeds.clone().count() as f64
    };
    let random = mean(&|seed| Box::new(Random::new(seed)));
    for objective in [Objective::Unique, Objective::Frequency] {
        let aimed = mean(&|seed| Box::new(Coverage::new(objective, seed)));
        let blind = mean(&|seed| Box::new(Coverage::new(objective, seed).without_goals()));
        eprintln!("{objective:?}: aimed {aimed}, without goals {blind}, random {random} executions on average");
        assert!(aimed * 4.0 < blind, "{objective:?}: aimed {aimed}, without goals {blind} executions on average");
    }
}

/// One finished execution fed to `s`: `taken` (three-way forks at every decision), with the
/// property lines `lines`.
fn feed(s: &mut Coverage, k: u64, taken: &[Choice], lines: &[&str]) {
    let mut properties = ExecutionProperties::default();
    for l in lines {
        properties.record(l.as_bytes());
    }
    s.begin_execution(Start::at(k));
    for (i, c) in taken.iter().enumerate() {
        let offered = [*c, run_choice(7, Op::Yield, i as u64), run_choice(8, Op::Yield, i as u64)];
        s.forced(i as u64, &offered, 0);
    }
    let coverage = BTreeMap::new();
    let _ = s.end_execution(&Feedback { choices: taken, coverage: &coverage, properties: &properties });
}

#[test]
fn an_aimed_execution_follows_its_seed_to_a_fork_and_departs_there() {
    let seed_run: Vec<Choice> = (0..6).map(|i| run_choice(i % 3, Op::MutexLock, 0x40 + u64::from(i))).collect();
    let mut departures = std::collections::BTreeSet::new();
    for seed in 0..10 {
        let mut s = Coverage::new(Objective::Unique, seed);
        feed(&mut s, 0, &seed_run, &["sometimes 0 goal"]);
        // Later executions offer the seed's choice and two others at every step.
        for k in 1..20 {
            let aimed_before = s.aimed();
            let followed_before = s.reasons().followed;
            s.begin_execution(Start::at(k));
            let aimed = s.aimed() > aimed_before;
            let mut taken = Vec::new();
            for (i, c) in seed_run.iter().enumerate() {
                let offered = [run_choice(8, Op::Yield, i as u64), *c, run_choice(7, Op::Yield, i as u64)];
                let pick = s.choose(i as u64, &offered).unwrap();
                taken.push(offered[pick]);
            }
            let _ = s.end_execution(&Feedback::without_coverage(&taken));
            if aimed {
                let followed = (s.reasons().followed - followed_before) as usize;
                assert_eq!(taken[..followed], seed_run[..followed], "seed {seed} execution {k}: follows the seed");
                assert!(followed < seed_run.len(), "seed {seed} execution {k}: departs at a fork");
                assert_ne!(taken[followed], seed_run[followed], "seed {seed} execution {k}: another choice at the fork");
                departures.insert(followed);
            } else {
                assert_eq!(s.reasons().followed, followed_before, "only aimed executions follow");
            }
        }
        assert!(s.aimed() > 0, "seed {seed}: an unmet goal that was evaluated is aimed at");
    }
    assert!(departures.len() > 3, "forks are drawn among all of the seed's: {departures:?}");
}

#[test]
fn a_seed_choice_the_program_no_longer_offers_ends_the_following() {
    let seed_run: Vec<Choice> = (0..6).map(|i| run_choice(i % 2, Op::MutexLock, 0x40 + u64::from(i))).collect();
    let mut s = Coverage::new(Objective::Unique, 3);
    feed(&mut s, 0, &seed_run, &["sometimes 0 goal"]);
    // An aimed execution that departs late.
    let k = (1..500).find(|&k| {
        s.begin_execution(Start::at(k));
        s.aim.is_some_and(|aim| aim.depart >= 3)
    });
    assert!(k.is_some(), "some execution departs at fork 3 or later");
    // The program offers something else at the first step: the following ends there, and the
    // seed's second decision, offered at the second step, is not taken for following.
    let other = [run_choice(5, Op::Yield, 1), run_choice(6, Op::Yield, 2)];
    s.choose(0, &other).unwrap();
    assert!(s.aim.is_none());
    s.choose(1, &[other[0], seed_run[1]]).unwrap();
    assert_eq!(s.reasons().followed, 0);
}

fn properties(lines: &[&str]) -> ExecutionProperties {
    let mut p = ExecutionProperties::default();
    for l in lines {
        p.record(l.as_bytes());
    }
    p
}

/// A run of `n` decisions, each a fork.
fn forks(n: u64) -> Run {
    let mut run = Run::default();
    for a in 0..n {
        run.push(a, 2);
    }
    run
}

#[test]
fn seeds_are_the_executions_that_evaluated_unmet_goals_closest_first() {
    let mut goals = Goals::default();
    let declared = ["declare sometimes a", "declare sometimes b", "declare reachable r"];
    let with = |lines: &[&'static str]| properties(&[&declared[..], lines].concat());
    // Not kept: close to nothing (declared only; met a goal and evaluated nothing unmet).
    goals.record(&with(&[]), forks(3));
    goals.record(&with(&["sometimes 1 z"]), forks(3));
    assert_eq!(goals.seeds(), 0);
    // Evaluated `a`; met `b` first and evaluated `a`; evaluated `a` and `c`.
    goals.record(&with(&["sometimes 0 a"]), forks(4));
    goals.record(&with(&["sometimes 1 b", "sometimes 0 a"]), forks(5));
    goals.record(&with(&["sometimes 0 a", "sometimes 0 c", "sometimes 0 c"]), forks(6));
    assert_eq!(goals.seeds(), 3);
    assert_eq!(goals.counts(), (5, 2), "a, b, r, z, c known; z and b met");
    let mut rng = Rng::new(1);
    for _ in 0..4 {
        let aim = goals.aim(&mut rng).unwrap();
        assert_eq!(goals.rank_of(aim), Rank { evaluated: 2, first_met: false }, "the execution that evaluated two unmet goals is closest");
        assert!(aim.depart < 6);
    }
    // `c` met: among the executions close to `a` alone, the one that also met `b` first.
    goals.record(&with(&["sometimes 1 c"]), forks(2));
    let aim = goals.aim(&mut rng).unwrap();
    assert_eq!(goals.rank_of(aim), Rank { evaluated: 1, first_met: true });
    // `a` met: what is left is `r`, never evaluated: no execution is close to it.
    goals.record(&with(&["sometimes 1 a"]), forks(2));
    assert_eq!(goals.aim(&mut rng), None);
    // Every goal met: nothing to aim at, nothing kept.
    goals.record(&with(&["reachable r", "sometimes 0 a"]), forks(2));
    assert_eq!(goals.counts(), (5, 5));
    let kept = goals.seeds();
    goals.record(&with(&["sometimes 0 a"]), forks(2));
    assert_eq!((goals.aim(&mut rng), goals.seeds()), (None, kept));
}

#[test]
fn the_least_used_closest_seed_goes_first_and_seeds_are_bounded() {
    let mut goals = Goals::default();
    goals.record(&properties(&["sometimes 0 a"]), forks(3));
    goals.record(&properties(&["sometimes 0 a"]), forks(3));
    let mut rng = Rng::new(9);
    let first = goals.aim(&mut rng).unwrap();
    let second = goals.aim(&mut rng).unwrap();
    assert_ne!(first, second, "two equally close seeds take turns");
    for _ in 0..2 * MAX_SEEDS {
        goals.record(&properties(&["sometimes 0 a", "sometimes 0 b"]), forks(2));
    }
    assert_eq!(goals.seeds(), MAX_SEEDS);
    // Full of seeds close to two goals: one close to a single goal does not replace any.
    goals.record(&properties(&["sometimes 0 a"]), forks(2));
    let aim = goals.aim(&mut rng).unwrap();
    assert_eq!(goals.rank_of(aim), Rank { evaluated: 2, first_met: false });
    // A run without a fork cannot be departed from: not kept.
    let mut straight = Run::default();
    straight.push(1, 1);
    let mut fresh = Goals::default();
    fresh.record(&properties(&["sometimes 0 a"]), straight);
    assert_eq!(fresh.seeds(), 0);
}

#[test]
fn forks_late_in_the_seed_are_likelier() {
    let mut goals = Goals::default();
    goals.record(&properties(&["sometimes 0 a"]), forks(10));
    let mut rng = Rng::new(4);
    let mut per_fork = [0u32; 10];
    for _ in 0..10_000 {
        per_fork[goals.aim(&mut rng).unwrap().depart] += 1;
    }
    // Fork i of 10 with probability (2i+1)/100: 1% for the first, 19% for the last.
    assert!((50..150).contains(&per_fork[0]), "{per_fork:?}");
    assert!((1700..2100).contains(&per_fork[9]), "{per_fork:?}");
}

#[test]
fn programs_without_goals_get_the_decisions_they_got_before() {
    // The staged program of tests.rs reports coverage but no properties: aiming never starts and
    // the decisions are those of `:no-goals`, execution for execution.
    for seed in 0..4 {
        let mut with = Coverage::new(Objective::Frequency, seed);
        let mut without = Coverage::new(Objective::Frequency, seed).without_goals();
        for k in 0..25 {
            let program = || Straight::new(vec![vec![Op::Yield; 3], vec![Op::Yield; 2], vec![Op::Yield; 2]]);
            assert_eq!(run(&mut with, Start::at(k), &mut program(), 50).0, run(&mut without, Start::at(k), &mut program(), 50).0, "seed {seed} execution {k}");
            let (mut a, mut b) = (Relay::new(3, 2, &[0, 1]).silent(), Relay::new(3, 2, &[0, 1]).silent());
            assert_eq!(run(&mut with, Start::at(k), &mut a, 100).0, run(&mut without, Start::at(k), &mut b, 100).0, "seed {seed} execution {k}");
        }
        assert_eq!(with.aimed(), 0);
    }
}

#[test]
fn the_spec_names_the_objective_and_whether_goals_are_aimed_at() {
    for (suffix, spec) in [("unique", "coverage:unique"), ("frequency:no-goals", "coverage:frequency:no-goals"), ("node-frequency", "coverage:node-frequency")] {
        assert_eq!(Coverage::parse(suffix, 1).unwrap().info().spec, spec);
    }
    for bad in ["", "unique:", "unique:goals", "edges", "edges:no-goals"] {
        assert!(Coverage::parse(bad, 1).is_none(), "{bad}");
    }
}

#[test]
fn the_notes_say_how_many_executions_were_aimed() {
    let mut s = Coverage::new(Objective::Unique, 2);
    for k in 0..40 {
        let mut relay = Relay::new(RUNNERS, LAPS, &ORDER);
        run(&mut s, Start::at(k), &mut relay, 1000);
    }
    let notes = s.notes();
    assert!(s.aimed() > 0);
    let note = notes.iter().find(|n| n.contains("aimed")).unwrap_or_else(|| panic!("{notes:?}"));
    assert!(note.starts_with(&format!("coverage:unique aimed {} of 40 executions at the goals not met yet", s.aimed())), "{note}");
}
