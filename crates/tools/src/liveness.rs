//! `dara-trace`'s step after a liveness violation: find its critical transition
//! (`dara_explorer::liveness`), store it in the bug's trace (a replay's listing marks it) and its
//! summary, and say it in one line.
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use dara_explorer::deadline::with_deadline;
use dara_explorer::liveness::{critical_transition, TransitionError};
use dara_explorer::search::SavedBug;
use dara_scheduler::execution::ExecutionConfig;

/// Looks for `bug`'s critical transition with `walks` walks per prefix; on success rewrites its
/// trace and summary. Failing is not an error of the search: one line says why.
pub fn find_critical_transition(bug: &SavedBug, base: &ExecutionConfig, walks: u32, stop: &AtomicBool, deadline: Option<Instant>) {
    let Ok(mut trace) = dara_model::trace::read_file(&bug.trace) else { return };
    let started = Instant::now();
    let found = with_deadline(stop, deadline, |halt| critical_transition(&trace, base, walks, halt));
    let (transition, cost) = match found {
        Ok(found) => found,
        Err(TransitionError::Interrupted) => {
            eprintln!("  (no critical transition: interrupted or out of time)");
            return;
        }
        Err(e) => {
            eprintln!("  (no critical transition: {e})");
            return;
        }
    };
    let line = format!("{} ({} prefixes, {} executions, {:.1} s)", transition.describe(), cost.probes, cost.executions, started.elapsed().as_secs_f64());
    eprintln!("  {line}");
    trace.header.critical_transition = Some(transition);
    if let Err(e) = dara_model::trace::write_file(&bug.trace, &trace) {
        eprintln!("  (could not store the critical transition in {}: {e})", bug.trace.display());
        return;
    }
    let summary = bug.dir.join("summary.txt");
    if let Ok(mut text) = std::fs::read_to_string(&summary) {
        text.push_str(&format!("critical:   {line}\n"));
        let _ = dara_model::trace::write_private(&summary, text.as_bytes());
    }
}
