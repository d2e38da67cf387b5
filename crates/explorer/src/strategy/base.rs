//! The base scheduler of the systematic strategies: the schedule `dfs` takes when it departs from
//! nothing, and the choice `dpor` takes at a fresh node. Bounded search counts departures from it
//! (Musuvathi & Qadeer, PLDI 2007, "a nonpreemptive scheduler"; Emmi, Qadeer & Rakamarić, POPL
//! 2011, "a deterministic scheduler").
//!
//! Keep running the thread that ran last while it *can continue* (offers a `Run` that is not a
//! `sched_yield`); otherwise the lowest thread id, preferring threads that offer a `Run` over
//! those that only offer a `Timeout` (timers fire when nothing else can run, as time would). After
//! a yield, the next thread in round-robin order after the yielder, so that a `sched_yield` spin
//! loop hands over instead of spinning until the step bound (see `dfs`'s "where we deviate").
use dara_abi::Op;
use dara_model::choice::ThreadId;
use dara_model::{Choice, ChoiceKind};

fn offers_run(choices: &[Choice], t: ThreadId, pred: impl Fn(Op) -> bool) -> bool {
    choices.iter().any(|c| c.thread == t && c.kind == ChoiceKind::Run && pred(c.op))
}

/// `t` offers a `Run` that is not a yield: running something else preempts it.
pub(super) fn can_continue(choices: &[Choice], t: ThreadId) -> bool {
    offers_run(choices, t, |op| op != Op::Yield)
}

pub(super) fn is_yielding(choices: &[Choice], t: ThreadId) -> bool {
    offers_run(choices, t, |op| op == Op::Yield)
}

/// Threads offering a choice, ascending (choices are ordered by thread).
pub(super) fn threads(choices: &[Choice]) -> Vec<ThreadId> {
    let mut out: Vec<ThreadId> = choices.iter().map(|c| c.thread).collect();
    out.dedup();
    out
}

/// The base scheduler's thread, `prev` being the thread of the last decision.
pub(super) fn base_thread(prev: Option<ThreadId>, choices: &[Choice]) -> ThreadId {
    if let Some(p) = prev.filter(|&p| can_continue(choices, p)) {
        return p;
    }
    let all = threads(choices);
    let yielder = prev.filter(|&p| is_yielding(choices, p) && all.len() > 1);
    let others: Vec<ThreadId> = all.iter().copied().filter(|&t| Some(t) != yielder).collect();
    let runnable: Vec<ThreadId> = others.iter().copied().filter(|&t| offers_run(choices, t, |_| true)).collect();
    let pool = if runnable.is_empty() { others } else { runnable };
    let first = pool.first().copied().unwrap_or_default();
    match yielder {
        Some(y) => pool.iter().copied().find(|&t| t > y).unwrap_or(first),
        None => first,
    }
}

/// The base scheduler's choice: the first choice of its thread (a `Run` if it offers one).
pub(super) fn default_index(prev: Option<ThreadId>, choices: &[Choice]) -> usize {
    let t = base_thread(prev, choices);
    choices.iter().position(|c| c.thread == t).unwrap_or(0)
}
