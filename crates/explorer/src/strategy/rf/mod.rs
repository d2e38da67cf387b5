//! `rf`: reads-from feedback, after Wolff, Shi, Dutta, Lahav, Roychoudhury, "Greybox Fuzzing for
//! Concurrency Testing" (RFF), ASPLOS 2024.
//!
//! The idea: what a concurrent execution computes is decided by which write each read reads from.
//! RFF keeps, across executions, the set of reads-from pairs (write event, read event) it has
//! seen, keeps the *abstract schedules* (sets of reads-from constraints) that produced new pairs
//! in a corpus, and mutates them toward pairs not seen yet, letting a partial-order-sampling
//! scheduler fill in everything the constraints leave open.
//!
//! Here, after each execution ([`Strategy::end_execution`]) its events and pairs are derived from
//! the granted choices (`events.rs`: a read reads from the last write to its granule). An
//! execution that showed a new pair puts its plan (its constraints) in the corpus. Every later
//! execution takes a plan from the corpus and adds one constraint aimed at a pair: one never
//! seen and not yet tried [`MAX_TRIES`] times, with probability 1/2 when there is one, otherwise
//! any possible pair (a read with the initial value or with any write to its granule). A pair
//! becomes a `Delay`:
//!
//! * read `r` from the initial value: every write to `r`'s granule waits until `r` has run;
//! * read `r` from write `w`: `r` waits until `w` has run.
//!
//! A plan keeps at most [`MAX_CONSTRAINTS`] (the oldest go first); one execution in four runs
//! without constraints. During an execution, a choice whose event a constraint holds back is not
//! offered to the [`Pos`] scheduler underneath, unless every choice is held back (then all are).
//!
//! Where we deviate, and why:
//!
//! * Events are not program locations (choices carry none) but what a thread does, where, and
//!   after which accesses (`events::Event`); like locations they are shared by threads running
//!   the same code.
//! * RFF's constraints are also negative ("r must not read from w") and its power schedule
//!   weighs corpus entries by how rarely their pairs were seen; here a constraint is one of the
//!   two delays above and corpus entries are picked uniformly.
//! * A write inside a critical section that the read also needs is held back at the lock that
//!   opens the section (`Knowledge::delay_points`): held back inside, it would keep the reader
//!   out, and the plan would fall apart at the all-delayed fallback.
//!
//! Determinism: execution `k` depends on the seed, `k` and what executions 0..k showed, so `rf`
//! runs executions one after another ([`Order::Learning`], like the coverage strategies); its
//! trace replays exactly from the decision list.
use std::collections::BTreeSet;

use dara_model::{Choice, Decide, Divergence};

use super::{Describe, Feedback, Info, Order, Pos, Start, Status, Strategy};
use crate::rng::Rng;

pub(crate) mod events;
#[cfg(test)]
mod tests;

use events::{Event, Knowledge, Pair, Tracker};

/// Constraints a plan keeps.
pub const MAX_CONSTRAINTS: usize = 3;
/// Executions aimed at an unseen pair before it stops counting as a target of its own.
pub const MAX_TRIES: u32 = 3;
/// Mixed into the seed for `rf`'s own draws, so they are not the scheduler's.
const PLAN_STREAM: u64 = 0x7266_7266_7266_7266;

/// Events `delayed` do not run until `until` has run in the same execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Delay {
    pub delayed: BTreeSet<Event>,
    pub until: Event,
}

pub struct Rf {
    seed: u64,
    pos: Pos,
    knowledge: Knowledge,
    /// Plans whose execution showed a new pair; the empty plan first.
    corpus: Vec<Vec<Delay>>,
    /// Executions aimed at each pair so far.
    tries: std::collections::BTreeMap<Pair, u32>,
    /// This execution's constraints and the pair it aims at.
    plan: Vec<Delay>,
    target: Option<Pair>,
    tracker: Tracker,
    /// Events run so far in this execution.
    ran: BTreeSet<Event>,
}

impl Rf {
    pub fn new(seed: u64) -> Rf {
        Rf {
            seed,
            pos: Pos::new(seed),
            knowledge: Knowledge::default(),
            corpus: vec![Vec::new()],
            tries: Default::default(),
            plan: Vec::new(),
            target: None,
            tracker: Tracker::default(),
            ran: BTreeSet::new(),
        }
    }

    /// Reads-from pairs seen so far.
    pub fn pairs_seen(&self) -> usize {
        self.knowledge.seen.len()
    }

    fn held_back(&self, event: &Event) -> bool {
        self.plan.iter().any(|d| d.delayed.contains(event) && !self.ran.contains(&d.until))
    }

    /// The pair execution `rng`'s plan aims at, if any pair is known.
    fn pick_target(&self, rng: &mut Rng) -> Option<Pair> {
        let all = self.knowledge.candidates();
        let fresh: Vec<Pair> = all.iter().filter(|p| !self.knowledge.seen.contains(p) && self.tries.get(p).copied().unwrap_or(0) < MAX_TRIES).copied().collect();
        let pool = if !fresh.is_empty() && rng.below(2) == 0 { fresh } else { all };
        pool.get(rng.index(pool.len().max(1))).copied()
    }

    /// The constraint that makes `pair` happen.
    fn delay_for(&self, pair: Pair) -> Delay {
        match pair.write {
            None => {
                let writes = self.knowledge.writes.get(&pair.read.obj).into_iter().flatten();
                let delayed = writes.flat_map(|&w| self.knowledge.delay_points(w, pair.read)).filter(|&e| !self.knowledge.delay_points(pair.read, pair.read).contains(&e)).collect();
                Delay { delayed, until: pair.read }
            }
            Some(w) => Delay { delayed: self.knowledge.delay_points(pair.read, w).into_iter().collect(), until: w },
        }
    }
}

impl Decide for Rf {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let free: Vec<usize> = (0..choices.len()).filter(|&i| !self.held_back(&self.tracker.event(&choices[i]))).collect();
        let pick = if free.is_empty() || free.len() == choices.len() {
            self.pos.pick(choices)
        } else {
            let offered: Vec<Choice> = free.iter().map(|&i| choices[i]).collect();
            free[self.pos.pick(&offered)]
        };
        self.forced_pick(&choices[pick]);
        Ok(pick)
    }
}

impl Rf {
    fn forced_pick(&mut self, c: &Choice) {
        let (event, _, _) = self.tracker.granted(c);
        self.ran.insert(event);
    }
}

impl Strategy for Rf {
    fn begin_execution(&mut self, start: Start) {
        self.pos.begin_execution(start);
        self.tracker = Tracker::default();
        self.ran.clear();
        self.target = None;
        self.plan = Vec::new();
        let mut rng = Rng::for_execution(self.seed ^ PLAN_STREAM, start.execution);
        if start.execution == 0 || rng.below(4) == 0 {
            return;
        }
        let mut plan = self.corpus[rng.index(self.corpus.len())].clone();
        if let Some(target) = self.pick_target(&mut rng) {
            plan.push(self.delay_for(target));
            self.target = Some(target);
        }
        let excess = plan.len().saturating_sub(MAX_CONSTRAINTS);
        plan.drain(..excess);
        self.plan = plan;
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        if self.knowledge.learn(feedback.choices) {
            self.corpus.push(self.plan.clone());
        }
        if let Some(target) = self.target.take() {
            *self.tries.entry(target).or_default() += 1;
        }
        Status::default()
    }

    fn forced(&mut self, step: u64, choices: &[Choice], chosen: usize) {
        self.pos.forced(step, choices, chosen);
        if let Some(c) = choices.get(chosen) {
            self.forced_pick(c);
        }
    }
}

impl Describe for Rf {
    fn info(&self) -> Info {
        Info { spec: "rf".to_string(), order: Order::Learning }
    }
}
