//! Asking the agent to trace a process, from the process itself ([`dara_abi::AgentWords`]).
//!
//! The asker is a process about to `execve` a program the preload cannot enter: dara's launcher
//! between fork and exec, or (later) a traced process's preload. It holds the run token (or no
//! thread runs yet), so one request at a time is under way. Everything here is
//! async-signal-safe: atomics, `futex`, `readlinkat`; no allocation.
use std::sync::atomic::Ordering;

use dara_abi::{AgentWords, SEIZE_REFUSED};

/// How long an asker waits for the agent before it gives up (the agent attaches in
/// microseconds; a loaded machine can delay it by seconds, a dead agent never answers).
const PATIENCE_SECONDS: u32 = 30;

/// Why the agent did not attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeizeError {
    /// The agent answered that it could not (`PTRACE_SEIZE` failed).
    Refused,
    /// No answer in [`PATIENCE_SECONDS`]: the agent is gone or stuck.
    NoAnswer,
}

/// Asks the agent to attach to thread `host_tid` (as dara's PID namespace numbers it) and waits
/// for its answer.
pub fn ask(words: &AgentWords, host_tid: u32) -> Result<(), SeizeError> {
    words.seize_ack.store(0, Ordering::Relaxed);
    words.seize_tid.store(host_tid, Ordering::Relaxed);
    words.doorbell.fetch_add(1, Ordering::Release);
    futex_wake(&words.doorbell);
    for _ in 0..PATIENCE_SECONDS {
        loop {
            match words.seize_ack.load(Ordering::Acquire) {
                0 => {}
                SEIZE_REFUSED => return Err(SeizeError::Refused),
                tid if tid == host_tid => return Ok(()),
                _ => {}
            }
            if !futex_wait_a_second(&words.seize_ack, 0) {
                break;
            }
        }
    }
    Err(SeizeError::NoAnswer)
}

/// The agent's side: the thread asking now, if a request is waiting.
pub fn pending(words: &AgentWords) -> Option<u32> {
    match words.seize_tid.swap(0, Ordering::AcqRel) {
        0 => None,
        tid => Some(tid),
    }
}

/// The agent's answer to `tid` (attached, or not).
pub fn answer(words: &AgentWords, tid: u32, attached: bool) {
    words.seize_ack.store(if attached { tid } else { SEIZE_REFUSED }, Ordering::Release);
    futex_wake(&words.seize_ack);
}

/// The calling process's pid as dara's PID namespace numbers it, read through `host_proc` (a
/// descriptor of dara's /proc): `readlink("self")` there names this process in that /proc's
/// namespace. Async-signal-safe.
pub fn host_pid(host_proc: i32) -> Option<u32> {
    let mut buf = [0u8; 16];
    // SAFETY: readlinkat writes at most buf.len() bytes into the live local buffer.
    let n = unsafe { libc::readlinkat(host_proc, c"self".as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if n <= 0 {
        return None;
    }
    buf[..n as usize].iter().try_fold(0u32, |pid, &b| b.is_ascii_digit().then(|| pid * 10 + u32::from(b - b'0')))
}

fn futex_wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned word of the shared region.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// Waits up to a second while `word` holds `expected`; false when the second passed.
fn futex_wait_a_second(word: &std::sync::atomic::AtomicU32, expected: u32) -> bool {
    let second = libc::timespec { tv_sec: 1, tv_nsec: 0 };
    // SAFETY: FUTEX_WAIT on a live, aligned word with a live timeout.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &second as *const libc::timespec, 0usize, 0u32) };
    !(rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}
