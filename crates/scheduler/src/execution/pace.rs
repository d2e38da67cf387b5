//! A recording's timers against real time, while outside peers may bring input: a timer fires
//! no earlier, in real time, than its duration after its thread armed it, as it would without
//! dara.
//!
//! Virtual time moves by one step's cost a decision while the program works, and a decision
//! takes tens of microseconds of real time, so virtual time falls behind real time. Measured
//! against the run's start alone (virtual t due at real t), every timer was due at the first idle
//! moment after a busy stretch: a 100 ms `nanosleep` after 20,000 steps ended after 10 ms. So
//! each timer gets its real-time floor when dara first sees it, at the decision after its thread
//! posted the timed wait: the real time then plus what the timer has left in virtual time.
//!
//! Once an outside peer has brought input, `Boundary::keep_pace` also keeps the clock itself
//! within a millisecond of real time, and a floor then adds at most that millisecond; the floors
//! matter before that, while virtual time goes alone (a server working before its first client).
//!
//! Only a recording waits for these floors (`Boundary::when_idle`); its replay fires the same
//! timers at the same steps without waiting. A `timerfd`'s expiry has no thread: it keeps the
//! run-start rule.
use std::collections::HashMap;
use std::time::Instant;

use crate::choice::ThreadId;
use crate::model::Model;

pub(super) struct TimerPace {
    /// Real time 0 of the run (virtual time 0).
    started: Instant,
    /// Per thread with a timer: its deadline (virtual ns) and the real time (ns since `started`)
    /// before which it does not fire.
    armed: HashMap<ThreadId, (u64, u64)>,
}

impl TimerPace {
    pub(super) fn new() -> TimerPace {
        TimerPace { started: Instant::now(), armed: HashMap::new() }
    }

    /// Real nanoseconds since the run started.
    pub(super) fn real_ns(&self) -> u64 {
        real_ns_since(self.started)
    }

    /// Notes the timers armed since the last look and forgets those gone (called at every
    /// decision of a recording).
    pub(super) fn note(&mut self, model: &Model) {
        self.armed.retain(|&thread, &mut (deadline, _)| model.timer_deadline(thread) == Some(deadline));
        let (now, started, mut real) = (model.now(), self.started, None);
        for (thread, deadline) in model.timers() {
            self.armed.entry(thread).or_insert_with(|| {
                let real = *real.get_or_insert_with(|| real_ns_since(started));
                (deadline, real.saturating_add(deadline.saturating_sub(now)))
            });
        }
    }

    /// The real time (ns since the start) before which the timers of virtual `deadline` do not
    /// fire: the earliest floor of a thread's timer with that deadline, or the deadline itself
    /// for a timer no thread armed (a `timerfd`).
    pub(super) fn floor(&self, deadline: u64) -> u64 {
        self.armed.values().filter(|&&(d, _)| d == deadline).map(|&(_, floor)| floor).min().unwrap_or(deadline)
    }
}

fn real_ns_since(started: Instant) -> u64 {
    started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
}
