//! The keeper of a tree without a PID namespace: a tiny process that outlives dara only to kill
//! what dara started.
//!
//! In a namespace, the init's death takes every process there with it, so nothing survives a
//! SIGKILL of dara. A recording runs with the host's pids, without one (the scheduler's `pids`),
//! and so does any run when dara may not make namespaces. A parked thread ends its own process
//! once it sees dara gone, but a thread that computes without a scheduling point never looks, and
//! `PR_SET_PDEATHSIG` reaches only dara's own children, not the grandchild a daemon's double fork
//! leaves.
//!
//! So the tree gets a keeper: cloned into dara's memory and descriptor table (`CLONE_VM |
//! CLONE_FILES`, like the init, see [`crate::own_stack`]), in a process group of its own (a signal
//! to dara's group does not reach it), it waits on a pidfd of dara. When dara is gone it kills
//! every process dara told it of, through pidfds dara opened (they stay open in the descriptor
//! table it shares, and never name a recycled pid), and the root's process group, then exits.
//! When the tree ends normally dara kills the keeper first.
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use dara_abi::MAX_PROCESSES;
use syscalls::{syscall, Sysno};

use crate::own_stack::{kill_and_reap, OwnStack};

/// What dara and its keeper share.
#[repr(C)]
#[derive(Debug)]
struct KeeperShared {
    /// A pidfd of dara (readable once every thread of dara has ended).
    dara: i32,
    /// The process group of the tree's root (0: not known yet).
    group: AtomicI32,
    /// A pidfd of each of the tree's processes, by logical process (-1: none).
    pidfds: [AtomicI32; MAX_PROCESSES],
}

/// A running keeper; dropping it stops it (the tree ended normally).
#[derive(Debug)]
pub(crate) struct Keeper {
    pid: u32,
    pidfd: OwnedFd,
    /// dara's pidfd, which the keeper polls (it shares the table).
    _dara: OwnedFd,
    stack: OwnStack<KeeperShared>,
}

impl Keeper {
    /// Starts the keeper.
    pub(crate) fn start() -> std::io::Result<Keeper> {
        let dara = crate::procfs::pidfd_open(std::process::id()).ok_or_else(std::io::Error::last_os_error)?;
        let shared = KeeperShared { dara: dara.as_raw_fd(), group: AtomicI32::new(0), pidfds: [const { AtomicI32::new(-1) }; MAX_PROCESSES] };
        let mut stack = OwnStack::new(shared)?;
        // SAFETY: `keeper_entry` makes raw system calls only and exits rather than return; the
        // stack is released only once the keeper is reaped (`Drop`).
        let pid = match unsafe { stack.clone_process(keeper_entry, libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD) } {
            Ok(pid) => pid,
            Err(e) => {
                stack.release();
                return Err(e);
            }
        };
        let Some(pidfd) = crate::procfs::pidfd_open(pid) else {
            let e = std::io::Error::last_os_error();
            kill_and_reap(pid);
            stack.release();
            return Err(e);
        };
        Ok(Keeper { pid, pidfd, _dara: dara, stack })
    }

    /// The root's process group, killed whole if dara dies.
    pub(crate) fn keep_group(&self, pgid: u32) {
        if let Some(shared) = self.stack.shared() {
            shared.group.store(pgid as i32, Ordering::Release);
        }
    }

    /// Process `process` (logical) is reached through `pidfd`, which dara keeps open while the
    /// process may live.
    pub(crate) fn keep(&self, process: usize, pidfd: i32) {
        if let Some(slot) = self.stack.shared().and_then(|s| s.pidfds.get(process)) {
            slot.store(pidfd, Ordering::Release);
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        crate::procfs::pidfd_kill(&self.pidfd);
        // Bounded: a SIGKILLed process that touches no file ends at once.
        if crate::procfs::pidfd_exited_within(&self.pidfd, std::time::Duration::from_secs(10)) {
            kill_and_reap(self.pid);
            self.stack.release();
        }
        // Otherwise its stack stays mapped: it must not vanish under a live process.
    }
}

/// Where the cloned keeper starts: `arg` points at its [`KeeperShared`].
extern "C" fn keeper_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the KeeperShared `OwnStack::new` wrote, which lives as long as the keeper.
    let shared = unsafe { &*(arg as *const KeeperShared) };
    // SAFETY: every call takes integers or pointers to live locals; raw system calls only.
    unsafe {
        let _ = syscall!(Sysno::setpgid, 0, 0);
        // Until dara has ended: its pidfd becomes readable. A descriptor that is no pidfd of
        // dara's any more (never expected) makes the keeper leave rather than kill on a guess.
        loop {
            let mut pfd = libc::pollfd { fd: shared.dara, events: libc::POLLIN, revents: 0 };
            let ready = syscall!(Sysno::poll, &mut pfd as *mut libc::pollfd, 1, -1i32).is_ok_and(|n| n == 1);
            if ready && pfd.revents & libc::POLLNVAL != 0 {
                let _ = syscall!(Sysno::exit, 0);
            }
            if ready && pfd.revents & libc::POLLIN != 0 {
                break;
            }
        }
        for slot in &shared.pidfds {
            let fd = slot.load(Ordering::Acquire);
            if fd >= 0 {
                let _ = syscall!(Sysno::pidfd_send_signal, fd, libc::SIGKILL, 0, 0);
            }
        }
        let group = shared.group.load(Ordering::Acquire);
        if group > 0 {
            let _ = syscall!(Sysno::kill, -group, libc::SIGKILL);
        }
        let _ = syscall!(Sysno::exit, 0);
    }
    0
}
