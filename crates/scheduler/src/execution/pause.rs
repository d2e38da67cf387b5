//! A replay paused before one step for a person to look at the program (`dara-replay --gdb
//! STEP`): the decision is made, nothing is granted yet, every thread is parked; the step's thread
//! is named by its kernel ids and handed to a hook the tool provides (which starts a debugger and
//! returns when the person is done). Virtual time and the decisions do not move meanwhile, so the
//! replay goes on exactly as it would have.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dara_abi::Op;

use super::Execution;
use crate::choice::{Choice, ThreadId, FAULT_THREAD};

/// The step a replay stands before.
#[derive(Clone, Debug)]
pub struct PausedStep {
    pub step: u64,
    pub thread: ThreadId,
    pub op: Op,
    /// Kernel pid and tid of the step's thread; None for a fault dara injects (no thread's step).
    pub kernel: Option<(u32, u32)>,
}

/// Pause before `step` and call `hook` with it.
#[derive(Clone)]
pub struct PauseBefore {
    pub step: u64,
    pub hook: Arc<dyn Fn(&PausedStep) + Send + Sync>,
}

impl std::fmt::Debug for PauseBefore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PauseBefore {{ step: {} }}", self.step)
    }
}

impl Execution<'_> {
    /// Calls the pause hook when `choice` is the step the run was asked to pause before.
    pub(super) fn pause_if_asked(&self, choice: &Choice) {
        let step = self.steps.len() as u64;
        let Some(pause) = self.cfg.pause_before.as_ref().filter(|p| p.step == step) else { return };
        let kernel = (choice.thread != FAULT_THREAD).then(|| {
            let slot = self.region.slot(choice.thread as usize);
            (slot.pid.load(Ordering::Acquire), slot.tid.load(Ordering::Acquire))
        });
        (pause.hook)(&PausedStep { step, thread: choice.thread, op: choice.op, kernel });
    }
}
