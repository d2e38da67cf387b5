//! `dara export --format shiviz|json TRACE -o FILE`: a trace's steps for other tools.
//!
//! * `shiviz`: a log ShiViz (Beschastnikh et al.) draws as a space-time diagram: a host per thread
//!   (`dara` for the faults dara injected), each step an event with a vector clock. The clocks
//!   come from the happens-before the trace shows: program order within a thread; a lock's
//!   latest release (mutex, rwlock unlock, semaphore post, condition signal, futex wake) before
//!   the next acquisition of the same object (lock, wait, held); a thread's creation before its
//!   start and its exit before the join that waits for it; the latest send on an endpoint before
//!   a receive or accept on its peer (the model cannot say which bytes a receive took: a send it
//!   did not need may count, one it needed from an earlier, unordered sender may not).
//!   [`causes`] is that relation, once.
//!   Not yet edges: fork before a child's start and a process's exit before its wait.
//! * `json`: the steps as an array (step, virtual time, thread, operation, how it moved on, the
//!   object, the result) and the outcome, for scripts.
//!
//! Both read the trace alone (no re-execution): objects are named by address, not symbol.
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use dara_model::choice::{ChoiceObject, ThreadId, FAULT_THREAD};
use dara_model::trace::{Step, Trace};
use dara_model::ChoiceKind;
use dara_abi::Op;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// `shiviz` (a ShiViz log: a host per thread, vector clocks from happens-before) or `json`.
    #[arg(long, default_value = "shiviz")]
    pub format: String,
    /// The trace to export.
    pub trace: PathBuf,
    /// Where to write it (stdout without).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

pub fn run(args: ExportArgs) -> anyhow::Result<u8> {
    let trace = dara_model::trace::read_file(&args.trace)?;
    let text = match args.format.as_str() {
        "shiviz" => shiviz(&trace),
        "json" => serde_json::to_string_pretty(&json(&trace)).context("cannot encode the steps")? + "\n",
        other => anyhow::bail!("--format {other}: dara exports `shiviz` or `json`"),
    };
    match &args.output {
        Some(path) => std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(0)
}

/// A vector clock: host -> events of that host known to have happened before (or be) this one.
pub type VectorClock = BTreeMap<String, u64>;

fn host(thread: ThreadId) -> String {
    if thread == FAULT_THREAD {
        "dara".into()
    } else {
        format!("t{thread}")
    }
}

fn join(into: &mut VectorClock, other: &VectorClock) {
    for (h, &n) in other {
        let e = into.entry(h.clone()).or_insert(0);
        *e = (*e).max(n);
    }
}

/// Why one step waited for an earlier one of another thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Why {
    /// A release (unlock, post, signal, wake) before the next acquisition of the same object.
    Lock,
    /// A thread's creation before its start.
    Start,
    /// A thread's exit before the join that waited for it.
    Join,
    /// A send or connect on an endpoint before a receive or accept on its peer.
    Message,
}

/// Each step's latest cause: the earlier step it was ordered after by something other than its
/// own thread's program order (see the module doc), and why. The one definition of the trace's
/// happens-before, which the vector clocks and the timeline's arrows both draw from.
pub fn causes(steps: &[Step]) -> Vec<Option<(usize, Why)>> {
    let mut released: BTreeMap<u64, usize> = BTreeMap::new();
    let mut created: BTreeMap<ThreadId, Vec<usize>> = BTreeMap::new();
    let mut exited: BTreeMap<ThreadId, usize> = BTreeMap::new();
    let mut sent_to: BTreeMap<u64, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let c = &step.choice;
        let moved = c.kind != ChoiceKind::Fault && step.result.is_some();
        let cause = match (c.op, c.object()) {
            (Op::MutexLock | Op::MutexTryLock | Op::RwReadLock | Op::RwWriteLock | Op::RwTryReadLock | Op::RwTryWriteLock | Op::Held | Op::SemWait | Op::SemTryWait | Op::CondWait | Op::FutexWait | Op::BarrierWait, ChoiceObject::Address(a)) if moved => released.get(&a).map(|&f| (f, Why::Lock)),
            (Op::ThreadStart, ChoiceObject::Thread(creator)) => created.get_mut(&creator).filter(|v| !v.is_empty()).map(|v| (v.remove(0), Why::Start)),
            (Op::ThreadJoin, ChoiceObject::Thread(t)) if moved => exited.get(&t).map(|&f| (f, Why::Join)),
            (Op::NetRecv | Op::NetAccept, ChoiceObject::Net(n)) if moved => n.endpoint.and_then(|e| sent_to.get(&e)).map(|&f| (f, Why::Message)),
            _ => None,
        };
        out.push(cause);
        match (c.op, c.object()) {
            (Op::MutexUnlock | Op::RwUnlock | Op::SemPost | Op::CondSignal | Op::CondBroadcast | Op::FutexWake | Op::BarrierWait, ChoiceObject::Address(a)) => {
                released.insert(a, i);
            }
            (Op::ThreadCreate, _) => created.entry(c.thread).or_default().push(i),
            (Op::ThreadExit, _) => {
                exited.insert(c.thread, i);
            }
            (Op::NetSend | Op::NetConnect, ChoiceObject::Net(n)) => {
                if let Some(peer) = n.peer {
                    sent_to.insert(peer, i);
                }
            }
            _ => {}
        }
    }
    out
}

/// Each step's vector clock: its thread's previous clock, one more event of its own, joined with
/// its cause's clock ([`causes`]; a release's clock holds every earlier release of the object it
/// was ordered after, so the latest cause carries the others).
pub fn vector_clocks(steps: &[Step]) -> Vec<VectorClock> {
    let mut threads: BTreeMap<ThreadId, VectorClock> = BTreeMap::new();
    let mut out: Vec<VectorClock> = Vec::with_capacity(steps.len());
    for (step, cause) in steps.iter().zip(causes(steps)) {
        let mut clock = threads.remove(&step.choice.thread).unwrap_or_default();
        *clock.entry(host(step.choice.thread)).or_insert(0) += 1;
        if let Some((from, _)) = cause {
            let earlier = out[from].clone();
            join(&mut clock, &earlier);
        }
        out.push(clock.clone());
        threads.insert(step.choice.thread, clock);
    }
    out
}

/// The ShiViz log: the parsing expression, an empty execution delimiter, then two lines a step.
pub fn shiviz(trace: &Trace) -> String {
    let mut out = String::from("(?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})\n\n");
    // The outcome is dara's last event, after everything: every host's last clock.
    let mut last = VectorClock::new();
    for (i, (step, clock)) in trace.steps.iter().zip(vector_clocks(&trace.steps)).enumerate() {
        out += &format!("{}\n{} {}\n", event_text(i, step), host(step.choice.thread), serde_json::to_string(&clock).unwrap_or_default());
        join(&mut last, &clock);
    }
    *last.entry("dara".into()).or_insert(0) += 1;
    out += &format!("outcome: {}\ndara {}\n", trace.outcome.summary(), serde_json::to_string(&last).unwrap_or_default());
    out
}

fn how(kind: ChoiceKind) -> &'static str {
    match kind {
        ChoiceKind::Run => "run",
        ChoiceKind::Timeout => "timeout",
        ChoiceKind::Interrupt => "signal",
        ChoiceKind::Fault => "fault",
    }
}

fn event_text(i: usize, step: &Step) -> String {
    let c = &step.choice;
    let result = step.result.map_or("blocks".to_string(), |r| format!("-> {r}"));
    let kind = if c.kind == ChoiceKind::Run { String::new() } else { format!(" ({})", how(c.kind)) };
    format!("step {i} at {}: {}{kind} {} {result}", crate::listing::format_vtime(step.now_ns), c.op.name(), object_text(c))
}

fn object_text(c: &dara_model::Choice) -> String {
    match c.object() {
        ChoiceObject::None => String::new(),
        ChoiceObject::Address(a) => format!("{a:#x}"),
        ChoiceObject::Thread(t) => format!("thread {t}"),
        ChoiceObject::Net(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

#[derive(serde::Serialize)]
struct JsonStep {
    step: usize,
    vtime_ns: u64,
    thread: String,
    operation: &'static str,
    how: &'static str,
    object: String,
    /// The result handed to the thread; null when it blocked.
    result: Option<i64>,
    clock: VectorClock,
}

#[derive(serde::Serialize)]
struct JsonTrace<'a> {
    command: &'a [String],
    outcome: crate::results::OutcomeEntry,
    steps: Vec<JsonStep>,
}

fn json(trace: &Trace) -> JsonTrace<'_> {
    let steps = trace
        .steps
        .iter()
        .zip(vector_clocks(&trace.steps))
        .enumerate()
        .map(|(i, (s, clock))| JsonStep { step: i, vtime_ns: s.now_ns, thread: host(s.choice.thread), operation: s.choice.op.name(), how: how(s.choice.kind), object: object_text(&s.choice), result: s.result, clock })
        .collect();
    JsonTrace { command: &trace.header.command, outcome: crate::results::OutcomeEntry::of(&trace.outcome), steps }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dara_model::Choice;

    fn step(thread: ThreadId, op: Op, obj: u64) -> Step {
        Step { choice: Choice { thread, kind: ChoiceKind::Run, alt: 0, op, obj }, result: Some(0), now_ns: 0 }
    }

    #[test]
    fn a_lock_orders_its_holders_and_a_join_its_thread() {
        let steps = [
            step(0, Op::ThreadCreate, 0),
            step(1, Op::ThreadStart, 0), // created by thread 0
            step(1, Op::MutexLock, 0x40),
            step(1, Op::MutexUnlock, 0x40),
            step(0, Op::MutexLock, 0x40),
            step(1, Op::ThreadExit, 0),
            step(0, Op::ThreadJoin, 1),
        ];
        let c = vector_clocks(&steps);
        let vc = |i: usize| c[i].iter().map(|(h, n)| format!("{h}:{n}")).collect::<Vec<_>>().join(",");
        assert_eq!(vc(1), "t0:1,t1:1", "the start knows its creation");
        assert_eq!(vc(4), "t0:2,t1:3", "the lock knows the unlock before it");
        assert_eq!(vc(6), "t0:3,t1:4", "the join knows the exit");
    }

    #[test]
    fn unrelated_threads_stay_concurrent_and_local_clocks_count_by_one() {
        let steps = [step(1, Op::MutexLock, 0x40), step(2, Op::MutexLock, 0x80), step(1, Op::MutexUnlock, 0x40), step(2, Op::Yield, 0)];
        let c = vector_clocks(&steps);
        assert!(!c[3].contains_key("t1"), "thread 2 never learned of thread 1: {:?}", c[3]);
        assert_eq!((c[2]["t1"], c[3]["t2"]), (2, 2));
    }
}
