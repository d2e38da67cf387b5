//! `select` and `pselect6` on the ptrace path, the preload's way (crates/preload/src/hooks/poll.rs,
//! `select_sets`): the descriptor sets become a `pollfd` array, posted as the same `NetPoll` a
//! `poll` of those entries posts, and the sets are written back from what the poll found.
//!
//! The array lives in the tracee, below its stack pointer and the 128-byte red zone (where a
//! signal frame would go; at most 1024 entries, 8 KiB), since the scheduler reads a poll's
//! entries from the program's memory. Once granted, the call is run as `poll(array, count, 0)`
//! and looked at on return ([`came_back`]): a blocking select that found nothing is made again
//! (its own number and arguments back, so it stops at the filter and posts again); otherwise
//! each set is rewritten from the entries' `revents` (the grant's choice of one of several ready
//! entries applied first, as for a poll) and the call returns the number of bits set, as the
//! kernel's. A timeout the grant says fired clears the sets, zeroes the program's timeout (the
//! time not slept, as Linux writes it) and returns 0: a virtual-time deadline, as a poll's.
//!
//! `pselect6`'s signal mask: the post leaves it in the slot (a pending signal it lets through
//! ends the wait: `agent/signals.rs`), and the granted call runs as a `ppoll` under it, so that
//! a signal that ended the wait is handled under it and the call fails with EINTR, as the
//! kernel's.
use dara_abi::select_sets::SETS;
use dara_abi::{Addr, Request};

use super::calls::{Action, Then, Timeout};
use crate::ptrace::remote::{self, Syscall};

/// `select` handles descriptors below this (the kernel's and libc's `FD_SETSIZE` for `fd_set`).
const FD_SETSIZE: usize = 1024;
/// `struct pollfd`: descriptor, events, revents (at byte 6).
const POLLFD_BYTES: usize = 8;
/// The bytes below the stack pointer the program may use without moving it.
const RED_ZONE: u64 = 128;

/// A `select`/`pselect6` posted as a poll of the entries at `scratch`: what finishing it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectCall {
    /// The call (`SYS_select` or `SYS_pselect6`) and its arguments as the program made it.
    pub call: Syscall,
    /// The `pollfd` array written below the thread's stack, and its length.
    pub scratch: u64,
    pub count: u64,
    /// Whether the program may block (a timeout that is not zero).
    pub blocking: bool,
    /// `pselect6`'s signal mask (the address of its set; 0 for none): the call runs as a `ppoll`
    /// under it, so that a signal ending the wait is handled under that mask.
    pub sigmask: u64,
}

impl SelectCall {
    /// The descriptor count the sets cover (`nfds`, at most `FD_SETSIZE`).
    fn nfds(&self) -> usize {
        (self.call.args[0] as i32).clamp(0, FD_SETSIZE as i32) as usize
    }

    /// The read, write and except sets (null when the program gave none).
    fn sets(&self) -> [u64; 3] {
        [self.call.args[1], self.call.args[2], self.call.args[3]]
    }

    /// The bytes of a set the kernel reads and writes: `nfds` bits in whole longs.
    fn set_bytes(&self) -> usize {
        self.nfds().div_ceil(64) * 8
    }
}

/// What `select`/`pselect6` call `call` of a thread of process `pid` (stack pointer `rsp`,
/// last grant at `last_now`) means; None for any other call.
pub fn decode(call: Syscall, pid: i32, rsp: u64, last_now: u64) -> Option<Action> {
    let a = call.args;
    let timeout = match call.nr {
        libc::SYS_select => timeval_arg(pid, a[4]),
        libc::SYS_pselect6 => Timeout::of_timespec(pid, a[4]),
        _ => return None,
    };
    let timeout = match timeout {
        Ok(t) => t,
        Err(e) => return Some(Action::Answer(e)),
    };
    if (a[0] as i32) < 0 {
        return Some(Action::Answer(-(libc::EINVAL as i64)));
    }
    let sigmask = if call.nr == libc::SYS_pselect6 { super::signals::pselect_mask_pointer(pid, a[5]).unwrap_or(0) } else { 0 };
    let mut select = SelectCall { call, scratch: 0, count: 0, blocking: timeout != Timeout::Never, sigmask };
    let mut sets = Vec::new();
    for addr in select.sets() {
        let mut bits = vec![0u8; select.set_bytes()];
        if addr != 0 && remote::read(pid, addr, &mut bits).is_err() {
            return Some(Action::Answer(-(libc::EFAULT as i64)));
        }
        sets.push(bits);
    }
    let mut entries = Vec::new();
    for fd in 0..select.nfds() {
        let events = SETS.iter().zip(&sets).filter(|(_, bits)| bits[fd / 8] & (1 << (fd % 8)) != 0).fold(0i16, |e, ((asks, _), _)| e | asks);
        if events != 0 {
            entries.extend_from_slice(&(fd as i32).to_le_bytes());
            entries.extend_from_slice(&events.to_le_bytes());
            entries.extend_from_slice(&[0, 0]);
        }
    }
    select.count = (entries.len() / POLLFD_BYTES) as u64;
    select.scratch = (rsp - RED_ZONE - entries.len() as u64) & !15;
    if remote::write(pid, select.scratch, &entries).is_err() {
        return Some(Action::Answer(-(libc::EFAULT as i64)));
    }
    let (deadline, flags) = timeout.deadline_and_flags(last_now);
    Some(Action::Post(Request::NetPoll { fds: Addr(select.scratch), count: select.count, deadline, flags }, Then::Select(select)))
}

/// `select`'s `timeval` at `addr` as a timeout; `Err(-errno)` for a bad one.
fn timeval_arg(pid: i32, addr: u64) -> Result<Timeout, i64> {
    match remote::read_timespec(pid, addr) {
        Ok(None) => Ok(Timeout::Forever),
        Ok(Some((sec, usec))) if sec >= 0 && (0..1_000_000).contains(&usec) => Ok(Timeout::of_ns(Some((sec as u64).saturating_mul(1_000_000_000).saturating_add(usec as u64 * 1_000)))),
        Ok(Some(_)) => Err(-(libc::EINVAL as i64)),
        Err(_) => Err(-(libc::EFAULT as i64)),
    }
}

/// The call a granted select runs as, and its arguments: `poll(entries, count, 0)`, or
/// `ppoll(entries, count, &zero, mask, 8)` under a `pselect6`'s mask (the zeroed `timespec` just
/// below the entries). None when that `timespec` cannot be written.
pub fn as_poll(pid: i32, select: &SelectCall) -> Option<(i64, Vec<u64>)> {
    if select.sigmask == 0 {
        return Some((libc::SYS_poll, vec![select.scratch, select.count, 0]));
    }
    let zero = select.scratch - 16;
    remote::write(pid, zero, &[0u8; 16]).ok()?;
    Some((libc::SYS_ppoll, vec![select.scratch, select.count, zero, select.sigmask, 8]))
}

/// A select whose grant says its timeout fired: its sets cleared, its timeout zeroed (the time
/// not slept); the call's result.
pub fn timed_out(pid: i32, select: &SelectCall) -> i64 {
    let zeros = vec![0u8; select.set_bytes()];
    for addr in select.sets().into_iter().filter(|&a| a != 0) {
        if remote::write(pid, addr, &zeros).is_err() {
            return -(libc::EFAULT as i64);
        }
    }
    if select.call.args[4] != 0 {
        let _ = remote::write(pid, select.call.args[4], &[0u8; 16]);
    }
    0
}

/// The zero-timeout `poll` a granted select ran as returned `result`: the select's own result.
/// `keep`: the grant's choice of one of several ready entries. None: a blocking select found
/// nothing, and is to be made again.
pub fn came_back(pid: i32, select: &SelectCall, result: i64, keep: Option<usize>) -> Option<i64> {
    if result < 0 {
        return Some(result);
    }
    let mut entries = vec![0u8; select.count as usize * POLLFD_BYTES];
    if remote::read(pid, select.scratch, &mut entries).is_err() {
        return Some(-(libc::EFAULT as i64));
    }
    let revents = |e: &[u8]| i16::from_le_bytes([e[6], e[7]]);
    if entries.chunks(POLLFD_BYTES).any(|e| revents(e) & libc::POLLNVAL != 0) {
        return Some(-(libc::EBADF as i64)); // a closed descriptor in a set, as the kernel says
    }
    let mut sets = vec![vec![0u8; select.set_bytes()]; 3];
    let mut ready = 0;
    let mut seen = 0;
    for e in entries.chunks(POLLFD_BYTES) {
        let (fd, events, got) = (i32::from_le_bytes(e[..4].try_into().expect("4 bytes")) as usize, i16::from_le_bytes([e[4], e[5]]), revents(e));
        if got == 0 {
            continue;
        }
        seen += 1;
        if keep.is_some_and(|k| k != seen - 1) {
            continue;
        }
        for ((asks, marks), bits) in SETS.iter().zip(sets.iter_mut()) {
            if events & asks != 0 && got & marks != 0 {
                bits[fd / 8] |= 1 << (fd % 8);
                ready += 1;
            }
        }
    }
    if ready == 0 && select.blocking {
        return None;
    }
    for (addr, bits) in select.sets().into_iter().zip(&sets).filter(|(a, _)| *a != 0) {
        if remote::write(pid, addr, bits).is_err() {
            return Some(-(libc::EFAULT as i64));
        }
    }
    Some(ready)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// An `fd_set` with `fds` set.
    fn fd_set(fds: &[i32]) -> [u64; 16] {
        let mut set = [0u64; 16];
        for &fd in fds {
            set[fd as usize / 64] |= 1 << (fd % 64);
        }
        set
    }

    #[test]
    fn a_select_posts_the_poll_of_its_sets_and_writes_back_what_was_ready() {
        let pid = std::process::id() as i32;
        let (reader, mut writer) = std::io::pipe().expect("pipe");
        let (r, w) = (reader.as_raw_fd(), writer.as_raw_fd());
        let mut reads = fd_set(&[r]);
        let mut writes = fd_set(&[w]);
        // The scratch array goes below this "stack pointer": a buffer of ours.
        let stack = vec![0u8; 4096];
        let rsp = stack.as_ptr() as u64 + 4096;
        let n = r.max(w) as u64 + 1;
        let call = Syscall { nr: libc::SYS_select, args: [n, reads.as_mut_ptr() as u64, writes.as_mut_ptr() as u64, 0, 0, 0] };
        let Some(Action::Post(Request::NetPoll { fds, count, .. }, Then::Select(select))) = decode(call, pid, rsp, 0) else { panic!("not a poll") };
        assert_eq!((count, fds.0, select.blocking), (2, select.scratch, true));
        assert!(select.scratch + 16 <= rsp - RED_ZONE);
        // SAFETY: the two entries decode wrote into `stack`.
        let entries = unsafe { std::slice::from_raw_parts_mut(select.scratch as *mut libc::pollfd, 2) };
        assert_eq!(entries.iter().map(|e| (e.fd, e.events)).collect::<Vec<_>>(), vec![(r.min(w), if r < w { libc::POLLIN } else { libc::POLLOUT }), (r.max(w), if r < w { libc::POLLOUT } else { libc::POLLIN })]);
        // Only the write end is ready; the poll found it.
        // SAFETY: the live array of 2 entries.
        assert_eq!(unsafe { libc::poll(entries.as_mut_ptr(), 2, 0) }, 1);
        assert_eq!(came_back(pid, &select, 1, None), Some(1));
        assert_eq!((reads, writes), (fd_set(&[]), fd_set(&[w])));
        // Nothing ready for a blocking select: made again.
        reads = fd_set(&[r]);
        let call = Syscall { nr: libc::SYS_select, args: [n, reads.as_mut_ptr() as u64, 0, 0, 0, 0] };
        let Some(Action::Post(_, Then::Select(select))) = decode(call, pid, rsp, 0) else { panic!("not a poll") };
        assert_eq!(came_back(pid, &select, 0, None), None);
        std::io::Write::write_all(&mut writer, b"x").expect("write");
        // SAFETY: the live array of 1 entry.
        assert_eq!(unsafe { libc::poll(select.scratch as *mut libc::pollfd, 1, 0) }, 1);
        assert_eq!(came_back(pid, &select, 1, None), Some(1));
        assert_eq!(reads, fd_set(&[r]));
        assert_eq!(timed_out(pid, &select), 0);
        assert_eq!(reads, fd_set(&[]));
    }

    #[test]
    fn a_zero_timeout_never_blocks_and_a_bad_one_is_refused() {
        let pid = std::process::id() as i32;
        let stack = vec![0u8; 256];
        let rsp = stack.as_ptr() as u64 + 256;
        let zero = libc::timeval { tv_sec: 0, tv_usec: 0 };
        let call = Syscall { nr: libc::SYS_select, args: [0, 0, 0, 0, &zero as *const libc::timeval as u64, 0] };
        let Some(Action::Post(Request::NetPoll { count: 0, flags, .. }, Then::Select(select))) = decode(call, pid, rsp, 0) else { panic!("not a poll") };
        assert!(!select.blocking && flags.0 & dara_abi::net_flags::NONBLOCK != 0);
        let bad = libc::timeval { tv_sec: 0, tv_usec: 1_000_000 };
        let call = Syscall { nr: libc::SYS_select, args: [0, 0, 0, 0, &bad as *const libc::timeval as u64, 0] };
        assert_eq!(decode(call, pid, rsp, 0), Some(Action::Answer(-(libc::EINVAL as i64))));
    }
}
