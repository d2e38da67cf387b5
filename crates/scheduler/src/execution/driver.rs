//! The driver: one [`Execution`] (its sub-stores, each in its own file) and the gated loop —
//! wait for a quiet point, end the run if a bound or an oracle says so, bring the network and
//! signal views up to date, let the worlds around the program act, ask the strategy, apply the
//! decision, grant exactly one thread.
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dara_abi::{CloseHow, Op};

use super::handoff::Handoff;
use super::liveness::Walk;
use super::network::Network;
use super::observations::Observations;
use super::pids::PidLedger;
use super::processes::ProcessTable;
use super::stall::Stall;
use super::target::Target;
use super::timerfds::TimerFdTable;
use super::world::{Advance, World, WorldReport};
use super::ExecutionConfig;
use crate::choice::{Choice, ChoiceKind, Decide, ProcessId};
use crate::memory::TargetMemory;
use crate::model::{Effect, Model, Request, ThreadStatus};
use crate::outcome::Outcome;
use crate::region::Region;
use crate::trace::Step;

/// Why a turn of the loop stops before (or instead of) a decision.
enum Halt {
    /// Look again from the top (something changed: a launch, input, a process to wait for).
    Again,
    /// The execution is over.
    End(Outcome),
}

type Flow<T = ()> = ControlFlow<Halt, T>;

fn end<T>(outcome: Outcome) -> Flow<T> {
    ControlFlow::Break(Halt::End(outcome))
}

fn again<T>() -> Flow<T> {
    ControlFlow::Break(Halt::Again)
}

/// What a world's [`Advance`] means for the turn.
fn advance(a: Advance) -> Flow {
    match a {
        Advance::Decide => ControlFlow::Continue(()),
        Advance::Again => again(),
        Advance::End(outcome) => end(outcome),
    }
}

pub(super) enum Wait {
    /// Every live thread is parked at a scheduling point.
    Quiet,
    /// The execution is over.
    End(Outcome),
}

/// One execution in progress: the configuration, the shared region and the process tree, the
/// model, and the sub-stores that each own one concern.
pub(super) struct Execution<'a> {
    pub(super) cfg: &'a ExecutionConfig,
    pub(super) region: Arc<Region>,
    /// The processes: the tracer's tree (a fake in the driver's tests).
    pub(super) tree: Box<dyn Target>,
    pub(super) model: Model,
    pub(super) memory: TargetMemory,
    pub(super) steps: Vec<Step>,
    /// The slot protocol: posts seen, active slots, the token holder, threads being born.
    pub(super) handoff: Handoff,
    /// Every traced process, which process each thread is in, who is on the way out.
    pub(super) processes: ProcessTable,
    /// The pid each process and thread was born with, against the run's plan (see `pids.rs`).
    pub(super) pids: PidLedger,
    /// What the report names: symbols, programs, fault sites, coverage modules.
    pub(super) observed: Observations,
    /// The net probe (and its delivery ledger) and the freshness of readiness views.
    pub(super) network: Network,
    /// The process whose exit status is the run's verdict: the launched command (process 0) in a
    /// plain run; the workload, then the check, in a cluster run (`None` while one is starting).
    pub(super) verdict: Option<ProcessId>,
    /// Something that went wrong while granting, ending the run at the next decision.
    pub(super) pending_end: Option<Outcome>,
    /// Something may have sent a traced process a signal since the driver last looked which
    /// parked waits one ends (see `signals.rs`).
    pub(super) signals_dirty: bool,
    /// The world around the program (closed, a cluster, or outside peers); taken out while
    /// one of its hooks runs (see [`Execution::with_world`]).
    pub(super) world: Option<Box<dyn World>>,
    /// Which eventfds stand for `timerfd`s (see `timerfds.rs`).
    pub(super) timerfds: TimerFdTable,
    /// The liveness walk after the workload (see `liveness.rs`).
    pub(super) walk: Walk,
    /// Since when nothing has moved in the wait for a quiet point (see `stall.rs`).
    pub(super) stall: Stall,
}

impl<'a> Execution<'a> {
    pub(super) fn new(cfg: &'a ExecutionConfig, region: Arc<Region>, tree: Box<dyn Target>, world: Box<dyn World>) -> Execution<'a> {
        let model = Model::with_time(&cfg.time).with_pause_horizon(cfg.time.run_for_ns.unwrap_or(u64::MAX).min(cfg.max_vtime_ns));
        let mut network = Network::default();
        if world.dials() {
            network.probe.take_outside_servers();
        }
        Execution {
            cfg,
            region,
            tree,
            model: if cfg.preempt.coarse { model.with_coarse_steps() } else { model },
            memory: TargetMemory::default(),
            steps: Vec::new(),
            handoff: Handoff::default(),
            processes: ProcessTable::default(),
            pids: PidLedger::new(cfg.pids.clone()),
            observed: Observations::default(),
            network,
            verdict: if cfg.cluster.is_some() { None } else { Some(0) },
            pending_end: None,
            signals_dirty: false,
            world: Some(world),
            timerfds: TimerFdTable::default(),
            walk: Walk::off(),
            stall: Stall::default(),
        }
    }

    /// Runs `hook` on the world, with the rest of the execution at hand.
    pub(super) fn with_world<T>(&mut self, hook: impl FnOnce(&mut dyn World, &mut Execution<'_>) -> T) -> T {
        let mut world = self.world.take().expect("a world hook called another (see world.rs)");
        let out = hook(&mut *world, self);
        self.world = Some(world);
        out
    }

    /// The world, for its queries.
    pub(super) fn world(&self) -> &dyn World {
        self.world.as_deref().expect("a world hook called another (see world.rs)")
    }

    /// The run is over with `outcome`: the world has its last word (a replay that did not use
    /// every recorded input diverged) and gives what it adds to the report, and is dropped (a
    /// recording stops taking the user's signals).
    pub(super) fn end_world(&mut self, outcome: &mut Outcome, stopped_as_recorded: bool) -> WorldReport {
        let steps = self.steps.len() as u64;
        let mut world = self.world.take().expect("the world is there at the end");
        world.finish(steps, outcome, stopped_as_recorded)
    }

    /// Runs the execution to its end: a loop of [`Execution::turn`]s.
    pub(super) fn drive(&mut self, decide: &mut dyn Decide, stop: &AtomicBool) -> Outcome {
        loop {
            if let ControlFlow::Break(Halt::End(outcome)) = self.turn(decide, stop) {
                return outcome;
            }
        }
    }

    /// One turn of the loop: a quiet point, then at most one decision, applied and granted.
    fn turn(&mut self, decide: &mut dyn Decide, stop: &AtomicBool) -> Flow {
        self.quiet_point(stop)?;
        self.within_bounds()?;
        self.timers_due()?;
        self.refresh_views()?;
        self.world_acts()?;
        let choices = self.choices(stop)?;
        let choice = self.choose(decide, &choices)?;
        self.pause_if_asked(&choice);
        let step = self.steps.len() as u64;
        self.with_world(|world, ex| world.before_grant(ex, step));
        self.apply(choice)
    }

    /// Waits until every live thread is parked with its post ingested.
    fn quiet_point(&mut self, stop: &AtomicBool) -> Flow {
        match self.wait_until_quiet(stop) {
            Wait::Quiet => ControlFlow::Continue(()),
            Wait::End(outcome) => end(outcome),
        }
    }

    /// Ends the run at its bounds (steps, virtual time, the step a replayed recording was stopped
    /// at; the liveness walk's instead once it runs) or when something went wrong while granting.
    fn within_bounds(&mut self) -> Flow {
        let walking = match self.walk_bounds() {
            ControlFlow::Continue(walking) => walking,
            ControlFlow::Break(outcome) => return end(outcome),
        };
        if !walking && self.steps.len() as u64 >= self.cfg.max_steps {
            return end(Outcome::Hang { reason: format!("step bound reached ({} scheduling decisions); raise --max-steps if the program is just long", self.cfg.max_steps) });
        }
        if !walking && self.model.now() > self.cfg.max_vtime_ns {
            return end(Outcome::Hang { reason: format!("virtual-time bound exceeded ({} s); raise --max-vtime if the program legitimately runs longer", self.cfg.max_vtime_ns / 1_000_000_000) });
        }
        if let Some(outcome) = self.pending_end.take() {
            return end(outcome);
        }
        if self.cfg.stop_at_step == Some(self.steps.len() as u64) {
            return end(Outcome::Interrupted); // where the recording was stopped
        }
        ControlFlow::Continue(())
    }

    /// Fires the `timerfd` timers the clock has reached, before the readiness views are taken
    /// (see `timerfds.rs`).
    fn timers_due(&mut self) -> Flow {
        match self.fire_timers(0) {
            Ok(()) => ControlFlow::Continue(()),
            Err(outcome) => end(outcome),
        }
    }

    /// Brings the network views up to date (and moves what waits at the world's edge).
    fn refresh_views(&mut self) -> Flow {
        if let Some(outcome) = self.refresh_net() {
            return end(outcome);
        }
        ControlFlow::Continue(())
    }

    /// Lets the world act before the decision (launch the next command, pass the user's
    /// signals on, enforce partitions) and, at `--run-for`, end the run or start the check.
    fn world_acts(&mut self) -> Flow {
        advance(self.with_world(|world, ex| world.before_choosing(ex)))?;
        match self.cfg.time.run_for_ns.filter(|&t| self.model.now() >= t) {
            // The workload is over: the liveness walk, if an `eventually` is unmet, else the end.
            Some(end_ns) => match self.start_walk() {
                Ok(true) => ControlFlow::Continue(()),
                Ok(false) => advance(self.with_world(|world, ex| world.run_for_reached(ex, end_ns))),
                Err(outcome) => end(outcome),
            },
            None => ControlFlow::Continue(()),
        }
    }

    /// What may be decided now: the model's choices (after the timers that are due, when nothing
    /// else can run), then the faults on offer. Waits for outside input first in a recording that
    /// idles; with no choice at all the run ends (deadlock) or waits for the last exits.
    fn choices(&mut self, stop: &AtomicBool) -> Flow<Vec<Choice>> {
        let step = self.steps.len() as u64;
        self.with_world(|world, ex| world.before_decision(ex, step));
        self.refresh_signals();
        // A signal passed on or sent again just now may have made a signalfd readable that a
        // parked poll or epoll set watches: their views are taken again (`netprobe/signalfd.rs`).
        if self.network.dirty {
            if let Some(outcome) = self.refresh_net() {
                return end(outcome);
            }
        }
        let mut choices = self.model.choices();
        match self.with_world(|world, ex| world.when_idle(ex, &choices, stop)) {
            Ok(true) => return again(),
            Ok(false) => {}
            Err(outcome) => return end(outcome),
        }
        // Nothing can run: the earliest timers become due. The decision follows at once, with
        // no look at the outside in between: input that comes after the jump belongs to the
        // next step, in the recording as in its replay (which jumps at the same step).
        // (Not once every thread is gone: a timerfd's deadline is no one's to wait for then.)
        while choices.is_empty() && !self.model.live_threads().is_empty() && self.model.jump_to_next_deadline().is_some() {
            if self.model.timerfd_due() {
                // A timerfd fired: its readers see it once the turn starts again (fired, then
                // probed), still before this step's decision.
                return again();
            }
            choices = self.model.choices();
        }
        self.add_pause_choices(&mut choices);
        self.world().add_choices(self, &mut choices);
        if !choices.is_empty() {
            return ControlFlow::Continue(choices);
        }
        if !self.model.live_threads().is_empty() {
            return end(Outcome::Deadlock { threads: self.deadlock_report() });
        }
        // Everyone finished; only process exits are still to come.
        match self.wait_for_exits(stop) {
            Some(outcome) => end(outcome),
            None => again(),
        }
    }

    /// Asks the strategy (the liveness walk picks itself, outside a replay); an index out of range or a replay that cannot follow is a divergence.
    fn choose(&mut self, decide: &mut dyn Decide, choices: &[Choice]) -> Flow<Choice> {
        if let Some(i) = self.walk.pick(choices) {
            return ControlFlow::Continue(choices[i]);
        }
        let step = self.steps.len() as u64;
        match decide.choose(step, choices) {
            Ok(i) if i < choices.len() => ControlFlow::Continue(choices[i]),
            Ok(i) => end(Outcome::Diverged { step, expected: format!("a choice index below {}", choices.len()), seen: format!("index {i}") }),
            Err(d) => {
                let seen = format!("{}{}", d.seen, self.offered_from(choices));
                end(Outcome::Diverged { step: d.step, expected: d.expected, seen })
            }
        }
    }

    /// Where in the program the threads of `choices` made the posts a replay did not expect
    /// (`" (posted by thread 0 from redisCommand+0x1c (redis-server+0x4f2a1))"`), or nothing
    /// when the preload noted no call site: the place to start looking for why a run differs.
    fn offered_from(&mut self, choices: &[Choice]) -> String {
        let mut threads: Vec<crate::choice::ThreadId> = choices.iter().map(|c| c.thread).collect();
        threads.dedup();
        let places: Vec<String> = threads
            .into_iter()
            .take(3)
            .filter_map(|thread| {
                let addr = self.region.slot(thread as usize).call_site.load(Ordering::Acquire);
                let process = self.processes.of(thread)?;
                let place = (addr != 0).then(|| self.observed.place(process, self.processes.pid_of(thread), addr)).flatten()?;
                Some(format!("thread {thread} from {place}"))
            })
            .collect();
        if places.is_empty() {
            String::new()
        } else {
            format!(" (posted by {})", places.join("; "))
        }
    }

    /// Applies the decision: a fault is injected; otherwise the model applies it, a granted
    /// network operation is handed to the probe, the step is recorded and the thread granted.
    fn apply(&mut self, choice: Choice) -> Flow {
        if choice.kind == ChoiceKind::Fault {
            if choice.op == Op::Pause {
                self.model.pause(choice.thread);
            } else if let Some(outcome) = self.with_world(|world, ex| world.inject(ex, &choice)) {
                return end(outcome);
            }
            self.steps.push(Step { choice, result: Some(0), now_ns: self.model.now() });
            if self.cfg.symbolize {
                self.observed.note_step(None);
            }
            return ControlFlow::Continue(());
        }
        let pending = match self.model.status(choice.thread) {
            Some(ThreadStatus::Pending(r)) if r.op().is_net() => Some(r),
            _ => None,
        };
        let effect = self.model.apply(&choice, &mut self.memory);
        let result = match effect {
            Effect::Grant { result } => Some(result),
            Effect::Blocked => None,
        };
        let result = match (choice.op, result) {
            (Op::NameLookup, Some(_)) => match self.answer_lookup(choice.thread) {
                Ok(status) => Some(status),
                Err(outcome) => return end(outcome),
            },
            _ => result,
        };
        if let (Some(request), Some(_)) = (pending, result) {
            if let Err(outcome) = self.net_granted(&choice, request) {
                return end(outcome);
            }
            // Its view may be older than a write to an output pipe (see `output`).
            if let Some(outcome) = self.drain_output_for(&[(choice.thread, request)]) {
                return end(outcome);
            }
        }
        self.steps.push(Step { choice, result, now_ns: self.model.now() });
        if self.cfg.symbolize {
            self.observed.note_step(Some(choice.thread));
        }
        if let Some(result) = result {
            self.grant(choice.thread, choice.op, result);
        }
        ControlFlow::Continue(())
    }

    /// A network operation was granted: the probe settles what it leaves in flight; a first TCP
    /// connect to a server outside dara goes through the world, which may dial it.
    fn net_granted(&mut self, choice: &Choice, request: Request) -> Result<(), Outcome> {
        let pid = self.processes.pid_of(choice.thread);
        let timed_out = matches!(choice.kind, ChoiceKind::Timeout | ChoiceKind::Interrupt);
        let dialled = match request {
            Request::NetConnect { fd, addr, len, .. } if !timed_out => self.dial_if_outside(pid, fd, addr.0, len)?,
            _ => None,
        };
        self.network.probe.granted(choice.thread, pid, request, timed_out);
        if let Some(stand_in) = dialled {
            self.network.probe.connect_goes_to(stand_in);
        }
        self.network.dirty = true;
        self.network.new_connections |= matches!(request.op(), Op::NetConnect | Op::NetAccept);
        if let Request::NetClose { fd, how: CloseHow::Close } = request {
            self.timerfds.recheck = true; // the last descriptor of a timerfd?
            let process = self.processes.of(choice.thread).unwrap_or(0);
            self.with_world(|world, _| world.closed(process, fd));
        }
        Ok(())
    }

    /// A granted connect of `fd` of `pid` to the address at `addr`: when the world takes
    /// outside servers and this is a first TCP connect to a server no traced process (nor dara)
    /// listens for, the world dials it; Some(where the program connects instead).
    fn dial_if_outside(&mut self, pid: u32, fd: i32, addr: u64, len: u32) -> Result<Option<std::net::SocketAddr>, Outcome> {
        if !self.world().dials() {
            return Ok(None);
        }
        let Some(server) = self.network.probe.fresh_tcp_connect(pid, fd, addr, len) else { return Ok(None) };
        if self.is_traced_server(pid, server.port()) {
            self.forget_dials_to(server);
            return Ok(None);
        }
        let step = self.steps.len() as u64 + 1;
        self.with_world(|world, ex| world.dial(ex, step, server)).map(Some)
    }

    /// Appends this step's thread pauses (any run with a pause budget; the world adds its own
    /// faults).
    fn add_pause_choices(&self, choices: &mut Vec<Choice>) {
        if self.model.pauses_taken() < self.cfg.time.pauses {
            for (thread, until) in self.model.pausable() {
                choices.push(Choice { thread, kind: ChoiceKind::Fault, alt: 0, op: Op::Pause, obj: until });
            }
        }
    }

    pub(super) fn deadlock_report(&mut self) -> Vec<crate::outcome::BlockedThread> {
        let mut report = self.model.blocked_report();
        for blocked in &mut report {
            if blocked.addr >= 0x1000 {
                if let Some(pid) = self.processes.records.get(&blocked.process).map(|p| p.pid) {
                    blocked.symbol = self.observed.symbol(blocked.process, pid, blocked.addr);
                }
                if let Some(name) = &blocked.symbol {
                    let hex = format!("{:#x}", blocked.addr);
                    blocked.detail = blocked.detail.replace(&hex, &format!("{name} ({hex})"));
                }
            }
        }
        report
    }
}

