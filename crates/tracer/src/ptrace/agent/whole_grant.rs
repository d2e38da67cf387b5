//! A static or Go program's granted TCP receive into one buffer takes its whole grant, as the
//! preload's does (`crates/preload/src/hooks/whole_grant.rs`, which says why): the count is the
//! scheduler's decision, and some of those bytes may wait behind a window only this receive's
//! own read can open, so they are not queued yet when the call would run.
//!
//! The program's call cannot be made again for the rest without stopping at the agent's filter
//! and posting again, a step of its own. So when the socket's queue holds less than the grant,
//! the agent takes the bytes itself, through a copy of the descriptor (`pidfd_getfd`, as every
//! look at a tracee's socket): what is queued, which frees the segment and sends a window update,
//! then the rest as the peer's kernel sends it, waiting for it (`poll` by 10 ms, at most 2 s).
//! It writes them into the program's buffer, and the call is answered with their count without
//! running. Only a `read`, or a `recvfrom` with no flag that changes what it takes and no address
//! to fill, is taken so (`net::decode` marks them with `net_flags::WHOLE_GRANT`).
use std::os::fd::{AsRawFd, OwnedFd};

use super::net::copy_of;
use crate::ptrace::remote;

/// How long one wait for the rest of a grant lasts.
const WAIT_MS: libc::c_int = 10;
/// Waits in a row that may see nothing arrive before the agent gives up (2 s, dara's settle
/// limit): the run then stops ([`Taken::Stalled`]) rather than the program get a count the grant
/// did not decide, which no replay would give.
const WAITS: u32 = 200;

/// What [`take`] did.
pub(super) enum Taken {
    /// The call's result: the bytes taken and written into the buffer, or `-errno`.
    Answer(i64),
    /// The rest of the grant did not come: the bytes received (fewer than granted).
    Stalled(usize),
}

/// For a receive granted `want` bytes on socket `fd` of process `pid`, into its buffer at `buf`:
/// None when the socket's queue holds them all (or the descriptor cannot be copied): the call
/// runs as made, cut to the grant. Otherwise the call's result, the bytes taken and written
/// into the buffer (what came before end of file or an error counts), or `-errno` when the first
/// receive failed; or that the rest never came.
pub(super) fn take(pid: i32, fd: i32, buf: u64, want: usize) -> Option<Taken> {
    let copy = copy_of(pid, fd)?;
    if queued(&copy) >= want || !is_tcp(&copy) {
        return None;
    }
    let mut bytes = vec![0u8; want];
    let mut done = 0;
    let mut idle = 0;
    while done < want && idle < WAITS {
        // SAFETY: receives into the live buffer past `done`, at most its remaining length;
        // MSG_DONTWAIT never blocks.
        let n = unsafe { libc::recv(copy.as_raw_fd(), bytes[done..].as_mut_ptr().cast(), want - done, libc::MSG_DONTWAIT) };
        if n > 0 {
            done += n as usize;
            idle = 0;
            continue;
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if n == 0 || errno != libc::EAGAIN {
            if done == 0 && n < 0 {
                return Some(Taken::Answer(-i64::from(errno)));
            }
            break;
        }
        if !wait_readable(&copy) {
            idle += 1;
        }
    }
    if idle >= WAITS {
        return Some(Taken::Stalled(done));
    }
    match remote::write(pid, buf, &bytes[..done]) {
        Ok(()) => Some(Taken::Answer(done as i64)),
        Err(_) => Some(Taken::Answer(-i64::from(libc::EFAULT))),
    }
}

/// Whether `fd` is a TCP socket: only a stream's bytes may be taken in several receives, and only
/// a TCP receive is granted bytes not queued yet.
fn is_tcp(fd: &OwnedFd) -> bool {
    let mut protocol: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_PROTOCOL writes one int into the live local and updates `len`.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL, (&mut protocol as *mut libc::c_int).cast(), &mut len) };
    rc == 0 && protocol == libc::IPPROTO_TCP
}

/// Bytes queued for reading on `fd` (FIONREAD; 0 where it does not say).
fn queued(fd: &OwnedFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into the live local.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 { n.max(0) as usize } else { 0 }
}

/// Waits up to [`WAIT_MS`] for `fd` to become readable (or hung up, or failed); whether it did.
fn wait_readable(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, WAIT_MS) > 0 }
}
