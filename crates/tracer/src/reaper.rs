//! The reaper: one thread per execution that waits for the processes of that execution's
//! process group (the command, and orphans of the group reparented to dara as subreaper) and
//! reports each exit. It ends when no child of the group is left, which is how
//! [`crate::ProcessTree::kill_all`] knows the tree is gone. Waiting on the group, not on any
//! child, keeps parallel executions (`--jobs`) from reaping each other's processes.
//!
//! The thread does nothing but wait, and it says which process it is reaping and since when
//! ([`Reaping`]): the kernel's release of a process (`wait4` -> `release_task` ->
//! `proc_flush_pid`, which invalidates the process's /proc entries) has been seen to take
//! seconds to minutes on a loaded machine, and whoever waits for the reaper must be able to
//! tell "the kernel is still releasing pid N" from "a process survived SIGKILL".
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A process of the tree ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitEvent {
    pub pid: u32,
    pub status: ExitStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    /// From a status as `wait(2)` encodes it.
    pub fn from_wait(status: i32) -> ExitStatus {
        if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        }
    }
}

/// Which process the reaper is releasing right now (its `wait4` is in the kernel), and since
/// when. Written by the reaper thread, read by anyone.
#[derive(Debug, Default)]
pub struct Reaping {
    /// The pid being reaped; 0 when the reaper is not inside a reap.
    pid: AtomicU32,
    /// When that reap began, in microseconds after [`epoch`] (plus one, so never 0).
    since_us: AtomicU64,
    /// The reaper thread's kernel tid (0 until it runs): where a slow reap sits in the kernel is
    /// read from its /proc entries.
    tid: AtomicU32,
    /// The exit status of the process being reaped, known before the reap (`waitid` with
    /// `WNOWAIT`), as `wait(2)` encodes it.
    status: AtomicI32,
}

/// A fixed instant all [`Reaping`] times are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Reaping {
    fn begin(&self, pid: u32, status: i32) {
        self.status.store(status, Ordering::Relaxed);
        self.since_us.store(epoch().elapsed().as_micros() as u64 + 1, Ordering::Relaxed);
        self.pid.store(pid, Ordering::Release);
    }

    fn end(&self) {
        self.pid.store(0, Ordering::Release);
    }

    /// The exit status of `pid` if the reaper is reaping it now: the status is known before the
    /// kernel's release of the process ends, which can take minutes (see the module doc).
    pub fn status_of(&self, pid: u32) -> Option<ExitStatus> {
        (self.pid.load(Ordering::Acquire) == pid && pid != 0).then(|| ExitStatus::from_wait(self.status.load(Ordering::Relaxed)))
    }

    /// The reaper thread's kernel tid, once it runs.
    pub fn thread(&self) -> Option<u32> {
        Some(self.tid.load(Ordering::Relaxed)).filter(|&t| t != 0)
    }

    /// The process being reaped and for how long, if a reap is under way.
    pub fn current(&self) -> Option<(u32, Duration)> {
        let pid = self.pid.load(Ordering::Acquire);
        let since = self.since_us.load(Ordering::Relaxed);
        (pid != 0 && since != 0).then(|| (pid, epoch().elapsed().saturating_sub(Duration::from_micros(since - 1))))
    }
}

/// What the reaper hands back: exit events, a channel that closes when no child of the group
/// is left, and what it is reaping now.
pub(crate) struct Reaper {
    pub(crate) exits: Receiver<ExitEvent>,
    pub(crate) done: Receiver<()>,
    pub(crate) reaping: Arc<Reaping>,
}

/// Starts the reaper for process group `pgid`, on `cpu` (the tree's) if given.
pub(crate) fn start(pgid: u32, cpu: Option<usize>, on_exit: impl Fn() + Send + 'static) -> Reaper {
    let (tx, exits) = channel();
    let (done_tx, done) = channel();
    let reaping = Arc::new(Reaping::default());
    let published = reaping.clone();
    crate::helper_threads::run("dara-reaper", cpu, move || {
            // SAFETY: gettid takes no arguments and cannot fail.
            published.tid.store(unsafe { libc::gettid() } as u32, Ordering::Relaxed);
            loop {
                // Which child has ended, without reaping it yet, so the reap itself can be named.
                let (pid, ended_with) = match ended_child(pgid) {
                    Ok(ended) => ended,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(_) => break, // ECHILD: nothing left to reap
                };
                published.begin(pid, ended_with);
                let mut status = 0;
                // Reaps whichever child of the group is first now (that one, unless another came
                // first): on the group, never on a pid that could have been recycled in between,
                // and without blocking, so a child someone else reaped meanwhile (the scheduler
                // reaps killed strays) never leaves a reap "under way" that is only a wait.
                // SAFETY: waitpid writes the status into our local integer.
                let reaped = unsafe { libc::waitpid(-(pgid as i32), &mut status, libc::WNOHANG | libc::__WALL) };
                published.end();
                if reaped <= 0 {
                    continue; // reaped elsewhere, or nothing left: the next waitid tells
                }
                let _ = tx.send(ExitEvent { pid: reaped as u32, status: ExitStatus::from_wait(status) });
                on_exit();
            }
            // Signal `done` before the wake-up, so the woken scheduler sees it. `on_exit` must
            // therefore own what it touches (the scheduler passes a closure holding its region).
            let _ = done_tx.send(());
            on_exit();
        })
        .expect("starting the reaper thread");
    Reaper { exits, done, reaping }
}

/// Waits until a child in process group `pgid` has ended and returns its pid and exit status
/// (as `wait(2)` encodes it), leaving it unreaped (`waitid(P_PGID, WEXITED | WNOWAIT)`).
fn ended_child(pgid: u32) -> std::io::Result<(u32, i32)> {
    // SAFETY: an all-zero siginfo is a valid value for waitid to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into the local siginfo.
    let rc = unsafe { libc::waitid(libc::P_PGID, pgid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT | libc::__WALL) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: after a successful waitid without WNOHANG the siginfo holds a SIGCHLD record.
    let (pid, status) = unsafe { (info.si_pid() as u32, info.si_status()) };
    Ok((pid, crate::procfs::wait_encoding(info.si_code, status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reap_under_way_is_named_with_its_duration() {
        let r = Reaping::default();
        assert_eq!(r.current(), None);
        r.begin(4242, 0);
        let (pid, first) = r.current().expect("a reap is under way");
        assert_eq!(pid, 4242);
        let (_, later) = r.current().unwrap();
        assert!(later >= first, "its duration only grows");
        r.end();
        assert_eq!(r.current(), None);
    }
}
