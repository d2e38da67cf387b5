//! Waiting for a quiet point: every live thread parked at a scheduling point with its post
//! ingested, no thread being born, no killed process still on its way out, no launched command
//! still arriving. Meanwhile exits are drained, the token holder and newborn threads are watched,
//! a wait in which nothing moves at all is bounded (`stall.rs`), and a stop request is honoured.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::handoff::Scan;
use super::{Execution, Wait};
use dara_abi::handoff::Waited;
use crate::outcome::Outcome;

impl Execution<'_> {
    /// Waits until no thread is running or starting, ingesting every new post.
    pub(super) fn wait_until_quiet(&mut self, stop: &AtomicBool) -> Wait {
        let wait = self.wait_for_quiet(stop);
        self.stall_over();
        wait
    }

    fn wait_for_quiet(&mut self, stop: &AtomicBool) -> Wait {
        loop {
            let seen = self.region.wake_count();
            // Before exits: a program refused a thread by dara's limit may crash right after.
            if let Err(outcome) = self.handoff.note_new_slots(&self.region) {
                return Wait::End(outcome);
            }
            if let Some(outcome) = self.drain_exits() {
                return Wait::End(outcome);
            }
            if !self.processes.exiting.is_empty() {
                if let Some(outcome) = self.check_exits(false) {
                    return Wait::End(outcome);
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Wait::End(Outcome::Interrupted);
            }
            let mut scan = Scan::new();
            while let Some(thread) = self.handoff.next_post(&self.region, &self.processes, &mut scan) {
                if let Some(outcome) = self.ingest(thread) {
                    return Wait::End(outcome);
                }
                // Some posts are granted at once, without a decision (`Held`, `Fault`): the
                // thread runs on.
                if self.handoff.holds(thread) {
                    scan.quiet = false;
                }
            }
            let quiet = scan.quiet || self.handoff.all_parked(&self.region, &self.processes);
            if quiet && !self.processes.awaiting_deaths() && !self.world().awaiting_arrival() {
                // A creator claims its child's slot before it posts again, so a post seen in the
                // scan makes that claim visible here: a slot claimed during the scan (the child
                // has not posted yet) means look again, or a decision would leave the child out.
                if self.handoff.claimed_unseen(&self.region) {
                    continue;
                }
                return Wait::Quiet;
            }
            if self.tree.all_gone() {
                if let Some(outcome) = self.drain_exits() {
                    return Wait::End(outcome);
                }
                return Wait::End(self.final_outcome());
            }
            // A process on its way out posts nothing more: look again soon.
            let pause = if self.processes.exiting.is_empty() { Duration::from_millis(20) } else { Duration::from_micros(200) };
            if self.region.sleep(seen, pause) == Waited::TimedOut {
                // Nothing posted for a while: has a process died unannounced (killed)? Is the
                // kernel slow to release one that ended (said once, in one line)?
                if let Some(outcome) = self.check_exits(true) {
                    return Wait::End(outcome);
                }
                self.tree.kernel_still_reaping();
            }
            if let Some(outcome) = self.watchdog() {
                return Wait::End(outcome);
            }
            if let Some(outcome) = self.watch_newborns() {
                return Wait::End(outcome);
            }
            if let Some(outcome) = self.stalled() {
                return Wait::End(outcome);
            }
        }
    }
}

