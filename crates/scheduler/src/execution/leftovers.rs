//! What an ended execution leaves behind, dropped on a thread of its own during a search.
//!
//! Once an execution's processes are all reaped and its output read, its verdict is known, but
//! the kernel still has work to do when dara lets go of the rest: closing the namespace's
//! descriptors tears down its mount namespace (the private /proc is unmounted), unmapping the
//! region frees its pages. About 90 µs per execution on the project's machines that the next
//! execution need not wait for. Nothing of it is observable: the processes are dead, and the next
//! execution has its own namespace and region.
//!
//! The thread ends when the last [`Leftovers`] handle is dropped, after it has dropped everything
//! sent to it (dropping the handle waits for that). What is sent must not own the last reference
//! to anything whose drop waits for something sent later: a finished process tree no longer
//! holds the search's namespace pool or fork server (the pool's drop waits until every
//! namespace it made is dropped, which would be behind it on this very thread).
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// A thread that drops what executions leave behind.
pub struct Leftovers {
    to_drop: Mutex<Option<Sender<Box<dyn Send>>>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Leftovers")
    }
}

impl Leftovers {
    /// Starts the thread, on `cpus` if any; None if it cannot be started (executions then drop
    /// their own).
    pub fn start(cpus: &[usize]) -> Option<Leftovers> {
        let (to_drop, dropped) = channel::<Box<dyn Send>>();
        let cpus = cpus.to_vec();
        let thread = std::thread::Builder::new()
            .name("dara-leftovers".into())
            .spawn(move || {
                dara_tracer::placement::pin_to(0, &cpus);
                for leftover in dropped {
                    drop(leftover);
                }
            })
            .ok()?;
        Some(Leftovers { to_drop: Mutex::new(Some(to_drop)), thread: Some(thread) })
    }

    /// Drops `leftover` on the thread (here, if the thread is gone).
    pub(super) fn drop_later(&self, leftover: Box<dyn Send>) {
        // A failed send hands the leftover back inside its error, dropped here.
        if let Ok(Some(to_drop)) = self.to_drop.lock().as_deref() {
            let _ = to_drop.send(leftover);
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if let Ok(mut to_drop) = self.to_drop.lock() {
            to_drop.take();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
