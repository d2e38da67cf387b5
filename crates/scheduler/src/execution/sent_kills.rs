//! Telling a SIGKILL from outside from one the execution sent.
//!
//! A process of the execution that dies of SIGKILL was killed either from inside (a traced
//! process's `kill`, which is a scheduling point; dara's own crash fault, judged before this) or
//! from outside: `kill -9` by someone else, the kernel's OOM killer. The kernel does not say who
//! sent a SIGKILL, and a process killed by it cannot look, so the execution keeps the processes
//! a SIGKILL was sent to from inside, and any other SIGKILL death came from outside. Such a run
//! is no bug of the program: it neither replays nor minimizes, since the kill is not part of the
//! schedule. [`Outcome::KilledFromOutside`] ends the execution, and the search (the machine, or
//! someone on it, is killing the program: going on would only record more of that).
use std::collections::BTreeSet;

use crate::choice::ProcessId;
use crate::outcome::Outcome;

/// The processes some traced process sent a SIGKILL to, in this execution.
#[derive(Default)]
pub(super) struct SentKills(BTreeSet<ProcessId>);

impl SentKills {
    /// A traced process's granted `kill` sends `signal` to `process`.
    pub(super) fn note(&mut self, process: ProcessId, signal: i32) {
        if signal == libc::SIGKILL {
            self.0.insert(process);
        }
    }

    /// The outcome of `process` dying of `signal`, if that signal was a SIGKILL nobody inside
    /// the execution sent.
    pub(super) fn outside_kill(&self, process: ProcessId, signal: i32) -> Option<Outcome> {
        (signal == libc::SIGKILL && !self.0.contains(&process)).then_some(Outcome::KilledFromOutside { process })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sigkill_nobody_inside_sent_came_from_outside() {
        let mut sent = SentKills::default();
        sent.note(1, libc::SIGKILL);
        sent.note(2, libc::SIGTERM);
        assert_eq!(sent.outside_kill(1, libc::SIGKILL), None);
        assert_eq!(sent.outside_kill(2, libc::SIGKILL), Some(Outcome::KilledFromOutside { process: 2 }));
        assert_eq!(sent.outside_kill(3, libc::SIGKILL), Some(Outcome::KilledFromOutside { process: 3 }));
        assert_eq!(sent.outside_kill(3, libc::SIGTERM), None);
    }
}
