//! The contract with dara's ptrace agent (`dara-agent`, crates/tracer/src/ptrace), which runs the
//! programs the preload cannot enter (statically linked ones, Go programs): how a process asks
//! the agent to trace it, and the seccomp filter it installs once traced.
//!
//! The asker is a process about to `execve` such a program: dara's launcher between fork and
//! exec, or a traced process's preload (its exec hook). It holds the run token, or no thread runs
//! yet, so at most one request is under way. It writes the request, bumps `doorbell` and
//! futex-wakes it, then waits on `seize_ack` until it holds the asker's tid (the agent attached)
//! or [`SEIZE_REFUSED`]. Then it installs [`filter_program`] (a traced call without a tracer
//! fails with ENOSYS, hence the order) and makes its `execve`, which the agent sees as the new
//! image's first stop.
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::handoff::{Futex, Waited};

/// The words of [`crate::Header::agent`].
#[repr(C)]
pub struct AgentWords {
    /// Bumped (then futex-woken) for every request; the agent waits on it.
    pub doorbell: AtomicU32,
    /// The asking thread's kernel tid, as dara's PID namespace numbers it (0: no request).
    pub seize_tid: AtomicU32,
    pub seize_ack: AtomicU32,
    /// The agent's pid (0: no agent in this execution).
    pub pid: AtomicU32,
    /// The asker's logical process, or [`NEW_PROCESS`] for a command dara launches.
    pub process: AtomicU32,
    /// The slot the asker's preload claimed for the new image's main thread (0: none).
    pub exec_slot: AtomicU32,
    /// The address after the preload's own `syscall` instruction, the one its seccomp filter
    /// lets through (0: no preload filter): the new image inherits that filter, and the agent
    /// runs the calls it traps from there.
    pub allowed_ip: AtomicU64,
}

/// [`AgentWords::seize_ack`] when the agent could not attach.
pub const SEIZE_REFUSED: u32 = u32::MAX;
/// [`AgentWords::process`] of a command dara launches (a new process).
pub const NEW_PROCESS: u32 = u32::MAX;

/// One request to trace a thread about to exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeizeRequest {
    pub tid: u32,
    /// The logical process whose image is replaced; None for a new process.
    pub process: Option<u32>,
    /// Slot claimed for the new image's main thread (see [`AgentWords::exec_slot`]).
    pub exec_slot: Option<u32>,
    pub allowed_ip: Option<u64>,
}

/// Why the agent did not attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeizeError {
    /// The agent answered that it could not (`PTRACE_SEIZE` failed).
    Refused,
    /// No answer after `patience` timed-out waits of `futex`: the agent is gone or stuck.
    NoAnswer,
}

/// Asks the agent to trace `request.tid` and waits for its answer (at most `patience` waits of
/// `futex` that time out).
pub fn ask<F: Futex<AtomicU32>>(words: &AgentWords, request: SeizeRequest, futex: &F, patience: u32) -> Result<(), SeizeError> {
    words.seize_ack.store(0, Ordering::Relaxed);
    words.process.store(request.process.unwrap_or(NEW_PROCESS), Ordering::Relaxed);
    words.exec_slot.store(request.exec_slot.map_or(0, |s| s + 1), Ordering::Relaxed);
    words.allowed_ip.store(request.allowed_ip.unwrap_or(0), Ordering::Relaxed);
    words.seize_tid.store(request.tid, Ordering::Release);
    words.doorbell.fetch_add(1, Ordering::Release);
    futex.wake(&words.doorbell, crate::handoff::WAKE_ALL);
    let mut timeouts = 0;
    loop {
        match words.seize_ack.load(Ordering::Acquire) {
            SEIZE_REFUSED => return Err(SeizeError::Refused),
            tid if tid == request.tid => return Ok(()),
            _ => {}
        }
        if futex.wait(&words.seize_ack, 0) == Waited::TimedOut {
            timeouts += 1;
            if timeouts >= patience {
                return Err(SeizeError::NoAnswer);
            }
        }
    }
}

/// The agent's side: the request waiting, if any (taken: a second look finds none).
pub fn pending(words: &AgentWords) -> Option<SeizeRequest> {
    let tid = words.seize_tid.swap(0, Ordering::AcqRel);
    (tid != 0).then(|| SeizeRequest {
        tid,
        process: Some(words.process.load(Ordering::Relaxed)).filter(|&p| p != NEW_PROCESS),
        exec_slot: words.exec_slot.load(Ordering::Relaxed).checked_sub(1),
        allowed_ip: Some(words.allowed_ip.load(Ordering::Relaxed)).filter(|&ip| ip != 0),
    })
}

/// The agent's answer to `tid`.
pub fn answer<F: Futex<AtomicU32>>(words: &AgentWords, tid: u32, attached: bool, futex: &F) {
    words.seize_ack.store(if attached { tid } else { SEIZE_REFUSED }, Ordering::Release);
    futex.wake(&words.seize_ack, crate::handoff::WAKE_ALL);
}

/// The system calls that stop a traced process for the agent (x86-64 numbers): those through
/// which a program without dara's preload can block, read the time or randomness, make threads
/// and processes, or talk to another process (reads, writes and closes of every descriptor: the
/// filter cannot tell a socket from a file, the agent looks); and `listen` and `getsockname`,
/// through which outside peers are kept apart in a recording (the agent's `listeners.rs`); `sendfile`,
/// `splice` and `tee`, which move bytes to or from a socket or pipe (the agent's `transfer.rs`); and the
/// calls that send signals, so that a signal between the program's threads and processes is
/// sent at a scheduling point (the agent's `signals.rs`); and `io_uring_setup` and `io_setup`,
/// refused as a kernel built without io_uring and native AIO refuses them (their requests run
/// in the kernel, where no scheduling point can reach them). Calls not listed that could block in the kernel are caught by the
/// scheduler's watchdog and end the run as uncontrolled, never silently.
pub const TRACED: [u32; 59] = [
    202, // futex
    449, // futex_waitv
    24,  // sched_yield
    35,  // nanosleep
    230, // clock_nanosleep
    228, // clock_gettime
    229, // clock_getres
    96,  // gettimeofday
    201, // time
    100, // times
    98,  // getrusage
    309, // getcpu
    318, // getrandom
    204, // sched_getaffinity
    56,  // clone
    435, // clone3
    57,  // fork
    58,  // vfork
    59,  // execve
    322, // execveat
    60,  // exit
    231, // exit_group
    61,  // wait4
    247, // waitid
    232, // epoll_wait
    281, // epoll_pwait
    441, // epoll_pwait2
    7,   // poll
    271, // ppoll
    23,  // select
    270, // pselect6
    34,  // pause
    130, // rt_sigsuspend
    128, // rt_sigtimedwait
    62,  // kill
    200, // tkill
    234, // tgkill
    0,   // read
    1,   // write
    19,  // readv
    20,  // writev
    3,   // close
    42,  // connect
    43,  // accept
    288, // accept4
    44,  // sendto
    45,  // recvfrom
    46,  // sendmsg
    47,  // recvmsg
    48,  // shutdown
    49,  // bind
    50,  // listen
    51,  // getsockname
    52,  // getpeername
    40,  // sendfile
    275, // splice
    276, // tee
    425, // io_uring_setup
    206, // io_setup
];

/// One classic-BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// Offsets into `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// Length of [`filter_program`].
pub const FILTER_LEN: usize = TRACED.len() + 6;

/// The agent's filter: kill a foreign architecture's calls, trace [`TRACED`], allow the rest.
pub const fn filter_program() -> [SockFilter; FILTER_LEN] {
    const fn stmt(code: u16, k: u32) -> SockFilter {
        SockFilter { code, jt: 0, jf: 0, k }
    }
    let n = TRACED.len();
    let mut p = [stmt(0, 0); FILTER_LEN];
    p[0] = stmt(BPF_LD_W_ABS, DATA_ARCH);
    p[1] = SockFilter { code: BPF_JEQ_K, jt: 1, jf: 0, k: AUDIT_ARCH_X86_64 };
    p[2] = stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS);
    p[3] = stmt(BPF_LD_W_ABS, DATA_NR);
    let mut i = 0;
    while i < n {
        // To the TRACE return, past the remaining comparisons and the ALLOW return.
        p[4 + i] = SockFilter { code: BPF_JEQ_K, jt: (n - i) as u8, jf: 0, k: TRACED[i] };
        i += 1;
    }
    p[4 + n] = stmt(BPF_RET_K, SECCOMP_RET_ALLOW);
    p[5 + n] = stmt(BPF_RET_K, SECCOMP_RET_TRACE);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_traced_call_jumps_to_the_trace_return() {
        let p = filter_program();
        let trace_at = p.len() - 1;
        assert_eq!(p[trace_at].k, SECCOMP_RET_TRACE);
        assert_eq!(p[trace_at - 1].k, SECCOMP_RET_ALLOW);
        for (i, &nr) in TRACED.iter().enumerate() {
            let at = 4 + i;
            assert_eq!(p[at].k, nr);
            assert_eq!(at + 1 + p[at].jt as usize, trace_at, "call {nr}");
        }
    }

    #[test]
    fn a_request_round_trips_through_the_words() {
        let words = AgentWords { doorbell: AtomicU32::new(0), seize_tid: AtomicU32::new(0), seize_ack: AtomicU32::new(0), pid: AtomicU32::new(0), process: AtomicU32::new(0), exec_slot: AtomicU32::new(0), allowed_ip: AtomicU64::new(0) };
        struct Answered<'a>(&'a AgentWords);
        impl Futex<AtomicU32> for Answered<'_> {
            fn wait(&self, _: &AtomicU32, _: u32) -> Waited {
                // The agent, answering whatever is pending.
                if let Some(request) = pending(self.0) {
                    answer(self.0, request.tid, request.process == Some(3) && request.exec_slot == Some(7) && request.allowed_ip == Some(0x1234), self);
                }
                Waited::Woken
            }
            fn wake(&self, _: &AtomicU32, _: u32) {}
        }
        let request = SeizeRequest { tid: 42, process: Some(3), exec_slot: Some(7), allowed_ip: Some(0x1234) };
        assert_eq!(ask(&words, request, &Answered(&words), 1), Ok(()));
        let launched = SeizeRequest { tid: 43, process: None, exec_slot: None, allowed_ip: None };
        assert_eq!(ask(&words, launched, &Answered(&words), 1), Err(SeizeError::Refused));
    }
}
