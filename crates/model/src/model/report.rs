//! The deadlock report: for each live thread, the operation it is stuck in and, in words, what it
//! waits for and who stands in the way ("waits for mutex 0x4040 held by thread 2").
//!
//! Symbols are left empty: the driver resolves addresses against the target's binaries.
use dara_abi::{Addr, Op, Request as R};

use super::objects::Once;
use super::thread::{Phase, Thread, Wait};
use super::{Model, Request};
use crate::choice::{NetObject, ThreadId};
use crate::outcome::BlockedThread;

impl Model {
    pub(super) fn describe(&self, id: ThreadId, thread: &Thread) -> BlockedThread {
        let (op, addr, detail) = match thread.phase {
            Phase::Running => ("running".to_string(), 0, "is running (holds the run token)".to_string()),
            Phase::Exited => ("exited".to_string(), 0, "has exited".to_string()),
            Phase::Pending(r) => (r.op().name().to_string(), object_addr(&r), self.pending_detail(id, thread, r)),
            Phase::Waiting(r, wait) => {
                (r.op().name().to_string(), object_addr(&r), self.waiting_detail(id, thread, r, wait))
            }
        };
        BlockedThread { thread: id, process: thread.process, op, addr, symbol: None, detail }
    }

    fn pending_detail(&self, me: ThreadId, thread: &Thread, r: Request) -> String {
        if self.run_alternatives(me, thread) > 0 {
            return format!("is ready to proceed ({})", r.op().name());
        }
        let key = |a: u64| self.objects.key(thread.process, a);
        match r {
            R::ProcessWait { target, .. } => self.wait_detail(thread.process, target),
            R::MutexLock { mutex, .. } => self.mutex_wait(me, thread, mutex.0),
            R::RwReadLock { lock, .. } | R::RwWriteLock { lock, .. } => {
                let (a, k) = (lock.0, key(lock.0));
                let Some(l) = self.objects.rwlocks.get(&k) else { return format!("waits for rwlock {a:#x}") };
                if let Some(w) = l.writer {
                    format!("waits for rwlock {a:#x} write-locked by {}", self.who(me, w))
                } else {
                    let readers: Vec<String> = l.readers.keys().map(|&t| self.who(me, t)).collect();
                    format!("waits for rwlock {a:#x} read-locked by {}", readers.join(", "))
                }
            }
            R::ThreadJoin { target } => {
                let note = if self.threads.contains_key(&target) { "" } else { " (no such thread was started)" };
                format!("waits to join thread {target}{note}")
            }
            R::OnceBegin { once: Addr(a) } => match self.objects.onces.get(&key(a)) {
                Some(&Once::Running(t)) if t == me => {
                    format!("re-entered once-control {a:#x} from its own init routine")
                }
                Some(&Once::Running(t)) => {
                    format!("waits for once-control {a:#x} whose init routine runs in {}", self.who(me, t))
                }
                _ => format!("waits for once-control {a:#x}"),
            },
            R::SemWait { sem, .. } => format!("waits on semaphore {:#x} (value 0, never posted since)", sem.0),
            R::Sleep { deadline } => match deadline.at() {
                None => "sleeps forever".to_string(),
                Some(d) => format!("sleeps until virtual time {d} ns"),
            },
            R::Unsupported(call) => format!("stopped at uncontrolled syscall {}", call.nr()),
            R::FileLock { fd, kind } => format!(
                "waits in {} on descriptor {fd} for a file lock another holder keeps (no thread left can release it)",
                kind.name()
            ),
            R::NetRecv { .. } | R::NetAccept { .. } | R::NetPoll { .. } | R::NetEpollWait { .. } | R::NetSend { .. } => {
                let net = NetObject::decode(self.net_obj(me));
                let on = match (net.endpoint, net.peer) {
                    (Some(e), Some(p)) => format!(" on endpoint e{e} (peer e{p})"),
                    (Some(e), None) => format!(" on endpoint e{e}"),
                    _ => String::new(),
                };
                let what = match r.op() {
                    Op::NetAccept => "a connection",
                    Op::NetSend => "room to send",
                    Op::NetRecv => "data",
                    _ => "a ready descriptor",
                };
                format!("waits for {what}{on}, which no other thread can still provide")
            }
            R::NetConnect { .. } => {
                let net = NetObject::decode(self.net_obj(me));
                let to = net.peer.map_or(String::new(), |p| format!(" of listener e{p}"));
                format!("waits in connect for room in the backlog{to}, which no other thread can still make (an accept)")
            }
            R::FifoOpen { flags, .. } => {
                let fifo = NetObject::decode(self.net_obj(me)).endpoint.map_or(String::new(), |e| format!(" e{e}"));
                let other = if flags.fifo_reader() { "writer" } else { "reader" };
                format!("waits in open of FIFO{fifo} for a {other}, which no other thread can still provide")
            }
            R::SigWait { set, .. } => format!("waits in sigwait for a signal of {set:#x} that nothing left can send"),
            R::SigSuspend { mask } => format!("waits in sigsuspend for a signal (wait mask {mask:#x}) that nothing left can send"),
            r => format!("waits to {}", r.op().name()),
        }
    }

    fn waiting_detail(&self, me: ThreadId, thread: &Thread, r: Request, wait: Wait) -> String {
        // The object waited on: a condition variable, a futex or a barrier.
        let a = object_addr(&r);
        let k = self.objects.key(thread.process, a);
        match wait {
            Wait::Cond { signals_seen } => {
                let cond = self.objects.conds.get(&k);
                let signals = cond.map_or(0, |c| c.signals);
                let unheard = cond.map_or(0, |c| c.unheard);
                let why = if signals == 0 {
                    "never signalled"
                } else if signals == signals_seen {
                    "not signalled since it started waiting"
                } else {
                    "later signals woke other waiters"
                };
                let lost = if unheard > 0 { format!("; {unheard} signal(s) found no waiter and were lost") } else { String::new() };
                format!("waits on condition variable {a:#x} ({why}{lost})")
            }
            Wait::CondReacquire { .. } => {
                let mutex = if let R::CondWait { mutex, .. } = r { mutex.0 } else { 0 };
                format!("was woken on condition variable {a:#x} and {}", self.mutex_wait(me, thread, mutex))
            }
            Wait::Futex => {
                let expected = if let R::FutexWait { expected, .. } = r { expected } else { 0 };
                format!("waits on futex {a:#x} (value was {expected:#x} as expected; no matching wake since)")
            }
            Wait::Barrier => {
                let b = self.objects.barriers.get(&k);
                let arrived = b.map_or(0, |b| b.waiting.len());
                let count = b.and_then(|b| b.count).unwrap_or(0);
                format!("waits at barrier {a:#x} ({arrived} of {count} arrived)")
            }
            Wait::Woken { .. } => format!("was woken from {} and is ready to proceed", r.op().name()),
        }
    }

    /// "waits for mutex 0x… held by thread N" for a thread that cannot take that mutex.
    fn mutex_wait(&self, me: ThreadId, thread: &Thread, addr: u64) -> String {
        let owner = self.objects.mutexes.get(&self.objects.key(thread.process, addr)).and_then(|m| m.owner);
        match owner {
            Some(o) if o == me => {
                format!("waits for mutex {addr:#x} that it already holds (relocking a non-recursive mutex)")
            }
            Some(o) => format!("waits for mutex {addr:#x} held by {}", self.who(me, o)),
            None => format!("waits for mutex {addr:#x}"),
        }
    }

    /// "thread 3", "thread 3 (itself)", "thread 3 (exited)".
    fn who(&self, me: ThreadId, t: ThreadId) -> String {
        if t == me {
            format!("thread {t} (itself)")
        } else if self.threads.get(&t).is_some_and(|th| !th.is_live()) {
            format!("thread {t} (exited)")
        } else {
            format!("thread {t}")
        }
    }
}

/// The address of the synchronization object `r` is about, 0 when it names none.
fn object_addr(r: &Request) -> u64 {
    r.object().map_or(0, |a| a.0)
}
