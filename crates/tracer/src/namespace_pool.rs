//! Namespaces made ahead: while one execution of a search runs, a thread of dara's makes the next
//! execution's PID namespace ([`crate::pidns`]), on another CPU when the machine has one, so no
//! execution waits for its namespace's init to be cloned and to mount its /proc.
//!
//! A namespace an execution left empty comes back ([`PidNamespace::give_back`]) and is offered
//! again once its init has started its pids over ([`crate::pidns`]'s `reuse`); the maker makes a
//! new one only when none came back, or one that came back cannot serve again. In a search with
//! launches ahead, three namespaces take turns: one in use, one holding the next execution's
//! program, one coming back. The maker holds at most one ready. An init dies with the thread that
//! cloned it (`PR_SET_PDEATHSIG` follows the parent thread), so the maker thread outlives every
//! namespace it handed out: it ends only once the pool is dropped and the last of them is gone.
use std::sync::mpsc::{channel, sync_channel, Receiver, TryRecvError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::pidns::PidNamespace;

/// A source of fresh namespaces for a search's executions.
pub struct NamespacePool {
    ready: Mutex<Option<Receiver<std::io::Result<PidNamespace>>>>,
    /// Namespaces made so far (the maker counts them).
    made: Arc<AtomicU64>,
    maker: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for NamespacePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NamespacePool")
    }
}

impl NamespacePool {
    /// Starts the maker thread (on `cpus` if any: executions' CPUs are better left alone), which
    /// begins on the first namespace at once.
    pub fn start(cpus: &[usize]) -> std::io::Result<NamespacePool> {
        let cpus = cpus.to_vec();
        let made = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&made);
        // A rendezvous: the maker makes one namespace and waits until it is taken.
        let (hand_over, ready) = sync_channel(0);
        let maker = std::thread::Builder::new().name("dara-namespaces".into()).spawn(move || {
            crate::placement::pin_to(0, &cpus);
            let handed_out = Arc::new(());
            let (give_back, came_back) = channel::<PidNamespace>();
            loop {
                let offer = match reset_one(&came_back) {
                    Some(ns) => Ok(ns),
                    None => {
                        counted.fetch_add(1, Ordering::Relaxed);
                        PidNamespace::create().map(|ns| ns.kept_alive_by(Arc::clone(&handed_out)))
                    }
                };
                if hand_over.send(offer.map(|ns| ns.returning_to(give_back.clone()))).is_err() {
                    break; // the pool is gone; the one offered here is dropped (its init killed)
                }
            }
            // The inits of namespaces still in use die with this thread: wait for them (those
            // given back meanwhile are dropped here).
            while Arc::strong_count(&handed_out) > 1 {
                while let Ok(ns) = came_back.try_recv() {
                    drop(ns);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })?;
        Ok(NamespacePool { ready: Mutex::new(Some(ready)), made, maker: Some(maker) })
    }

    /// The next namespace (made ahead, or being made now).
    pub fn take(&self) -> std::io::Result<PidNamespace> {
        let ready = self.ready.lock().map_err(|_| std::io::Error::other("namespace pool lock poisoned"))?;
        match ready.as_ref().map(Receiver::recv) {
            Some(Ok(made)) => made,
            _ => Err(std::io::Error::other("dara's namespace maker thread ended")),
        }
    }

    /// How many namespaces the pool has made so far (one made ahead and never used included).
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }
}

/// The first namespace given back that can serve again, reset; None when none is waiting. The
/// others tried are dropped (killed).
fn reset_one(came_back: &Receiver<PidNamespace>) -> Option<PidNamespace> {
    loop {
        match came_back.try_recv() {
            Ok(mut ns) => {
                if ns.reset() {
                    return Some(ns);
                }
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => return None,
        }
    }
}

impl Drop for NamespacePool {
    fn drop(&mut self) {
        if let Ok(mut ready) = self.ready.lock() {
            ready.take();
        }
        if let Some(maker) = self.maker.take() {
            let _ = maker.join();
        }
    }
}
