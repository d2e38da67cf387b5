//! The launcher's side of asking the agent to trace a command ([`dara_abi::agent`]), between
//! fork and exec: async-signal-safe (atomics, `futex`, `readlinkat`; no allocation).
use std::sync::atomic::AtomicU32;

use dara_abi::agent::{self, AgentWords, SeizeError, SeizeRequest};
use dara_abi::handoff::{Futex, Waited};

/// How long an asker waits for the agent, in seconds (it attaches in microseconds; a loaded
/// machine can delay it by seconds; a dead agent never answers).
const PATIENCE_SECONDS: u32 = 30;

/// Asks the agent to trace the calling process, a command dara launches, whose pid in dara's
/// namespace is `host_pid`.
pub fn ask_for_launch(words: &AgentWords, host_pid: u32) -> Result<(), SeizeError> {
    agent::ask(words, SeizeRequest { tid: host_pid, process: None, exec_slot: None, allowed_ip: None }, &SecondFutex, PATIENCE_SECONDS)
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

/// The kernel's futex on words of the shared region, waits bounded by a second.
pub struct SecondFutex;

impl Futex<AtomicU32> for SecondFutex {
    fn wait(&self, word: &AtomicU32, expected: u32) -> Waited {
        let second = libc::timespec { tv_sec: 1, tv_nsec: 0 };
        // SAFETY: FUTEX_WAIT on a live, aligned word with a live timeout.
        let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &second as *const libc::timespec, 0usize, 0u32) };
        if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
            Waited::TimedOut
        } else {
            Waited::Woken
        }
    }

    fn wake(&self, word: &AtomicU32, count: u32) {
        // SAFETY: FUTEX_WAKE on a live, aligned word of the shared region.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count, 0usize, 0usize, 0u32) };
    }
}
