//! `Guided`: follow a *plan* (preferred choices, in order) where the run allows it, and fall back
//! to a non-preemptive default where it does not. The minimizer (`super`) builds plans from a
//! failing schedule — the same schedule with a thread's next block of steps moved earlier, or
//! only its first part — and lets `Guided` turn each plan into a real execution.
//!
//! Unlike `replay`, a plan is a wish, not a contract: a changed schedule changes what later steps
//! offer, so an entry may never be offered. The plan is matched per thread: at each step only the
//! first pending entry of each thread is eligible (a thread runs its own operations in order),
//! and the earliest eligible entry the run offers is taken. When none is offered, the fallback
//! picks: the thread that ran last if it offers a `Run` choice, else its `Timeout`, else the first
//! choice (lowest thread). A thread that moves by the fallback consumes its pending entry if that
//! is what it did, or skips ahead to it within its next few entries, so one mismatch does not
//! stall the rest of its plan.
//!
//! Every step is noted: whether the chosen thread differs from the previous one (a context
//! switch) and whether that was a *preemption* — the previous thread still had a choice offered
//! (`Run` or `Timeout`). The fallback therefore never preempts.
use dara_scheduler::choice::ThreadId;
use dara_scheduler::{Choice, ChoiceKind, Decide, Divergence};

/// Plan entries examined per step, counted from the first pending one. Bounds the cost of a step
/// on long plans; entries further ahead wait their turn.
const WINDOW: usize = 64;
/// How far ahead in its own pending entries a thread that moved by the fallback looks for what it
/// did.
const RESYNC: usize = 4;

/// What happened at one step of a guided execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepNote {
    /// The chosen thread differs from the previous step's.
    pub switched: bool,
    /// A switch while the previous thread still had a choice offered.
    pub preempted: bool,
    /// The choice that would have continued the previous thread (its `Run`, else its `Timeout`),
    /// if it offered one.
    pub continuation: Option<Choice>,
    /// The choice came from the plan (not from the fallback).
    pub planned: bool,
}

pub struct Guided {
    plan: Vec<Choice>,
    consumed: Vec<bool>,
    /// First plan entry not consumed yet.
    cursor: usize,
    last: Option<ThreadId>,
    notes: Vec<StepNote>,
}

impl Guided {
    pub fn new(plan: Vec<Choice>) -> Guided {
        let consumed = vec![false; plan.len()];
        Guided { plan, consumed, cursor: 0, last: None, notes: Vec::new() }
    }

    /// One note per decision made so far, in step order.
    pub fn notes(&self) -> &[StepNote] {
        &self.notes
    }

    pub fn into_notes(self) -> Vec<StepNote> {
        self.notes
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> usize {
        self.notes.iter().filter(|n| n.preempted).count()
    }

    /// Pending entries inside the window, each thread's first one only, in plan order.
    fn eligible(&self) -> Vec<usize> {
        let mut seen: Vec<ThreadId> = Vec::new();
        let mut out = Vec::new();
        for p in self.cursor..self.plan.len().min(self.cursor + WINDOW) {
            let t = self.plan[p].thread;
            if self.consumed[p] || seen.contains(&t) {
                continue;
            }
            seen.push(t);
            out.push(p);
        }
        out
    }

    /// The non-preemptive default.
    fn fallback(&self, choices: &[Choice]) -> usize {
        self.continuation(choices).map_or(0, |(i, _)| i)
    }

    /// Index and value of the choice that continues the previous thread: its Run, else its Timeout.
    fn continuation(&self, choices: &[Choice]) -> Option<(usize, Choice)> {
        let last = self.last?;
        let mine = |kind| choices.iter().position(|c| c.thread == last && c.kind == kind);
        mine(ChoiceKind::Run).or_else(|| mine(ChoiceKind::Timeout)).map(|i| (i, choices[i]))
    }

    /// `thread` did `done` without the plan: consume its pending entry for that, if one of its
    /// next few is, together with the entries of it that it skipped.
    fn resync(&mut self, done: &Choice) {
        let mine: Vec<usize> = (self.cursor..self.plan.len().min(self.cursor + WINDOW))
            .filter(|&p| !self.consumed[p] && self.plan[p].thread == done.thread)
            .take(RESYNC)
            .collect();
        if let Some(k) = mine.iter().position(|&p| self.plan[p] == *done) {
            for &p in &mine[..=k] {
                self.consumed[p] = true;
            }
        }
    }

    fn advance_cursor(&mut self) {
        while self.cursor < self.plan.len() && self.consumed[self.cursor] {
            self.cursor += 1;
        }
    }
}

impl Decide for Guided {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let planned = self
            .eligible()
            .into_iter()
            .find_map(|p| choices.iter().position(|c| *c == self.plan[p]).map(|i| (p, i)));
        let index = match planned {
            Some((p, i)) => {
                self.consumed[p] = true;
                i
            }
            None => {
                let i = self.fallback(choices);
                self.resync(&choices[i]);
                i
            }
        };
        self.advance_cursor();
        let chosen = choices[index];
        let continuation = self.continuation(choices).map(|(_, c)| c);
        let switched = self.last.is_some_and(|t| t != chosen.thread);
        self.notes.push(StepNote { switched, preempted: switched && continuation.is_some(), continuation, planned: planned.is_some() });
        self.last = Some(chosen.thread);
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::*;
    use crate::strategy::testkit::{run_choice, Program, Straight};

    /// Runs `program` under `guided` to the end; returns the choices taken.
    fn drive(guided: &mut Guided, program: &mut dyn Program) -> Vec<Choice> {
        let mut taken = Vec::new();
        loop {
            let choices = program.choices();
            if choices.is_empty() || taken.len() > 100 {
                return taken;
            }
            let i = guided.choose(taken.len() as u64, &choices).expect("guided never diverges");
            program.apply(&choices[i]);
            taken.push(choices[i]);
        }
    }

    fn two_threads() -> Straight {
        Straight::new(vec![vec![Op::MutexLock, Op::MutexUnlock, Op::Yield], vec![Op::MutexLock, Op::MutexUnlock]])
    }

    #[test]
    fn an_empty_plan_runs_each_thread_until_it_stops_and_never_preempts() {
        let mut g = Guided::new(Vec::new());
        let mut p = two_threads();
        let taken = drive(&mut g, &mut p);
        let threads: Vec<u32> = taken.iter().map(|c| c.thread).collect();
        assert_eq!(threads, vec![0, 0, 0, 1, 1]);
        assert_eq!(g.preemptions(), 0);
        let switches: Vec<bool> = g.notes().iter().map(|n| n.switched).collect();
        assert_eq!(switches, vec![false, false, false, true, false]);
        assert!(g.notes().iter().all(|n| !n.planned));
    }

    #[test]
    fn a_followed_plan_counts_switches_and_preemptions() {
        let p = two_threads();
        let c = |t: u32, i: usize| run_choice(t, p.ops[t as usize][i], 0x1000 * (t as u64 + 1) + i as u64);
        // t0 lock, t1 (preempts t0), t0, t0, t1: two preemptions, one non-preemptive switch.
        let plan = vec![c(0, 0), c(1, 0), c(0, 1), c(0, 2), c(1, 1)];
        let mut g = Guided::new(plan.clone());
        let mut p = two_threads();
        assert_eq!(drive(&mut g, &mut p), plan);
        let notes = g.notes();
        assert!(notes.iter().all(|n| n.planned));
        assert_eq!(notes.iter().map(|n| n.preempted).collect::<Vec<_>>(), vec![false, true, true, false, false]);
        assert_eq!(notes.iter().map(|n| n.switched).collect::<Vec<_>>(), vec![false, true, true, false, true]);
        // At step 1 thread 0 could have gone on with its unlock.
        assert_eq!(notes[1].continuation, Some(c(0, 1)));
        assert_eq!(g.preemptions(), 2);
    }

    #[test]
    fn a_truncated_plan_is_completed_by_the_fallback() {
        let p = two_threads();
        let c = |t: u32, i: usize| run_choice(t, p.ops[t as usize][i], 0x1000 * (t as u64 + 1) + i as u64);
        let mut g = Guided::new(vec![c(1, 0)]);
        let mut p = two_threads();
        let threads: Vec<u32> = drive(&mut g, &mut p).iter().map(|c| c.thread).collect();
        // The plan starts thread 1; the fallback keeps it running, then runs thread 0.
        assert_eq!(threads, vec![1, 1, 0, 0, 0]);
        assert_eq!(g.preemptions(), 0);
        assert_eq!(g.notes().iter().filter(|n| n.planned).count(), 1);
    }

    #[test]
    fn entries_not_offered_wait_while_other_threads_follow_the_plan() {
        let p = two_threads();
        let c = |t: u32, i: usize| run_choice(t, p.ops[t as usize][i], 0x1000 * (t as u64 + 1) + i as u64);
        // A plan entry that never comes (thread 0 never offers this object) does not stop the
        // rest: thread 1's entries are still taken in order.
        let bogus = run_choice(0, Op::MutexLock, 0xdead);
        let plan = vec![bogus, c(1, 0), c(1, 1)];
        let mut g = Guided::new(plan);
        let mut p = two_threads();
        let threads: Vec<u32> = drive(&mut g, &mut p).iter().map(|c| c.thread).collect();
        assert_eq!(threads, vec![1, 1, 0, 0, 0]);
    }

    #[test]
    fn the_fallback_prefers_the_last_threads_timeout_to_a_switch() {
        // Thread 0 sleeps (offers only a Timeout in the model; Straight offers Run and Timeout,
        // so drop its Run by hand).
        let mut g = Guided::new(vec![run_choice(0, Op::Yield, 1)]);
        let yield0 = run_choice(0, Op::Yield, 1);
        assert_eq!(g.choose(0, &[yield0, run_choice(1, Op::Yield, 2)]), Ok(0));
        let timeout0 = Choice { kind: ChoiceKind::Timeout, ..run_choice(0, Op::Sleep, 9) };
        let offered = [run_choice(1, Op::Yield, 2), timeout0];
        assert_eq!(g.choose(1, &offered), Ok(1), "thread 0's timeout, not thread 1");
        // Thread 0 gone: the lowest thread's first choice, a switch but no preemption.
        assert_eq!(g.choose(2, &[run_choice(1, Op::Yield, 2), run_choice(2, Op::Yield, 3)]), Ok(0));
        let last = g.notes()[2];
        assert!(last.switched && !last.preempted && last.continuation.is_none());
    }

    #[test]
    fn a_thread_moved_by_the_fallback_resyncs_with_its_plan() {
        let p = two_threads();
        let c = |t: u32, i: usize| run_choice(t, p.ops[t as usize][i], 0x1000 * (t as u64 + 1) + i as u64);
        // Thread 0's first entry is stale (never offered). The fallback runs thread 0's lock,
        // which is its next entry: both are consumed and the rest of the plan is followed.
        let stale = run_choice(0, Op::MutexLock, 0xdead);
        let plan = vec![stale, c(0, 0), c(0, 1), c(0, 2)];
        let mut g = Guided::new(plan);
        let mut p = two_threads();
        let taken = drive(&mut g, &mut p);
        assert_eq!(taken.iter().map(|c| c.thread).collect::<Vec<_>>(), vec![0, 0, 0, 1, 1]);
        assert_eq!(g.notes().iter().map(|n| n.planned).collect::<Vec<_>>(), vec![false, true, true, false, false]);
    }
}
