//! `pos`: partial order sampling, after Yuan, Yang and Gu, "Partial Order Aware Concurrency
//! Sampling", CAV 2018.
//!
//! The idea: a random walk samples interleavings very unevenly (a thread with many steps ahead
//! of it nearly always finishes before a short one starts), and PCT's few priority changes miss
//! bugs that need many small reorderings. POS gives every *event* (a thread's next step) an
//! independent random priority and always runs the enabled event with the highest priority;
//! after an event runs, the events still waiting that *race* with it get new priorities. A
//! racing pair is thereby ordered either way with probability about 1/2 each time it meets,
//! whatever the other threads do, which is what makes POS sample partial orders close to
//! uniformly on programs with many fine-grained points.
//!
//! Here an event is what PCT ranks (`pct::entity`): a thread's pending step, or its timer.
//! An event keeps its priority until it runs (its thread's next step is a new event with a new
//! draw) or until an event that races with it runs. Two events race when
//! [`dpor::dependent`](super::dpor::dependent) says so: memory accesses to one 8-byte granule
//! of which one writes, operations on the same synchronisation object, and anything with
//! process-wide effect.
//!
//! Where we deviate, and why:
//!
//! * The paper assumes every event's object is known while it waits; here we know it too (the
//!   pending choice carries `op` and `obj`), so the race test is exact for memory and locks.
//!   It is coarser than the paper's for process and network operations, which `dependent`
//!   treats as racing with everything (sound, just more redraws).
//! * When the chosen event offers several choices (several `CondSignal` waiters) one is picked
//!   uniformly at random, as in [`pct`](super::pct).
//! * No yield demotion is needed: a thread spinning on `sched_yield` draws a new priority at
//!   every step, so it cannot starve the thread it waits for the way a fixed PCT priority can.
//!
//! Reproducibility: execution `e` draws everything from `Rng::for_execution(seed, e)`, so
//! executions are independent and may run in parallel (`--jobs`).
use std::collections::BTreeMap;

use dara_model::{Choice, Decide, Divergence};

use super::dpor::dependent;
use super::pct::entity;
use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};
use crate::rng::Rng;

pub struct Pos {
    seed: u64,
    rng: Rng,
    /// Priority of each waiting event (by [`entity`]); higher runs first. An entry is removed
    /// when its event runs or is raced by the event that ran, and redrawn when next offered.
    priorities: BTreeMap<u64, u64>,
}

impl Pos {
    pub fn new(seed: u64) -> Pos {
        Pos { seed, rng: Rng::for_execution(seed, 0), priorities: BTreeMap::new() }
    }

    /// The priority of `c`'s event, drawn now if it has none.
    fn priority(&mut self, c: &Choice) -> u64 {
        let rng = &mut self.rng;
        *self.priorities.entry(entity(c)).or_insert_with(|| rng.next_u64())
    }

    /// POS's step over `choices`: the index of the highest-priority event's choice (uniform among
    /// that event's choices), after which the event and those racing with it lose their priority.
    pub(crate) fn pick(&mut self, choices: &[Choice]) -> usize {
        debug_assert!(!choices.is_empty(), "the model offers at least one choice");
        let mut top = (0, entity(&choices[0]));
        for c in choices {
            let p = self.priority(c);
            if p > top.0 {
                top = (p, entity(c));
            }
        }
        let own: Vec<usize> = (0..choices.len()).filter(|&i| entity(&choices[i]) == top.1).collect();
        let pick = own[self.rng.index(own.len())];
        self.ran(&choices[pick], choices);
        pick
    }

    /// `ran` was granted while `choices` were offered: it, and every waiting event that races
    /// with it, get a new priority when next offered.
    fn ran(&mut self, ran: &Choice, choices: &[Choice]) {
        self.priorities.remove(&entity(ran));
        for c in choices {
            if entity(c) != entity(ran) && dependent(ran, c) {
                self.priorities.remove(&entity(c));
            }
        }
    }
}

impl Decide for Pos {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        Ok(self.pick(choices))
    }
}

impl Strategy for Pos {
    fn begin_execution(&mut self, start: Start) {
        self.rng = Rng::for_execution(self.seed, start.execution);
        self.priorities.clear();
    }

    fn end_execution(&mut self, _feedback: &Feedback<'_>) -> Status {
        Status::default()
    }

    fn forced(&mut self, _step: u64, choices: &[Choice], chosen: usize) {
        if let Some(c) = choices.get(chosen) {
            self.ran(c, choices);
        }
    }
}

impl Describe for Pos {
    fn info(&self) -> Info {
        Info { spec: "pos".to_string(), order: Order::Independent }
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::super::sim::{executions_to_torn, reorder, Instr, Sim};
    use super::super::testkit::{run_choice, Program, Search};
    use super::*;

    #[test]
    fn finds_the_planted_reorder_within_a_bound_and_sooner_than_random() {
        // The checker starts late (it yields once per setter), so a random walk has usually let
        // every setter finish; POS reorders each racing pair either way at about even odds.
        let limit = 300;
        let total = |strategy: &dyn Fn(u64) -> Box<dyn Strategy>| -> u64 {
            (1..=10).map(|seed| executions_to_torn(&mut *strategy(seed), &reorder(3), limit).unwrap_or(limit + 1)).sum()
        };
        for seed in 1..=10 {
            assert!(executions_to_torn(&mut Pos::new(seed), &reorder(3), limit).is_some(), "seed {seed} missed within {limit}");
        }
        let pos = total(&|seed| Box::new(Pos::new(seed)));
        let random = total(&|seed| Box::new(super::super::Random::new(seed)));
        assert!(pos < random, "pos {pos} vs random {random} executions over 10 seeds");
    }

    #[test]
    fn same_seed_same_decisions_and_executions_are_independent() {
        let decisions = |seed, k| {
            let mut pos = Pos::new(seed);
            let mut search = Search::new();
            let mut sim = reorder(5);
            search.run(&mut pos, k, &mut sim, 1000).0
        };
        assert_eq!(decisions(7, 3), decisions(7, 3));
        assert_ne!(decisions(7, 3), decisions(7, 4));
        assert_ne!(decisions(7, 3), decisions(8, 3));
    }

    #[test]
    fn racing_events_are_redrawn_and_others_keep_their_priority() {
        let mut pos = Pos::new(1);
        pos.begin_execution(Start::at(0));
        let offered = [run_choice(0, Op::MemoryWrite, 0x100), run_choice(1, Op::MemoryRead, 0x104), run_choice(2, Op::MemoryRead, 0x200)];
        let chosen = pos.pick(&offered);
        let kept: Vec<u64> = pos.priorities.keys().copied().collect();
        // Thread 0's write races with thread 1's read (same granule), not with thread 2's.
        match chosen {
            0 => assert_eq!(kept, vec![2]),
            1 => assert_eq!(kept, vec![2]),
            _ => assert_eq!(kept, vec![0, 1]),
        }
    }

    #[test]
    fn a_spinning_thread_does_not_starve_the_one_it_waits_for() {
        use Instr::*;
        let flag = 0x100;
        for seed in 0..20 {
            let mut sim = Sim::new(vec![vec![SpinUntil(flag)], vec![Yield, Yield, Write(flag, 1)]]);
            let mut pos = Pos::new(seed);
            let mut search = Search::new();
            let (_, finished) = search.run(&mut pos, 0, &mut sim, 1000);
            assert!(finished && sim.choices().is_empty(), "seed {seed}");
        }
    }
}
