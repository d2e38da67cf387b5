//! A miniature dara for testing systematic strategies: threads are lists of [`Instr`]s on mutexes
//! and shared variables, offered as [`Choice`]s the way the model offers them (by thread, Run
//! before Timeout, then alternative; blocked threads offer nothing), with a final [`Outcome`] that
//! says what the program computed. Test-only.
//!
//! Shared-variable accesses are modelled as futex operations on the variable's address
//! (`Load`/`Store`/`Write`), or as memory-level scheduling points (`MemRead`/`MemAdd`, what
//! `--preempt-on memory` posts); either way they conflict exactly when they touch the same
//! variable and one writes.
use std::collections::{BTreeMap, BTreeSet, HashSet};

use dara_abi::Op;
use dara_model::choice::ThreadId;
use dara_model::{Choice, ChoiceKind, Divergence};

use super::testkit::Program;
use super::{Describe, Feedback, Start, Status, Strategy};
use crate::rng::Rng;

/// Deadline reported as the object of a `Sleep`.
const SLEEP_DEADLINE: u64 = 5_000_000;
/// Register value after a timed lock timed out.
pub(crate) const TIMED_OUT: i64 = -110;
/// Steps after which an execution is cut off (none of the tests' programs get near it).
const MAX_STEPS: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instr {
    /// `MutexLock`, enabled while the mutex is free.
    Lock(u64),
    /// `MutexLock` with a deadline: Run while the mutex is free, Timeout always (the register
    /// becomes [`TIMED_OUT`] and the mutex is not taken).
    TimedLock(u64),
    /// `MutexUnlock`; does nothing unless this thread holds the mutex.
    Unlock(u64),
    /// register := variable.
    Load(u64),
    /// variable := register + n.
    Store(u64, i64),
    /// variable := n.
    Write(u64, i64),
    /// register := variable, as a `MemoryRead` point.
    MemRead(u64),
    /// variable := register + n, as a `MemoryWrite` point.
    MemAdd(u64, i64),
    Yield,
    /// Only a Timeout.
    Sleep,
    /// Yields while the variable is 0, then reads it (`FutexWait`) and moves on.
    SpinUntil(u64),
    /// `CondSignal` with n alternatives; alternative a sets the variable to a.
    Pick(u64, u32),
    /// `ThreadCreate` of the given thread, which then offers `ThreadStart` (object: creator).
    Spawn(ThreadId),
    /// `ThreadJoin`, enabled once the thread has finished.
    Join(ThreadId),
    Exit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a `Spawn`.
    Dormant,
    /// Spawned by the creator, `ThreadStart` pending.
    Starting(ThreadId),
    Running(usize),
}

/// What an execution computed: final variables, registers, and the threads that never finished
/// (a deadlock when not empty).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Outcome {
    pub vars: Vec<(u64, i64)>,
    pub regs: Vec<i64>,
    pub stuck: Vec<ThreadId>,
}

#[derive(Clone, Debug)]
pub(crate) struct Sim {
    code: Vec<Vec<Instr>>,
    phase: Vec<Phase>,
    regs: Vec<i64>,
    vars: BTreeMap<u64, i64>,
    held: BTreeMap<u64, ThreadId>,
}

impl Sim {
    /// Thread `t` runs `code[t]`; threads named by some `Spawn` wait for it, the others run from
    /// the start.
    pub(crate) fn new(code: Vec<Vec<Instr>>) -> Sim {
        let spawned: BTreeSet<ThreadId> = code
            .iter()
            .flatten()
            .filter_map(|i| match i {
                Instr::Spawn(t) => Some(*t),
                _ => None,
            })
            .collect();
        let phase = (0..code.len() as ThreadId)
            .map(|t| {
                if spawned.contains(&t) {
                    Phase::Dormant
                } else {
                    Phase::Running(0)
                }
            })
            .collect();
        Sim {
            regs: vec![0; code.len()],
            code,
            phase,
            vars: BTreeMap::new(),
            held: BTreeMap::new(),
        }
    }

    /// The same program with every thread ending in `Exit`.
    pub(crate) fn exiting(&self) -> Sim {
        Sim::new(with_exits(self.code.clone()))
    }

    /// The program with thread `t`'s instruction `i` replaced.
    pub(crate) fn with(mut self, t: usize, i: usize, instr: Instr) -> Sim {
        self.code[t][i] = instr;
        self
    }

    fn finished(&self, t: ThreadId) -> bool {
        let t = t as usize;
        matches!(self.phase[t], Phase::Running(pc) if pc >= self.code[t].len())
    }

    fn var(&self, v: u64) -> i64 {
        self.vars.get(&v).copied().unwrap_or(0)
    }

    fn free(&self, m: u64) -> bool {
        !self.held.contains_key(&m)
    }

    pub(crate) fn outcome(&self) -> Outcome {
        Outcome {
            vars: self.vars.iter().map(|(&v, &x)| (v, x)).collect(),
            regs: self.regs.clone(),
            stuck: (0..self.code.len() as ThreadId)
                .filter(|&t| !self.finished(t))
                .collect(),
        }
    }
}

impl Program for Sim {
    fn choices(&self) -> Vec<Choice> {
        let mut out = Vec::new();
        for t in 0..self.code.len() as ThreadId {
            let c = |kind, alt, op, obj| Choice {
                thread: t,
                kind,
                alt,
                op,
                obj,
            };
            let pc = match self.phase[t as usize] {
                Phase::Dormant => continue,
                Phase::Starting(creator) => {
                    out.push(c(ChoiceKind::Run, 0, Op::ThreadStart, u64::from(creator)));
                    continue;
                }
                Phase::Running(pc) => pc,
            };
            let Some(&instr) = self.code[t as usize].get(pc) else {
                continue;
            };
            let run = |op, obj| c(ChoiceKind::Run, 0, op, obj);
            match instr {
                Instr::Lock(m) if self.free(m) => out.push(run(Op::MutexLock, m)),
                Instr::Lock(_) => {}
                Instr::TimedLock(m) => {
                    if self.free(m) {
                        out.push(run(Op::MutexLock, m));
                    }
                    out.push(c(ChoiceKind::Timeout, 0, Op::MutexLock, m));
                }
                Instr::Unlock(m) => out.push(run(Op::MutexUnlock, m)),
                Instr::Load(v) => out.push(run(Op::FutexWait, v)),
                Instr::Store(v, _) | Instr::Write(v, _) => out.push(run(Op::FutexWake, v)),
                Instr::MemRead(v) => out.push(run(Op::MemoryRead, v)),
                Instr::MemAdd(v, _) => out.push(run(Op::MemoryWrite, v)),
                Instr::Yield => out.push(run(Op::Yield, 0)),
                Instr::Sleep => out.push(c(ChoiceKind::Timeout, 0, Op::Sleep, SLEEP_DEADLINE)),
                Instr::SpinUntil(v) if self.var(v) == 0 => out.push(run(Op::Yield, 0)),
                Instr::SpinUntil(v) => out.push(run(Op::FutexWait, v)),
                Instr::Pick(v, n) => {
                    out.extend((0..n).map(|a| c(ChoiceKind::Run, a, Op::CondSignal, v)))
                }
                Instr::Spawn(_) => out.push(run(Op::ThreadCreate, 0)),
                Instr::Join(u) if self.finished(u) => out.push(run(Op::ThreadJoin, u64::from(u))),
                Instr::Join(_) => {}
                Instr::Exit => out.push(run(Op::ThreadExit, 0)),
            }
        }
        out
    }

    fn apply(&mut self, c: &Choice) {
        let t = c.thread as usize;
        let pc = match self.phase[t] {
            Phase::Starting(_) => {
                self.phase[t] = Phase::Running(0);
                return;
            }
            Phase::Running(pc) => pc,
            Phase::Dormant => return,
        };
        let Some(&instr) = self.code[t].get(pc) else {
            return;
        };
        match (instr, c.kind) {
            (Instr::Lock(m) | Instr::TimedLock(m), ChoiceKind::Run) => {
                self.held.insert(m, c.thread);
            }
            (Instr::TimedLock(_), ChoiceKind::Timeout) => self.regs[t] = TIMED_OUT,
            (Instr::Unlock(m), _) if self.held.get(&m) == Some(&c.thread) => {
                self.held.remove(&m);
            }
            (Instr::SpinUntil(_), _) if c.op == Op::Yield => return,
            (Instr::Load(v) | Instr::SpinUntil(v) | Instr::MemRead(v), _) => self.regs[t] = self.var(v),
            (Instr::Store(v, n) | Instr::MemAdd(v, n), _) => {
                self.vars.insert(v, self.regs[t] + n);
            }
            (Instr::Write(v, n), _) => {
                self.vars.insert(v, n);
            }
            (Instr::Pick(v, _), _) => {
                self.vars.insert(v, i64::from(c.alt));
            }
            (Instr::Spawn(u), _) => {
                if let Some(p) = self.phase.get_mut(u as usize) {
                    *p = Phase::Starting(c.thread);
                }
            }
            _ => {}
        }
        self.phase[t] = Phase::Running(pc + 1);
    }
}

/// Every complete schedule of `program`, each step with the choices offered there, by brute
/// force: the reference the systematic strategies are checked against.
pub(crate) fn all_schedules(program: &Sim) -> Vec<Vec<(Vec<Choice>, usize)>> {
    fn walk(
        p: &Sim,
        prefix: &mut Vec<(Vec<Choice>, usize)>,
        out: &mut Vec<Vec<(Vec<Choice>, usize)>>,
    ) {
        let choices = p.choices();
        if choices.is_empty() || prefix.len() as u64 >= MAX_STEPS {
            out.push(prefix.clone());
            return;
        }
        for i in 0..choices.len() {
            let mut next = p.clone();
            next.apply(&choices[i]);
            prefix.push((choices.clone(), i));
            walk(&next, prefix, out);
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    walk(program, &mut Vec::new(), &mut out);
    out
}

/// Appends `Exit` to every thread, as real threads end.
pub(crate) fn with_exits(mut code: Vec<Vec<Instr>>) -> Vec<Vec<Instr>> {
    for thread in &mut code {
        thread.push(Instr::Exit);
    }
    code
}

/// What a whole search found.
#[derive(Debug, Default)]
pub(crate) struct Explored {
    pub executions: u64,
    pub outcomes: BTreeSet<Outcome>,
    pub schedules: HashSet<Vec<Choice>>,
    pub exhausted: bool,
    pub note: Option<String>,
    /// The notes after the last execution.
    pub notes: Vec<String>,
}

/// Runs executions the way the search loop does (execution 0 always; later ones while the
/// strategy is not exhausted), execution `k` on `make(k)`, at most `max_executions`.
pub(crate) fn explore(
    strategy: &mut dyn Strategy,
    mut make: impl FnMut(u64) -> Sim,
    max_executions: u64,
) -> Result<Explored, Divergence> {
    let mut found = Explored::default();
    let mut status = Status::default();
    for k in 0..max_executions {
        if status.exhausted.is_some() {
            break;
        }
        let mut program = make(k);
        strategy.begin_execution(Start::at(k));
        let mut taken = Vec::new();
        while (taken.len() as u64) < MAX_STEPS {
            let choices = program.choices();
            if choices.is_empty() {
                break;
            }
            match strategy.choose(taken.len() as u64, &choices) {
                Ok(i) => {
                    program.apply(&choices[i]);
                    taken.push(choices[i]);
                }
                Err(d) => {
                    let _ = strategy.end_execution(&Feedback::without_coverage(&taken));
                    return Err(d);
                }
            }
        }
        status = strategy.end_execution(&Feedback::without_coverage(&taken));
        found.executions += 1;
        found.outcomes.insert(program.outcome());
        found.schedules.insert(taken);
    }
    found.exhausted = status.exhausted.is_some();
    found.note = status.exhausted;
    found.notes = status.notes;
    Ok(found)
}

/// Explores `program` until exhausted (panics if `limit` executions do not suffice).
pub(crate) fn exhaust<S: Strategy + Describe>(strategy: &mut S, program: &Sim, limit: u64) -> Explored {
    let found = explore(strategy, |_| program.clone(), limit)
        .unwrap_or_else(|d| panic!("diverged on a fixed program: {d}"));
    assert!(
        found.exhausted,
        "{} not exhausted after {limit} executions",
        strategy.info().spec
    );
    found
}

/// A small random program: 2 or 3 threads of one or two blocks each (critical sections on one of
/// two mutexes, nested locks in either order, unprotected accesses to one of two variables,
/// yields, timed locks, sleeps and picks), at most `budget` instructions in all; with three
/// threads, half the time thread 0 spawns thread 2 first and joins it last.
pub(crate) fn random_program(seed: u64, budget: usize) -> Sim {
    const M: [u64; 2] = [0x100, 0x108];
    const V: [u64; 2] = [0x200, 0x208];
    let mut rng = Rng::new(seed);
    let mut code = vec![Vec::new(); 2 + rng.index(2)];
    let mut total = 0;
    for thread in code.iter_mut() {
        for _ in 0..1 + rng.index(2) {
            let (m, n, v) = (M[rng.index(2)], M[rng.index(2)], V[rng.index(2)]);
            let access = match rng.index(3) {
                0 => Instr::Load(v),
                1 => Instr::Store(v, 1),
                _ => Instr::Write(v, 1 + rng.index(3) as i64),
            };
            let block: Vec<Instr> = match rng.index(8) {
                0 | 1 => vec![Instr::Lock(m), access, Instr::Unlock(m)],
                2 if m != n => vec![
                    Instr::Lock(m),
                    Instr::Lock(n),
                    Instr::Unlock(n),
                    Instr::Unlock(m),
                ],
                2..=4 => vec![access],
                5 => vec![Instr::TimedLock(m), access, Instr::Unlock(m)],
                6 => vec![Instr::Yield, access],
                _ if rng.index(2) == 0 => vec![Instr::Sleep, access],
                _ => vec![Instr::Pick(v, 2)],
            };
            if total + block.len() <= budget {
                total += block.len();
                thread.extend(block);
            }
        }
    }
    if code.len() == 3 && rng.index(2) == 0 {
        code[0].insert(0, Instr::Spawn(2));
        code[0].push(Instr::Join(2));
    }
    Sim::new(code)
}

/// Like [`random_program`], over plain memory: lost-update style read-then-write blocks on two
/// variables (`MemRead`/`MemAdd`), some inside a mutex, some interleaved with sync operations
/// that touch no variable.
pub(crate) fn random_memory_program(seed: u64, budget: usize) -> Sim {
    const M: [u64; 2] = [0x100, 0x108];
    const V: [u64; 2] = [0x300, 0x308];
    let mut rng = Rng::new(seed);
    let mut code = vec![Vec::new(); 2 + rng.index(2)];
    let mut total = 0;
    for thread in code.iter_mut() {
        for _ in 0..1 + rng.index(2) {
            let (m, v) = (M[rng.index(2)], V[rng.index(2)]);
            let block: Vec<Instr> = match rng.index(5) {
                0 => vec![Instr::Lock(m), Instr::MemRead(v), Instr::MemAdd(v, 1), Instr::Unlock(m)],
                1 => vec![Instr::MemRead(v), Instr::Lock(m), Instr::Unlock(m), Instr::MemAdd(v, 1)],
                2 => vec![Instr::MemRead(v)],
                3 => vec![Instr::MemAdd(v, 1 + rng.index(3) as i64)],
                _ => vec![Instr::MemRead(v), Instr::MemAdd(v, 1)],
            };
            if total + block.len() <= budget {
                total += block.len();
                thread.extend(block);
            }
        }
    }
    Sim::new(code)
}

/// Where [`reorder`] and [`two_stage`]'s checker copies the first and the second value it read.
const SEEN_FIRST: u64 = 0x300;
const SEEN_SECOND: u64 = 0x400;

/// A reorder bug in miniature (tests/fixtures/mem_reorder.c): `setters` threads each write `a`
/// then `b`; a checker, which yields once per setter first (it starts late), reads `a` then `b`.
/// Bug ([`torn`]): it saw a written `a` and an unwritten `b`.
pub(crate) fn reorder(setters: usize) -> Sim {
    use Instr::*;
    let (a, b) = (0x100, 0x200);
    let mut code: Vec<Vec<Instr>> = (0..setters).map(|_| vec![MemAdd(a, 1), MemAdd(b, 1)]).collect();
    code.push(vec![Yield; setters].into_iter().chain([MemRead(a), MemAdd(SEEN_FIRST, 0), MemRead(b), MemAdd(SEEN_SECOND, 0)]).collect());
    Sim::new(code)
}

/// A two-stage bug in miniature (tests/fixtures/mem_two_stage.c): `writers` threads each set
/// `first` under one mutex, then `second = first + 1` under another; a late reader reads `first`
/// under the first mutex and `second` under the second. Bug ([`torn`]): it saw stage 1 without
/// stage 2.
pub(crate) fn two_stage(writers: usize) -> Sim {
    use Instr::*;
    let (m1, m2, first, second) = (0x10, 0x20, 0x100, 0x200);
    let mut code: Vec<Vec<Instr>> = (0..writers)
        .map(|_| vec![Lock(m1), MemAdd(first, 1), Unlock(m1), Lock(m2), MemRead(first), MemAdd(second, 1), Unlock(m2)])
        .collect();
    let reader = [Lock(m1), MemRead(first), MemAdd(SEEN_FIRST, 0), Unlock(m1), Lock(m2), MemRead(second), MemAdd(SEEN_SECOND, 0), Unlock(m2)];
    code.push(vec![Yield; writers].into_iter().chain(reader).collect());
    Sim::new(code)
}

/// Whether an execution of [`reorder`] or [`two_stage`] showed its bug.
pub(crate) fn torn(sim: &Sim) -> bool {
    let var = |v| sim.vars.get(&v).copied().unwrap_or(0);
    var(SEEN_FIRST) > 0 && var(SEEN_SECOND) == 0
}

/// Executions (1-based) until `strategy` first shows `program`'s [`torn`] bug, up to `limit`.
pub(crate) fn executions_to_torn(strategy: &mut dyn Strategy, program: &Sim, limit: u64) -> Option<u64> {
    let mut search = super::testkit::Search::new();
    (0..limit)
        .find(|&k| {
            let mut sim = program.clone();
            let (_, finished) = search.run(strategy, k, &mut sim, MAX_STEPS);
            assert!(finished, "execution {k} did not finish");
            torn(&sim)
        })
        .map(|k| k + 1)
}
