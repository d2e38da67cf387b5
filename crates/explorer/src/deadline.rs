//! A stop flag that also fires at a deadline (`--time-budget`): executions, searches and
//! minimizations already end promptly when their stop flag is set (the scheduler looks at it
//! every few milliseconds), so a budget that cuts into a running execution is only one more
//! reason to set it. The user's own stop (SIGINT/SIGTERM) still reaches the work through it.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the watcher looks at the clock and the user's stop.
const POLL: Duration = Duration::from_millis(20);

/// Runs `work` with a stop flag that is set when `user` is, or at `deadline`. Without a
/// deadline `work` gets `user` itself and no thread is started.
pub fn with_deadline<R>(user: &AtomicBool, deadline: Option<Instant>, work: impl FnOnce(&AtomicBool) -> R) -> R {
    let Some(deadline) = deadline else { return work(user) };
    let halt = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if user.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    halt.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(POLL);
            }
        });
        let result = work(&halt);
        done.store(true, Ordering::Relaxed);
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_is_set_at_the_deadline_or_by_the_user() {
        let user = AtomicBool::new(false);
        let waited = with_deadline(&user, Some(Instant::now()), |halt| {
            while !halt.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            true
        });
        assert!(waited);
        let user = AtomicBool::new(true);
        let far = Instant::now() + Duration::from_secs(3600);
        assert!(with_deadline(&user, Some(far), |halt| {
            while !halt.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            true
        }));
        let calm = AtomicBool::new(false);
        assert!(!with_deadline(&calm, None, |halt| halt.load(Ordering::SeqCst)), "no deadline: the user's flag itself");
    }
}
