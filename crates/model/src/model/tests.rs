//! Unit tests of the model: synthetic post/choose scripts against a fake target memory.
//!
//! This file holds the harness (`Sim`, `FakeMem`); the tests live under `tests/` by subject:
//! `locks.rs` (mutexes, condition variables, rwlocks), `sync.rs` (barriers, once, semaphores,
//! futexes, join), `time.rs` (sleeps, timeouts, deadline timers, pauses), `net.rs` (network
//! operations), `signals.rs` (interrupted waits), `runs.rs` (choice order, determinism of a
//! seeded script) and `sharing.rs` (objects shared between processes).
use std::collections::BTreeMap;

use dara_abi::{mutex_kind, Op, NO_DEADLINE};

use super::*;
use crate::choice::{ChoiceKind, ProcessId, ThreadId};

const EBUSY: i64 = libc::EBUSY as i64;
const EDEADLK: i64 = libc::EDEADLK as i64;
const EPERM: i64 = libc::EPERM as i64;
const EAGAIN: i64 = libc::EAGAIN as i64;
const ETIMEDOUT: i64 = libc::ETIMEDOUT as i64;

const M: u64 = 0x5555_5555_8040;
const M2: u64 = 0x5555_5555_8080;
const C: u64 = 0x5555_5555_9000;
const B: u64 = 0x5555_5555_a000;
const S: u64 = 0x5555_5555_b000;
const F: u64 = 0x5555_5555_c000;
const R: u64 = 0x5555_5555_d000;

/// Words of target memory by process and address, and which addresses lie in shared memory.
#[derive(Default)]
struct FakeMem(BTreeMap<(ProcessId, u64), u32>, BTreeMap<(ProcessId, u64), SharedLocation>);

impl MemoryReader for FakeMem {
    fn read_u32(&mut self, process: ProcessId, addr: u64) -> Option<u32> {
        self.0.get(&(process, addr)).copied()
    }

    fn shared_location(&mut self, process: ProcessId, addr: u64) -> Option<SharedLocation> {
        self.1.get(&(process, addr)).copied()
    }
}

/// A model plus fake memory, driven one thread at a time like the real scheduler would.
///
/// The tests of what each operation does use `TimerPolicy::Any`, so that a timeout can be taken
/// at any point of an operation's life; `deadline_*` and `pause_*` tests use the default policy.
struct Sim {
    m: Model,
    mem: FakeMem,
}

impl Default for Sim {
    fn default() -> Sim {
        Sim::with_policy(TimerPolicy::Any)
    }
}

const TICK_NS: u64 = crate::time::DEFAULT_STEP_NS;

impl Sim {
    fn with_policy(timers: TimerPolicy) -> Sim {
        Sim { m: Model::with_time(&TimeConfig { timers, ..TimeConfig::default() }), mem: FakeMem::default() }
    }

    /// Threads 1..=n in process 0, all started and running (thread 1 is the main thread).
    fn with_threads(n: ThreadId) -> Sim {
        Sim::started(Sim::default(), n)
    }

    /// Like `with_threads`, with timers that fire at their deadlines (the default policy).
    fn at_deadlines(n: ThreadId) -> Sim {
        Sim::started(Sim::with_policy(TimerPolicy::Deadline), n)
    }

    fn started(mut s: Sim, n: ThreadId) -> Sim {
        for t in 1..=n {
            s.m.add_thread(t, 0);
            let op = if t == 1 { Op::ProcessStart } else { Op::ThreadStart };
            s.m.post(t, req(op, [0; 4]), &mut s.mem);
            assert_eq!(s.run(t), Effect::Grant { result: 0 });
        }
        s
    }

    fn post(&mut self, t: ThreadId, op: Op, args: [u64; 4]) {
        self.m.post(t, req(op, args), &mut self.mem);
    }

    /// The (kind, alt) pairs thread `t` offers.
    fn offered(&self, t: ThreadId) -> Vec<(ChoiceKind, u32)> {
        self.m.choices().iter().filter(|c| c.thread == t).map(|c| (c.kind, c.alt)).collect()
    }

    fn can_run(&self, t: ThreadId) -> bool {
        self.offered(t).iter().any(|&(k, _)| k == ChoiceKind::Run)
    }

    fn pick(&mut self, t: ThreadId, kind: ChoiceKind, alt: u32) -> Effect {
        let choice = self
            .m
            .choices()
            .into_iter()
            .find(|c| c.thread == t && c.kind == kind && c.alt == alt)
            .unwrap_or_else(|| panic!("thread {t} does not offer {kind:?}/{alt}; offered: {:?}", self.m.choices()));
        self.m.apply(&choice, &mut self.mem)
    }

    fn run(&mut self, t: ThreadId) -> Effect {
        self.pick(t, ChoiceKind::Run, 0)
    }

    fn timeout(&mut self, t: ThreadId) -> Effect {
        self.pick(t, ChoiceKind::Timeout, 0)
    }

    /// Post and run at once; the operation must be enabled.
    fn op(&mut self, t: ThreadId, op: Op, args: [u64; 4]) -> Effect {
        self.post(t, op, args);
        self.run(t)
    }

    fn lock(&mut self, t: ThreadId, addr: u64, kind: u64) -> Effect {
        self.op(t, Op::MutexLock, [addr, kind, NO_DEADLINE, 0])
    }

    fn unlock(&mut self, t: ThreadId, addr: u64, kind: u64) -> Effect {
        self.op(t, Op::MutexUnlock, [addr, kind, 0, 0])
    }

    fn exit(&mut self, t: ThreadId) {
        assert_eq!(self.op(t, Op::ThreadExit, [0; 4]), Effect::Grant { result: 0 });
    }

    fn detail(&self, t: ThreadId) -> String {
        let report = self.m.blocked_report();
        report.into_iter().find(|b| b.thread == t).map(|b| b.detail).unwrap_or_default()
    }
}

/// The request `op` posts with `args` (as the driver decodes it).
fn req(op: Op, args: [u64; 4]) -> Request {
    Request::decode(op, args).expect("a test request decodes")
}

fn grant(result: i64) -> Effect {
    Effect::Grant { result }
}

mod locks;
mod net;
mod runs;
mod sharing;
mod signals;
mod sync;
mod time;
