//! dara's output pipes (the program's stdout and stderr, the SDK's lines) are always writable to
//! the program: a `poll`, `select` or `epoll_wait` that asks one for room finds it.
//!
//! dara's forwarders drain those pipes in real time, outside the model, so what a probe saw of
//! their room would depend on how fast the forwarders ran: a poll seen "not ready" at an instant
//! the pipe was full left no traced thread that could make it ready (a false deadlock, xz writing
//! its output with `-T4 -c`), and the same schedule decided differently from run to run. So before
//! such a wait is viewed, and again before it is granted (another thread may have written since
//! its view was taken; writes to an output pipe are no scheduling points), the driver waits until
//! dara has read everything from the pipes ([`dara_tracer::output_drain`]). Nothing else can fill
//! them meanwhile (every thread is parked), so the view, the grant and the program's real call all
//! see them empty, whatever the forwarders' speed. The wait is the one a blocking write to the
//! pipes makes anyway; it is bounded by `--busy-limit` (whoever reads dara's output, a paused
//! pager, may not read at all). Writes on an `O_NONBLOCK` description wait in the preload and in
//! the ptrace agent.
use std::time::Duration;

use dara_abi::Op;

use super::Execution;
use crate::choice::ThreadId;
use crate::model::Request;
use crate::netprobe::watches_for_room;
use crate::outcome::Outcome;

impl Execution<'_> {
    /// Before `requests` (pending; about to be viewed or granted) are looked at: when one of them
    /// is a poll or an epoll wait that asks an output pipe for room and dara has not read
    /// everything on those pipes yet, waits until it has. The run ends as uncontrolled if that
    /// takes longer than the busy limit.
    pub(super) fn drain_output_for(&self, requests: &[(ThreadId, Request)]) -> Option<Outcome> {
        let waits = |r: &Request| matches!(r.op(), Op::NetPoll | Op::NetEpollWait);
        if !requests.iter().any(|(_, r)| waits(r)) || self.tree.output_drained(Duration::ZERO) {
            return None;
        }
        let pipes: Vec<u64> = self.region.header().output_pipes.iter().map(|p| p.load(std::sync::atomic::Ordering::Relaxed)).filter(|&inode| inode != 0).collect();
        let (thread, request) = requests.iter().find(|(t, r)| waits(r) && watches_for_room(self.processes.pid_of(*t), r, &pipes))?;
        if self.tree.output_drained(self.cfg.busy_limit) {
            return None;
        }
        Some(Outcome::Uncontrolled {
            thread: *thread,
            syscall: request.op().name().into(),
            detail: format!(
                "thread {thread} waits for room on its stdout or stderr, a pipe dara drains into its own output, and nothing read dara's output for {} s (a paused pager or terminal?); the run was stopped: let dara's output be read, or redirect it to a file",
                self.cfg.busy_limit.as_secs()
            ),
        })
    }
}
