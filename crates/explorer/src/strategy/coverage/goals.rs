//! What the coverage strategies know of the program's goals (issue 18): the `sometimes` and
//! `reachable` properties (docs/properties.md) that no execution of the search has met yet, and
//! the executions that came closest to them, kept as *seeds* that an aimed execution starts from.
//! Pure bookkeeping over each execution's [`ExecutionProperties`]; when an execution is aimed and
//! how it follows its seed is in `mod.rs`, with the sources and where we deviate from them.
//!
//! **How close an execution came** ([`Rank`]). The SDK's lines say, per execution, how often
//! each goal was evaluated and how often it held, not at which step. The one signal a goal gives
//! of itself before it is met is being *evaluated* without holding: a `DARA_SOMETIMES` site
//! reached with its condition false. Such an execution got the program into the code that checks
//! the goal; what it lacked is the condition. So an execution is close to the unmet goals it
//! evaluated; among executions close to as many, one that also met a goal first (no execution
//! before it had) is closer: it got further than any before it, and meeting a goal for the first
//! time is the most valuable new coverage there is. A goal never evaluated yet (a `reachable`
//! before it is reached, a `sometimes` whose site no execution reached) gives no signal: no
//! execution is close to it, and only the coverage guidance of `mod.rs`, which already pushes
//! toward code no execution reached, works toward it. (We tried the coverage frontier as a stand-
//! in, the executions that reached new code: following them kept the early decisions that had
//! *not* led to the goal and made the goal rarer, see docs/guided.md.)
//!
//! An execution close to no unmet goal is not kept. Seeds are at most [`MAX_SEEDS`]; a new one
//! then replaces the lowest-ranked (the most used among those, then the oldest) unless it ranks
//! lower still.
use std::collections::BTreeMap;

use dara_model::property::{ExecutionProperties, PropertyKind};

use crate::rng::Rng;

/// Most seeds kept (each holds its execution's decisions: 64 executions of 20,000 decisions, a
/// liveness walk's length, take about 15 MB).
pub(crate) const MAX_SEEDS: usize = 64;

/// A goal of the program, by its order of appearance in the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GoalId(u32);

#[derive(Clone, Debug)]
struct Goal {
    /// Some execution met it.
    met: bool,
}

/// One execution's own decisions, as the strategy made them (decisions a wrapper took for it,
/// fault points, are not in it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Run {
    /// The action of each decision (`history::action`).
    pub actions: Vec<u64>,
    /// Indices of the decisions at which more than one choice was offered: where an execution
    /// that follows this one can take another way.
    pub forks: Vec<u32>,
}

impl Run {
    pub(crate) fn push(&mut self, action: u64, offered: usize) {
        if offered > 1 {
            self.forks.push(self.actions.len() as u32);
        }
        self.actions.push(action);
    }

    pub(crate) fn len(&self) -> usize {
        self.actions.len()
    }
}

/// An execution kept as a starting point.
#[derive(Clone, Debug)]
struct Seed {
    run: Run,
    /// Goals unmet at its end that it evaluated without meeting.
    evaluated: Vec<GoalId>,
    /// It met a goal first.
    first_met: bool,
    /// Aimed executions started from it.
    uses: u32,
}

/// How close a seed is to the goals unmet now; greater is closer (fields compare in order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rank {
    /// Unmet goals it evaluated.
    pub evaluated: usize,
    pub first_met: bool,
}

/// Where an aimed execution goes: the first `depart` decisions of seed `seed`, then a choice
/// other than the seed's decision `depart` (a fork of the seed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Aim {
    seed: usize,
    pub depart: usize,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Goals {
    goals: Vec<Goal>,
    by_name: BTreeMap<(PropertyKind, String), GoalId>,
    seeds: Vec<Seed>,
}

impl Goals {
    /// Learns from one finished execution: which goals it declared, evaluated and met; keeps it
    /// as a seed if it came close to the goals still unmet.
    pub(crate) fn record(&mut self, properties: &ExecutionProperties, run: Run) {
        let mut evaluated = Vec::new();
        let mut first_met = false;
        for ((kind, name), tally) in properties.tallies.iter().filter(|((kind, _), _)| kind.is_goal()) {
            let id = self.intern(*kind, name);
            let goal = &mut self.goals[id.0 as usize];
            if tally.held > 0 {
                first_met |= !goal.met;
                goal.met = true;
            } else if tally.evaluations > 0 && !goal.met {
                evaluated.push(id);
            }
        }
        if run.forks.is_empty() || !self.goals.iter().any(|g| !g.met) {
            return; // nowhere to depart, or nothing left to aim at
        }
        let seed = Seed { run, evaluated, first_met, uses: 0 };
        if self.rank(&seed).evaluated == 0 {
            return;
        }
        if self.seeds.len() < MAX_SEEDS {
            self.seeds.push(seed);
            return;
        }
        let worst = (0..self.seeds.len()).min_by_key(|&i| (self.rank(&self.seeds[i]), std::cmp::Reverse(self.seeds[i].uses)));
        if let Some(worst) = worst.filter(|&w| self.rank(&self.seeds[w]) <= self.rank(&seed)) {
            self.seeds[worst] = seed;
        }
    }

    fn intern(&mut self, kind: PropertyKind, name: &str) -> GoalId {
        let key = (kind, name.to_string());
        if let Some(&id) = self.by_name.get(&key) {
            return id;
        }
        let id = GoalId(self.goals.len() as u32);
        self.goals.push(Goal { met: false });
        self.by_name.insert(key, id);
        id
    }

    /// Goals known (declared or evaluated) and goals met.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.goals.len(), self.goals.iter().filter(|g| g.met).count())
    }

    fn rank(&self, seed: &Seed) -> Rank {
        let evaluated = seed.evaluated.iter().filter(|id| !self.goals[id.0 as usize].met).count();
        Rank { evaluated, first_met: seed.first_met }
    }

    /// The start of an aimed execution: a seed among the closest to the unmet goals (the least
    /// used of them, then at random) and a fork of it, the later of two drawn uniformly (fork i
    /// of n with probability (2i+1)/n²: the later the fork, the more of what the seed achieved is
    /// kept; on goal_relay this met the goal in 89 executions on average over ten seeds, against
    /// 127 with a uniform fork). None when every goal is met or no execution came close.
    pub(crate) fn aim(&mut self, rng: &mut Rng) -> Option<Aim> {
        if self.goals.iter().all(|g| g.met) {
            return None;
        }
        let ranks: Vec<Rank> = self.seeds.iter().map(|s| self.rank(s)).collect();
        let best = ranks.iter().copied().max().filter(|r| r.evaluated > 0)?;
        let closest: Vec<usize> = (0..self.seeds.len()).filter(|&i| ranks[i] == best).collect();
        let fewest = closest.iter().map(|&i| self.seeds[i].uses).min()?;
        let pool: Vec<usize> = closest.into_iter().filter(|&i| self.seeds[i].uses == fewest).collect();
        let seed = pool[rng.index(pool.len())];
        let forks = &self.seeds[seed].run.forks;
        let later = rng.index(forks.len()).max(rng.index(forks.len()));
        let depart = forks[later] as usize;
        self.seeds[seed].uses += 1;
        Some(Aim { seed, depart })
    }

    /// The action the aimed execution's seed took at decision `i` (None past its end).
    pub(crate) fn action(&self, aim: Aim, i: usize) -> Option<u64> {
        self.seeds.get(aim.seed)?.run.actions.get(i).copied()
    }

    /// The rank of the seed `aim` starts from, now.
    #[cfg(test)]
    pub(crate) fn rank_of(&self, aim: Aim) -> Rank {
        self.seeds.get(aim.seed).map(|s| self.rank(s)).unwrap_or_default()
    }

    #[cfg(test)]
    pub(crate) fn seeds(&self) -> usize {
        self.seeds.len()
    }
}
