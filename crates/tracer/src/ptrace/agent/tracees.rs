//! What the agent keeps about each tracee thread and process: its slot, its last grant's time,
//! the child it is creating, and each process's stream of application randomness (the same
//! stream the preload draws from in a process it runs: `splitmix64(splitmix64(seed) ^ i)`, the
//! seed written by the scheduler before the process's first grant).
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use dara_abi::splitmix64;

use super::calls::Then;
use super::region::Region;
use crate::ptrace::remote;


/// A thread the agent runs.
#[derive(Debug)]
pub struct Tracee {
    /// Its process's kernel pid (the thread group), for memory access.
    pub pid: i32,
    pub slot: u32,
    /// Its logical process.
    pub process: u32,
    /// Virtual time of its last grant.
    pub last_now: u64,
    /// Clock reads answered without a post since its last post (coarse steps).
    pub unposted_clock_reads: u32,
    /// Posted, waiting for the grant; how to finish the call then.
    pub parked: Option<Then>,
    /// The child whose slot it claimed for a `clone`/`fork` under way.
    pub birth: Option<Birth>,
    /// A call run for real whose result is looked at when it returns.
    pub exit_check: Option<ExitCheck>,
    /// Its exit was granted: its slot is finished once it is gone.
    pub exiting: bool,
    /// The main thread of a program image that has not run yet.
    pub fresh_image: bool,
    /// The tid word the kernel would clear and wake when this thread exits
    /// (`CLONE_CHILD_CLEARTID`); the agent does it instead, as a scheduling point.
    pub clear_tid: Option<u64>,
    /// Single-stepping the instruction under this probe (see [`crate::ptrace::probes`]).
    pub stepping: Option<u64>,
    /// How the call it stopped in last is finished.
    pub stop: CallStop,
    /// Running a call in the process's stub; where its own code goes on after it.
    pub in_stub: Option<u64>,
    /// Making an `execve` for which it claimed this slot (the new image's main thread's).
    pub exec_slot: Option<u32>,
    /// A call let run whose exit the agent looks at (a listener to split, a name to show).
    pub after: Option<super::listeners::AfterCall>,
    /// The mask the call it stopped in waits under (`ppoll`, `pselect6`), for its post.
    pub wait_mask: Option<u64>,
    /// Sent a signal that ends process `target` (kernel pid): waits at its `kill`'s exit until
    /// that process is gone (`agent/signals.rs`).
    pub awaits_death: Option<super::signals::DeathWait>,
}

/// How a tracee stopped in a system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallStop {
    /// At the agent's filter: the call has not run; it is skipped or let through.
    Seccomp,
    /// At the preload's filter, inherited from the image before the exec (SIGSYS): the call did
    /// not run and the thread is past its `syscall` instruction, at `ret`; it is answered, or
    /// made from the stub the preload's filter lets through.
    Trapped { nr: i64, ret: u64 },
}

impl Tracee {
    pub fn new(pid: i32, slot: u32, process: u32, last_now: u64) -> Tracee {
        Tracee { pid, slot, process, last_now, unposted_clock_reads: 0, parked: None, birth: None, exit_check: None, exiting: false, fresh_image: false, clear_tid: None, stepping: None, stop: CallStop::Seccomp, in_stub: None, exec_slot: None, after: None, wait_mask: None, awaits_death: None }
    }
}

/// A thread or process being created, with the slot its creator claimed for it.
#[derive(Clone, Copy, Debug)]
pub enum Birth {
    Thread { slot: u32, creator: u32, pid: i32, process: u32, clear_tid: Option<u64>, via_stub: Option<u64> },
    Process { slot: u32, parent: u32, process: u32, via_stub: Option<u64> },
}

impl Birth {
    pub fn slot(&self) -> u32 {
        match *self {
            Birth::Thread { slot, .. } | Birth::Process { slot, .. } => slot,
        }
    }

    /// Where the child goes on when it was created through the stub (it starts at the stub's
    /// `int3`, as its creator returns there).
    pub fn via_stub(&self) -> Option<u64> {
        match *self {
            Birth::Thread { via_stub, .. } | Birth::Process { via_stub, .. } => via_stub,
        }
    }
}

/// A wait for readiness run with a zero timeout ([`Then::ReadyWait`]): the call's number, its
/// timeout argument as the program gave it, whether the program asked to block, and for a
/// `poll` whose grant chose one of several ready entries, which (the program sees only it, as
/// from the preload).
#[derive(Clone, Copy, Debug)]
pub struct ExitCheck {
    pub nr: i64,
    pub timeout_arg: usize,
    pub timeout: u64,
    pub blocking: bool,
    pub only_entry: Option<usize>,
    /// A `select`/`pselect6` run as this `poll`: its sets are written back from the entries.
    pub select: Option<super::select::SelectCall>,
    /// Granted as ended by a signal (`Interrupt`): finding nothing, it fails with EINTR (the
    /// handler runs as the thread goes on) instead of waiting again.
    pub interrupted: bool,
}

/// The processes the agent runs: words of randomness drawn so far, and each stream's seed.
#[derive(Default)]
pub struct Processes {
    drawn: BTreeMap<u32, u64>,
    seeds: BTreeMap<u32, u64>,
    /// Each process's preemption probes (a forked child has its parent's).
    pub probes: BTreeMap<u32, crate::ptrace::probes::Probes>,
    /// The preload's allowed call address of processes whose image came from a preload's exec.
    pub allowed_ip: BTreeMap<u32, u64>,
    /// The `int3` of each such process's stub (its `syscall` ends at the allowed address).
    pub stubs: BTreeMap<u32, u64>,
    /// The pid the programs see of each process (inside dara's PID namespace, when the
    /// execution has one; the agent sees dara's own numbers).
    pub seen_as: BTreeMap<u32, u32>,
    /// Listening sockets split for outside peers, and scratch pages.
    pub listeners: super::listeners::Listeners,
}

impl Processes {
    /// Process `process` (kernel pid `pid`) is known now; its entry's pid is written.
    pub fn started(&mut self, process: u32, pid: i32, region: &Region) {
        if let Some(entry) = region.header().processes.get(process as usize) {
            entry.pid.store(pid as u32, Ordering::Release);
        }
        self.drawn.insert(process, 0);
        self.seeds.remove(&process);
        self.known_as(process, pid);
    }

    /// Process `process` is kernel pid `pid`: the pid the programs see (in dara's PID namespace)
    /// names it from now on.
    pub fn known_as(&mut self, process: u32, pid: i32) {
        let seen = crate::procfs::namespace_pids(pid as u32).and_then(|ids| ids.last().copied()).unwrap_or(pid as u32);
        self.seen_as.insert(process, seen);
    }

    /// Fills the `buffers` (address, length) of `pid` in turn from `process`'s stream, at most
    /// 1 MiB in all (a read may return less); the call's result: the bytes written, or EFAULT
    /// when none could be.
    pub fn fill_random(&mut self, process: u32, pid: i32, buffers: &[(u64, u64)], region: &Region) -> i64 {
        let seed = *self.seeds.entry(process).or_insert_with(|| {
            let seed = region.header().processes.get(process as usize).map_or(0, |e| e.random_seed.load(Ordering::Acquire));
            splitmix64(seed)
        });
        let total = buffers.iter().map(|&(_, len)| len).fold(0u64, u64::saturating_add);
        let drawn = self.drawn.entry(process).or_insert(0);
        let mut bytes = vec![0u8; total.min(1 << 20) as usize];
        for chunk in bytes.chunks_mut(8) {
            let word = splitmix64(seed ^ *drawn).to_le_bytes();
            *drawn += 1;
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        let mut written = 0usize;
        for &(addr, len) in buffers {
            let piece = &bytes[written..written + (len as usize).min(bytes.len() - written)];
            if piece.is_empty() {
                continue;
            }
            if remote::write(pid, addr, piece).is_err() {
                break;
            }
            written += piece.len();
        }
        match written {
            0 if !bytes.is_empty() => -(libc::EFAULT as i64),
            n => n as i64,
        }
    }
}
