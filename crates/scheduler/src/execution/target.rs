//! What the driver needs from the processes it runs: their exits, whether they are all gone,
//! launching another command into the same tree (a cluster's nodes), and the end. The real
//! target is the tracer's [`ProcessTree`]; the driver's unit tests put a fake in its place
//! (`tests.rs`) that speaks the slot protocol from a thread of the test, so `drive()`'s decisions
//! are tested without launching processes. The calls are a few per quiet point, next to a futex
//! round trip each: dispatching them dynamically costs nothing measurable.
use dara_tracer::reaper::ExitEvent;
use dara_tracer::{LaunchError, ProcessTree};

pub(super) trait Target: Send {
    /// Kernel pid of the launched command.
    fn root_pid(&self) -> u32;
    /// Whether the pids the program sees are virtual (a PID namespace).
    fn pids_virtual(&self) -> bool;
    /// Makes `pid` the next birth's pid in the namespace, if free there; whether it could.
    fn set_next_pid(&mut self, pid: u32) -> bool;
    /// Logical process `process` is reached through `pidfd` (kept open while it may live), for
    /// the tree's keeper to kill it if dara dies.
    fn keep(&self, process: usize, pidfd: i32);
    /// The next exit the reaper reported, if any.
    fn try_exit(&mut self) -> Option<ExitEvent>;
    /// Whether every process of the tree is gone (and reaped).
    fn all_gone(&mut self) -> bool;
    /// Whether the kernel is still releasing an ended process (said once, in one line).
    fn kernel_still_reaping(&mut self) -> bool;
    /// The exit status of `pid` if the reaper is reaping it now (its release by the kernel can
    /// take minutes; the status is known before).
    fn status_being_reaped(&self, pid: u32) -> Option<dara_tracer::reaper::ExitStatus>;
    /// Starts `command` in the tree; its kernel pid.
    fn launch(&mut self, command: &[String]) -> Result<u32, LaunchError>;
    /// Kills what is left; false if something could not be killed (see [`Target::survivors`]).
    fn kill_all(&mut self) -> bool;
    fn survivors(&self) -> String;
    /// The last bytes the program wrote to stderr.
    fn stderr_tail(&self) -> Vec<u8>;
    /// Waits until dara has read everything the program wrote to its output pipes (stdout,
    /// stderr, the SDK's lines), at most `limit` (zero: one look); whether it has.
    fn output_drained(&self, limit: std::time::Duration) -> bool;
    /// Starts the ptrace agent if the tree has none yet (a process is about to exec a program
    /// the preload cannot enter); why not, if it cannot.
    fn ensure_agent(&mut self) -> Result<(), String>;
}

impl Target for ProcessTree {
    fn root_pid(&self) -> u32 {
        ProcessTree::root_pid(self)
    }

    fn pids_virtual(&self) -> bool {
        ProcessTree::pids_virtual(self)
    }

    fn set_next_pid(&mut self, pid: u32) -> bool {
        ProcessTree::set_next_pid(self, pid)
    }

    fn keep(&self, process: usize, pidfd: i32) {
        ProcessTree::keep(self, process, pidfd)
    }

    fn try_exit(&mut self) -> Option<ExitEvent> {
        ProcessTree::try_exit(self)
    }

    fn all_gone(&mut self) -> bool {
        ProcessTree::all_gone(self)
    }

    fn kernel_still_reaping(&mut self) -> bool {
        ProcessTree::kernel_still_reaping(self)
    }

    fn status_being_reaped(&self, pid: u32) -> Option<dara_tracer::reaper::ExitStatus> {
        ProcessTree::status_being_reaped(self, pid)
    }

    fn launch(&mut self, command: &[String]) -> Result<u32, LaunchError> {
        ProcessTree::launch(self, command)
    }

    fn kill_all(&mut self) -> bool {
        ProcessTree::kill_all(self)
    }

    fn survivors(&self) -> String {
        ProcessTree::survivors(self)
    }

    fn stderr_tail(&self) -> Vec<u8> {
        ProcessTree::stderr_tail(self)
    }

    fn output_drained(&self, limit: std::time::Duration) -> bool {
        ProcessTree::wait_output_drained(self, limit)
    }

    fn ensure_agent(&mut self) -> Result<(), String> {
        ProcessTree::ensure_agent(self)
    }
}
