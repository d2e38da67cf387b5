//! `--seed-trace`: execution 0 starts from a recorded schedule, as Dara's explorer starts from a
//! seed schedule. [`Seeded`] wraps any strategy that accepts it
//! ([`Info::accepts_seed_trace`](super::Info::accepts_seed_trace)): in execution 0 it follows the
//! seed's decisions while the program offers them — telling the wrapped strategy about each
//! ([`Strategy::forced`]) so its per-execution context stays right — and hands over to the
//! strategy when the seed runs out or the program offers something else. Every later execution is
//! the strategy's own. The seed is matched on the whole recorded choice (thread, kind,
//! alternative, op, object), as replay does.
use dara_model::{Choice, Decide, Divergence};

use super::{Feedback, Start, Status, Strategy};

pub struct Seeded {
    inner: Box<dyn Strategy + Send>,
    /// The wrapped strategy's spec, for notes.
    spec: String,
    seed: Vec<Choice>,
    /// Decisions of execution 0 taken from the seed so far.
    followed: usize,
    /// True while execution 0 still follows the seed.
    following: bool,
    /// Where and why execution 0 left the seed (None: not yet, or it followed it to the end).
    left: Option<String>,
}

impl Seeded {
    /// `inner`, whose spec is `spec`, starting execution 0 from `seed`.
    pub fn new(inner: Box<dyn Strategy + Send>, spec: &str, seed: Vec<Choice>) -> Seeded {
        Seeded { inner, spec: spec.to_string(), seed, followed: 0, following: true, left: None }
    }

    /// Decisions of execution 0 that came from the seed.
    pub fn followed(&self) -> usize {
        self.followed
    }

    /// How execution 0 went with the seed.
    fn note(&self) -> String {
        let total = self.seed.len();
        let how = match &self.left {
            Some(why) => format!("then {why} and {} took over", self.spec),
            None if self.followed == total => format!("then {} took over", self.spec),
            None => "then the run ended".to_string(),
        };
        format!("execution 0 followed the seed trace for {} of its {total} decisions, {how}", self.followed)
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
    fn begin_execution(&mut self, start: Start) {
        self.following = start.execution == 0;
        if self.following {
            self.followed = 0;
            self.left = None;
        }
        self.inner.begin_execution(start);
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        self.following = false;
        let mut status = self.inner.end_execution(feedback);
        status.notes.insert(0, self.note());
        status
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use dara_abi::Op;
    use dara_model::choice::FAULT_THREAD;
    use dara_model::ChoiceKind;

    use super::super::faults::Faults;
    use super::super::testkit::{run, run_choice, Program, Search, Straight};
    use super::super::Random;
    use super::*;

    fn program() -> Straight {
        Straight::new(vec![vec![Op::MutexLock, Op::MutexUnlock, Op::Yield], vec![Op::MutexLock, Op::Yield], vec![Op::Yield; 3]])
    }

    #[test]
    fn execution_zero_follows_the_seed_then_the_strategy() {
        let (recorded, _) = run(&mut Random::new(9), Start::at(4), &mut program(), 100);
        // The whole seed: execution 0 is the recorded run.
        let mut s = Seeded::new(Box::new(Random::new(1)), "random", recorded.clone());
        let (taken, _) = run(&mut s, Start::at(0), &mut program(), 100);
        assert_eq!(taken, recorded);
        assert_eq!(s.followed(), recorded.len());
        // Half the seed: the first half is the seed's, the rest is Random's choice.
        let half = recorded.len() / 2;
        let mut s = Seeded::new(Box::new(Random::new(1)), "random", recorded[..half].to_vec());
        let mut search = Search::new();
        let (taken, finished) = search.run(&mut s, 0, &mut program(), 100);
        assert!(finished);
        assert_eq!(taken[..half], recorded[..half]);
        assert_eq!(s.followed(), half);
        let note = format!("execution 0 followed the seed trace for {half} of its {half} decisions, then random took over");
        assert_eq!(search.status.notes, std::slice::from_ref(&note));
        // Later executions are the wrapped strategy's own, and the note stays.
        let (later, _) = search.run(&mut s, 1, &mut program(), 100);
        let (plain, _) = run(&mut Random::new(1), Start::at(1), &mut program(), 100);
        assert_eq!(later, plain);
        assert_eq!(search.status.notes, [note]);
    }

    #[test]
    fn a_seed_the_program_does_not_offer_is_left_where_it_diverges() {
        let (recorded, _) = run(&mut Random::new(9), Start::at(4), &mut program(), 100);
        let mut seed = recorded.clone();
        seed[2].obj ^= 0xdead;
        let mut s = Seeded::new(Box::new(Random::new(1)), "random", seed);
        let (taken, finished) = run(&mut s, Start::at(0), &mut program(), 100);
        assert!(finished, "the strategy finishes the run");
        assert_eq!(taken[..2], recorded[..2]);
        assert_eq!(s.followed(), 2);
        assert!(s.note().contains("no longer offered") && s.note().contains("at step 2"), "{}", s.note());
    }

    /// A strategy that logs what reaches it and always takes the first choice.
    struct Recorder {
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Decide for Recorder {
        fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
            self.log.lock().unwrap().push(format!("choose {step}: of {}", choices.len()));
            Ok(0)
        }
    }

    impl Strategy for Recorder {
        fn begin_execution(&mut self, start: Start) {
            self.log.lock().unwrap().push(format!("begin {} {:?}", start.execution, start.first_steps));
        }

        fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
            self.log.lock().unwrap().push(format!("end {}", feedback.steps()));
            Status { exhausted: None, notes: vec!["recorder".to_string()] }
        }

        fn forced(&mut self, step: u64, choices: &[Choice], chosen: usize) {
            self.log.lock().unwrap().push(format!("forced {step}: {chosen} of {}", choices.len()));
        }
    }

    /// Two threads of three yields; a crash of node 0 offered first at every step (a no-op).
    struct WithCrash(Straight);

    impl Program for WithCrash {
        fn choices(&self) -> Vec<Choice> {
            let threads = self.0.choices();
            let crash = Choice { thread: FAULT_THREAD, kind: ChoiceKind::Fault, alt: 0, op: Op::NodeCrash, obj: 0 };
            if threads.is_empty() { threads } else { std::iter::once(crash).chain(threads).collect() }
        }

        fn apply(&mut self, c: &Choice) {
            if c.kind != ChoiceKind::Fault {
                self.0.apply(c);
            }
        }
    }

    #[test]
    fn a_seed_reaches_a_sampling_strategy_through_its_fault_points() {
        // Seeded(Faults(strategy)), as a search with --seed-trace builds it for random, pct and
        // coverage: the seed's decisions reach the strategy as forced ones, among the non-fault
        // choices and at their indices there; the start, the end and the notes pass both wrappers.
        let log = Arc::new(Mutex::new(Vec::new()));
        let faults = Faults::new(Recorder { log: log.clone() }, 3);
        let program = || WithCrash(Straight::new(vec![vec![Op::Yield; 3], vec![Op::Yield; 3]]));
        let seed = vec![run_choice(1, Op::Yield, 0x2000), run_choice(0, Op::Yield, 0x1000)];
        let mut s = Seeded::new(Box::new(faults), "recorder", seed.clone());
        let mut search = Search::new();
        let (taken, finished) = search.run(&mut s, 0, &mut program(), 100);
        assert!(finished);
        assert_eq!(taken[..2], seed[..]);
        let seen = std::mem::take(&mut *log.lock().unwrap());
        assert_eq!(seen[..3], ["begin 0 None", "forced 0: 1 of 2", "forced 1: 0 of 2"]);
        let faults_taken = taken.iter().filter(|c| c.kind == ChoiceKind::Fault).count();
        let chosen: Vec<&String> = seen.iter().filter(|l| l.starts_with("choose")).collect();
        assert_eq!(chosen.len(), taken.len() - 2 - faults_taken, "every other decision not a fault is the strategy's: {seen:?}");
        assert!(chosen.iter().all(|l| l.ends_with("of 2") || l.ends_with("of 1")), "no fault choice reaches the strategy: {seen:?}");
        assert_eq!(seen.last().unwrap(), &format!("end {}", taken.len()));
        let note = "execution 0 followed the seed trace for 2 of its 2 decisions, then recorder took over".to_string();
        assert_eq!(search.status, Status { exhausted: None, notes: vec![note, "recorder".to_string()] });
        // Execution 1 is the strategy's alone, started with execution 0's length.
        search.run(&mut s, 1, &mut program(), 100);
        let seen = log.lock().unwrap();
        assert_eq!(seen[0], format!("begin 1 Some({})", taken.len()));
        assert!(!seen.iter().any(|l| l.starts_with("forced")), "{seen:?}");
    }
}
