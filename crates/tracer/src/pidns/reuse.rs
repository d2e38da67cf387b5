//! A namespace used again by a later execution, instead of a new one made and torn down for each.
//!
//! Making an execution's namespaces (a clone with `CLONE_NEWPID | CLONE_NEWNS`, three mounts) and
//! tearing them down (the init's death, the unmounts) cost about 300 µs of CPU an execution, on
//! the CPU that also forks each execution's program: the larger part of that CPU's work in a
//! search of a small program. A PID namespace can serve again once everything of an execution is
//! gone, if its pids start over: its init writes 1 to `/proc/sys/kernel/ns_last_pid` (the kernel's
//! counter for the writer's own namespace, `CONFIG_CHECKPOINT_RESTORE`), and the next process
//! born there is pid 2 again, as in a new namespace.
//!
//! The program must find the same namespace it would find new: a namespace is used again only if
//! - its init is alive and has no child left (every orphan reaped: their pids are free),
//! - its mount table is unchanged since it was set up (a program run as root may mount things:
//!   `/proc/<init>/mounts` polls `POLLPRI` after any change),
//! - its private /dev/shm is empty (what a program leaves there would be seen by the next),
//!
//! and its init confirms the reset. Anything else, and it is killed as before. (The same word of
//! the init's gives a replay's births their recorded pids: [`PidNamespace::set_next_pid`].) The process tree
//! hands its namespace back only when it saw every process reaped and no orphan (`all_gone`);
//! a tree killed, or one whose init was reaped (a cluster's group), never does.
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use super::init::{RESET_DONE, RESET_SIGNAL};
use super::PidNamespace;

/// How long dara waits for the init's answer (it answers at once; past this the namespace is
/// dropped, not waited for).
const RESET_LIMIT: Duration = Duration::from_secs(1);

/// `f_type` of a tmpfs (`TMPFS_MAGIC`).
const TMPFS_MAGIC: i64 = 0x0102_1994;

impl PidNamespace {
    /// Readies the namespace for another execution; false if it cannot serve again (the caller
    /// drops it).
    pub(crate) fn reset(&mut self) -> bool {
        if self.reaped || crate::procfs::pidfd_exited(&self.init_fd) || self.has_orphans() {
            return false;
        }
        if mounts_changed(&self.mounts) || !self.shm.as_ref().is_none_or(empty_tmpfs) {
            return false;
        }
        // The next process born there is pid 2 again, as in a new namespace.
        self.set_last_pid(1)
    }

    /// Makes `pid` the pid of the next process or thread born in the namespace, if it is free
    /// there (a replay gives its births the pids they had in the recording); false if the init
    /// could not set it.
    pub fn set_next_pid(&mut self, pid: u32) -> bool {
        pid >= 2 && !self.reaped && self.set_last_pid(pid - 1)
    }

    /// Has the init write `last_pid` to the namespace's `ns_last_pid` and waits for its answer.
    fn set_last_pid(&mut self, last_pid: u32) -> bool {
        let Some(shared) = self.stack.shared() else { return false };
        shared.last_pid.store(last_pid, std::sync::atomic::Ordering::Release);
        // (An init that ended since cannot answer: the wait below then gives up.)
        crate::procfs::pidfd_signal(&self.init_fd, RESET_SIGNAL);
        let mut pfd = libc::pollfd { fd: self.reset_done.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll reads and writes the one live pollfd.
        if unsafe { libc::poll(&mut pfd, 1, RESET_LIMIT.as_millis() as i32) } != 1 {
            return false;
        }
        let mut answer = [0u8];
        // SAFETY: read writes at most one byte into the live local.
        let n = unsafe { libc::read(self.reset_done.as_raw_fd(), answer.as_mut_ptr().cast(), 1) };
        n == 1 && answer[0] == RESET_DONE
    }

    /// Hands the namespace back to the pool that made it, to serve a later execution; without a
    /// pool (or once it is gone) it is dropped. Call only once every process of the execution is
    /// reaped and the init has no orphan.
    pub fn give_back(mut self) {
        if let Some(pool) = self.returns_to.take() {
            // A pool that has ended gives it back: dropped here.
            let _ = pool.send(self);
        }
    }
}

/// Whether the mount table `/proc/<init>/mounts` (open as `mounts`) changed since it was opened.
fn mounts_changed(mounts: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd { fd: mounts.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
    // SAFETY: poll reads and writes the one live pollfd; a zero timeout never waits.
    unsafe { libc::poll(&mut pfd, 1, 0) == 1 && pfd.revents & (libc::POLLPRI | libc::POLLERR) != 0 }
}

/// Whether the tmpfs `dir` is on holds nothing but its root directory.
fn empty_tmpfs(dir: &OwnedFd) -> bool {
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into the live local.
    let ok = unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) } == 0;
    ok && st.f_type == TMPFS_MAGIC && st.f_files.saturating_sub(st.f_ffree) == 1
}
