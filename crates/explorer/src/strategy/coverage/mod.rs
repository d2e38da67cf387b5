//! `coverage:unique`, `coverage:frequency`, `coverage:node-frequency`: coverage-guided
//! exploration after Dara's three objectives over basic-block coverage across nodes. Each
//! execution is steered by what earlier executions learned: which *action* first reached which
//! blocks.
//!
//! **Action.** An action is what a choice does, without its step number: (thread, kind,
//! alternative, op, object) of the chosen [`Choice`], plus one action of context — the action
//! taken just before it in the same execution. The context matters because the same call
//! ("thread 2 locks m") reaches new code only in some states; "thread 2 locks m right after
//! thread 1 unlocked it" is the smallest step-free description that still tells a
//! hand-off order apart. More context would split the history so finely that no action repeats
//! and guidance would degenerate into the fallbacks.
//!
//! **Learning.** After each execution ([`Strategy::end_execution`]) every block the execution reached
//! is credited to the key of the decision after whose grant it was first reached
//! (`EdgeHit::first_step`), and per-block counts (executions that reached it, processes that
//! reached its code) are updated. See [`history`].
//!
//! **Deciding.** The strategy cannot see coverage during an execution (the scheduler reads it at
//! the end), so it predicts: the blocks reached so far in this execution are the union of the
//! blocks credited to the keys taken so far. Every enabled choice is scored by what its key
//! promises beyond that prediction under the objective ([`Objective`]): count of blocks
//! (`unique`), Σ 1/executions (`frequency`), Σ processes/(nodes · executions)
//! (`node-frequency`). The best score wins, ties broken by this execution's seeded generator.
//! When no choice promises anything new: a choice whose key was never taken (unseen action),
//! else one whose (decision prefix, action) path was never taken (new path), else any (random).
//!
//! **Determinism.** Execution k depends on the seed, k and the history of executions 0..k, so
//! these strategies run sequentially ([`Order::Learning`]); a trace's header alone
//! does not regenerate its schedule, but its decision list replays it exactly.
//!
//! Deviations from Dara: Dara scores actions of a model-checked distributed system; here an
//! action is a scheduling choice of real threads, and coverage of the step is attributed through
//! the first-hit step the sancov receivers record rather than by re-running each action.
//! Programs without coverage get only the fallbacks (said once, in the search's notes).
use std::collections::HashSet;

use dara_model::{Choice, Decide, Divergence};

use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};
use crate::rng::Rng;

pub mod history;
#[cfg(test)]
mod tests;

pub use history::Objective;
use history::{action, key, path, Block, History, START};

/// Why a decision was made, counted per search (for tests and notes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reasons {
    /// A choice promised new coverage.
    pub guided: u64,
    /// Nothing promised coverage; an action never taken before.
    pub unseen: u64,
    /// All actions seen; a (prefix, action) path never taken.
    pub new_path: u64,
    /// Everything seen: uniformly at random.
    pub random: u64,
}

pub struct Coverage {
    objective: Objective,
    seed: u64,
    rng: Rng,
    history: History,
    /// Previous action of this execution ([`START`] before the first decision).
    previous: u64,
    /// Hash of this execution's decisions so far.
    prefix: u64,
    /// Blocks predicted reached in this execution.
    reached: HashSet<Block>,
    reasons: Reasons,
}

impl Coverage {
    pub fn new(objective: Objective, seed: u64) -> Coverage {
        Coverage {
            objective,
            seed,
            rng: Rng::for_execution(seed, 0),
            history: History::default(),
            previous: START,
            prefix: START,
            reached: HashSet::new(),
            reasons: Reasons::default(),
        }
    }

    /// The spec suffix after `coverage:`, or None if unknown.
    pub fn parse_objective(name: &str) -> Option<Objective> {
        match name {
            "unique" => Some(Objective::Unique),
            "frequency" => Some(Objective::Frequency),
            "node-frequency" => Some(Objective::NodeFrequency),
            _ => None,
        }
    }

    pub fn reasons(&self) -> Reasons {
        self.reasons
    }

    /// Distinct blocks the history knows.
    pub fn blocks(&self) -> usize {
        self.history.blocks()
    }

    /// What the user should know: that guidance was off, when the program reports no coverage.
    fn notes(&self) -> Vec<String> {
        if self.history.executions > 0 && self.history.covered_executions == 0 {
            vec![format!(
                "the program reports no coverage (not built with -fsanitize-coverage and -ldara_cov, see docs/coverage.md): {} ran unguided, choosing unseen actions, then new paths, then at random",
                self.info().spec
            )]
        } else {
            Vec::new()
        }
    }

    /// Records that `c` was taken: advances the context and the predicted coverage.
    fn take(&mut self, c: &Choice) {
        let a = action(c);
        let k = key(a, self.previous);
        self.reached.extend(self.history.credited(k).copied());
        self.prefix = path(self.prefix, a);
        self.previous = a;
    }

    /// Indices of the choices to pick among, and why.
    fn candidates(&self, choices: &[Choice]) -> (Vec<usize>, Reason) {
        let keys: Vec<u64> = choices.iter().map(|c| key(action(c), self.previous)).collect();
        let scores: Vec<f64> = keys.iter().map(|&k| self.history.promise(k, &self.reached, self.objective)).collect();
        let best = scores.iter().copied().fold(0.0, f64::max);
        if best > 0.0 {
            return ((0..choices.len()).filter(|&i| scores[i] == best).collect(), Reason::Guided);
        }
        let unseen: Vec<usize> = (0..choices.len()).filter(|&i| !self.history.seen(keys[i])).collect();
        if !unseen.is_empty() {
            return (unseen, Reason::Unseen);
        }
        let fresh: Vec<usize> =
            (0..choices.len()).filter(|&i| !self.history.path_taken(path(self.prefix, action(&choices[i])))).collect();
        if !fresh.is_empty() {
            return (fresh, Reason::NewPath);
        }
        ((0..choices.len()).collect(), Reason::Random)
    }
}

#[derive(Clone, Copy)]
enum Reason {
    Guided,
    Unseen,
    NewPath,
    Random,
}

impl Decide for Coverage {
    fn choose(&mut self, _step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        debug_assert!(!choices.is_empty(), "the model offers at least one choice");
        let (candidates, reason) = self.candidates(choices);
        let counter = match reason {
            Reason::Guided => &mut self.reasons.guided,
            Reason::Unseen => &mut self.reasons.unseen,
            Reason::NewPath => &mut self.reasons.new_path,
            Reason::Random => &mut self.reasons.random,
        };
        *counter += 1;
        let pick = candidates[self.rng.index(candidates.len())];
        self.take(&choices[pick]);
        Ok(pick)
    }
}

impl Strategy for Coverage {
    fn begin_execution(&mut self, start: Start) {
        self.rng = Rng::for_execution(self.seed, start.execution);
        self.previous = START;
        self.prefix = START;
        self.reached.clear();
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        self.history.record(feedback);
        Status { exhausted: None, notes: self.notes() }
    }

    fn forced(&mut self, _step: u64, choices: &[Choice], chosen: usize) {
        if let Some(c) = choices.get(chosen) {
            self.take(c);
        }
    }
}

impl Describe for Coverage {
    fn info(&self) -> Info {
        let name = match self.objective {
            Objective::Unique => "unique",
            Objective::Frequency => "frequency",
            Objective::NodeFrequency => "node-frequency",
        };
        Info { spec: format!("coverage:{name}"), order: Order::Learning }
    }
}
