//! The worlds around the program: what surrounds the traced processes and acts on them at fixed
//! points of the driver's loop, so the driver itself never asks which kind of run it is.
//!
//! * [`Closed`]: nothing — every peer is traced, a thread that waits for anything else is
//!   deadlocked (searches, minimization, replays of closed runs).
//! * [`ClusterWorld`](super::cluster::ClusterWorld): nodes dara launches, crashes and restarts,
//!   the workload and the check, faults between nodes (docs/cluster.md).
//! * [`Boundary`](super::boundary::Boundary) around a recording's or a replay's relay: peers
//!   outside dara, their inputs recorded, or fed back and the program's outputs compared
//!   (docs/outside.md).
//!
//! One execution has one world (a cluster run is a closed world of its own; a recording is of a
//! single program). Every hook has a default that is what a closed world does; the driver calls
//! them with the world taken out of the execution (see `Execution::world`), so a hook has the
//! whole execution at hand and must not call back into another hook.
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use dara_tracer::reaper::ExitStatus;

use super::driver::Execution;
use crate::choice::{Choice, ProcessId, ThreadId};
use crate::model::Request;
use dara_model::name_lookup::{NameAnswer, NameQuery};
use crate::outcome::Outcome;
use super::boundary::Boundary;
use super::cluster::ClusterWorld;
use super::{ExecutionConfig, ExecutionError};
use crate::outside::{OutsideEvent, OutsideMode, Recorder, Relay, RelayError, Replayer};

/// What a world wants before the next decision.
pub(super) enum Advance {
    /// Nothing: decide.
    Decide,
    /// Something changed (a command was launched, input came, a process is to be waited for):
    /// look again from the top.
    Again,
    End(Outcome),
}

/// A world around the program (see the module doc). The hooks, in the order a turn of the
/// driver's loop reaches them: queries while the network is settled and probed, then
/// `exchange`, `before_choosing`, `before_decision`, `when_idle`, `add_choices`, `inject`; the
/// process and post hooks whenever a process starts or ends, a thread listens, closes, reads the
/// clock or takes a signal; `finish` once at the end.
pub(super) trait World {
    /// The descriptor the program is launched with as its stdin (None: /dev/null).
    fn stdin_for_program(&self) -> Option<i32> {
        None
    }

    /// The program was launched.
    fn launched(&mut self) {}

    /// How many bytes dara's own end of a connection with these (local, remote) ports received
    /// from the program, if it has one (see `netprobe::OwnReceived`).
    fn received_by(&self, _local: u16, _remote: u16) -> Option<u64> {
        None
    }

    /// Whether `port` is a listening port the world serves for the program: a connection to it
    /// reaches a traced server.
    fn listens_on(&self, _port: u16) -> bool {
        false
    }

    /// Whether a traced TCP connect to a server outside dara goes through the world
    /// ([`World::dial`]) rather than stop the run.
    fn dials(&self) -> bool {
        false
    }

    /// The program's TCP connect to `server`, outside dara, is granted before the decision of
    /// `step`: the address the program connects to instead (dara's socket that stands for the
    /// server, shown to the program as `server`).
    fn dial(&mut self, _ex: &mut Execution<'_>, _step: u64, server: std::net::SocketAddr) -> Result<std::net::SocketAddr, Outcome> {
        Ok(server)
    }

    /// At a quiet point, after settling and before the readiness views are taken: moves what
    /// waits at the world's edge. Ok(true) when the program's side changed.
    fn exchange(&mut self, _ex: &mut Execution<'_>) -> Result<bool, Outcome> {
        Ok(false)
    }

    /// Before the decision: launch, pass signals on, enforce partitions, or end.
    fn before_choosing(&mut self, _ex: &mut Execution<'_>) -> Advance {
        Advance::Decide
    }

    /// `--run-for` is reached at virtual time `end`: the run ends as ran-for unless the world
    /// has something to finish first.
    fn run_for_reached(&mut self, _ex: &mut Execution<'_>, end: u64) -> Advance {
        Advance::End(Outcome::RanFor { virtual_ns: end })
    }

    /// Just before the choices of `step` are taken (a replay's signals that ended a wait).
    fn before_decision(&mut self, _ex: &mut Execution<'_>, _step: u64) {}

    /// The decision of `step` is made and about to be applied: a recording may bring the clock
    /// up to real time here, and its replay moves it the same and sends the signals from
    /// outside that came with this grant (see `Boundary`).
    fn before_grant(&mut self, _ex: &mut Execution<'_>, _step: u64) {}

    /// Nothing but timers can run (`choices`): wait for input from the world? Ok(true) when
    /// something came (look again), Ok(false) to decide now.
    fn when_idle(&mut self, _ex: &mut Execution<'_>, _choices: &[Choice], _stop: &AtomicBool) -> Result<bool, Outcome> {
        Ok(false)
    }

    /// Appends the world's fault choices to this step's.
    fn add_choices(&self, _ex: &Execution<'_>, _choices: &mut Vec<Choice>) {}

    /// Does what a chosen fault of the world says (the step is recorded by the driver).
    fn inject(&mut self, _ex: &mut Execution<'_>, _choice: &Choice) -> Option<Outcome> {
        None
    }

    /// Whether a command the world launched has not arrived yet (no decision until it has).
    fn awaiting_arrival(&self) -> bool {
        false
    }

    /// A process this execution does not know ended: the world's command on its way?
    fn unknown_exit(&mut self, _ex: &mut Execution<'_>, _pid: u32, _status: ExitStatus) -> Option<Outcome> {
        None
    }

    /// Process `process` (kernel pid `pid`, forked from `parent`) registered.
    fn process_started(&mut self, _ex: &mut Execution<'_>, _process: ProcessId, _pid: u32, _parent: Option<ProcessId>) {}

    /// Process `process` is gone (before its end is judged).
    fn process_gone(&mut self, _process: ProcessId) {}

    /// Judges the end of `process` with `status`, before the generic judgement (a crash signal
    /// is a bug, anything else is not).
    fn judge_exit(&mut self, _ex: &mut Execution<'_>, _process: ProcessId, _status: ExitStatus) -> Option<Outcome> {
        None
    }

    /// The answer to the program's name lookup `query`, granted before the decision of `step`.
    /// A closed world answers what the machine answers by itself (the hosts file, numeric
    /// addresses) and stops the run at a name only a name server outside dara would know.
    fn name_lookup(&mut self, _ex: &mut Execution<'_>, thread: ThreadId, _step: u64, query: &NameQuery) -> Result<NameAnswer, Outcome> {
        if !crate::names::answered_locally(query) {
            let detail = format!(
                "the program looked up {}, a name only a name server outside dara knows (the hosts file does not list it), and a search is a closed world: list the name in /etc/hosts, use an address, or record the program (`dara-trace` without --runs), which records the answer",
                query.describe()
            );
            return Err(Outcome::Uncontrolled { thread, syscall: "getaddrinfo".into(), detail });
        }
        Ok(crate::names::resolve(query))
    }

    /// The wall-clock skew a `ClockRead` of `thread` shows, in ns.
    fn clock_skew(&self, _ex: &Execution<'_>, _thread: ThreadId) -> i64 {
        0
    }

    /// `thread` is granted `listen` (a `NetListen` request: the preload split the socket): the
    /// world takes the public socket over. Err says why it could not.
    fn listening(&mut self, _ex: &mut Execution<'_>, _thread: ThreadId, _request: Request) -> Result<(), String> {
        Err("no relay in a closed world".into())
    }

    /// `process` closed descriptor `fd`.
    fn closed(&mut self, _process: ProcessId, _fd: i32) {}

    /// A signal from a process dara does not trace reached `thread` with the grant of `step`
    /// (`ending_wait`: that grant was the thread's interrupt, which the signal caused): true if
    /// the world takes it as input (a recording), false if it is uncontrolled.
    fn signal_from_outside(&mut self, _step: u64, _thread: ThreadId, _sig: i32, _ending_wait: bool) -> bool {
        false
    }

    /// The run ended with `outcome` after `steps` steps: what the world adds to the report (a
    /// replay that did not use every recorded input diverged; `stopped_as_recorded`: it ended
    /// where the recording was stopped).
    fn finish(&mut self, _steps: u64, _outcome: &mut Outcome, _stopped_as_recorded: bool) -> WorldReport {
        WorldReport::default()
    }
}

/// What a world adds to the execution's report.
#[derive(Default)]
pub(super) struct WorldReport {
    /// Each node process's node name, and `workload`/`check` for those (cluster runs).
    pub(super) nodes: BTreeMap<ProcessId, String>,
    /// What crossed the boundary with outside peers (recording and replay runs).
    pub(super) outside: Vec<OutsideEvent>,
}

/// A closed world: nothing around the program.
pub(super) struct Closed;

impl World for Closed {}

/// The world `cfg` asks for.
pub(super) fn for_config(cfg: &ExecutionConfig) -> Result<Box<dyn World>, ExecutionError> {
    let relay_error = ExecutionError::Outside;
    Ok(match (&cfg.cluster, &cfg.outside) {
        (None, OutsideMode::Closed) => Box::new(Closed),
        (Some(spec), OutsideMode::Closed) => Box::new(ClusterWorld::new(spec.clone())),
        (None, OutsideMode::Live { stdin, signals }) => Box::new(Boundary::new(Relay::new(Recorder::new(signals.clone()), *stdin).map_err(relay_error)?)),
        (None, OutsideMode::Replay { events, stdin }) => Box::new(Boundary::new(Relay::new(Replayer::new(events), *stdin).map_err(relay_error)?)),
        (Some(_), _) => return Err(relay_error(RelayError::Broken("a cluster run is a closed world: it cannot also take input from peers outside dara".into()))),
    })
}
