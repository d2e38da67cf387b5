//! `random`: a uniform random walk over the enabled choices, the baseline every other strategy is
//! measured against (Dara's Random strategy; MaceMC's random walks). Each step picks uniformly
//! among whatever is offered — threads, timeouts and signal alternatives alike — so a thread that
//! offers two choices is twice as likely to move as one that offers one.
use dara_model::{Choice, Decide, Divergence};

use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};
use crate::rng::Rng;

pub struct Random {
    seed: u64,
    /// This execution's generator: `Rng::for_execution(seed, execution)`.
    rng: Rng,
}

impl Random {
    /// Until `begin_execution` is called the generator is execution 0's.
    pub fn new(seed: u64) -> Random {
        Random {
            seed,
            rng: Rng::for_execution(seed, 0),
        }
    }
}

impl Decide for Random {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        debug_assert!(!choices.is_empty(), "the model offers at least one choice");
        Ok(self.rng.index(choices.len()))
    }
}

impl Strategy for Random {
    fn begin_execution(&mut self, start: Start) {
        self.rng = Rng::for_execution(self.seed, start.execution);
    }

    fn end_execution(&mut self, _feedback: &Feedback<'_>) -> Status {
        Status::default()
    }
}

impl Describe for Random {
    fn info(&self) -> Info {
        Info { spec: "random".to_string(), order: Order::Independent }
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;
    use dara_model::ChoiceKind;

    use super::super::testkit::{run_choice, Search, Straight};
    use super::*;

    fn offered(n: usize) -> Vec<Choice> {
        (0..n as u32).map(|t| run_choice(t, Op::Yield, 0)).collect()
    }

    fn picks(seed: u64, execution: u64) -> Vec<usize> {
        let mut r = Random::new(seed);
        r.begin_execution(Start::at(execution));
        (0..200u64)
            .map(|step| r.choose(step, &offered(1 + (step % 5) as usize)).unwrap())
            .collect()
    }

    #[test]
    fn picks_only_offered_indices_and_all_of_them() {
        let mut r = Random::new(3);
        let mut seen = [false; 7];
        for step in 0..2000u64 {
            let n = 1 + (step % 7) as usize;
            let i = r.choose(step, &offered(n)).unwrap();
            assert!(i < n);
            if n == 7 {
                seen[i] = true;
            }
        }
        assert!(
            seen.iter().all(|&s| s),
            "every index of 7 is eventually picked: {seen:?}"
        );
    }

    #[test]
    fn an_execution_depends_only_on_seed_and_index() {
        assert_eq!(picks(11, 5), picks(11, 5));
        // Running other executions first changes nothing.
        let mut r = Random::new(11);
        for k in 0..5 {
            r.begin_execution(Start::at(k));
            let chosen = r.choose(0, &offered(3)).unwrap();
            let _ = r.end_execution(&Feedback::without_coverage(&offered(3)[chosen..=chosen]));
        }
        r.begin_execution(Start::at(5));
        let after: Vec<usize> = (0..200u64)
            .map(|step| r.choose(step, &offered(1 + (step % 5) as usize)).unwrap())
            .collect();
        assert_eq!(after, picks(11, 5));

        assert_ne!(picks(11, 5), picks(11, 6), "different executions differ");
        assert_ne!(picks(11, 5), picks(12, 5), "different seeds differ");
    }

    #[test]
    fn also_picks_timeouts() {
        let mut r = Random::new(1);
        let mut timeouts = 0;
        let mut search = Search::new();
        for k in 0..50 {
            let mut p = Straight::new(vec![vec![Op::Sleep], vec![Op::Yield]]);
            let (taken, finished) = search.run(&mut r, k, &mut p, 10);
            assert!(finished);
            timeouts += taken.iter().filter(|c| c.kind == ChoiceKind::Timeout).count();
        }
        assert!((5..45).contains(&timeouts), "{timeouts}");
    }
}
