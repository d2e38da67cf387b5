//! Shared (not process-private) futex wait and wake on words in the region.
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout`. Spurious returns are allowed.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Waited {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind `word` and the timespec on our stack.
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec, 0usize, 0u32) };
    if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        Waited::TimedOut
    } else {
        Waited::Woken
    }
}

/// How a [`wait`] ended (the handoff protocol's own type).
pub use dara_abi::handoff::Waited;

/// Wakes up to `n` waiters on `word`, in any process.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address of `word` as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n, 0usize, 0usize, 0u32);
    }
}
