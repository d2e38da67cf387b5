//! A granted TCP receive into one buffer takes its whole grant: the count is the scheduler's
//! decision (what a traced peer wrote and this socket has not read, at most 32 KiB), not what the
//! kernel happened to have queued when the receive ran.
//!
//! Why it must wait: the bytes of a traced peer that are not in the queue yet wait in the peer's
//! send queue behind the receive window, and sometimes only this receive can open that window.
//! On loopback a segment is about 64 KiB, and Linux opens no window smaller than a segment; a
//! segment the reader has mostly read keeps its whole buffer charged to the socket until its last
//! byte is taken, so 1,294 bytes left of one held 73,898 bytes of a 128 KiB buffer and the window
//! stayed shut (an rsync daemon's 4 MB pull). The scheduler grants the decided count anyway
//! (`netprobe/unread.rs`); the receive takes what is queued, which frees the segment and sends a
//! window update, and the peer's kernel sends the rest at once, through the softirq, with no
//! traced thread running. So this waits for it in the kernel, briefly, holding the run token: a
//! wait for bytes already written, never for another thread's work. A receive that does so says
//! it in its post (`net_flags::WHOLE_GRANT`): only such a receive is granted bytes not queued yet.
//!
//! Runs on a gated thread, inside a hook or the syscall trap's handler: no allocation, raw
//! syscalls only.
use libc::{c_int, ssize_t};

use crate::{real, sys};

/// How long one wait for the rest of a grant lasts: the thread is put back on a CPU at least this
/// often, so dara's watchdog never takes it for a thread blocked on something outside.
const WAIT_MS: u64 = 10;
/// Waits in a row that may see nothing arrive before the receive gives up (2 s, dara's settle
/// limit): the caller then stops the run ([`Stalled`]) rather than return a count the grant did
/// not decide, which no replay would give.
const WAITS: u32 = 200;

/// The rest of a grant did not come: the bytes received in all (fewer than granted).
pub struct Stalled(pub usize);

/// Receives the rest of a grant of `want` bytes on TCP socket `fd`, of which the first call took
/// `first` (a positive count less than `want`): `call(done, most)` receives at most `most` bytes
/// into the caller's buffer after the first `done`, without blocking. Returns the bytes received
/// in all; what came before end of file or an error counts, as in the kernel, and the error is
/// left for the program's next call.
pub fn rest(fd: c_int, first: usize, want: usize, call: &mut dyn FnMut(usize, usize) -> ssize_t) -> Result<usize, Stalled> {
    let mut done = first;
    let mut idle = 0;
    while done < want && idle < WAITS {
        let n = call(done, want - done);
        if n > 0 {
            done += n as usize;
            idle = 0;
            continue;
        }
        if n == 0 || real::errno() != libc::EAGAIN {
            break;
        }
        if !wait_readable(fd) {
            idle += 1;
        }
    }
    if idle >= WAITS {
        return Err(Stalled(done));
    }
    Ok(done)
}

/// Waits up to [`WAIT_MS`] for `fd` to become readable (or hung up, or failed); whether it did.
fn wait_readable(fd: c_int) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let timeout = libc::timespec { tv_sec: 0, tv_nsec: (WAIT_MS * 1_000_000) as libc::c_long };
    // SAFETY: one live pollfd and a live timespec; no signal mask is passed. The preload's own
    // call, not trapped.
    let r = unsafe { sys::syscall(libc::SYS_ppoll, &[&mut p as *mut libc::pollfd as u64, 1, &timeout as *const libc::timespec as u64, 0, 0]) };
    r > 0
}
