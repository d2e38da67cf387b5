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
//!
//! **Aiming at goals** (issue 18; off with `coverage:OBJECTIVE:no-goals`). A program's
//! `DARA_SOMETIMES` and `DARA_REACHABLE` properties are goals (docs/properties.md). While a goal
//! is unmet and some execution came close to it, each execution is *aimed* with probability 1/2
//! (drawn from a generator of its own; the others decide by the rules above alone): it
//! starts from a recorded execution that came close (a *seed*; [`goals`] says how closeness is
//! judged: the proxy is "evaluated the goal without meeting it", a `DARA_SOMETIMES` site reached
//! with its condition false), follows the seed's decisions up to one of its *forks* (a decision
//! where the program offered more than one choice: the later of two forks drawn uniformly, so
//! late forks, which keep more of what the seed achieved, are likelier), takes a choice other
//! than the seed's there, and from then on decides by the rules above. Following is by action: a
//! seed's decision that the program does not offer again ends the following early.
//!
//! Where it comes from: Antithesis uses sometimes-assertions both as a better coverage report and
//! to steer its search toward the rare cases they name (antithesis.com, best practices,
//! "Sometimes assertions"), branching new timelines from states where something interesting
//! happened, which turns k unlikely events in a row from a product of their chances into roughly
//! a sum (the "sequential luck problem" of the moonpool book). Returning to a promising state and
//! exploring from there is Go-Explore's "first return, then explore" (Ecoffet et al., Nature
//! 2021); spending executions on the inputs closest to a target is directed greybox fuzzing
//! (AFLGo, Böhme et al., CCS 2017). Where we deviate: dara has no snapshots, so it returns by
//! replaying the seed's prefix (executions are deterministic); the SDK's lines carry no step, so
//! closeness is per execution and the departure is a fork drawn with a bias toward the end, not
//! the moment of the evaluation; conditions are booleans, so there is no numeric distance to a
//! goal (Antithesis' `sometimes_greater_than` and the like, AFLGo's control-flow distance); and a
//! goal never evaluated (a `reachable` before it is reached) gives no closeness at all, so only
//! the coverage guidance above works toward it.
use std::collections::HashSet;

use dara_model::{Choice, Decide, Divergence};

use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};
use crate::rng::Rng;

pub mod goals;
pub mod history;
#[cfg(test)]
mod aim_tests;
#[cfg(test)]
mod tests;

use goals::{Aim, Goals, Run};
pub use history::Objective;
use history::{action, key, path, Block, History, START};

/// One execution in this many (drawn) is aimed at the goals, while one is unmet and a seed is
/// known. Always aiming met goal_relay's goal sooner still (docs/guided.md), but would leave
/// nothing of the search that is not spent near the goals.
const AIM_ONE_IN: u64 = 2;
/// Keeps the aiming generator's stream apart from the decisions'.
const AIM_STREAM: u64 = 0x60A1_5EED_0000_0001;

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
    /// An aimed execution followed its seed.
    pub followed: u64,
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
    /// Whether executions are aimed at unmet goals.
    aiming: bool,
    goals: Goals,
    /// Draws which executions are aimed, their seeds and forks.
    aim_rng: Rng,
    /// This execution's seed and fork, while it follows the seed.
    aim: Option<Aim>,
    /// Executions aimed so far.
    aimed: u64,
    /// This execution's decisions so far.
    run: Run,
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
            aiming: true,
            goals: Goals::default(),
            aim_rng: Rng::for_execution(seed ^ AIM_STREAM, 0),
            aim: None,
            aimed: 0,
            run: Run::default(),
        }
    }

    /// The same strategy without aiming at goals (`coverage:OBJECTIVE:no-goals`).
    pub fn without_goals(mut self) -> Coverage {
        self.aiming = false;
        self
    }

    /// The strategy a spec's suffix after `coverage:` names (`unique`, `frequency:no-goals`, ...),
    /// or None if it names none.
    pub fn parse(suffix: &str, seed: u64) -> Option<Coverage> {
        let (name, goals) = match suffix.split_once(':') {
            Some((name, "no-goals")) => (name, false),
            Some(_) => return None,
            None => (suffix, true),
        };
        let objective = match name {
            "unique" => Objective::Unique,
            "frequency" => Objective::Frequency,
            "node-frequency" => Objective::NodeFrequency,
            _ => return None,
        };
        let strategy = Coverage::new(objective, seed);
        Some(if goals { strategy } else { strategy.without_goals() })
    }

    pub fn reasons(&self) -> Reasons {
        self.reasons
    }

    /// Executions aimed at unmet goals so far.
    pub fn aimed(&self) -> u64 {
        self.aimed
    }

    /// Distinct blocks the history knows.
    pub fn blocks(&self) -> usize {
        self.history.blocks()
    }

    /// What the user should know: that guidance was off, when the program reports no coverage;
    /// how many executions were aimed at goals.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let spec = self.info().spec;
        if self.history.executions > 0 && self.history.covered_executions == 0 {
            notes.push(format!(
                "the program reports no coverage (not built with -fsanitize-coverage and -ldara_cov, see docs/coverage.md): {spec} ran unguided, choosing unseen actions, then new paths, then at random"
            ));
        }
        if self.aimed > 0 {
            let (known, met) = self.goals.counts();
            notes.push(format!(
                "{spec} aimed {} of {} executions at the goals not met yet ({met} of {known} met), each starting from an execution that came close (docs/guided.md)",
                self.aimed, self.history.executions
            ));
        }
        notes
    }

    /// Records that `c` was taken among `offered` choices: advances the context, the predicted
    /// coverage and this execution's record.
    fn take(&mut self, c: &Choice, offered: usize) {
        let a = action(c);
        let k = key(a, self.previous);
        self.reached.extend(self.history.credited(k).copied());
        self.prefix = path(self.prefix, a);
        self.previous = a;
        self.run.push(a, offered);
    }

    /// While aimed: the seed's choice to follow, or (at the fork) the seed's action not to take
    /// again. Ends the following at the fork, or when the program does not offer the seed's
    /// decision.
    fn follow(&mut self, choices: &[Choice]) -> Following {
        let Some(aim) = self.aim else { return Following::Free };
        let position = self.run.len();
        let Some(seed_action) = self.goals.action(aim, position) else {
            self.aim = None;
            return Following::Free;
        };
        if position == aim.depart {
            self.aim = None;
            return Following::Depart(seed_action);
        }
        match choices.iter().position(|c| action(c) == seed_action) {
            Some(i) => Following::Take(i),
            None => {
                self.aim = None;
                Following::Free
            }
        }
    }

    /// Indices of the choices to pick among, and why; `avoid`: an action not to take unless it
    /// is the only one offered.
    fn candidates(&self, choices: &[Choice], avoid: Option<u64>) -> (Vec<usize>, Reason) {
        let mut allowed: Vec<usize> = (0..choices.len()).filter(|&i| Some(action(&choices[i])) != avoid).collect();
        if allowed.is_empty() {
            allowed = (0..choices.len()).collect();
        }
        let keys: Vec<u64> = choices.iter().map(|c| key(action(c), self.previous)).collect();
        let scores: Vec<f64> = keys.iter().map(|&k| self.history.promise(k, &self.reached, self.objective)).collect();
        let best = allowed.iter().map(|&i| scores[i]).fold(0.0, f64::max);
        if best > 0.0 {
            return (allowed.into_iter().filter(|&i| scores[i] == best).collect(), Reason::Guided);
        }
        let unseen: Vec<usize> = allowed.iter().copied().filter(|&i| !self.history.seen(keys[i])).collect();
        if !unseen.is_empty() {
            return (unseen, Reason::Unseen);
        }
        let fresh: Vec<usize> =
            allowed.iter().copied().filter(|&i| !self.history.path_taken(path(self.prefix, action(&choices[i])))).collect();
        if !fresh.is_empty() {
            return (fresh, Reason::NewPath);
        }
        (allowed, Reason::Random)
    }
}

/// What an aimed execution's seed says about the current decision.
enum Following {
    /// Not following (not aimed, or no longer).
    Free,
    /// Take the seed's choice, at this index.
    Take(usize),
    /// The fork: decide freely, but not the seed's action.
    Depart(u64),
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
        let avoid = match self.follow(choices) {
            Following::Take(i) => {
                self.reasons.followed += 1;
                self.take(&choices[i], choices.len());
                return Ok(i);
            }
            Following::Depart(seed_action) => Some(seed_action),
            Following::Free => None,
        };
        let (candidates, reason) = self.candidates(choices, avoid);
        let counter = match reason {
            Reason::Guided => &mut self.reasons.guided,
            Reason::Unseen => &mut self.reasons.unseen,
            Reason::NewPath => &mut self.reasons.new_path,
            Reason::Random => &mut self.reasons.random,
        };
        *counter += 1;
        let pick = candidates[self.rng.index(candidates.len())];
        self.take(&choices[pick], choices.len());
        Ok(pick)
    }
}

impl Strategy for Coverage {
    fn begin_execution(&mut self, start: Start) {
        self.rng = Rng::for_execution(self.seed, start.execution);
        self.previous = START;
        self.prefix = START;
        self.reached.clear();
        self.run = Run::default();
        self.aim_rng = Rng::for_execution(self.seed ^ AIM_STREAM, start.execution);
        self.aim = None;
        if self.aiming && self.aim_rng.below(AIM_ONE_IN) == 0 {
            self.aim = self.goals.aim(&mut self.aim_rng);
            self.aimed += u64::from(self.aim.is_some());
        }
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        self.history.record(feedback);
        self.aim = None;
        if self.aiming {
            self.goals.record(feedback.properties, std::mem::take(&mut self.run));
        }
        Status { exhausted: None, notes: self.notes() }
    }

    fn forced(&mut self, _step: u64, choices: &[Choice], chosen: usize) {
        if let Some(c) = choices.get(chosen) {
            self.take(c, choices.len());
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
        let goals = if self.aiming { "" } else { ":no-goals" };
        Info { spec: format!("coverage:{name}{goals}"), order: Order::Learning }
    }
}
