//! `signalfd` and a blocking `read` of one (docs/processes.md, "signalfd").
//!
//! A signalfd is readable while a signal of its mask is pending for the thread that reads it or
//! for its process (systemd's sd-event, qemu and libvirt block SIGCHLD and friends and read them
//! so). The kernel decides that for the reader: `current`'s pending sets. So it is never probed
//! from dara's side (a duplicate in dara's process would show dara's own signals): the scheduler
//! reads the waiting thread's `SigPnd`/`ShdPnd` in `/proc` and the descriptor's `sigmask:` in its
//! fdinfo (`scheduler/src/netprobe/signalfd.rs`, for poll, select and epoll). The mask is read
//! from the kernel each time rather than kept from the hook: it follows `dup`, `fork`, a later
//! `signalfd(fd, mask, ..)` and a raw `signalfd4` with nothing to keep up to date.
//!
//! A blocking `read` is a `SigWait` for the mask, the scheduling point `sigwaitinfo` uses, which
//! becomes enabled exactly when such a signal is pending (a child's exit, a traced `kill` or
//! `raise`, a signal from outside in a recording: `execution/signals.rs`). Granted, the thread
//! tells the scheduler who sent the signals it is about to take (as a sigwait does, so a recorded
//! kill from outside is sent again in the replay), and makes the real read, which returns the
//! kernel's `signalfd_siginfo` records at once. When a caught signal ended the wait instead (none
//! of the mask is pending), the read fails with EINTR, or waits again when every handler that ran
//! asked for `SA_RESTART`, as the kernel's `-ERESTARTSYS` does. A non-blocking signalfd, or a
//! buffer too small for one record, is read for real at once: the kernel does not block then.
//!
//! A granted `poll` or `select` that watches a signalfd tells the senders of the signals its
//! masks hold ([`tell_watched`]), and the scheduler counts them as ending the wait, so a signal
//! from outside a recording is sent again before that decision in the replay. An `epoll_wait`
//! does not (its members are not known here): a recorded signal from outside that an epoll set
//! saw through a signalfd is sent in the replay only before the read that takes it, too late,
//! and the replay reports the divergence.
//!
//! Runs on a gated thread; stack buffers only.
use dara_abi::{Deadline, Request, NO_DEADLINE};
use libc::{c_int, c_void, sigset_t, size_t, ssize_t};

use super::set_errno;
use super::sigwait::set_word;
use crate::fd::{self, Kind};
use crate::gate::Gated;
use crate::{real, sys};

/// The kernel's signal-set size (64 signals).
const KERNEL_SIGSET_BYTES: u64 = 8;
/// `sizeof(struct signalfd_siginfo)`: a read shorter than one record fails with EINVAL.
const RECORD_BYTES: usize = 128;

/// `signalfd` in kernel form (`signalfd4`): the descriptor or `-errno`. A new descriptor is
/// noted as a signalfd; changing the mask of an existing one keeps its entry.
pub fn create(fd: c_int, mask: u64, flags: c_int) -> i64 {
    // SAFETY: signalfd4 reads one live 8-byte set.
    let rc = unsafe { sys::syscall(libc::SYS_signalfd4, &[fd as i64 as u64, &mask as *const u64 as u64, KERNEL_SIGSET_BYTES, flags as u64]) };
    if rc >= 0 && fd < 0 {
        fd::opened(rc as c_int, Kind::Signalfd);
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn signalfd(fd: c_int, mask: *const sigset_t, flags: c_int) -> c_int {
    let Some(word) = set_word(mask) else {
        // SAFETY: the program's own arguments, forwarded unchanged (the kernel says EFAULT).
        return unsafe { real::signalfd(fd, mask, flags) };
    };
    let rc = create(fd, word, flags);
    if rc < 0 {
        set_errno(-rc as c_int);
        return -1;
    }
    rc as c_int
}

/// The `sigmask:` of signalfd `fd` as its fdinfo shows it; `None` when it cannot be read.
fn mask_of(fd: c_int) -> Option<u64> {
    const PREFIX: &[u8] = b"/proc/self/fdinfo/";
    const KEY: &[u8] = b"sigmask:";
    let mut path = [0u8; 40];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    sys::decimal(fd as u32, &mut path[PREFIX.len()..]);
    // SAFETY: a NUL-terminated path in a local buffer (zero-filled past its end).
    let info = unsafe { sys::syscall(libc::SYS_open, &[path.as_ptr() as u64, (libc::O_RDONLY | libc::O_CLOEXEC) as u64]) };
    if info < 0 {
        return None;
    }
    let mut buf = [0u8; 512];
    // SAFETY: reading into a local buffer of its size.
    let got = unsafe { sys::syscall(libc::SYS_read, &[info as u64, buf.as_mut_ptr() as u64, buf.len() as u64]) };
    sys::close(info as i32);
    let text = buf.get(..usize::try_from(got).ok()?)?;
    let at = text.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = text[at..].iter().skip_while(|b| b.is_ascii_whitespace()).take_while(|b| b.is_ascii_hexdigit());
    Some(digits.fold(0u64, |v, &b| v << 4 | u64::from((b as char).to_digit(16).unwrap_or(0))))
}

/// Whether `fd` was opened `O_NONBLOCK` (its reads never block).
fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_GETFL as u64]) };
    flags >= 0 && flags & libc::O_NONBLOCK as i64 != 0
}

/// The signals of `set` pending for this thread or its process (and blocked by it: others would
/// have been delivered).
fn pending_of(set: u64) -> u64 {
    let mut pending: u64 = 0;
    // SAFETY: rt_sigpending writes one 8-byte set into a live local.
    unsafe { sys::syscall(libc::SYS_rt_sigpending, &[&mut pending as *mut u64 as u64, KERNEL_SIGSET_BYTES]) };
    pending & set
}

/// After a granted `poll`/`select` of the `n` entries at `fds`: tells the scheduler who sent the
/// signals its signalfd entries are about to report, as a sigwait does, so a signal from outside
/// that made one readable in a recording is sent again before that grant in its replay.
///
/// # Safety
/// `fds` points to `n` readable `pollfd`s (the program's own array, as poll got it).
pub unsafe fn tell_watched(gate: &Gated, fds: *const libc::pollfd, n: libc::nfds_t) {
    let mut masks = 0;
    for i in 0..n as usize {
        // SAFETY: the caller's array of `n` entries.
        let fd = unsafe { (*fds.add(i)).fd };
        if fd::is_signalfd(fd) {
            masks |= mask_of(fd).unwrap_or(0);
        }
    }
    if masks != 0 {
        gate.tell_waited_signals(masks & crate::gate::PARKED_MASK);
    }
}

/// A `read` of signalfd `fd` on a gated thread (see the module doc).
///
/// # Safety
/// `buf` and `len` are the program's own `read` arguments (`len` writable bytes at `buf`).
pub unsafe fn read(gate: Gated, fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    let mask = match mask_of(fd) {
        Some(mask) if len >= RECORD_BYTES && !nonblocking(fd) => mask & crate::gate::PARKED_MASK,
        // Does not block: an error, a short buffer, a non-blocking descriptor.
        _ => {
            drop(gate);
            // SAFETY: the program's own arguments, forwarded unchanged.
            return unsafe { real::read(fd, buf, len) };
        }
    };
    let mut gate = gate;
    loop {
        gate.post(Request::SigWait { set: mask, deadline: Deadline::from_ns(NO_DEADLINE) });
        gate.tell_waited_signals(mask);
        if pending_of(mask) != 0 {
            drop(gate);
            // SAFETY: the program's own arguments; a signal of the mask is pending for this
            // thread, so the read returns at once.
            return unsafe { real::read(fd, buf, len) };
        }
        // A caught signal ended the wait: its handler runs as the thread leaves the preload.
        let restarts = super::sigwait::run_handlers(&gate, true);
        if !restarts {
            drop(gate);
            set_errno(libc::EINTR);
            return -1;
        }
        drop(gate);
        match Gated::enter() {
            Some(again) => gate = again,
            None => {
                // SAFETY: as above; not gated any more, so dara does not hold the token for it.
                return unsafe { real::read(fd, buf, len) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signalfd_is_known_by_its_link_and_its_mask_is_read_from_fdinfo() {
        let mask: u64 = 1 << (libc::SIGUSR1 - 1) | 1 << (libc::SIGCHLD - 1);
        // A raw signalfd4, as a program that bypasses libc makes it: the table learns it on use.
        let fd = create(-1, mask, libc::SFD_CLOEXEC) as c_int;
        assert!(fd >= 0);
        fd::opened(fd, Kind::Unknown);
        assert!(fd::is_signalfd(fd), "recognised by its /proc/self/fd link");
        assert!(!fd::is_net(fd), "a signalfd is no network descriptor");
        assert_eq!(mask_of(fd), Some(mask));
        assert!(!nonblocking(fd));
        // A new mask for the same descriptor is what the kernel shows next.
        assert_eq!(create(fd, 1 << (libc::SIGUSR2 - 1), 0), i64::from(fd));
        assert_eq!(mask_of(fd), Some(1 << (libc::SIGUSR2 - 1)));
        sys::close(fd);
        fd::closed(fd);
        // A pipe is not one.
        let mut p = [0; 2];
        // SAFETY: pipe writes two descriptors into a live array.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        fd::opened(p[0], Kind::Unknown);
        assert!(!fd::is_signalfd(p[0]));
        assert_eq!(mask_of(p[0]), None);
        for f in p {
            sys::close(f);
            fd::closed(f);
        }
    }
}
