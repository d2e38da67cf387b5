//! Telling a death by a signal from outside from the program's own.
//!
//! Two kinds of signal death are not the program's doing:
//! - **A SIGKILL from outside.** A process of the execution that dies of SIGKILL was killed either
//!   from inside (a traced process's `kill`, which is a scheduling point; dara's own crash fault,
//!   judged before this) or from outside: `kill -9` by someone else, the kernel's OOM killer. The
//!   kernel does not say who sent a SIGKILL, and a process killed by it cannot look, so the
//!   execution keeps the processes a SIGKILL was sent to from inside, and any other SIGKILL death
//!   came from outside. Such a run is no bug of the program: it neither replays nor minimizes,
//!   since the kill is not part of the schedule. [`Outcome::KilledFromOutside`] ends the
//!   execution, and the search (the machine, or someone on it, is killing the program: going on
//!   would only record more of that).
//! - **The user's Ctrl-C, passed on.** In a recording dara passes SIGINT/SIGTERM it receives on to
//!   every traced process (a replay sends the recorded one at the same step). A process that does
//!   not catch it takes the signal's default action and dies of it, as it would at a terminal
//!   (haproxy, most command-line tools): the user stopped the program, it did not crash.
//!   The launched program ending that way is [`Outcome::StoppedBySignal`], which replays like any
//!   other outcome and is no bug. A program that catches it and exits with a status of its own
//!   (rsync's 20, varnishd's 64) answers the stop the same way: [`Outcome::ExitedAfterStop`]. So
//!   does one stopped by a SIGINT, SIGTERM or SIGHUP sent to it straight from outside (`kill
//!   <server pid>`), which a recording records and its replay sends again.
use std::collections::{BTreeMap, BTreeSet};

use crate::choice::ProcessId;
use crate::outcome::Outcome;

/// Signals that reached the execution's processes from somewhere the program cannot answer for.
#[derive(Default)]
pub(super) struct OutsideDeaths {
    /// The processes some traced process sent a SIGKILL to, in this execution.
    killed_inside: BTreeSet<ProcessId>,
    /// The processes a signal was passed on to from outside, with the signal.
    passed_on: BTreeMap<ProcessId, i32>,
}

impl OutsideDeaths {
    /// A traced process's granted `kill` sends `signal` to `process`.
    pub(super) fn note_kill(&mut self, process: ProcessId, signal: i32) {
        if signal == libc::SIGKILL {
            self.killed_inside.insert(process);
        }
    }

    /// dara passed `signal` (from its own SIGINT/SIGTERM, or the recorded one in a replay) on to
    /// `process`. If the process dies of that signal later (its default action, or a handler
    /// that cleans up and raises it again, as many programs do), the user stopped it.
    pub(super) fn note_passed_on(&mut self, process: ProcessId, signal: i32) {
        self.passed_on.insert(process, signal);
    }

    /// The outcome of `process` dying of `signal`, if that signal was a SIGKILL nobody inside
    /// the execution sent.
    pub(super) fn outside_kill(&self, process: ProcessId, signal: i32) -> Option<Outcome> {
        (signal == libc::SIGKILL && !self.killed_inside.contains(&process)).then_some(Outcome::KilledFromOutside { process })
    }

    /// Whether `process` dying of `signal` is the user's doing: dara passed that signal on to it.
    pub(super) fn stopped_by_user(&self, process: ProcessId, signal: i32) -> bool {
        self.passed_on.get(&process) == Some(&signal)
    }

    /// The signal from outside that asked `process` to stop, if one did: a non-zero exit after it
    /// is the program's answer, not a failure.
    pub(super) fn asked_to_stop(&self, process: ProcessId) -> Option<i32> {
        self.passed_on.get(&process).copied().filter(|&s| [libc::SIGINT, libc::SIGTERM, libc::SIGHUP].contains(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sigkill_nobody_inside_sent_came_from_outside() {
        let mut deaths = OutsideDeaths::default();
        deaths.note_kill(1, libc::SIGKILL);
        deaths.note_kill(2, libc::SIGTERM);
        assert_eq!(deaths.outside_kill(1, libc::SIGKILL), None);
        assert_eq!(deaths.outside_kill(2, libc::SIGKILL), Some(Outcome::KilledFromOutside { process: 2 }));
        assert_eq!(deaths.outside_kill(3, libc::SIGKILL), Some(Outcome::KilledFromOutside { process: 3 }));
        assert_eq!(deaths.outside_kill(3, libc::SIGTERM), None);
    }

    #[test]
    fn only_the_signal_passed_on_to_that_process_is_the_users_stop() {
        let mut deaths = OutsideDeaths::default();
        deaths.note_passed_on(0, libc::SIGINT);
        assert!(deaths.stopped_by_user(0, libc::SIGINT));
        assert!(!deaths.stopped_by_user(0, libc::SIGTERM), "a different signal is the program's own");
        assert_eq!(deaths.asked_to_stop(0), Some(libc::SIGINT));
        assert_eq!(deaths.asked_to_stop(1), None, "nothing was passed on to process 1");
        deaths.note_passed_on(2, libc::SIGUSR1);
        assert_eq!(deaths.asked_to_stop(2), None, "SIGUSR1 asks for something else");
        assert!(!deaths.stopped_by_user(1, libc::SIGINT), "a process the signal was not passed on to");
    }
}
