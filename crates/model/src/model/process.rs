//! Processes as the model sees them: who forked whom, and which children have exited and not
//! been collected, which is what decides when a `wait` may proceed and which child it collects.
//!
//! ```text
//!  add_process ─► Alive ──process_exited──► Zombie ──a parent's wait collects it──► Collected
//!                                  (no traced parent, or parent gone) ─► Collected
//! ```
//!
//! A `ProcessWait` (wait4/waitpid/waitid) is enabled when a matching child is a zombie (one `Run`
//! alternative per such child, in creation order: which exit the parent sees first is a choice),
//! when `WNOHANG` was asked, or when no child matches at all (ECHILD). Its result is the pid the
//! thread then collects for real, which cannot block because that child has exited.
use dara_abi::{ProcessTarget, WaitOptions};

use super::Model;
use crate::choice::ProcessId;

/// A child's life as its parent sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Life {
    Alive,
    /// Exited, waiting to be collected by its parent.
    Zombie,
    Collected,
}

#[derive(Clone, Debug)]
pub(crate) struct ProcessInfo {
    pub parent: Option<ProcessId>,
    pub life: Life,
}

const ECHILD: i64 = libc::ECHILD as i64;

impl Model {
    /// A process's main thread posted `ProcessStart`: `parent` is the traced process that forked
    /// it (`None` for the launched command and for orphans nobody announced).
    pub fn add_process(&mut self, process: ProcessId, parent: Option<ProcessId>) {
        self.processes.insert(process, ProcessInfo { parent, life: Life::Alive });
    }

    /// The process is gone: a zombie for its traced parent to collect, if it has one that is
    /// still alive, else collected already.
    pub(super) fn mark_exited(&mut self, process: ProcessId) {
        let parent_alive = self
            .processes
            .get(&process)
            .and_then(|p| p.parent)
            .and_then(|parent| self.processes.get(&parent))
            .is_some_and(|parent| parent.life == Life::Alive);
        if let Some(p) = self.processes.get_mut(&process) {
            if p.life == Life::Alive {
                p.life = if parent_alive { Life::Zombie } else { Life::Collected };
            }
        }
        // Its own zombie children will never be collected by it.
        for child in self.processes.values_mut().filter(|c| c.parent == Some(process) && c.life == Life::Zombie) {
            child.life = Life::Collected;
        }
    }

    /// The children of `parent` a wait for `target` may collect: exited ones in creation order,
    /// and whether any matching child exists at all.
    fn wait_candidates(&self, parent: ProcessId, target: ProcessTarget) -> (Vec<ProcessId>, bool) {
        let matching = self
            .processes
            .iter()
            .filter(|(_, c)| c.parent == Some(parent) && c.life != Life::Collected)
            .filter(|(&id, _)| target.matches(id));
        let mut exited = Vec::new();
        let mut any = false;
        for (&id, child) in matching {
            any = true;
            if child.life == Life::Zombie {
                exited.push(id);
            }
        }
        (exited, any)
    }

    /// Run alternatives of a pending `ProcessWait`: one per exited child, one for an immediate
    /// answer (WNOHANG, or ECHILD), none while it must block.
    pub(super) fn wait_alternatives(&self, process: ProcessId, target: ProcessTarget, options: WaitOptions) -> u32 {
        let (exited, any) = self.wait_candidates(process, target);
        if !exited.is_empty() {
            exited.len() as u32
        } else {
            u32::from(!any || options.nohang)
        }
    }

    /// Applies alternative `alt` of a `ProcessWait`: the pid to collect, 0 (WNOHANG, nothing
    /// exited) or -ECHILD.
    pub(super) fn apply_wait(&mut self, process: ProcessId, target: ProcessTarget, options: WaitOptions, alt: u32) -> i64 {
        let (exited, any) = self.wait_candidates(process, target);
        let Some(&child) = exited.get(alt as usize) else {
            return if any { 0 } else { -ECHILD };
        };
        let Some(info) = self.processes.get_mut(&child) else { return -ECHILD };
        if !options.nowait {
            info.life = Life::Collected;
        }
        i64::from(child) + 1
    }

    /// For the deadlock report: what a blocked wait waits for.
    pub(super) fn wait_detail(&self, process: ProcessId, target: ProcessTarget) -> String {
        let live: Vec<String> = self
            .processes
            .iter()
            .filter(|(_, c)| c.parent == Some(process) && c.life == Life::Alive)
            .filter(|(&id, _)| target.matches(id))
            .map(|(id, _)| format!("process {id}"))
            .collect();
        format!("waits for a child to exit ({} still running)", live.join(", "))
    }
}
