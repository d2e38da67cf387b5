//! `--seed-trace`: execution 0 starts from a recorded schedule, as Dara's explorer starts from a
//! seed schedule. [`Seeded`] wraps any strategy that accepts it
//! ([`Strategy::accepts_seed_trace`]): in execution 0 it follows the seed's decisions while the
//! program offers them — telling the wrapped strategy about each ([`Strategy::forced`]) so its
//! per-execution context stays right — and hands over to the strategy when the seed runs out or
//! the program offers something else. Every later execution is the strategy's own. The seed is
//! matched on the whole recorded choice (thread, kind, alternative, op, object), as replay does.
use dara_scheduler::{Choice, Decide, Divergence};

use super::{Feedback, Strategy};

pub struct Seeded {
    inner: Box<dyn Strategy + Send>,
    seed: Vec<Choice>,
    /// Decisions of execution 0 taken from the seed so far.
    followed: usize,
    /// True while execution 0 still follows the seed.
    following: bool,
    /// Where and why execution 0 left the seed (None: not yet, or it followed it to the end).
    left: Option<String>,
}

impl Seeded {
    pub fn new(inner: Box<dyn Strategy + Send>, seed: Vec<Choice>) -> Seeded {
        Seeded { inner, seed, followed: 0, following: true, left: None }
    }

    /// Decisions of execution 0 that came from the seed.
    pub fn followed(&self) -> usize {
        self.followed
    }
}

impl Decide for Seeded {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        if self.following {
            match self.seed.get(self.followed) {
                Some(want) => match choices.iter().position(|c| c == want) {
                    Some(i) => {
                        self.followed += 1;
                        self.inner.forced(step, choices, i);
                        return Ok(i);
                    }
                    None => {
                        self.left = Some(format!("the program no longer offered {} at step {step}", want));
                        self.following = false;
                    }
                },
                None => self.following = false,
            }
        }
        self.inner.choose(step, choices)
    }
}

impl Strategy for Seeded {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn begin_execution(&mut self, execution: u64) {
        self.following = execution == 0;
        if self.following {
            self.followed = 0;
            self.left = None;
        }
        self.inner.begin_execution(execution);
    }

    fn end_execution(&mut self, steps: u64) {
        self.following = false;
        self.inner.end_execution(steps);
    }

    fn exhausted(&self) -> bool {
        self.inner.exhausted()
    }

    fn exhausted_note(&self) -> Option<String> {
        self.inner.exhausted_note()
    }

    fn parallel_safe(&self) -> bool {
        self.inner.parallel_safe()
    }

    fn calibrate(&mut self, first_execution_steps: u64) {
        self.inner.calibrate(first_execution_steps);
    }

    fn observe(&mut self, feedback: &Feedback<'_>) {
        self.inner.observe(feedback);
    }

    fn forced(&mut self, step: u64, choices: &[Choice], chosen: usize) {
        self.inner.forced(step, choices, chosen);
    }

    fn accepts_seed_trace(&self) -> bool {
        self.inner.accepts_seed_trace()
    }

    fn notes(&self) -> Vec<String> {
        let total = self.seed.len();
        let how = match &self.left {
            Some(why) => format!("then {why} and {} took over", self.inner.describe()),
            None if self.followed == total => format!("then {} took over", self.inner.describe()),
            None => "then the run ended".to_string(),
        };
        let mut notes = vec![format!("execution 0 followed the seed trace for {} of its {total} decisions, {how}", self.followed)];
        notes.extend(self.inner.notes());
        notes
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::super::testkit::{run, Straight};
    use super::super::Random;
    use super::*;

    fn program() -> Straight {
        Straight::new(vec![vec![Op::MutexLock, Op::MutexUnlock, Op::Yield], vec![Op::MutexLock, Op::Yield], vec![Op::Yield; 3]])
    }

    #[test]
    fn execution_zero_follows_the_seed_then_the_strategy() {
        let (recorded, _) = run(&mut Random::new(9), 4, &mut program(), 100);
        // The whole seed: execution 0 is the recorded run.
        let mut s = Seeded::new(Box::new(Random::new(1)), recorded.clone());
        let (taken, _) = run(&mut s, 0, &mut program(), 100);
        assert_eq!(taken, recorded);
        assert_eq!(s.followed(), recorded.len());
        // Half the seed: the first half is the seed's, the rest is Random's choice.
        let half = recorded.len() / 2;
        let mut s = Seeded::new(Box::new(Random::new(1)), recorded[..half].to_vec());
        let (taken, finished) = run(&mut s, 0, &mut program(), 100);
        assert!(finished);
        assert_eq!(taken[..half], recorded[..half]);
        assert_eq!(s.followed(), half);
        assert!(s.notes()[0].starts_with(&format!("execution 0 followed the seed trace for {half} of its {half} decisions")), "{:?}", s.notes());
        // Later executions are the wrapped strategy's own.
        let (later, _) = run(&mut s, 1, &mut program(), 100);
        let (plain, _) = run(&mut Random::new(1), 1, &mut program(), 100);
        assert_eq!(later, plain);
    }

    #[test]
    fn a_seed_the_program_does_not_offer_is_left_where_it_diverges() {
        let (recorded, _) = run(&mut Random::new(9), 4, &mut program(), 100);
        let mut seed = recorded.clone();
        seed[2].obj ^= 0xdead;
        let mut s = Seeded::new(Box::new(Random::new(1)), seed);
        let (taken, finished) = run(&mut s, 0, &mut program(), 100);
        assert!(finished, "the strategy finishes the run");
        assert_eq!(taken[..2], recorded[..2]);
        assert_eq!(s.followed(), 2);
        assert!(s.notes()[0].contains("no longer offered") && s.notes()[0].contains("at step 2"), "{:?}", s.notes());
    }
}
