//! `dpor`: stateless dynamic partial-order reduction (Flanagan & Godefroid, "Dynamic
//! Partial-Order Reduction for Model Checking Software", POPL 2005) with sleep sets (Godefroid,
//! "Partial-Order Methods for the Verification of Concurrent Systems", LNCS 1032, 1996), races
//! reversed with source sets (Abdulla, Aronis, Jonsson & Sagonas, "Optimal Dynamic Partial Order
//! Reduction", POPL 2014).
//!
//! Two schedules that differ only in the order of adjacent *independent* steps reach the same
//! state, so only one needs to run.
//!
//! **What "exhausted" proves.** dara sees scheduling points, not plain memory accesses, unless
//! the program is built with memory instrumentation (the ThreadSanitizer ABI with
//! `libdara_tsan.so`, which also covers atomics, or sancov `trace-loads`/`trace-stores`) and run
//! with `--preempt-on memory`, which makes accesses to shared written granules scheduling points;
//! the search reports an exhausted space as a proof only then (`crate::visibility`). Without them DPOR
//! is exhaustive only for programs whose shared memory is ordered by the synchronisation dara
//! sees (data-race-free between scheduling points), and a bug that needs a race on plain memory
//! can be missed: `tests/fixtures/order_violation.c` (the child reads a pointer the parent writes
//! without synchronisation) is found by `dfs` in 3 executions and never by `dpor` on a plain
//! build, which considers the parent's unrelated log lock independent of the child's start; on a
//! sancov build with memory points the read and the write are dependent steps and `dpor` finds
//! it (crates/tools/tests/memory.rs). Like [`dfs`](super::dfs) this is a stateless depth-first
//! search that replays a prefix of decisions every execution; unlike it, a node only gets
//! alternatives (its *backtrack set*) when an execution shows that a later step of some thread
//! races with the step taken there. After each execution the schedule is analysed with vector
//! clocks over happens-before (program order, dependence between the steps taken, and
//! `ThreadCreate` → the child's `ThreadStart`), in the `races` module. Sleep sets skip choices
//! already explored from an ancestor and independent of every step taken since.
//!
//! Dependence ([`dependent`]) between steps of different threads is decided from the choices:
//!
//! * two operations on synchronisation objects (mutex, rwlock, condvar, barrier, once,
//!   semaphore, futex word) with the same object address (in any process: conservative);
//! * `CondWait` with *any* synchronisation operation: it also releases and re-takes a mutex that
//!   its choice does not name;
//! * `ThreadExit` of t with `ThreadJoin` of t;
//! * a `Timeout` with every step: it moves the shared virtual clock, which every later step can
//!   observe. Conservative;
//! * `ProcessExit` (it ends every thread of the process) with every step;
//! * an injected fault (crash, partition, ...) with every step. Conservative;
//! * two memory accesses (`MemoryRead`/`MemoryWrite`, `--preempt-on memory`) to the same 8-byte
//!   granule, at least one a write. A memory access is independent of every synchronisation
//!   operation: the sync object's own memory is never watched (it is touched by libc, which is
//!   not instrumented) and what the lock protects is ordered by the lock's own dependences;
//! * nothing else: `ThreadStart`, `ThreadCreate`, `ThreadDetach`, `ProcessStart`, `Yield` and
//!   `ClockRead` are independent of other threads' steps (a clock read's value does depend on
//!   how many steps ran before it; we ignore those tick differences).
//!
//! Where we deviate, and why:
//!
//! * **Choices, not threads.** A thread may offer several choices at once (Run or Timeout,
//!   several `CondSignal` waiters). Backtrack sets hold threads, as in the papers, and exploring
//!   a thread at a node explores *every* choice it offers there; a thread's next step races with
//!   a step if any choice it offered since its previous step depends on it.
//! * **Hidden pending operations.** Flanagan & Godefroid check, at every state, the next step
//!   of every thread, enabled or not; source-DPOR leaves blocking to its lock model. dara offers
//!   nothing for a blocked thread, so its next operation is known only once it is offered. The
//!   analysis therefore runs after the execution and checks each step against every state since
//!   the thread's previous step, which is what the per-state checks would have done. A thread
//!   left blocked at the end on an operation never offered is taken to depend on everything.
//! * **Source sets, not Flanagan & Godefroid's rule.** Their rule adds the racing thread itself
//!   when it is enabled; with sleep sets that misses schedules when that thread is asleep there
//!   and its step needs another thread's step first (a test shows one). We add an *initial* of
//!   the reversed sequence instead, as source-DPOR does, without its wakeup trees.
//! * **No co-enabledness.** Every dependent pair is treated as possibly co-enabled, which only
//!   adds backtracking.
//! * **Sleep-set blocked executions** (every offered choice asleep) cannot be abandoned, since
//!   the program is already running: they run to the end with the default choice, and only
//!   their prefix up to the blocked state is analysed.
//!
//! Limitation: the analysis sees only the operations dara schedules. Memory the program touches
//! between two scheduling points (plain or atomic accesses, including the uncontended fast path
//! of futex-based locks such as Rust's `std::sync::Mutex`) is invisible, so schedules that differ
//! only in the order of such code are taken as equivalent and may not all run. `dfs` runs every
//! order of the scheduled steps, and with them every order of the code between them.
use dara_abi::Op;
use dara_model::choice::{ChoiceObject, ThreadId};
use dara_model::{Choice, ChoiceKind, Decide, Divergence};

use super::base::default_index;
use super::prefix::{Path, Recorded};
use super::{Describe, Feedback, Info, Order, Start, Status, Strategy};

mod races;

pub struct Dpor {
    /// The decisions of the current (or last) execution, with their backtrack and sleep sets.
    path: Path<Node>,
    /// Thread of the last decision, for the default choice.
    last: Option<ThreadId>,
    /// Depth at which the current execution found every offered choice asleep; from there on
    /// it runs outside the tree.
    blocked: Option<usize>,
    executions: u64,
    exhausted: bool,
    /// Executions whose race analysis ran out of its work budget (see [`races::Work`]).
    analyses_cut: u64,
    /// Work budget of one execution's analysis.
    analysis_work: u64,
}

struct Node {
    choices: Vec<Choice>,
    /// Index taken by the current execution.
    taken: usize,
    /// Indices to explore here.
    backtrack: Vec<bool>,
    /// Indices explored, or being explored (`taken`).
    done: Vec<bool>,
    /// Choices explored from an ancestor and independent of every step taken since: taking
    /// them here would only reorder independent steps.
    sleep: Vec<Choice>,
}

impl Node {
    fn asleep(&self, i: usize) -> bool {
        self.sleep.contains(&self.choices[i])
    }

    /// Sleep set of the child reached by `taken`.
    fn child_sleep(&self) -> Vec<Choice> {
        let t = self.choices[self.taken];
        let explored = (0..self.choices.len())
            .filter(|&i| self.done[i] && i != self.taken)
            .map(|i| &self.choices[i]);
        let mut out: Vec<Choice> = Vec::new();
        for z in self.sleep.iter().chain(explored) {
            if !dependent(z, &t) && !out.contains(z) {
                out.push(*z);
            }
        }
        out
    }

    /// Takes the next unexplored backtrack choice here, if there is one.
    fn next_branch(&mut self) -> bool {
        let next = (0..self.choices.len()).find(|&i| self.backtrack[i] && !self.done[i] && !self.asleep(i));
        if let Some(i) = next {
            self.done[i] = true;
            self.taken = i;
        }
        next.is_some()
    }
}

impl Recorded for Node {
    fn offered(&self) -> &[Choice] {
        &self.choices
    }

    fn taken(&self) -> usize {
        self.taken
    }
}

impl Default for Dpor {
    fn default() -> Self {
        Dpor::new()
    }
}

impl Dpor {
    pub fn new() -> Dpor {
        Dpor {
            path: Path::new(),
            last: None,
            blocked: None,
            executions: 0,
            exhausted: false,
            analyses_cut: 0,
            analysis_work: races::ANALYSIS_WORK,
        }
    }

    /// A search whose race analyses may each visit only `events` events (tests).
    #[cfg(test)]
    fn with_analysis_work(events: u64) -> Dpor {
        Dpor { analysis_work: events, ..Dpor::new() }
    }

    /// Whether every schedule the race analyses asked for has run.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    fn fresh(&mut self, choices: &[Choice]) -> usize {
        let sleep = self.path.last().map(Node::child_sleep).unwrap_or_default();
        let n = choices.len();
        let mut node = Node {
            choices: choices.to_vec(),
            taken: default_index(self.last, choices),
            backtrack: vec![false; n],
            done: vec![false; n],
            sleep,
        };
        let awake: Vec<usize> = (0..n).filter(|&i| !node.asleep(i)).collect();
        match awake.first() {
            None => self.blocked = Some(self.path.depth()),
            Some(&first) => {
                if node.asleep(node.taken) {
                    node.taken = first;
                }
                let thread = choices[node.taken].thread;
                for &i in awake.iter().filter(|&&i| choices[i].thread == thread) {
                    node.backtrack[i] = true;
                }
                node.done[node.taken] = true;
            }
        }
        let taken = node.taken;
        self.path.push(node);
        taken
    }

    /// What an exhausted search proved.
    fn proved(&self) -> String {
        match self.analyses_cut {
            0 => format!(
                "explored all schedules up to reordering of independent steps in {} executions",
                self.executions
            ),
            cut => format!(
                "explored every schedule the race analysis asked for in {} executions, but the analysis of {cut} of them was cut short (too many steps to analyse within its budget), so this is not a proof",
                self.executions
            ),
        }
    }

    fn notes(&self) -> Vec<String> {
        match self.analyses_cut {
            0 => Vec::new(),
            cut => vec![format!("dpor: the race analysis of {cut} executions was cut short (too many steps): fewer schedules than a full analysis would ask for were explored")],
        }
    }
}

impl Decide for Dpor {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        debug_assert!(!choices.is_empty(), "the model offers at least one choice");
        let index = match self.path.replayed(step, choices)? {
            Some(index) => index,
            None if self.blocked.is_some() => {
                self.path.untracked();
                default_index(self.last, choices)
            }
            None => self.fresh(choices),
        };
        self.last = Some(choices[index].thread);
        Ok(index)
    }
}

impl Strategy for Dpor {
    fn begin_execution(&mut self, start: Start) {
        self.path.begin(start.execution);
        self.last = None;
        self.blocked = None;
    }

    fn end_execution(&mut self, feedback: &Feedback<'_>) -> Status {
        if !self.path.end(feedback.steps()) {
            return Status { exhausted: None, notes: self.notes() };
        }
        self.executions += 1;
        let end = self.blocked.unwrap_or(self.path.len());
        let mut work = races::Work::new(self.analysis_work);
        races::analyse(self.path.nodes_mut(), end, &mut work);
        self.analyses_cut += u64::from(work.ran_out());
        self.path.truncate(end);
        self.exhausted = !self.path.backtrack(Node::next_branch);
        Status { exhausted: self.exhausted.then(|| self.proved()), notes: self.notes() }
    }
}

impl Describe for Dpor {
    fn info(&self) -> Info {
        Info { spec: "dpor".to_string(), order: Order::Systematic }
    }
}

/// Whether two steps may not commute (see the module doc). Steps of one thread always depend.
pub fn dependent(a: &Choice, b: &Choice) -> bool {
    if a.thread == b.thread || matches!(a.kind, ChoiceKind::Timeout | ChoiceKind::Fault | ChoiceKind::Interrupt) || matches!(b.kind, ChoiceKind::Timeout | ChoiceKind::Fault | ChoiceKind::Interrupt) {
        return true;
    }
    if ends_everything(a.op) || ends_everything(b.op) {
        return true;
    }
    let joins = |x: &Choice, y: &Choice| {
        x.op == Op::ThreadExit && y.op == Op::ThreadJoin && y.object() == ChoiceObject::Thread(x.thread)
    };
    if joins(a, b) || joins(b, a) {
        return true;
    }
    // Network operations act on kernel objects whose peers the choice does not name: any two
    // are treated as dependent (sound, coarse).
    if a.op.is_net() && b.op.is_net() {
        return true;
    }
    if is_memory_access(a.op) || is_memory_access(b.op) {
        return is_memory_access(a.op)
            && is_memory_access(b.op)
            && a.obj >> dara_abi::access::GRANULE_SHIFT == b.obj >> dara_abi::access::GRANULE_SHIFT
            && (a.op == Op::MemoryWrite || b.op == Op::MemoryWrite);
    }
    on_sync_object(a.op)
        && on_sync_object(b.op)
        && (a.obj == b.obj || a.op == Op::CondWait || b.op == Op::CondWait)
}

fn is_memory_access(op: Op) -> bool {
    matches!(op, Op::MemoryRead | Op::MemoryWrite)
}

fn ends_everything(op: Op) -> bool {
    // Process operations touch other processes' lives (a wait sees exits, a kill ends a
    // process): treated as dependent on everything, which is safe, not minimal. A file lock's
    // retry is too: any other step may be the one that released the lock (file locks are not
    // modelled, see the scheduler's model/file_locks.rs).
    matches!(op, Op::ProcessExit | Op::Unsupported | Op::ProcessFork | Op::ProcessExec | Op::ProcessWait | Op::ProcessKill | Op::FileLock)
}

fn on_sync_object(op: Op) -> bool {
    use Op::*;
    matches!(
        op,
        MutexLock
            | MutexTryLock
            | MutexUnlock
            | RwReadLock
            | RwWriteLock
            | RwTryReadLock
            | RwTryWriteLock
            | RwUnlock
            | CondWait
            | CondSignal
            | CondBroadcast
            | BarrierInit
            | BarrierWait
            | OnceBegin
            | OnceDone
            | SemInit
            | SemWait
            | SemTryWait
            | SemPost
            | FutexWait
            | FutexWake
    )
}

#[cfg(test)]
mod tests;
