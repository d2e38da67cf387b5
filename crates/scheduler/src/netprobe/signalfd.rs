//! Whether a target's `signalfd` is readable for the thread waiting on it, asked of `/proc`
//! instead of a duplicate (docs/processes.md, "signalfd").
//!
//! The kernel answers a signalfd's poll for `current`: a duplicate in dara's process would show
//! dara's own pending signals, never the program's. So readiness is computed as the kernel's
//! `signalfd_poll` computes it for the waiting thread: some signal of the descriptor's mask
//! (`sigmask:` in its fdinfo, read each time: it follows `dup`, `fork` and a later
//! `signalfd(fd, mask, ..)` with nothing to keep) is pending for that thread or its process
//! (`SigPnd | ShdPnd` in `/proc/<pid>/task/<tid>/status`). Both are read at a quiet point, so the
//! answer is the one the thread's own call would get when granted next.
//!
//! An epoll set that watches a signalfd needs care: polling the set's duplicate from dara's
//! process evaluates every member on its ready list as dara, and the kernel drops a member it
//! finds not ready from that list (`__ep_eventpoll_poll`), so a probe would hide a signal the
//! program's own `epoll_wait` must report. A set is therefore first asked whether one of its
//! signalfd members (anonymous-inode members whose fdinfo has a `sigmask:`) asks for input that
//! is pending ([`ready_in_epoll`]); only when none is does the caller poll the duplicate, which
//! then drops nothing the program could see.
use std::os::fd::{AsRawFd, OwnedFd};

use crate::procfs;

/// The mask of descriptor `fd` of `pid` if it is a signalfd (`sigmask:` in its fdinfo).
pub(super) fn mask(pid: u32, fd: i32) -> Option<u64> {
    let info = procfs::descriptor_info(pid, fd)?;
    info.lines().find_map(|l| l.strip_prefix("sigmask:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// The signals pending for thread `tid` of `pid` or for its process (0 when it is gone).
fn pending(pid: u32, tid: u32) -> u64 {
    procfs::signals(pid, tid).map_or(0, |s| s.pending)
}

/// The `revents` a `poll` by thread `tid` of `pid` asking for `events` would see on signalfd
/// `fd`: `POLLIN` when a signal of its mask is pending, else nothing.
pub(super) fn revents(pid: u32, tid: u32, fd: i32, events: libc::c_short) -> libc::c_short {
    let readable = events & libc::POLLIN != 0 && mask(pid, fd).is_some_and(|m| pending(pid, tid) & m != 0);
    if readable {
        libc::POLLIN
    } else {
        0
    }
}

/// Whether epoll set `epfd` of `pid` (`set` is dara's duplicate of it) watches a signalfd for
/// input that thread `tid` would read now (see the module doc).
pub(super) fn ready_in_epoll(pid: u32, tid: u32, epfd: i32, set: &OwnedFd) -> bool {
    let pending = pending(pid, tid);
    if pending == 0 {
        return false;
    }
    // SAFETY: fstat fills a plain struct for a descriptor we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(set.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    // The epoll set is an anonymous inode itself: its members that share its inode are too.
    let anon = st.st_ino;
    let Some(info) = procfs::descriptor_info(pid, epfd) else { return false };
    info.lines().filter_map(member).any(|m| m.inode == anon && m.events & libc::EPOLLIN as u32 != 0 && mask(pid, m.fd).is_some_and(|mask| pending & mask != 0))
}

/// One `tfd:` line of an epoll set's fdinfo.
#[derive(Debug, PartialEq, Eq)]
struct Member {
    fd: i32,
    events: u32,
    inode: u64,
}

/// Parses `tfd: 5 events: 19 data: 5  pos:0 ino:40d sdev:e` (events and inode in hex).
fn member(line: &str) -> Option<Member> {
    let rest = line.strip_prefix("tfd:")?;
    let mut words = rest.split_whitespace();
    let fd = words.next()?.parse().ok()?;
    let (mut events, mut inode) = (None, None);
    while let Some(word) = words.next() {
        match word {
            "events:" => events = words.next().and_then(|v| u32::from_str_radix(v, 16).ok()),
            w if w.starts_with("ino:") => inode = u64::from_str_radix(&w[4..], 16).ok(),
            _ => {}
        }
    }
    Some(Member { fd, events: events?, inode: inode? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoll_member_line_gives_its_descriptor_events_and_inode() {
        let m = member("tfd:        5 events:       19 data:                5  pos:0 ino:40d sdev:e");
        assert_eq!(m, Some(Member { fd: 5, events: 0x19, inode: 0x40d }));
        assert_eq!(member("pos:\t0"), None);
    }

    #[test]
    fn a_signalfd_is_readable_for_a_thread_exactly_when_a_signal_of_its_mask_is_pending() {
        // A thread of our own blocks SIGUSR2 and makes it pending for itself; its signalfd for
        // SIGUSR2 is then readable for it, and one for SIGWINCH is not.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: plain calls on this thread's own mask and a local set.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                let usr2 = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGWINCH);
                let winch = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
                let tid = libc::syscall(libc::SYS_gettid) as u32;
                let before = revents(std::process::id(), tid, usr2, libc::POLLIN);
                libc::syscall(libc::SYS_tgkill, std::process::id(), tid, libc::SIGUSR2);
                tx.send((tid, usr2, winch, before)).unwrap();
                let _ = done_rx.recv();
                libc::close(usr2);
                libc::close(winch);
                // Take the signal so it never reaches the test harness.
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                let mut sig = 0;
                libc::sigwait(&set, &mut sig);
            }
        });
        let (tid, usr2, winch, before) = rx.recv().unwrap();
        let pid = std::process::id();
        assert_eq!(before, 0, "nothing pending yet");
        assert_eq!(mask(pid, usr2), Some(1 << (libc::SIGUSR2 - 1)));
        assert_eq!(revents(pid, tid, usr2, libc::POLLIN), libc::POLLIN);
        assert_eq!(revents(pid, tid, usr2, libc::POLLOUT), 0, "a signalfd is never writable");
        assert_eq!(revents(pid, tid, winch, libc::POLLIN), 0);
        done_tx.send(()).unwrap();
        worker.join().unwrap();
    }
}
