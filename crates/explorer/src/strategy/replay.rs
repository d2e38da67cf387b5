//! `replay`: follow a recorded decision list exactly, and say precisely where the run stopped
//! matching it. Used by `dara-replay` and by `--verify` (run a trace twice, compare), as dBug
//! (Simsa, Bryant & Gibson, SPIN 2011) replays a recorded schedule.
//!
//! A recorded choice is matched on everything it records — thread, kind, alternative, op and
//! object — not just on its index among the offered choices: if the program now offers
//! something different (another build, an environment difference, uncontrolled
//! nondeterminism), continuing by index would silently replay a different schedule. Instead
//! the first mismatch is a [`Divergence`] naming the step, the expected choice and what was
//! offered.
use dara_model::{Choice, Decide, Divergence};

use super::{choices_label, Feedback, Start, Status, Strategy};

pub struct Replay {
    expected: Vec<Choice>,
    /// Index into `expected` of the next decision; equals the number of decisions made in the
    /// current execution.
    position: usize,
}

impl Replay {
    pub fn new(expected: Vec<Choice>) -> Replay {
        Replay { expected, position: 0 }
    }

    /// Decisions replayed so far in this execution.
    pub fn position(&self) -> u64 {
        self.position as u64
    }

    /// Call when the run has ended: a run that ends before the trace does has diverged too.
    pub fn check_complete(&self) -> Result<(), Divergence> {
        if self.position >= self.expected.len() {
            return Ok(());
        }
        Err(Divergence {
            step: self.position as u64,
            expected: format!(
                "{} (the trace has {} steps)",
                self.expected[self.position],
                self.expected.len()
            ),
            seen: "nothing: the run ended".to_string(),
        })
    }
}

impl Decide for Replay {
    /// The `i`-th call of an execution follows `expected[i]`; divergences report `i`, the index
    /// into the trace's step list.
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let step = self.position as u64;
        let Some(want) = self.expected.get(self.position) else {
            return Err(Divergence {
                step,
                expected: format!("the run to end (the trace ended at step {})", self.expected.len()),
                seen: format!("{} and continued", choices_label(choices)),
            });
        };
        match choices.iter().position(|c| c == want) {
            Some(i) => {
                self.position += 1;
                Ok(i)
            }
            None => Err(Divergence {
                step,
                expected: want.to_string(),
                seen: choices_label(choices),
            }),
        }
    }
}

impl Strategy for Replay {
    fn begin_execution(&mut self, _start: Start) {
        self.position = 0;
    }

    fn end_execution(&mut self, _feedback: &Feedback<'_>) -> Status {
        Status::default()
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::super::testkit::{run, Program, Straight};
    use super::super::Random;
    use super::*;

    fn program() -> Straight {
        Straight::new(vec![
            vec![Op::ThreadCreate, Op::MutexLock, Op::Sleep, Op::MutexUnlock],
            vec![Op::ThreadStart, Op::MutexLock, Op::CondSignal, Op::MutexUnlock],
            vec![Op::ThreadStart, Op::Yield, Op::Sleep],
        ])
    }

    /// Drives `replay` over `p` until it finishes or diverges.
    fn replay_on(replay: &mut Replay, p: &mut dyn Program) -> Result<Vec<Choice>, Divergence> {
        replay.begin_execution(Start::at(0));
        let mut taken = Vec::new();
        loop {
            let choices = p.choices();
            if choices.is_empty() {
                replay.check_complete()?;
                return Ok(taken);
            }
            let i = replay.choose(taken.len() as u64, &choices)?;
            p.apply(&choices[i]);
            taken.push(choices[i]);
        }
    }

    #[test]
    fn reproduces_recorded_schedules() {
        let mut random = Random::new(77);
        for k in 0..20 {
            let (recorded, finished) = run(&mut random, Start::at(k), &mut program(), 100);
            assert!(finished);
            let mut replay = Replay::new(recorded.clone());
            assert_eq!(replay_on(&mut replay, &mut program()), Ok(recorded.clone()));
            assert_eq!(replay.position(), recorded.len() as u64);
            // And again: begin_execution rewinds.
            assert_eq!(replay_on(&mut replay, &mut program()), Ok(recorded));
        }
    }

    #[test]
    fn reports_the_first_step_the_run_no_longer_offers() {
        let (recorded, _) = run(&mut Random::new(5), Start::at(3), &mut program(), 100);
        // The program changed: thread 1's third op is now a trylock.
        let mut changed = program();
        changed.ops[1][2] = Op::MutexTryLock;
        let at = recorded
            .iter()
            .position(|c| c.thread == 1 && c.op == Op::CondSignal)
            .unwrap();

        let d = replay_on(&mut Replay::new(recorded.clone()), &mut changed).unwrap_err();
        assert_eq!(d.step, at as u64);
        assert_eq!(d.expected, "<thread 1 run cond-signal 0x2002>");
        assert!(d.seen.contains("<thread 1 run mutex-trylock 0x2002>"), "{}", d.seen);
        assert_eq!(
            d.to_string(),
            format!(
                "diverged at step {at}: expected <thread 1 run cond-signal 0x2002>, but the run offered {}",
                d.seen
            )
        );
    }

    #[test]
    fn a_run_that_outlives_the_trace_diverges_where_the_trace_ended() {
        let (recorded, _) = run(&mut Random::new(5), Start::at(0), &mut program(), 100);
        let n = recorded.len() - 2;
        let d = replay_on(&mut Replay::new(recorded[..n].to_vec()), &mut program()).unwrap_err();
        assert_eq!(d.step, n as u64);
        assert_eq!(d.expected, format!("the run to end (the trace ended at step {n})"));
        assert!(d.seen.ends_with(" and continued"), "{}", d.seen);
    }

    #[test]
    fn a_run_that_ends_early_is_reported_by_check_complete() {
        let (recorded, _) = run(&mut Random::new(5), Start::at(0), &mut program(), 100);
        let mut shorter = program();
        shorter.ops[2].pop();
        let mut extended = recorded.clone();
        extended.retain(|c| !(c.thread == 2 && c.obj == 0x3002));
        extended.push(recorded[0]);
        let d = replay_on(&mut Replay::new(extended.clone()), &mut shorter).unwrap_err();
        assert_eq!(d.step, extended.len() as u64 - 1);
        assert_eq!(d.seen, "nothing: the run ended");
    }
}
