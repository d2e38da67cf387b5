//! poll, ppoll, select, pselect, epoll_wait, epoll_pwait: a `NetPoll`/`NetEpollWait` scheduling
//! point each. The scheduler reads the `pollfd` array (or the epoll set) from outside, enables the
//! call when an entry is ready, offers its timeout as a timer (which may fire although data is on
//! its way), and may choose to let the program see only one of several ready entries. Once
//! granted, the hook runs the real call with a zero timeout.
//!
//! A caught signal the thread's mask lets through may end a wait: the scheduler then grants it
//! with [`INTERRUPTED`] (its `Interrupt` choice), the call fails with `EINTR` as the kernel's
//! does (these calls are never restarted, `SA_RESTART` or not), and the handler runs as the
//! thread leaves the preload.
//!
//! `ppoll`/`pselect`/`epoll_pwait` wait under their own signal mask, as in the kernel: a caught
//! signal that mask lets through ends the wait ([`gate::WaitMask`]), and its handler runs under
//! that mask before the call returns `EINTR` ([`interrupted_under`]). GNU make's jobserver waits
//! so: SIGCHLD blocked everywhere but in its `pselect`.
//!
//! `select` is turned into a `pollfd` array on this thread's stack (no allocation) and back.
use dara_abi::select_sets::SETS;
use dara_abi::{net_flags, Addr, Deadline, NetFlags, Request, NO_DEADLINE};
use libc::{c_int, nfds_t, pollfd, sigset_t, timespec, timeval};

use super::set_errno;
use super::sigwait::{set_word, INTERRUPTED};
use crate::gate::{self, Gated, WaitMask};
use crate::{real, sys, vclock};

/// `-1` with `errno` `EINTR`: what the call returns when a signal ended it.
fn interrupted() -> c_int {
    set_errno(libc::EINTR);
    -1
}

/// Ends a masked wait (`ppoll`, `pselect`, `epoll_pwait`) that returned `rc`: when a signal
/// interrupted it, the handlers its mask lets through run under that mask
/// ([`interrupted_under`]).
fn end_masked_wait(gate: Gated, rc: c_int, wait_mask: Option<u64>) -> c_int {
    // SAFETY: this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    match wait_mask {
        Some(mask) if rc < 0 && errno == libc::EINTR => interrupted_under(gate, mask),
        _ => rc,
    }
}

/// A wait under `wait_mask` that a signal ended: the scheduler is told who sent the signals that
/// mask lets through, the thread leaves the preload (its own mask back, maybe blocking them),
/// and the mask flips to `wait_mask` and back, so their handlers run under it as the kernel's
/// would; then `EINTR`.
fn interrupted_under(gate: Gated, wait_mask: u64) -> c_int {
    let program_mask = gate::program_mask().unwrap_or(u64::MAX);
    // Those the thread's own mask lets through are told as it leaves the preload (drop).
    gate.tell_signals(wait_mask | !program_mask);
    drop(gate);
    let wait_mask = super::signal::keep_traps_open(wait_mask);
    let mut own: u64 = 0;
    // SAFETY: rt_sigprocmask reads and writes one live 8-byte set each; pending signals the
    // wait mask lets through run their handlers as it returns.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &wait_mask as *const u64 as u64, &mut own as *mut u64 as u64, 8]) };
    // SAFETY: restores the mask read above.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &own as *const u64 as u64, 0, 8]) };
    interrupted()
}

/// `select` handles descriptors below this (glibc's FD_SETSIZE).
const FD_SETSIZE: usize = 1024;

fn deadline(gate: &Gated, timeout_ns: Option<u64>) -> u64 {
    timeout_ns.map_or(NO_DEADLINE, |t| gate.deadline_after(t))
}

fn ms_timeout(ms: c_int) -> Option<u64> {
    (ms >= 0).then(|| ms as u64 * 1_000_000)
}

/// The model-driven poll of `n` entries at `fds`; `timeout_ns` `None` waits forever.
fn poll_entries(gate: &Gated, fds: *mut pollfd, n: nfds_t, timeout_ns: Option<u64>) -> c_int {
    let nonblock = timeout_ns == Some(0);
    let flags = if nonblock { net_flags::NONBLOCK } else { 0 };
    let deadline = if nonblock { NO_DEADLINE } else { deadline(gate, timeout_ns) };
    loop {
        let g = gate.post(Request::NetPoll { fds: Addr(fds as u64), count: n, deadline: Deadline::from_ns(deadline), flags: NetFlags(flags) });
        if g.result == INTERRUPTED {
            return interrupted();
        }
        if g.result == 0 && !nonblock {
            for i in 0..n as usize {
                // SAFETY: the caller's array of `n` entries.
                unsafe { (*fds.add(i)).revents = 0 };
            }
            return 0; // the timer fired
        }
        // SAFETY: the caller's array of `n` entries.
        unsafe { super::signalfd::tell_watched(gate, fds, n) };
        // SAFETY: the caller's array; zero timeout, so the call does not block.
        let r = unsafe { real::poll(fds, n, 0) };
        if r == 0 && !nonblock {
            continue;
        }
        if r > 0 && g.result >= 2 {
            keep_only(fds, n, (g.result - 2) as usize);
            return 1;
        }
        return r;
    }
}

/// Clears the `revents` of every ready entry but the `keep`-th ready one.
fn keep_only(fds: *mut pollfd, n: nfds_t, keep: usize) {
    let mut seen = 0;
    for i in 0..n as usize {
        // SAFETY: the caller's array of `n` entries.
        let e = unsafe { &mut *fds.add(i) };
        if e.revents != 0 {
            if seen != keep {
                e.revents = 0;
            }
            seen += 1;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    match Gated::enter() {
        Some(gate) => poll_entries(&gate, fds, n, ms_timeout(timeout)),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::poll(fds, n, timeout) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::ppoll(fds, n, timeout, mask) };
    };
    // SAFETY: null or the caller's timespec.
    let t = unsafe { timeout.as_ref() }.map(|t| vclock::timespec_ns(t).unwrap_or(0));
    let wait_mask = set_word(mask);
    let rc = {
        let _waits_under = WaitMask::apply(wait_mask);
        poll_entries(&gate, fds, n, t)
    };
    end_masked_wait(gate, rc, wait_mask)
}

/// `select` on `n` descriptors through a `pollfd` array on the stack.
fn select_sets(gate: &Gated, n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout_ns: Option<u64>) -> c_int {
    let n = (n.max(0) as usize).min(FD_SETSIZE);
    let mut entries = [pollfd { fd: -1, events: 0, revents: 0 }; FD_SETSIZE];
    let mut count = 0usize;
    let isset = |set: *mut libc::fd_set, fd: usize| -> bool {
        // SAFETY: null or the caller's fd_set; fd < FD_SETSIZE.
        !set.is_null() && unsafe { libc::FD_ISSET(fd as c_int, set) }
    };
    let sets = [r, w, e];
    for fd in 0..n {
        let events = SETS.iter().zip(sets).filter(|(_, set)| isset(*set, fd)).fold(0, |events, ((asks, _), _)| events | asks);
        if events != 0 {
            entries[count] = pollfd { fd: fd as c_int, events, revents: 0 };
            count += 1;
        }
    }
    let rc = poll_entries(gate, entries.as_mut_ptr(), count as nfds_t, timeout_ns);
    if rc < 0 {
        return rc;
    }
    for set in sets {
        if !set.is_null() {
            // SAFETY: the caller's fd_set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut ready = 0;
    for p in &entries[..count] {
        for (&(asks, marks), set) in SETS.iter().zip(sets) {
            if !set.is_null() && p.events & asks != 0 && p.revents & marks != 0 {
                // SAFETY: the caller's fd_set; fd < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                ready += 1;
            }
        }
    }
    ready
}

#[no_mangle]
pub unsafe extern "C" fn select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *mut timeval) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::select(n, r, w, e, timeout) };
    };
    // SAFETY: null or the caller's timeval.
    let t = unsafe { timeout.as_ref() }.map(|t| t.tv_sec.max(0) as u64 * 1_000_000_000 + t.tv_usec.max(0) as u64 * 1_000);
    let rc = select_sets(&gate, n, r, w, e, t);
    if rc == 0 {
        // SAFETY: null or the caller's timeval; Linux leaves the time not slept, here none.
        if let Some(t) = unsafe { timeout.as_mut() } {
            *t = timeval { tv_sec: 0, tv_usec: 0 };
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::pselect(n, r, w, e, timeout, mask) };
    };
    // SAFETY: null or the caller's timespec.
    let t = unsafe { timeout.as_ref() }.map(|t| vclock::timespec_ns(t).unwrap_or(0));
    let wait_mask = set_word(mask);
    let rc = {
        let _waits_under = WaitMask::apply(wait_mask);
        select_sets(&gate, n, r, w, e, t)
    };
    end_masked_wait(gate, rc, wait_mask)
}

fn epoll_entries(gate: &Gated, ep: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int {
    let nonblock = timeout == 0;
    let flags = if nonblock { net_flags::NONBLOCK } else { 0 };
    let deadline = if nonblock { NO_DEADLINE } else { deadline(gate, ms_timeout(timeout)) };
    loop {
        let g = gate.post(Request::NetEpollWait { epoll: ep, deadline: Deadline::from_ns(deadline), flags: NetFlags(flags) });
        if g.result == INTERRUPTED {
            return interrupted();
        }
        if g.result == 0 && !nonblock {
            return 0; // the timer fired
        }
        // SAFETY: the caller's event array; zero timeout, so the call does not block.
        let r = unsafe { real::epoll_wait(ep, events, max, 0) };
        if r == 0 && !nonblock {
            continue;
        }
        if r < 0 {
            // SAFETY: this thread's errno, set by the real call.
            set_errno(unsafe { *libc::__errno_location() });
        }
        if r > 1 {
            // SAFETY: the kernel filled the first `r` entries of the caller's array.
            sort_events(unsafe { core::slice::from_raw_parts_mut(events, r as usize) });
        }
        return r;
    }
}

/// Puts ready events in the order of their `data` (the program's cookie: a descriptor or, with
/// ASLR off, an address that is the same in every run). The kernel reports them in the order
/// their readiness callbacks ran, which two descriptors made ready at one quiet point (a new
/// connection and a closing client) can take in either order from run to run; any order is one
/// epoll may give. `sort_unstable` is in core and sorts in place: no allocation.
fn sort_events(events: &mut [libc::epoll_event]) {
    events.sort_unstable_by_key(|e| e.u64);
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(ep: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int {
    match Gated::enter() {
        Some(gate) => epoll_entries(&gate, ep, events, max, timeout),
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::epoll_wait(ep, events, max, timeout) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(ep: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::epoll_pwait(ep, events, max, timeout, mask) };
    };
    let wait_mask = set_word(mask);
    let rc = {
        let _waits_under = WaitMask::apply(wait_mask);
        epoll_entries(&gate, ep, events, max, timeout)
    };
    end_masked_wait(gate, rc, wait_mask)
}
