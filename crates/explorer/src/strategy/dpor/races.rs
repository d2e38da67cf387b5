//! The happens-before analysis behind [`dpor`](super): after each execution, vector clocks over
//! the steps taken, the races they reveal, and the backtrack choices that reverse them.
//!
//! Races are found as in Flanagan & Godefroid (POPL 2005, Figure 4), adapted to operations that
//! dara shows only once they are enabled (see [`check`]); each race is reversed with a source
//! set (Abdulla, Aronis, Jonsson & Sagonas, POPL 2014, see [`reverse`]).
//!
//! The analysis is quadratic in the steps of an execution and more with many races (a
//! memory-level execution has tens of thousands of steps): it runs on a [`Work`] budget, counted
//! in events visited, so it is deterministic and ends within a fraction of a second whatever the
//! execution. An analysis cut short adds fewer backtrack points, and the search says that its
//! exploration is then no proof.
use std::collections::BTreeMap;

use dara_abi::Op;
use dara_model::choice::{ChoiceObject, ThreadId, FAULT_THREAD};
use dara_model::{Choice, ChoiceKind};

use super::{dependent, Node};

/// Events the analysis of one execution may visit (a fifth of a second on the project machines).
pub(super) const ANALYSIS_WORK: u64 = 100_000_000;

/// What is left of an analysis's budget.
pub(super) struct Work {
    left: u64,
}

impl Work {
    pub(super) fn new(events: u64) -> Work {
        Work { left: events }
    }

    /// Spends one visit; false once the budget is gone.
    fn spend(&mut self) -> bool {
        self.left = self.left.saturating_sub(1);
        self.left > 0
    }

    pub(super) fn ran_out(&self) -> bool {
        self.left == 0
    }
}

/// A vector clock: entry `index(t)` is how many of thread t's steps happened before.
#[derive(Clone, Debug, Default)]
struct Clock(Vec<u32>);

/// A thread's entry in a clock: injected faults (thread [`FAULT_THREAD`], `u32::MAX`) count as
/// one more thread, at entry 0, so a clock stays as long as the number of threads.
fn index(t: ThreadId) -> usize {
    if t == FAULT_THREAD {
        0
    } else {
        t as usize + 1
    }
}

impl Clock {
    fn get(&self, t: ThreadId) -> u32 {
        self.0.get(index(t)).copied().unwrap_or(0)
    }

    fn set(&mut self, t: ThreadId, n: u32) {
        let t = index(t);
        if self.0.len() <= t {
            self.0.resize(t + 1, 0);
        }
        self.0[t] = n;
    }

    fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, &b) in self.0.iter_mut().zip(&other.0) {
            *a = (*a).max(b);
        }
    }

    fn has(&self, e: &Event) -> bool {
        self.get(e.choice.thread) >= e.nth
    }
}

/// A step of the analysed execution.
struct Event {
    choice: Choice,
    /// 1-based rank among its thread's steps.
    nth: u32,
    /// Everything that happens before it, itself included.
    clock: Clock,
}

/// A thread as the analysis walks the execution.
struct ThreadView {
    /// Happens-before of its next step: its last step's clock (or its creation's).
    clock: Clock,
    steps: u32,
    /// First position at which its next step was pending: just after its previous step, or
    /// where it first appeared.
    since: usize,
    /// The choices it offered since `since`; empty if none was (not known).
    pending: Vec<Choice>,
    done: bool,
}

/// Walks the execution `path[..end]` (plus the pending choices of `path[end]`, if it was
/// sleep-set blocked there), finds its races and adds to the backtrack sets of its nodes. Stops
/// where `work` runs out (see [`Work::ran_out`]).
pub(super) fn analyse(path: &mut [Node], end: usize, work: &mut Work) {
    let mut events: Vec<Event> = Vec::with_capacity(end);
    let mut threads: BTreeMap<ThreadId, ThreadView> = BTreeMap::new();
    for pos in 0..=end {
        for c in path.get(pos).map_or(&[][..], |n| &n.choices[..]) {
            let view = threads.entry(c.thread).or_insert_with(|| ThreadView {
                clock: creation_clock(&events, c),
                steps: 0,
                since: pos,
                pending: Vec::new(),
                done: false,
            });
            if !view.pending.contains(c) {
                view.pending.push(*c);
            }
        }
        if pos == end {
            break;
        }
        let c = path[pos].choices[path[pos].taken];
        let Some(view) = threads.get_mut(&c.thread) else {
            continue;
        };
        check(path, &events, c.thread, view, pos, work);

        let mut clock = view.clock.clone();
        for e in events.iter().rev() {
            if !work.spend() {
                return;
            }
            if !clock.has(e) && dependent(&e.choice, &c) {
                clock.join(&e.clock);
            }
        }
        view.steps += 1;
        clock.set(c.thread, view.steps);
        view.clock = clock.clone();
        view.since = pos + 1;
        view.pending.clear();
        view.done |= c.kind == ChoiceKind::Run && matches!(c.op, Op::ThreadExit | Op::ProcessExit);
        events.push(Event {
            choice: c,
            nth: view.steps,
            clock,
        });
    }
    for (&t, view) in threads.iter().filter(|(_, v)| !v.done) {
        check(path, &events, t, view, end, work);
    }
}

/// A new thread's step happens after its creator's latest `ThreadCreate` (the start barrier
/// makes the child appear right after it).
fn creation_clock(events: &[Event], first: &Choice) -> Clock {
    if first.op != Op::ThreadStart {
        return Clock::default();
    }
    events
        .iter()
        .rev()
        .find(|e| e.choice.op == Op::ThreadCreate && first.object() == ChoiceObject::Thread(e.choice.thread))
        .map(|e| e.clock.clone())
        .unwrap_or_default()
}

/// Flanagan & Godefroid's check for thread `p`'s next step (taken at position `at`, or still
/// pending there), at every state from `view.since` to `at`: each dependent step of another
/// thread in that window, and the last one before it, that does not happen before `p`, races
/// with it.
fn check(path: &mut [Node], events: &[Event], p: ThreadId, view: &ThreadView, at: usize, work: &mut Work) {
    for i in (0..at).rev() {
        if !work.spend() {
            return;
        }
        let e = &events[i];
        if e.choice.thread == p || view.clock.has(e) {
            continue;
        }
        if !view.pending.is_empty() && !view.pending.iter().any(|v| dependent(&e.choice, v)) {
            continue;
        }
        reverse(&mut path[i], events, i, at, p, &view.clock, work);
        if i < view.since {
            break;
        }
    }
}

/// Makes node `i` explore a way to reverse the race between step `i` and `p`'s next step (at
/// `at`, with happens-before `p_clock`), as source-DPOR does (Abdulla, Aronis, Jonsson and
/// Sagonas, "Optimal Dynamic Partial Order Reduction", POPL 2014): the steps after `i` that do
/// not happen after it, followed by `p`'s step, must be able to start at node `i`. Their
/// *initials* (threads whose first step there has no predecessor among them) are the ways to
/// start; if none is in the backtrack set yet, add one, `p` by preference. If no initial is
/// offered at node `i` (a blocked thread's step dara did not show), add everything.
///
/// Adding `p` whenever it is offered, as Flanagan & Godefroid do, is not enough together with
/// sleep sets when `p`'s step needs another thread's step first and `p` is asleep at node `i`.
fn reverse(node: &mut Node, events: &[Event], i: usize, at: usize, p: ThreadId, p_clock: &Clock, work: &mut Work) {
    let race = &events[i];
    // For each thread with a step in v, the rank of its first one.
    let mut first_in_v: BTreeMap<ThreadId, u32> = BTreeMap::new();
    let mut initials: Vec<ThreadId> = Vec::new();
    let preceded = |clock: &Clock, first: &BTreeMap<ThreadId, u32>| {
        first.iter().any(|(&t, &nth)| clock.get(t) >= nth)
    };
    for e in &events[i + 1..at] {
        if !work.spend() {
            return;
        }
        if e.clock.has(race) {
            continue;
        }
        if !preceded(&e.clock, &first_in_v) {
            initials.push(e.choice.thread);
        }
        first_in_v.entry(e.choice.thread).or_insert(e.nth);
    }
    let p_initial = !preceded(p_clock, &first_in_v);
    if p_initial {
        initials.insert(0, p);
    }
    let has = |node: &Node, t: ThreadId| {
        node.choices
            .iter()
            .zip(&node.backtrack)
            .any(|(c, &b)| b && c.thread == t)
    };
    if initials.iter().any(|&t| has(node, t)) {
        return;
    }
    let offered = |t: ThreadId| node.choices.iter().any(|c| c.thread == t);
    let pick = initials.iter().copied().find(|&t| offered(t));
    for (x, c) in node.choices.iter().enumerate() {
        node.backtrack[x] |= match pick {
            Some(t) => c.thread == t,
            None => true,
        };
    }
}
