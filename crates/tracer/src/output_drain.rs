//! Waiting for dara's output pipes (the program's stdout and stderr, the SDK's lines) to be
//! drained, so that the program always finds them writable.
//!
//! dara's forwarder threads copy those pipes out in real time, outside the model: whether one
//! has room at a given instant depends on how fast they ran, which no schedule decides. So
//! whenever the program may look at an output pipe's room without blocking (a `poll`, `select` or
//! `epoll_wait` asking for POLLOUT, a write on an `O_NONBLOCK` description), dara first waits
//! until the pipe is empty: an empty pipe polls writable and takes `min(len, its size)` bytes of
//! a non-blocking write, whatever the drain's speed, in the recording and in every replay. The
//! wait is the one a blocking write to the pipe makes anyway (it waits for whoever reads dara's
//! output). The scheduler waits before it views or grants such a poll
//! (`dara_scheduler::execution::output`), the ptrace agent before it runs such a write
//! (`ptrace::agent::net`); the preload has its own allocation-free loop
//! (`dara_preload::hooks::output`).
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// How long a waiter sleeps between two looks at a pipe (the forwarder needs the CPU, which on a
/// pinned execution is the waiter's).
const LOOK_EVERY: Duration = Duration::from_micros(50);

/// Bytes in the pipe behind `fd` (either end) that nobody has read yet; 0 for a descriptor that
/// is no pipe.
pub fn unread(fd: BorrowedFd<'_>) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into the live local.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

/// Waits until every pipe of `fds` is empty, at most `limit`; whether they are.
pub fn wait_empty(fds: &[BorrowedFd<'_>], limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if fds.iter().all(|&fd| unread(fd) == 0) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_pipe_is_empty_once_its_reader_took_everything() {
        let (mut r, mut w) = std::io::pipe().unwrap();
        w.write_all(&[7u8; 5000]).unwrap();
        assert_eq!(unread(w.as_fd()), 5000, "either end counts what is queued");
        assert!(!wait_empty(&[w.as_fd()], Duration::ZERO), "nobody read yet");
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 5000];
            r.read_exact(&mut buf).unwrap();
        });
        assert!(wait_empty(&[w.as_fd()], Duration::from_secs(60)), "the reader drained it");
        reader.join().unwrap();
    }
}
