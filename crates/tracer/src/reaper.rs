//! The reaper: one thread per execution that waits for the processes of that execution's
//! process group (the command, and orphans of the group reparented to dara as subreaper) and
//! reports each exit. It ends when no child of the group is left, which is how
//! [`crate::ProcessTree::kill_all`] knows the tree is gone. Waiting on the group, not on any
//! child, keeps parallel executions (`--jobs`) from reaping each other's processes.
use std::sync::mpsc::{channel, Receiver};

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

/// Starts the reaper for process group `pgid`. Returns the exit-event queue and a channel that
/// closes when the reaper found no child of the group left.
pub(crate) fn start(pgid: u32, on_exit: impl Fn() + Send + 'static) -> (Receiver<ExitEvent>, Receiver<()>) {
    let (tx, rx) = channel();
    let (done_tx, done_rx) = channel();
    std::thread::Builder::new()
        .name("dara-reaper".into())
        .spawn(move || {
            loop {
                let mut status = 0;
                // SAFETY: waitpid writes the status into our local integer.
                let pid = unsafe { libc::waitpid(-(pgid as i32), &mut status, libc::__WALL) };
                if pid < 0 {
                    let err = std::io::Error::last_os_error();
                    if err.raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    break; // ECHILD: nothing left to reap
                }
                let status = if libc::WIFSIGNALED(status) {
                    ExitStatus::Signal(libc::WTERMSIG(status))
                } else {
                    ExitStatus::Code(libc::WEXITSTATUS(status))
                };
                let _ = tx.send(ExitEvent { pid: pid as u32, status });
                on_exit();
            }
            // Signal `done` before the wake-up, so the woken scheduler sees it. `on_exit` must
            // therefore own what it touches (the scheduler passes a closure holding its region).
            let _ = done_tx.send(());
            on_exit();
        })
        .expect("spawning the reaper thread");
    (rx, done_rx)
}

