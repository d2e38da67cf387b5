//! Timers of `timerfd`s on the virtual clock: when each expires next, its period, and how many
//! expirations a firing brings (docs/time.md, "timerfd").
//!
//! A timer belongs to no thread: the program holds a descriptor (an eventfd the preload made in
//! the timer's place) and reads, polls or epolls it. The driver sets and reads timers for the
//! thread that holds the token (`timerfd_settime`, `timerfd_gettime`), and before each decision
//! fires those whose deadline the clock has reached ([`TimerFds::fire_due`]), writing the
//! expirations into the eventfd. Firing follows from the clock alone, so it needs no choice and
//! no record: the order in which the program *sees* timers due at the same instant is the order
//! in which the threads that wait for them run, which is a choice already.
//!
//! Times are virtual nanoseconds (`v`); a deadline is absolute.
use std::collections::BTreeMap;

use crate::choice::ProcessId;

/// A timer's logical id: creation order within the execution.
pub type TimerId = u32;

/// A timer's setting as `timerfd_gettime` reports it: time to the next expiry (0: disarmed) and
/// the period (0: one shot), in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerValue {
    pub remaining_ns: u64,
    pub interval_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct TimerFd {
    /// The process that created it (its node, for a node pause).
    owner: ProcessId,
    /// Next expiry; `None` while disarmed.
    deadline: Option<u64>,
    interval: u64,
}

#[derive(Clone, Debug, Default)]
pub(super) struct TimerFds {
    timers: BTreeMap<TimerId, TimerFd>,
    next_id: TimerId,
}

impl TimerFds {
    /// A new, disarmed timer of `owner`.
    pub(super) fn create(&mut self, owner: ProcessId) -> TimerId {
        let id = self.next_id;
        self.next_id += 1;
        self.timers.insert(id, TimerFd { owner, deadline: None, interval: 0 });
        id
    }

    /// Arms `id` to expire at `deadline` and every `interval` after (or disarms it); returns the
    /// previous setting at `now`, `None` for an unknown timer.
    pub(super) fn set(&mut self, id: TimerId, deadline: Option<u64>, interval: u64, now: u64) -> Option<TimerValue> {
        let timer = self.timers.get_mut(&id)?;
        let old = value(timer, now);
        timer.deadline = deadline;
        timer.interval = if deadline.is_some() { interval } else { 0 };
        Some(old)
    }

    /// The setting of `id` at `now`.
    pub(super) fn get(&self, id: TimerId, now: u64) -> Option<TimerValue> {
        self.timers.get(&id).map(|t| value(t, now))
    }

    /// Forgets `id` (nobody holds its descriptor any more).
    pub(super) fn forget(&mut self, id: TimerId) {
        self.timers.remove(&id);
    }

    /// Whether some timer's deadline is at or before `now`.
    pub(super) fn any_due(&self, now: u64) -> bool {
        self.timers.values().any(|t| t.deadline.is_some_and(|d| d <= now))
    }

    /// Fires every timer whose deadline is at or before `now`: the expirations each brings (a
    /// periodic timer whose clock jumped past several periods brings them all, as the kernel's
    /// overrun count does), in timer order. A periodic timer is armed again for its next period
    /// after `now`; a one-shot timer is disarmed.
    pub(super) fn fire_due(&mut self, now: u64) -> Vec<(TimerId, u64)> {
        let mut fired = Vec::new();
        for (&id, timer) in &mut self.timers {
            let Some(deadline) = timer.deadline.filter(|&d| d <= now) else { continue };
            // A one-shot timer (period 0) expires once.
            let count = 1 + (now - deadline).checked_div(timer.interval).unwrap_or(0);
            timer.deadline = (timer.interval != 0).then(|| deadline.saturating_add(count.saturating_mul(timer.interval)));
            fired.push((id, count));
        }
        fired
    }

    /// The earliest deadline after `now` among the timers whose owner is not `inside`.
    pub(super) fn next_deadline(&self, now: u64, inside: &dyn Fn(ProcessId) -> bool) -> Option<u64> {
        self.timers.values().filter(|t| !inside(t.owner)).filter_map(|t| t.deadline).filter(|&d| d > now).min()
    }
}

fn value(timer: &TimerFd, now: u64) -> TimerValue {
    match timer.deadline {
        // The driver fires due timers before it answers a setting or a reading, so a deadline
        // is ahead of the clock here; were it not, the timer would be due now, not disarmed.
        Some(d) => TimerValue { remaining_ns: d.saturating_sub(now).max(1), interval_ns: timer.interval },
        None => TimerValue::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_one_shot_timer_fires_once_at_its_deadline() {
        let mut t = TimerFds::default();
        let id = t.create(0);
        assert_eq!(t.set(id, Some(35 * MS), 0, 0), Some(TimerValue::default()));
        assert!(!t.any_due(35 * MS - 1));
        assert_eq!(t.fire_due(35 * MS - 1), vec![]);
        assert_eq!(t.get(id, 10 * MS), Some(TimerValue { remaining_ns: 25 * MS, interval_ns: 0 }));
        assert_eq!(t.fire_due(35 * MS), vec![(id, 1)]);
        assert_eq!(t.fire_due(70 * MS), vec![]);
        assert_eq!(t.get(id, 70 * MS), Some(TimerValue::default()), "disarmed after it fired");
        assert_eq!(t.next_deadline(70 * MS, &|_| false), None);
    }

    #[test]
    fn a_periodic_timer_counts_the_periods_the_clock_jumped_over() {
        let mut t = TimerFds::default();
        let id = t.create(0);
        t.set(id, Some(10 * MS), 10 * MS, 0);
        assert_eq!(t.fire_due(10 * MS), vec![(id, 1)]);
        assert_eq!(t.next_deadline(10 * MS, &|_| false), Some(20 * MS));
        // The clock went on to 45 ms without a look: 20, 30 and 40 expired.
        assert_eq!(t.fire_due(45 * MS), vec![(id, 3)]);
        assert_eq!(t.get(id, 45 * MS), Some(TimerValue { remaining_ns: 5 * MS, interval_ns: 10 * MS }));
        let old = t.set(id, None, 10 * MS, 45 * MS);
        assert_eq!(old, Some(TimerValue { remaining_ns: 5 * MS, interval_ns: 10 * MS }), "settime returns the old setting");
        assert_eq!(t.get(id, 45 * MS), Some(TimerValue::default()), "disarming clears the period too");
        assert_eq!(t.fire_due(100 * MS), vec![]);
    }

    #[test]
    fn timers_due_together_fire_together_in_creation_order() {
        let mut t = TimerFds::default();
        let (a, b, c) = (t.create(0), t.create(1), t.create(1));
        t.set(b, Some(5 * MS), 0, 0);
        t.set(a, Some(5 * MS), 0, 0);
        t.set(c, Some(6 * MS), 0, 0);
        assert_eq!(t.fire_due(5 * MS), vec![(a, 1), (b, 1)]);
        assert_eq!(t.next_deadline(5 * MS, &|_| false), Some(6 * MS));
        assert_eq!(t.next_deadline(5 * MS, &|p| p == 1), None, "a paused node's own timers are left out");
        t.forget(c);
        assert_eq!(t.next_deadline(5 * MS, &|_| false), None);
        assert_eq!(t.set(c, Some(MS), 0, 0), None, "a forgotten timer is unknown");
    }
}
