//! What `rf` learns from an execution: its events, abstracted so that they repeat across
//! executions, and the reads-from pairs among them.
//!
//! RFF names an event by its program location. A [`Choice`] carries no location, so an
//! [`Event`] stands in for it with what the choice does (`op`), where (the 8-byte granule of a
//! memory access, the object of anything else) and how its thread got there: a hash of the
//! memory accesses (op, granule) the thread made before. Like a location it is blind to which
//! thread runs it, so 100 threads running the same code share their events; unlike one, a
//! loop's iterations are distinct events (bounded by the program's own length), and two threads
//! that lock the same mutex after different accesses (a writer after writing `first`, a reader
//! after reading it) are different events, which is what lets `rf` hold back one and not the
//! other.
//!
//! A read *reads from* the last write to its granule before it (executions are sequentially
//! consistent: one thread runs at a time), or from the initial value.
use std::collections::{BTreeMap, BTreeSet};

use dara_abi::access::GRANULE_SHIFT;
use dara_abi::Op;
use dara_model::choice::ThreadId;
use dara_model::Choice;

/// Most pairs [`Knowledge::candidates`] lists.
pub(crate) const MAX_CANDIDATES: usize = 100_000;

/// A step of some thread, as it recurs across executions (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Event {
    pub op: Op,
    /// The granule of a memory access; the choice's object otherwise.
    pub obj: u64,
    /// Hash of the memory accesses (op, granule) the thread made before this step.
    pub path: u64,
}

impl Event {
    pub fn is_read(&self) -> bool {
        self.op == Op::MemoryRead
    }

    pub fn is_write(&self) -> bool {
        self.op == Op::MemoryWrite
    }
}

fn is_memory(op: Op) -> bool {
    matches!(op, Op::MemoryRead | Op::MemoryWrite)
}

/// `path` followed by `access` (FNV-1a over the op and granule: fixed, so paths repeat across
/// executions and processes).
fn extend(path: u64, access: Event) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = if path == 0 { 0xcbf2_9ce4_8422_2325 } else { path };
    for word in [access.op as u64, access.obj] {
        for byte in word.to_le_bytes() {
            h = (h ^ u64::from(byte)).wrapping_mul(PRIME);
        }
    }
    h
}

/// A read and the write it read from (`None`: the initial value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pair {
    pub write: Option<Event>,
    pub read: Event,
}

/// Follows one execution's granted choices in order: names each [`Event`] and knows which mutexes
/// each thread holds (by the events that locked them).
#[derive(Default)]
pub(crate) struct Tracker {
    paths: BTreeMap<ThreadId, u64>,
    held: BTreeMap<ThreadId, Vec<Event>>,
    last_write: BTreeMap<u64, Event>,
}

impl Tracker {
    /// The event `c` would be if granted now.
    pub fn event(&self, c: &Choice) -> Event {
        let obj = if is_memory(c.op) { c.obj >> GRANULE_SHIFT } else { c.obj };
        Event { op: c.op, obj, path: self.paths.get(&c.thread).copied().unwrap_or(0) }
    }

    /// `c` was granted. Returns its event, the mutexes its thread held (outermost first), and,
    /// for a read, the pair it formed.
    pub fn granted(&mut self, c: &Choice) -> (Event, Vec<Event>, Option<Pair>) {
        let event = self.event(c);
        let held = self.held.get(&c.thread).cloned().unwrap_or_default();
        let mut pair = None;
        match c.op {
            Op::MemoryRead => pair = Some(Pair { write: self.last_write.get(&event.obj).copied(), read: event }),
            Op::MemoryWrite => {
                self.last_write.insert(event.obj, event);
            }
            Op::MutexLock if c.kind == dara_model::ChoiceKind::Run => self.held.entry(c.thread).or_default().push(event),
            Op::MutexUnlock => self.held.entry(c.thread).or_default().retain(|l| l.obj != c.obj),
            _ => {}
        }
        if is_memory(c.op) {
            let path = self.paths.entry(c.thread).or_default();
            *path = extend(*path, event);
        }
        (event, held, pair)
    }
}

/// Everything the search has seen: reads-from pairs, the reads and writes of each granule, and
/// the mutexes held around each memory event.
#[derive(Default)]
pub(crate) struct Knowledge {
    pub seen: BTreeSet<Pair>,
    pub reads: BTreeMap<u64, BTreeSet<Event>>,
    pub writes: BTreeMap<u64, BTreeSet<Event>>,
    /// Lock events held around a memory event, in any execution.
    pub locks: BTreeMap<Event, BTreeSet<Event>>,
}

impl Knowledge {
    /// Learns from one execution's decisions; true if it showed a pair never seen before.
    pub fn learn(&mut self, choices: &[Choice]) -> bool {
        let mut tracker = Tracker::default();
        let mut new = false;
        for c in choices {
            let (event, held, pair) = tracker.granted(c);
            if event.is_read() {
                self.reads.entry(event.obj).or_default().insert(event);
            } else if event.is_write() {
                self.writes.entry(event.obj).or_default().insert(event);
            } else {
                continue;
            }
            self.locks.entry(event).or_default().extend(held);
            if let Some(p) = pair {
                new |= self.seen.insert(p);
            }
        }
        new
    }

    /// Pairs that could exist by what has been seen: each read with the initial value and with
    /// every write of its granule, in a fixed order, at most [`MAX_CANDIDATES`] (a program that
    /// loops over shared memory makes new events every iteration).
    pub fn candidates(&self) -> Vec<Pair> {
        let mut out = Vec::new();
        for (granule, reads) in &self.reads {
            let writes = self.writes.get(granule).into_iter().flatten().map(|&w| Some(w));
            let sources: Vec<Option<Event>> = std::iter::once(None).chain(writes).collect();
            for &read in reads {
                out.extend(sources.iter().map(|&write| Pair { write, read }));
                if out.len() >= MAX_CANDIDATES {
                    out.truncate(MAX_CANDIDATES);
                    return out;
                }
            }
        }
        out
    }

    /// What to hold back so that `event` happens after `until`: `event` itself, or, when both
    /// have been seen under a mutex of the same address, the lock events that open `event`'s
    /// critical sections on it. Holding a thread back inside a section would keep `until`'s
    /// thread out of it, and the delay would only end in the all-delayed fallback.
    pub fn delay_points(&self, event: Event, until: Event) -> Vec<Event> {
        let theirs: BTreeSet<u64> = self.locks.get(&until).into_iter().flatten().map(|l| l.obj).collect();
        let shared: Vec<Event> = self.locks.get(&event).into_iter().flatten().filter(|l| theirs.contains(&l.obj)).copied().collect();
        if shared.is_empty() {
            vec![event]
        } else {
            shared
        }
    }
}
