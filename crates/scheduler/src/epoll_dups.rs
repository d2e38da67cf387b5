//! Duplicates of the target's epoll descriptors, kept from one probe to the next.
//!
//! A recorded server parks every event-loop thread in `epoll_wait`, and each readiness view is
//! taken again after every step that touched the network: with memcached's four workers and its
//! dispatcher that was five `pidfd_getfd` + `poll` + `close` per request. An epoll set is the one
//! kind of descriptor dara may hold on to: it keeps no watched file alive (closing a watched file
//! takes it out of every set), so holding it changes nothing the program can see. Sockets and pipes
//! are never kept (a duplicate would keep a connection open after the program closed it).
//!
//! A kept duplicate is used again for a new wait only while the target's descriptor still names
//! the same open file: `kcmp(KCMP_FILE)`, one system call in place of two and no descriptor
//! allocated. A program that closed the set and made another under the same number gets a fresh
//! duplicate. Within one wait (from the thread's post to its grant) the set is checked once: a
//! thread blocked in `epoll_wait` waits on the set its descriptor named when it called, even if
//! another thread closes the descriptor meanwhile, so the duplicate checked at the wait's first
//! view is the set the thread waits on until the wait ends ([`EpollDups::wait_ended`]). That
//! saves the `kcmp` of every later view of the same wait (memcached: five a request).
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::choice::ThreadId;

/// `KCMP_FILE` from `<linux/kcmp.h>`: compare two descriptors' open files.
const KCMP_FILE: libc::c_long = 0;
/// Most duplicates kept at once: a program that makes epoll sets by the thousand (one per call)
/// must not fill dara's descriptor table; past this, a duplicate is closed after its probe.
const MAX_KEPT: usize = 64;

/// Kept duplicates by (kernel pid, the target's descriptor number).
#[derive(Default)]
pub struct EpollDups {
    kept: BTreeMap<(u32, i32), OwnedFd>,
    /// Threads whose current wait was checked against the kept duplicate of (pid, fd): looked at
    /// again without `kcmp` until the wait ends.
    checked: BTreeMap<ThreadId, (u32, i32)>,
    /// dara's own pid (`getpid` is a system call: asked once).
    me: Option<u32>,
}

impl EpollDups {
    /// Takes the kept duplicate of descriptor `fd` of process `pid` out for a view of `thread`'s
    /// wait on it: without a look when this wait was checked already, else if the descriptor
    /// still names the same file (a stale one is closed). Hand it back with [`EpollDups::keep`].
    pub fn take(&mut self, thread: ThreadId, pid: u32, fd: i32) -> Option<OwnedFd> {
        let dup = self.kept.remove(&(pid, fd))?;
        if self.checked.get(&thread) == Some(&(pid, fd)) {
            return Some(dup);
        }
        let me = *self.me.get_or_insert_with(std::process::id);
        // SAFETY: kcmp takes two pids, a type and two descriptor numbers; it reads nothing of ours.
        let same = unsafe { libc::syscall(libc::SYS_kcmp, me as libc::c_long, pid as libc::c_long, KCMP_FILE, dup.as_raw_fd() as libc::c_long, fd as libc::c_long) } == 0;
        same.then_some(dup)
    }

    /// Keeps `dup`, a duplicate of descriptor `fd` of process `pid` that `thread` waits on, for
    /// the next probe (closes it when [`MAX_KEPT`] are kept already); the wait counts as checked.
    pub fn keep(&mut self, thread: ThreadId, pid: u32, fd: i32, dup: OwnedFd) {
        if self.kept.len() < MAX_KEPT || self.kept.contains_key(&(pid, fd)) {
            self.kept.insert((pid, fd), dup);
            self.checked.insert(thread, (pid, fd));
        }
    }

    /// `thread`'s wait ended (granted, timed out, interrupted): its next wait is checked again.
    pub fn wait_ended(&mut self, thread: ThreadId) {
        self.checked.remove(&thread);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn epoll() -> OwnedFd {
        // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a descriptor epoll_create1 just returned, owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    #[test]
    fn a_new_wait_uses_a_kept_duplicate_while_the_descriptor_names_the_same_set() {
        let me = std::process::id();
        let set = epoll();
        let fd = set.as_raw_fd();
        let mut dups = EpollDups::default();
        assert!(dups.take(0, me, fd).is_none());
        dups.keep(0, me, fd, set.try_clone().expect("dup"));
        dups.wait_ended(0);
        let kept = dups.take(0, me, fd).expect("the same set");
        dups.keep(0, me, fd, kept);
        dups.wait_ended(0);
        // The same number now names another set: the kept duplicate is stale for a new wait.
        let other = epoll();
        // SAFETY: dup2 onto a descriptor this test owns.
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
        assert!(dups.take(0, me, fd).is_none());
        assert!(dups.take(0, me, fd).is_none(), "a stale duplicate is dropped");
        drop(set);
    }

    #[test]
    fn one_wait_keeps_the_set_it_was_checked_against() {
        let me = std::process::id();
        let set = epoll();
        let fd = set.as_raw_fd();
        let first = set.try_clone().expect("dup");
        let mut dups = EpollDups::default();
        dups.keep(1, me, fd, set.try_clone().expect("dup"));
        // Another thread points the number at another set while thread 1 still waits.
        let other = epoll();
        // SAFETY: dup2 onto a descriptor this test owns.
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
        let kept = dups.take(1, me, fd).expect("thread 1's wait is on the set it named when it called");
        dups.keep(1, me, fd, kept);
        // Thread 2's wait is checked: the duplicate is stale for it.
        assert!(dups.take(2, me, fd).is_none());
        // So is thread 1's next wait.
        dups.keep(1, me, fd, first);
        dups.wait_ended(1);
        assert!(dups.take(1, me, fd).is_none());
        drop(set);
    }

    #[test]
    fn no_more_than_max_kept_are_kept() {
        let me = std::process::id();
        let sets: Vec<OwnedFd> = (0..MAX_KEPT + 2).map(|_| epoll()).collect();
        let mut dups = EpollDups::default();
        for set in &sets {
            dups.keep(0, me, set.as_raw_fd(), set.try_clone().expect("dup"));
        }
        assert_eq!(dups.kept.len(), MAX_KEPT);
        assert!(dups.take(0, me, sets[MAX_KEPT].as_raw_fd()).is_none());
    }
}
