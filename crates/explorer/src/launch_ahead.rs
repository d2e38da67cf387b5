//! The next execution's program launched while this one runs (`execution::launch_ahead`).
//!
//! A search's executions are one after another on one CPU; the launch of each (the fork server's
//! copy or a fork + exec, the dynamic loading, the preload's start) used to sit between two of
//! them. A thread of its own launches execution k + 1's program on another CPU as soon as
//! execution k starts, and k + 1 finds it parked at its start barrier. The program runs none of
//! its code before that execution grants it, so nothing it can observe differs (the scheduler's
//! `execution/launched.rs`); only the wall time does.
//!
//! The thread lives as long as the search: a fork + exec'd program dies with the thread that
//! forked it (`PR_SET_PDEATHSIG`). A launch made for settings the execution does not run with (a
//! watch set that grew meanwhile) is killed and the program launched at the execution's start;
//! one that failed is launched again there, where its error is reported.
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use dara_scheduler::execution::{self, ExecutionConfig, Launched};

pub(crate) struct LaunchAhead {
    /// Execution settings to launch for; None once the search is over.
    requests: Option<Sender<ExecutionConfig>>,
    launched: Receiver<Option<Launched>>,
    /// A launch was asked for and not yet taken.
    pending: bool,
    thread: Option<JoinHandle<()>>,
}

impl LaunchAhead {
    /// A launcher for executions of `cfg` on `cpu` (another CPU than the executions': on theirs it
    /// would only take their time); None when such executions cannot be launched ahead.
    pub(crate) fn start(cfg: &ExecutionConfig, cpu: usize) -> Option<LaunchAhead> {
        if !execution::can_launch_ahead(cfg) {
            return None;
        }
        let (requests, asked) = channel::<ExecutionConfig>();
        let (made, launched) = channel();
        let thread = std::thread::Builder::new()
            .name("dara-launch-ahead".into())
            .spawn(move || {
                for cfg in asked {
                    if made.send(execution::launch_ahead(&cfg, cpu).ok()).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(LaunchAhead { requests: Some(requests), launched, pending: false, thread: Some(thread) })
    }

    /// Launches the program of an execution of `cfg` now, in the background.
    pub(crate) fn ask(&mut self, cfg: ExecutionConfig) {
        self.discard();
        if let Some(requests) = &self.requests {
            self.pending = requests.send(cfg).is_ok();
        }
    }

    /// The program launched by the last [`ask`](Self::ask), once it is launched; None if there
    /// is none or it failed.
    pub(crate) fn take(&mut self) -> Option<Launched> {
        if !std::mem::take(&mut self.pending) {
            return None;
        }
        self.launched.recv().ok().flatten()
    }

    /// Kills the program launched for an execution that will not run.
    fn discard(&mut self) {
        drop(self.take());
    }
}

impl Drop for LaunchAhead {
    fn drop(&mut self) {
        self.discard();
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
