//! The pids a program sees, by kind of run ([`PidPlan`]), and the ledger of births that notes them
//! in a recording and gives them out again in its replay.
//!
//! Every execution runs in a PID namespace of its own by default (the tracer's `pidns`): pids
//! start at 2 in every execution, so they repeat with the schedule. A recording made with
//! `--host-pids` runs with the host's pids instead. The pid file a server writes then names it for
//! outside tools (`kill -HUP $(cat pidfile)`), and a stale pid file left by an earlier run names a
//! dead process, not the program itself (under a namespace every run's server was pid 2, so a
//! daemon that checks "already running" with `kill(pid, 0)` found itself).
//!
//! The recording notes the pid each process and thread sees itself as, in the order they are born
//! (the trace's `pids`). Its replay runs in a namespace, and before each grant that may bear a
//! process or thread (`ThreadCreate`, `ProcessFork`) has the namespace's init set the next pid to
//! the recorded one (`ns_last_pid`; one thread runs at a time, so nothing else is born in between).
//! The first command gets its pid at the launch. Every birth is checked: a pid the replay could
//! not give (taken in the namespace, or no namespace because dara is not root) ends the replay as
//! diverged, naming both. `getppid` of a process whose parent was dara shows dara's recorded pid
//! (the preload's hook, `Header::parent_shown`), and `getsid` of a process in dara's session shows
//! the session id dara had (`Header::session_shown`; in the namespace the kernel says 0, the
//! leader being outside).
use std::sync::Arc;

use dara_model::trace::RecordedPids;

use super::target::Target;
use crate::choice::Divergence;

/// Where the pids a program sees come from.
#[derive(Clone, Debug, Default)]
pub enum PidPlan {
    /// A PID namespace of the execution's own: the first command is pid 2 (a search, a cluster
    /// run, a replay of either).
    #[default]
    Namespace,
    /// The host's pids, each birth's noted for the trace (a recording with `--host-pids`).
    Host,
    /// A namespace whose births get the pids of the recording this replays.
    Replay(Arc<RecordedPids>),
}

impl PidPlan {
    /// Whether the execution runs in a PID namespace.
    pub fn namespaced(&self) -> bool {
        !matches!(self, PidPlan::Host)
    }

    /// The pid the first command gets, in a replay of a recording.
    pub(super) fn first_pid(&self) -> Option<u32> {
        match self {
            PidPlan::Replay(recorded) => recorded.born.first().copied(),
            _ => None,
        }
    }

    /// What `getppid` shows a process whose parent is outside the namespace or its init (0: the
    /// real answer).
    pub(super) fn parent_shown(&self) -> u32 {
        match self {
            PidPlan::Replay(recorded) => recorded.parent,
            _ => 0,
        }
    }

    /// What `getsid` shows a process whose session leader is outside the namespace (0: the real
    /// answer).
    pub(super) fn session_shown(&self) -> u32 {
        match self {
            PidPlan::Replay(recorded) => recorded.session,
            _ => 0,
        }
    }
}

/// dara's session id: the session of the commands it launches with the host's pids (the launch
/// makes each the leader of a process group, not of a session).
fn own_session() -> u32 {
    // SAFETY: getsid(0) takes a plain integer and asks about the calling process.
    let sid = unsafe { libc::getsid(0) };
    u32::try_from(sid).unwrap_or(0)
}

/// The births of one execution, against its [`PidPlan`].
#[derive(Debug, Default)]
pub(super) struct PidLedger {
    plan: PidPlan,
    /// The pid or tid each process and thread saw itself as, in the order they were born (only
    /// kept when the plan needs it).
    born: Vec<u32>,
    /// [`PidLedger::cannot_give_pids`] has said so.
    told_no_namespace: bool,
}

impl PidLedger {
    pub(super) fn new(plan: PidPlan) -> PidLedger {
        PidLedger { plan, born: Vec::new(), told_no_namespace: false }
    }

    /// Whether births are noted or checked (not in a namespace of the execution's own).
    pub(super) fn notes_births(&self) -> bool {
        !matches!(self.plan, PidPlan::Namespace)
    }

    /// Whether this is the replay of a recording made with the host's pids.
    pub(super) fn replays(&self) -> bool {
        matches!(self.plan, PidPlan::Replay(_))
    }

    /// A replay without a PID namespace of its own (dara may not make one unless root) cannot
    /// give out the recorded pids: said once, and its births go unchecked.
    pub(super) fn cannot_give_pids(&mut self) {
        if !self.told_no_namespace {
            self.told_no_namespace = true;
            eprintln!("dara: this replay cannot give the program the pids it had in the recording (that needs a PID namespace, which needs root): a program that acts on its pids may diverge");
        }
    }

    /// Called before a grant that may bear a process or thread: in a replay, the next birth gets
    /// the pid it had in the recording, if the namespace has it free.
    pub(super) fn before_birth(&self, target: &mut dyn Target) {
        if let PidPlan::Replay(recorded) = &self.plan {
            if let Some(&pid) = recorded.born.get(self.born.len()) {
                // Whether it took is checked at the birth.
                target.set_next_pid(pid);
            }
        }
    }

    /// A process or thread was born (before decision `step`) and sees itself as `pid`. In a
    /// replay, the error says how that differs from the recording.
    pub(super) fn born(&mut self, step: u64, pid: u32, what: &str) -> Result<(), Divergence> {
        match &self.plan {
            PidPlan::Namespace => Ok(()),
            PidPlan::Host => {
                self.born.push(pid);
                Ok(())
            }
            PidPlan::Replay(recorded) => {
                let birth = self.born.len();
                self.born.push(pid);
                match recorded.born.get(birth) {
                    Some(&expected) if expected == pid => Ok(()),
                    Some(&expected) => Err(Divergence { step, expected: format!("birth {} ({what}) with pid {expected}, as recorded", birth + 1), seen: format!("pid {pid}: the replay's PID namespace could not give it pid {expected} (dara must run as root to give a replay the recording's pids)") }),
                    None => Err(Divergence { step, expected: format!("{} births, as recorded", recorded.born.len()), seen: format!("birth {} ({what}, pid {pid})", birth + 1) }),
                }
            }
        }
    }

    /// The pids the trace keeps: a recording's births, and dara's own pid (the parent of its
    /// first command and of the orphans it adopts); a replay's (a minimized trace) are the
    /// recording's again.
    pub(super) fn recorded(&self) -> Option<RecordedPids> {
        match &self.plan {
            PidPlan::Namespace => None,
            PidPlan::Host => Some(RecordedPids { parent: std::process::id(), session: own_session(), born: self.born.clone() }),
            PidPlan::Replay(recorded) => Some(RecordedPids::clone(recorded)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_notes_every_birth_and_a_namespace_none() {
        let mut host = PidLedger::new(PidPlan::Host);
        host.born(0, 41_310, "process").unwrap();
        host.born(0, 41_311, "thread").unwrap();
        assert_eq!(host.recorded().unwrap().born, vec![41_310, 41_311]);
        let mut namespace = PidLedger::new(PidPlan::Namespace);
        namespace.born(0, 2, "process").unwrap();
        assert!(namespace.recorded().is_none());
    }

    #[test]
    fn a_replay_checks_each_birth_against_the_recording() {
        let recorded = Arc::new(RecordedPids { parent: 41_207, session: 40_001, born: vec![41_310, 41_311] });
        let mut replay = PidLedger::new(PidPlan::Replay(recorded));
        replay.born(0, 41_310, "process").unwrap();
        let other = replay.born(0, 3, "thread").unwrap_err();
        assert!(other.expected.contains("pid 41311") && other.seen.contains("pid 3"), "{other:?}");
        let extra = replay.born(0, 41_312, "thread").unwrap_err();
        assert!(extra.expected.contains("2 births") && extra.seen.contains("birth 3"), "{extra:?}");
        assert_eq!(replay.recorded().unwrap().born, vec![41_310, 41_311], "a replay's trace keeps the recording's pids, not its own");
    }
}
