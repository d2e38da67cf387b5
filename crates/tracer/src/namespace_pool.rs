//! Namespaces made ahead: while one execution of a search runs, a thread of dara's makes the next
//! execution's PID namespace ([`crate::pidns`]), on another CPU when the machine has one, so no
//! execution waits for its namespace's init to be cloned and to mount its /proc.
//!
//! Each namespace is used once (a PID namespace cannot be emptied and reused: its pids go on
//! counting). The maker holds at most one ready. An init dies with the thread that cloned it
//! (`PR_SET_PDEATHSIG` follows the parent thread), so the maker thread outlives every namespace
//! it handed out: it ends only once the pool is dropped and the last of them is gone.
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::pidns::PidNamespace;

/// A source of fresh namespaces for a search's executions.
pub struct NamespacePool {
    ready: Mutex<Option<Receiver<std::io::Result<PidNamespace>>>>,
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
        // A rendezvous: the maker makes one namespace and waits until it is taken.
        let (hand_over, ready) = sync_channel(0);
        let maker = std::thread::Builder::new().name("dara-namespaces".into()).spawn(move || {
            crate::placement::pin_to(0, &cpus);
            let handed_out = Arc::new(());
            loop {
                let made = PidNamespace::create().map(|ns| ns.kept_alive_by(Arc::clone(&handed_out)));
                if hand_over.send(made).is_err() {
                    break; // the pool is gone; the one made here is dropped (its init killed)
                }
            }
            // The inits of namespaces still in use die with this thread: wait for them.
            while Arc::strong_count(&handed_out) > 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        })?;
        Ok(NamespacePool { ready: Mutex::new(Some(ready)), maker: Some(maker) })
    }

    /// The next namespace (made ahead, or being made now).
    pub fn take(&self) -> std::io::Result<PidNamespace> {
        let ready = self.ready.lock().map_err(|_| std::io::Error::other("namespace pool lock poisoned"))?;
        match ready.as_ref().map(Receiver::recv) {
            Some(Ok(made)) => made,
            _ => Err(std::io::Error::other("dara's namespace maker thread ended")),
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
