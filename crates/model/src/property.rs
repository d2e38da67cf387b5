//! User properties: what the SDKs (`sdk/c/dara.h`, `sdk/rust`, `sdk/go`) and the line protocol
//! tell dara, tallied per execution, the verdict an execution gets from them, and the tally of a
//! whole search.
//!
//! The protocol (docs/properties.md): one line per evaluation, written to the descriptor
//! `DARA_SDK_FD` names, `KIND HELD NAME` with KIND one of `always`, `sometimes`, `eventually`
//! (HELD `1` or `0`: the condition's value), or `KIND NAME` for `reachable` and `unreachable`
//! (the line itself says the point was reached), and `declare KIND NAME`: a property the program
//! contains, sent once at its start (the C header does it from a table the linker collects), so a
//! goal never reached is still listed. Lines arrive in the order the program wrote them;
//! only one thread runs at a time, so that order is the schedule's and the same in a replay.
//!
//! Verdicts: an `always` that was false once, an `unreachable` that was reached, and an
//! `eventually` that was evaluated but never held by the end of the execution are bugs, named by
//! the property; the first of them in the execution's order is its outcome. `sometimes` and
//! `reachable` are goals: a search says which were never satisfied.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a property claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PropertyKind {
    /// The condition holds at every evaluation (`DARA_ALWAYS`).
    Always,
    /// The condition holds at some evaluation in some execution (`DARA_SOMETIMES`): a goal.
    Sometimes,
    /// The point is reached in some execution (`DARA_REACHABLE`): a goal.
    Reachable,
    /// The point is never reached (`DARA_UNREACHABLE`).
    Unreachable,
    /// The condition holds at some evaluation of each execution, by its end (`DARA_EVENTUALLY`).
    Eventually,
}

impl PropertyKind {
    /// The protocol's word.
    pub fn word(self) -> &'static str {
        match self {
            PropertyKind::Always => "always",
            PropertyKind::Sometimes => "sometimes",
            PropertyKind::Reachable => "reachable",
            PropertyKind::Unreachable => "unreachable",
            PropertyKind::Eventually => "eventually",
        }
    }

    fn from_word(word: &str) -> Option<PropertyKind> {
        [PropertyKind::Always, PropertyKind::Sometimes, PropertyKind::Reachable, PropertyKind::Unreachable, PropertyKind::Eventually].into_iter().find(|k| k.word() == word)
    }

    /// Whether the kind is a claim whose breaking is a bug (not a goal).
    pub fn is_claim(self) -> bool {
        matches!(self, PropertyKind::Always | PropertyKind::Unreachable | PropertyKind::Eventually)
    }

    /// Whether the kind is a goal a search tries to meet (`sometimes`, `reachable`).
    pub fn is_goal(self) -> bool {
        !self.is_claim()
    }
}

/// One property's evaluations in one execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Times it was evaluated (reached, for `reachable`/`unreachable`).
    pub evaluations: u64,
    /// Evaluations at which the condition held (every one, for `reachable`/`unreachable`).
    pub held: u64,
}

/// The properties of one execution, by kind and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionProperties {
    pub tallies: BTreeMap<(PropertyKind, String), Tally>,
    /// The first claim broken in the execution's order (an `eventually` is judged at the end).
    first_broken: Option<(PropertyKind, String)>,
    /// Lines that were not the protocol (shown once, so a typo in a script does not go unseen).
    pub malformed: u64,
    pub first_malformed: Option<String>,
    /// The latest value of each `eventually` property (see [`crate::liveness`]).
    latest: BTreeMap<String, bool>,
    /// The last mark the scheduler wrote into the pipe that was read.
    mark: u64,
    /// Since the walk's start mark: the `eventually` properties that had not held at it and have
    /// not held since (None before the walk).
    pending: Option<std::collections::BTreeSet<String>>,
}

/// Most distinct properties one execution keeps; later new names are counted as malformed.
pub const MAX_PROPERTIES: usize = 4096;

impl ExecutionProperties {
    /// No property declared or evaluated (a program without the SDK), usable in a `static`.
    pub const fn empty() -> ExecutionProperties {
        ExecutionProperties { tallies: BTreeMap::new(), first_broken: None, malformed: 0, first_malformed: None, latest: BTreeMap::new(), mark: 0, pending: None }
    }

    /// Takes one protocol line (without its newline).
    pub fn record(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        if let Some(mark) = crate::liveness::parse_mark(text) {
            self.mark = mark;
            if mark == crate::liveness::WALK_START_MARK {
                let unmet = self.tallies.keys().filter(|(kind, name)| *kind == PropertyKind::Eventually && self.latest.get(name) != Some(&true));
                self.pending = Some(unmet.map(|(_, name)| name.clone()).collect());
            }
            return;
        }
        if let Some((kind, name)) = text.strip_prefix("declare ").and_then(parse_declaration) {
            if self.tallies.len() < MAX_PROPERTIES {
                self.tallies.entry((kind, name.to_string())).or_default();
            }
            return;
        }
        let Some((kind, held, name)) = parse(text) else {
            self.malformed += 1;
            self.first_malformed.get_or_insert_with(|| text.chars().take(200).collect());
            return;
        };
        let key = (kind, name.to_string());
        if !self.tallies.contains_key(&key) && self.tallies.len() >= MAX_PROPERTIES {
            self.malformed += 1;
            return;
        }
        let tally = self.tallies.entry(key).or_default();
        tally.evaluations += 1;
        tally.held += u64::from(held);
        if kind == PropertyKind::Eventually {
            self.latest.insert(name.to_string(), held);
            if let (true, Some(pending)) = (held, self.pending.as_mut()) {
                pending.remove(name);
            }
        }
        let broken = match kind {
            PropertyKind::Always => !held,
            PropertyKind::Unreachable => true,
            _ => false,
        };
        if broken && self.first_broken.is_none() {
            self.first_broken = Some((kind, name.to_string()));
        }
    }

    /// The last mark read (0: none yet).
    pub fn mark(&self) -> u64 {
        self.mark
    }

    /// The `eventually` properties still unmet in the liveness walk (None: no walk started).
    pub fn pending(&self) -> Option<&std::collections::BTreeSet<String>> {
        self.pending.as_ref()
    }

    /// The claim the execution broke, if any: its kind, name and what happened, for the outcome.
    pub fn broken(&self) -> Option<(PropertyKind, String, String)> {
        let described = |kind: PropertyKind, name: &str| {
            let t = self.tallies.get(&(kind, name.to_string())).copied().unwrap_or_default();
            let what = match kind {
                PropertyKind::Always => format!("false at {} of its {} evaluations", t.evaluations - t.held, t.evaluations),
                PropertyKind::Unreachable => format!("reached ({} times)", t.evaluations),
                _ => format!("never held in its {} evaluations by the end of the execution", t.evaluations),
            };
            (kind, name.to_string(), what)
        };
        if let Some((kind, name)) = &self.first_broken {
            return Some(described(*kind, name));
        }
        self.tallies
            .iter()
            .find(|((kind, _), t)| *kind == PropertyKind::Eventually && t.evaluations > 0 && t.held == 0)
            .map(|((kind, name), _)| described(*kind, name))
    }
}

/// `KIND HELD NAME` or `KIND NAME` (reachable, unreachable); None if the line is not that.
fn parse(line: &str) -> Option<(PropertyKind, bool, &str)> {
    let (word, rest) = line.trim_start().split_once(' ')?;
    let kind = PropertyKind::from_word(word)?;
    let (held, name) = match kind {
        PropertyKind::Reachable | PropertyKind::Unreachable => (true, rest),
        _ => match rest.split_once(' ')? {
            ("1", name) => (true, name),
            ("0", name) => (false, name),
            _ => return None,
        },
    };
    let name = name.trim();
    (!name.is_empty()).then_some((kind, held, name))
}

/// `KIND NAME` after `declare `.
fn parse_declaration(rest: &str) -> Option<(PropertyKind, &str)> {
    let (word, name) = rest.trim_start().split_once(' ')?;
    let name = name.trim();
    PropertyKind::from_word(word).filter(|_| !name.is_empty()).map(|kind| (kind, name))
}

/// A property over a whole search.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SearchTally {
    /// Executions that evaluated (reached) it.
    pub executions: u64,
    /// Executions in which it held at least once (reached, for the point kinds).
    pub executions_held: u64,
    /// Executions in which the claim broke (claims only).
    pub executions_broken: u64,
    pub evaluations: u64,
    /// Goals: the (0-based) execution that met it first.
    pub first_met: Option<u64>,
}

/// The properties of a search, by kind and name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchProperties(pub BTreeMap<(PropertyKind, String), SearchTally>);

impl SearchProperties {
    /// Adds execution `k`'s properties; returns the goals it met first (none before it had).
    pub fn add(&mut self, k: u64, execution: &ExecutionProperties) -> Vec<(PropertyKind, String)> {
        let mut first = Vec::new();
        for ((kind, name), t) in &execution.tallies {
            let s = self.0.entry((*kind, name.clone())).or_default();
            if t.evaluations == 0 {
                continue; // declared, not evaluated
            }
            s.executions += 1;
            s.evaluations += t.evaluations;
            s.executions_held += u64::from(t.held > 0);
            if kind.is_goal() && t.held > 0 && s.first_met.is_none() {
                s.first_met = Some(k);
                first.push((*kind, name.clone()));
            }
            let broken = match kind {
                PropertyKind::Always => t.held < t.evaluations,
                PropertyKind::Unreachable => true,
                PropertyKind::Eventually => t.held == 0,
                _ => false,
            };
            s.executions_broken += u64::from(broken);
        }
        first
    }

    /// Whether a goal was met (a `sometimes` held, a `reachable` reached) or a claim kept.
    pub fn satisfied(kind: PropertyKind, t: &SearchTally) -> bool {
        match kind {
            PropertyKind::Sometimes | PropertyKind::Reachable => t.executions_held > 0,
            _ => t.executions_broken == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> ExecutionProperties {
        let mut p = ExecutionProperties::default();
        for l in lines {
            p.record(l.as_bytes());
        }
        p
    }

    #[test]
    fn the_first_broken_claim_in_order_is_the_verdict() {
        let p = run(&["always 1 balance never negative", "reachable retry path", "unreachable corrupted", "always 0 balance never negative"]);
        let (kind, name, what) = p.broken().unwrap();
        assert_eq!((kind, name.as_str()), (PropertyKind::Unreachable, "corrupted"));
        assert!(what.contains("reached (1 times)"), "{what}");
        assert_eq!(p.tallies[&(PropertyKind::Always, "balance never negative".into())], Tally { evaluations: 2, held: 1 });
    }

    #[test]
    fn an_eventually_fails_only_if_it_never_held() {
        assert!(run(&["eventually 0 converged", "eventually 1 converged", "eventually 0 converged"]).broken().is_none());
        let (kind, _, what) = run(&["eventually 0 converged", "eventually 0 converged"]).broken().unwrap();
        assert_eq!(kind, PropertyKind::Eventually);
        assert!(what.contains("never held in its 2 evaluations"), "{what}");
    }

    #[test]
    fn the_walk_waits_for_the_eventually_properties_unmet_at_its_start() {
        let mut p = run(&["declare eventually declared only", "eventually 0 leader", "eventually 1 converged", "eventually 0 converged"]);
        assert_eq!(p.pending(), None);
        p.record(crate::liveness::mark_line(1).trim_end().as_bytes());
        let names: Vec<&str> = p.pending().unwrap().iter().map(String::as_str).collect();
        assert_eq!(names, ["converged", "declared only", "leader"]);
        p.record(b"eventually 1 leader");
        p.record(crate::liveness::mark_line(2).trim_end().as_bytes());
        assert_eq!(p.mark(), 2);
        assert_eq!(p.pending().unwrap().len(), 2);
        assert_eq!(p.malformed, 0);
    }

    #[test]
    fn goals_never_break_and_malformed_lines_are_counted() {
        let p = run(&["sometimes 0 leader elected", "reachable  slow path ", "always 2 x", "hello", "always 1"]);
        assert!(p.broken().is_none());
        assert_eq!(p.malformed, 3);
        assert_eq!(p.first_malformed.as_deref(), Some("always 2 x"));
        assert_eq!(p.tallies[&(PropertyKind::Reachable, "slow path".into())].evaluations, 1);
    }

    #[test]
    fn a_declared_goal_never_reached_is_listed_unmet() {
        let mut s = SearchProperties::default();
        let p = run(&["declare reachable slow path", "declare always safe", "always 1 safe"]);
        assert!(p.broken().is_none());
        assert!(s.add(0, &p).is_empty());
        let slow = &s.0[&(PropertyKind::Reachable, "slow path".into())];
        assert_eq!(slow.executions, 0);
        assert!(!SearchProperties::satisfied(PropertyKind::Reachable, slow));
        assert_eq!(s.0[&(PropertyKind::Always, "safe".into())].executions, 1);
    }

    #[test]
    fn a_search_tells_unmet_goals_from_met_ones() {
        let mut s = SearchProperties::default();
        let first = s.add(0, &run(&["sometimes 0 leader elected", "always 1 safe", "reachable slow path"]));
        assert_eq!(first, [(PropertyKind::Reachable, "slow path".to_string())]);
        let second = s.add(1, &run(&["sometimes 1 leader elected", "always 0 safe", "sometimes 0 never", "reachable slow path"]));
        assert_eq!(second, [(PropertyKind::Sometimes, "leader elected".to_string())], "the goals met first, not again");
        let leader = &s.0[&(PropertyKind::Sometimes, "leader elected".into())];
        assert_eq!((leader.executions, leader.executions_held, leader.first_met), (2, 1, Some(1)));
        assert_eq!(s.0[&(PropertyKind::Sometimes, "never".into())].first_met, None);
        assert_eq!(s.0[&(PropertyKind::Always, "safe".into())].first_met, None, "claims are not goals");
        assert!(SearchProperties::satisfied(PropertyKind::Sometimes, leader));
        assert!(!SearchProperties::satisfied(PropertyKind::Sometimes, &s.0[&(PropertyKind::Sometimes, "never".into())]));
        assert_eq!(s.0[&(PropertyKind::Always, "safe".into())].executions_broken, 1);
    }
}
