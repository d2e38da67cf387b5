//! The reaper: one thread per execution that waits for every descendant of dara (its children,
//! and orphans reparented to it as subreaper) and reports each exit. It ends when no child is
//! left, which is how [`crate::ProcessTree::kill_all`] knows the tree is gone.
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

/// Starts the reaper. Returns the exit-event queue and a channel that closes when the reaper
/// found no child left.
pub(crate) fn start(on_exit: impl Fn() + Send + 'static) -> (Receiver<ExitEvent>, Receiver<()>) {
    let (tx, rx) = channel();
    let (done_tx, done_rx) = channel();
    std::thread::Builder::new()
        .name("dara-reaper".into())
        .spawn(move || {
            loop {
                let mut status = 0;
                // SAFETY: waitpid writes the status into our local integer.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
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
            // Wake the scheduler before signalling `done`: once `done` is seen, the owner may free
            // what `on_exit` touches.
            on_exit();
            let _ = done_tx.send(());
        })
        .expect("spawning the reaper thread");
    (rx, done_rx)
}

/// Pids of processes whose parent is dara (children and adopted orphans), from /proc.
pub(crate) fn adopted_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent_of(*pid) == Some(me))
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}
