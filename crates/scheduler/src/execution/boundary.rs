//! The world of peers outside dara (recording and replay runs; see [`crate::outside`]): the relay
//! between them and the program, listening sockets taken over, waiting for outside input while
//! the program idles, the user's signals passed on (recording) or sent again (replay), relayed
//! peers shown to the program, and signals from outside taken as input.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::driver::Execution;
use super::pace::TimerPace;
use super::world::{Advance, World, WorldReport};
use super::signal_name;
use crate::choice::{Choice, ChoiceKind, ProcessId, ThreadId};
use crate::model::Request;
use dara_model::name_lookup::{NameAnswer, NameQuery};
use crate::outcome::Outcome;
use crate::outside::{Relay, RelayError, Relayed, Side};
use crate::procfs;
use crate::time::TimerPolicy;

/// How often a recording that waits for a peer dara does not relay looks at the program's sockets
/// again.
const UNRELAYED_POLL: Duration = Duration::from_millis(20);

/// How often a recording waiting for outside input looks for signals sent straight to its parked
/// threads.
const SIGNAL_LOOK: Duration = Duration::from_millis(50);

/// How long the run waits for outside input before it says so.
const IDLE_NOTICE: Duration = Duration::from_secs(2);

/// How long a recording that relays peers (a TCP server) waits idle before it also looks for
/// peers it does not relay (a client of the program's Unix socket): the look reads epoll interest
/// lists, too dear for every quiet point of a busy server.
const UNRELAYED_LOOK_AFTER: Duration = Duration::from_millis(500);

/// The boundary with outside peers: the relay (a recording's or a replay's: `S`), and what the
/// execution keeps about it.
pub(super) struct Boundary<S: Side> {
    relay: Relay<S>,
    /// Entries written to the region's table of relayed peers (see [`show_relayed_peer`]).
    relayed_count: usize,
    /// When a recording's timers may fire in real time (see [`TimerPace`]).
    pace: TimerPace,
    /// Since when the run has been waiting for outside input with nothing else to do, and
    /// whether the user was told.
    idle_since: Option<(Instant, bool)>,
    /// A recording: an outside peer has brought input (see `keep_pace`).
    heard_from_outside: bool,
}

impl<S: Side> Boundary<S> {
    /// Replay: sends each signal recorded with the grant of `step` (those that ended the thread's
    /// wait, or the others) to its thread. True when one was sent.
    fn send_grant_signals(&mut self, ex: &mut Execution<'_>, step: u64, ending_wait: bool) -> bool {
        let signals = self.relay.signals_with_grant(step, ending_wait);
        for &(thread, sig) in &signals {
            let (pid, tid) = (ex.processes.pid_of(thread as ThreadId), ex.region.slot(thread as usize).tid.load(Ordering::Acquire));
            procfs::thread_signal(pid, tid, sig);
            if let Some(process) = ex.processes.of(thread as ThreadId) {
                ex.processes.deaths.note_passed_on(process, sig); // as the recording noted it
            }
        }
        !signals.is_empty()
    }

    /// Once an outside peer has brought input, a recording brings the program's clock up to real
    /// time whenever it has fallen more than a millisecond behind (a step costs 1 µs of virtual
    /// time and tens of real ones, so a busy server's clock fell far behind: `iperf3 -s` reported
    /// 423 MB received in 0.00 s), and records the move; its replay makes the same move at the
    /// same step. Made after the decision, before it is applied: what was enabled for it does not
    /// depend on the move. Until then (a recording nobody outside talked to, or its part before
    /// the first client) virtual time goes alone, so that the same seed gives the same run.
    fn keep_pace(&mut self, ex: &mut Execution<'_>, step: u64) {
        if !self.heard_from_outside {
            self.heard_from_outside = self.relay.live() && self.relay.events().iter().any(|e| e.what.is_input());
        }
        let real_ns = if self.heard_from_outside && self.relay.may_receive() { self.pace.real_ns() } else { 0 };
        if let Some(ns) = self.relay.pace(step, ex.model.now(), real_ns) {
            ex.model.advance_clock(ns);
        }
    }

    pub(super) fn new(relay: Relay<S>) -> Boundary<S> {
        Boundary { relay, relayed_count: 0, pace: TimerPace::new(), idle_since: None, heard_from_outside: false }
    }

    /// Tells the preload to show the client where the program would see dara's socket that
    /// stands for it (before the program can see it: its accept or receive is granted later),
    /// and, for an outside server dara dialled, where the program's connect to it goes (the
    /// newest entry for a server only: the older ones keep showing their connections' peer).
    fn show_relayed_peer(&mut self, ex: &Execution<'_>, relayed: Relayed) {
        use dara_abi::relayed_flags;
        let peer = relayed.peer;
        let (family, ip) = table_address(peer);
        let table = &ex.region.header().relayed;
        if relayed.dialled {
            ex.forget_dials_to(peer);
        }
        let entry = &table[self.relayed_count % dara_abi::MAX_RELAYED];
        self.relayed_count += 1;
        entry.relay_port.store(0, Ordering::Release);
        entry.family.store(family as u32, Ordering::Relaxed);
        let flags = if relayed.datagrams { relayed_flags::DATAGRAMS } else { 0 } | if relayed.relay.is_ipv6() { relayed_flags::RELAY_V6 } else { 0 } | if relayed.dialled { relayed_flags::DIALED } else { 0 };
        entry.flags.store(flags, Ordering::Relaxed);
        entry.port.store(u32::from(peer.port()), Ordering::Relaxed);
        for (word, value) in entry.ip.iter().zip(ip) {
            word.store(value, Ordering::Relaxed);
        }
        entry.relay_port.store(u32::from(relayed.relay.port()), Ordering::Release);
    }
}

/// `peer` as the relayed-peer table writes it: its family and IP in four native words.
fn table_address(peer: std::net::SocketAddr) -> (i32, [u32; 4]) {
    match peer.ip() {
        std::net::IpAddr::V4(v4) => (libc::AF_INET, [u32::from_ne_bytes(v4.octets()), 0, 0, 0]),
        std::net::IpAddr::V6(v6) => (libc::AF_INET6, std::array::from_fn(|i| u32::from_ne_bytes(v6.octets()[i * 4..i * 4 + 4].try_into().expect("4 bytes")))),
    }
}

impl Execution<'_> {
    /// The program's connects to `server` no longer go to a socket of dara's that stood for it as
    /// an outside server: a newer dial took over, or the server is now the program's own (a
    /// connect made before a traced server listened was dialled outside, refused, and every later
    /// one was sent to that refusal too: a test script's wait for its server never ended).
    pub(super) fn forget_dials_to(&self, server: std::net::SocketAddr) {
        let (family, ip) = table_address(server);
        let same_server = |e: &dara_abi::RelayedPeer| e.family.load(Ordering::Relaxed) == family as u32 && e.port.load(Ordering::Relaxed) == u32::from(server.port()) && e.ip.iter().zip(ip).all(|(w, v)| w.load(Ordering::Relaxed) == v);
        for e in self.region.header().relayed.iter().filter(|e| same_server(e)) {
            e.flags.fetch_and(!dara_abi::relayed_flags::DIALED, Ordering::Relaxed);
        }
    }
}

impl<S: Side> World for Boundary<S> {
    fn stdin_for_program(&self) -> Option<i32> {
        self.relay.stdin_for_program()
    }

    fn launched(&mut self) {
        self.relay.launched();
    }

    fn received_by(&self, local: u16, remote: u16) -> Option<u64> {
        self.relay.received_by(local, remote)
    }

    fn listens_on(&self, port: u16) -> bool {
        self.relay.listens_on(port)
    }

    fn dials(&self) -> bool {
        true
    }

    /// Dials the server (a recording) or finds it in the recording (a replay), and tells the
    /// preload where the program's connect goes instead before the connect is granted.
    fn dial(&mut self, ex: &mut Execution<'_>, step: u64, server: std::net::SocketAddr) -> Result<std::net::SocketAddr, Outcome> {
        let relayed = self.relay.dial(step, server).map_err(|e| relay_outcome(step, e))?;
        self.show_relayed_peer(ex, relayed);
        Ok(relayed.relay)
    }

    /// Asks the machine's resolver and records its answer (a recording) or gives the recorded
    /// answer back (a replay).
    fn name_lookup(&mut self, _ex: &mut Execution<'_>, _thread: ThreadId, step: u64, query: &NameQuery) -> Result<NameAnswer, Outcome> {
        self.relay.name_lookup(step, query).map_err(|e| relay_outcome(step, e))
    }

    /// Pumps the relay: the program's output out, new clients and their bytes in (settled);
    /// then shows the program the peers of new relayed connections.
    fn exchange(&mut self, ex: &mut Execution<'_>) -> Result<bool, Outcome> {
        let sending = ex.steps.last().is_some_and(|s| matches!(ex.model.status(s.choice.thread), Some(crate::model::ThreadStatus::Pending(r)) if r.op() == dara_abi::Op::NetSend));
        let step = ex.steps.len() as u64;
        let changed = self.relay.pump(step, &mut ex.network.probe, sending).map_err(|e| relay_outcome(step, e))?;
        for relayed in self.relay.take_relayed() {
            self.show_relayed_peer(ex, relayed);
        }
        Ok(changed)
    }

    /// Passes the signals dara-trace received (recording) or the recorded ones (replay) on to
    /// every traced process; a process that will die of one is waited for first.
    fn before_choosing(&mut self, ex: &mut Execution<'_>) -> Advance {
        let signals = self.relay.signals(ex.steps.len() as u64);
        let tell = self.relay.live();
        let dies = signals.into_iter().fold(false, |dies, sig| ex.pass_on(sig, tell) | dies);
        if dies {
            Advance::Again
        } else {
            Advance::Decide
        }
    }

    /// Replay: sends the signals from outside that ended a thread's wait with its grant of `step`
    /// in the recording, before that step's decision: the thread, parked and blocking them, was
    /// offered its `Interrupt` because one was pending, and is again. A recording notes here when
    /// its timers were armed, in real time (see [`TimerPace`]).
    fn before_decision(&mut self, ex: &mut Execution<'_>, step: u64) {
        if self.relay.live() {
            self.pace.note(&ex.model);
        }
        if self.send_grant_signals(ex, step, true) {
            ex.signals_may_be_pending();
        }
    }

    /// The decision of `step` is made: the recording may bring the clock up to real time (see
    /// [`Boundary::keep_pace`]), and a replay sends the other signals that reached the granted
    /// thread from outside with this grant. In the recording such a signal came while the
    /// thread was parked, too late for the scheduler to see it before it decided (a timed wait
    /// granted its timeout just as the signal came); sent before the decision it would end the
    /// wait instead. Sent now, the thread finds it pending as it comes back from the grant, as it
    /// did then.
    fn before_grant(&mut self, ex: &mut Execution<'_>, step: u64) {
        self.keep_pace(ex, step);
        self.send_grant_signals(ex, step, false);
    }

    /// Recording: when nothing can run now but an outside peer may still bring input, waits for
    /// it, and for real time to reach the next timer's deadline: a timer fires no earlier than it
    /// would without dara (the caller then moves the clock to it). Ok(true) when something came
    /// (look again), Ok(false) to go on now.
    ///
    /// "Nothing can run now": no choice at all (`TimerPolicy::Deadline`), or nothing but timers
    /// (`TimerPolicy::Any`, where a pending timer is always a choice).
    ///
    /// A thread waiting for a datagram on a socket it never bound (an answer from a UDP server),
    /// or for a client of a Unix-domain listening socket, waits for an outside peer too: dara
    /// relays neither, so it looks at the program's sockets again every [`UNRELAYED_POLL`], and a
    /// peer from outside stops the run as uncontrolled (see `NetProbe::view`) instead of the run
    /// calling it a deadlock (or, when the program also waits for relayed clients, instead of
    /// waiting silently: from [`UNRELAYED_LOOK_AFTER`] of idling on).
    fn when_idle(&mut self, ex: &mut Execution<'_>, choices: &[Choice], stop: &AtomicBool) -> Result<bool, Outcome> {
        let (live, may_receive) = (self.relay.live(), self.relay.may_receive());
        let idle = choices.iter().all(|c| c.kind == ChoiceKind::Timeout);
        let next_timer = match ex.cfg.time.timers {
            TimerPolicy::Deadline => ex.model.next_deadline(None),
            TimerPolicy::Any => choices.iter().filter_map(|c| ex.model.timer_deadline(c.thread)).min(),
        };
        // A thread waiting for a signal (`sigwait`, `sigsuspend`, `pause`) in a recording waits
        // for whoever outside sends it (`kill -HUP $(cat pidfile)`), as a server waits for clients.
        // So does a poll or epoll set that watches a signalfd (`netprobe/signalfd.rs`). Asked
        // only where the answer decides (it reads /proc for every watched descriptor): not at
        // each quiet point of a server waiting for its relayed clients.
        let signal_wait = |ex: &mut Execution<'_>| live && ex.waits_for_signals();
        if !idle || (next_timer.is_none() && ex.model.net_requests().is_empty() && !signal_wait(ex)) {
            self.idle_since = None;
            return Ok(false);
        }
        // (Looked for at once when no relayed peer may come, else once the program has idled a
        // while: it reads epoll interest lists. Before, a server that also listens on TCP waited
        // for good, silently, for a client of its Unix socket to be relayed.)
        let idled = self.idle_since.is_some_and(|(since, _)| since.elapsed() >= UNRELAYED_LOOK_AFTER);
        let unrelayed = live && (!may_receive || idled) && ex.waits_for_unrelayed_peers();
        if !may_receive && !unrelayed && !signal_wait(ex) {
            return Ok(false);
        }
        // While the program idles, its next timer fires when it would have without dara (its
        // duration after it was armed, in real time), unless a client comes first.
        let real_ns = self.pace.real_ns();
        let limit = next_timer.map(|t| Duration::from_nanos(self.pace.floor(t).saturating_sub(real_ns)));
        if limit == Some(Duration::ZERO) {
            self.idle_since = None;
            return Ok(false);
        }
        let (since, told) = *self.idle_since.get_or_insert((Instant::now(), false));
        if !told && next_timer.is_none() && since.elapsed() >= IDLE_NOTICE {
            eprintln!("dara: waiting for outside input ({}); Ctrl-C passes SIGINT on to the program, a second one stops dara and keeps the trace", ex.waiting_for());
            self.idle_since = Some((since, true));
        }
        // A signal someone outside sends straight to a parked thread (`kill <server pid>`) ends
        // a wait only once dara looks: while some wait could be ended so, look every
        // SIGNAL_LOOK (before, such a recording waited for good unless something else woke it).
        let interruptible = ex.model.has_interruptible_wait();
        let slice = match (unrelayed, limit) {
            (false, limit) => Some(limit.map_or(IDLE_NOTICE, |l| l.min(IDLE_NOTICE))),
            (true, None) => Some(UNRELAYED_POLL),
            (true, Some(limit)) => Some(limit.min(UNRELAYED_POLL)),
        };
        let slice = if interruptible { slice.map(|s| s.min(SIGNAL_LOOK)) } else { slice };
        match self.relay.wait(slice, stop) {
            Ok(true) => {
                self.idle_since = None;
                Ok(true)
            }
            Ok(false) if stop.load(Ordering::Relaxed) => Err(Outcome::Interrupted),
            Ok(false) => {
                if unrelayed {
                    ex.network.dirty = true; // look at the sockets again
                }
                if interruptible {
                    ex.signals_may_be_pending();
                }
                Ok(true) // look again: the deadline may have come, or more waiting is due
            }
            Err(e) => Err(relay_outcome(ex.steps.len() as u64, e)),
        }
    }

    fn process_gone(&mut self, process: ProcessId) {
        self.relay.forget_listeners(process, None);
    }

    /// A listening socket was split (`NetListen`, before its grant: both descriptors are still
    /// the program's): dara takes a duplicate of the public one and notes the twin's address.
    fn listening(&mut self, ex: &mut Execution<'_>, thread: ThreadId, request: Request) -> Result<(), String> {
        let Request::NetListen { fd, twin: twin_fd, datagrams } = request else { return Ok(()) };
        let process = ex.processes.of(thread).unwrap_or(0);
        let pid = ex.processes.pid_of(thread);
        let public = ex.network.probe.duplicate(pid, fd).map_err(|e| e.0)?.ok_or("the listening socket is gone")?;
        let twin = ex.network.probe.duplicate(pid, twin_fd).map_err(|e| e.0)?.ok_or("the twin socket is gone")?;
        let addr = crate::outside::loopback_address(&twin).ok_or("the twin has no INET address")?;
        if datagrams {
            return self.relay.add_datagram_socket(process, fd, public, addr).map_err(|e| e.to_string());
        }
        if let Some(public_port) = crate::netprobe::socket_address(&public, false).map(|a| a.port()) {
            ex.network.probe.split_listener(public_port, addr);
        }
        self.relay.add_listener(process, fd, public, twin, addr).map_err(|e| e.to_string())
    }

    fn closed(&mut self, process: ProcessId, fd: i32) {
        self.relay.forget_listeners(process, Some(fd));
    }

    /// A recording records a signal from outside, to be sent to the same thread with the same
    /// grant in its replay; a replay has nobody outside.
    fn signal_from_outside(&mut self, step: u64, thread: ThreadId, sig: i32, ending_wait: bool) -> bool {
        if !self.relay.live() {
            return false;
        }
        self.relay.signal_with_grant(step, thread, sig, ending_wait);
        true
    }

    /// A replay that ended before the recording's outside events were all used diverged, unless
    /// it ended where the recording was stopped, or was stopped as uncontrolled: that says why
    /// (a delivery that did not settle, say), and the events left over only follow from it.
    fn finish(&mut self, steps: u64, outcome: &mut Outcome, stopped_as_recorded: bool) -> WorldReport {
        if !matches!(outcome, Outcome::Diverged { .. } | Outcome::Uncontrolled { .. }) && !stopped_as_recorded {
            if let Some((step, expected, seen)) = self.relay.finish(steps) {
                *outcome = Outcome::Diverged { step, expected, seen };
            }
        }
        // The run is over: what a traced client was still owed does not matter any more.
        let _ = self.relay.flush_clients();
        WorldReport { outside: self.relay.events().to_vec(), ..Default::default() }
    }
}

impl Execution<'_> {
    /// Passes `sig` (the user's, or the recorded one) on to every traced process. True when some
    /// process will die of it: the next decision waits for that. `tell`: say so when processes
    /// catch it but wait where it does not end the wait (a recording, where the user waits).
    pub(super) fn pass_on(&mut self, sig: i32, tell: bool) -> bool {
        self.signals_may_be_pending();
        let now = Instant::now();
        let mut catching = Vec::new();
        let mut ending = Vec::new();
        let mut ignoring = Vec::new();
        for (&process, record) in &self.processes.records {
            if !record.alive {
                continue;
            }
            let terminates = procfs::signal_terminates(record.pid, sig);
            let caught = !terminates && procfs::signal_caught(record.pid, sig);
            if let Some(pidfd) = &record.pidfd {
                procfs::pidfd_signal(pidfd, sig);
            }
            // Noted whatever the process's mask says now: one parked at an exec has every
            // signal blocked, and takes this one, and dies of it, once it goes on.
            self.processes.deaths.note_passed_on(process, sig);
            if terminates {
                ending.push(process);
            } else if caught {
                catching.push(process);
            } else {
                ignoring.push((process, record.pid));
            }
        }
        if tell && ending.is_empty() && catching.is_empty() && !ignoring.is_empty() {
            self.tell_signal_ignored(&ignoring, sig);
        }
        let dies = !ending.is_empty();
        for process in ending {
            self.processes.dies(process, now);
        }
        // A process with a thread in a wait the signal ends (an `Interrupt`) takes it at once.
        let interruptible: Vec<ProcessId> = self.model.interruptible_waits().iter().filter_map(|(t, _)| self.processes.of(*t)).collect();
        catching.retain(|p| !interruptible.contains(p));
        if !catching.is_empty() && tell {
            self.tell_signal_waits(&catching, sig);
        }
        dies
    }

    /// What the idle threads wait for, for the waiting notice.
    fn waiting_for(&mut self) -> String {
        let report = self.deadlock_report();
        report.iter().take(3).map(|t| format!("thread {} {}", t.thread, t.detail)).collect::<Vec<_>>().join("; ")
    }

    /// A recording passed `sig` on to `processes`, which catch it and have no thread in a wait
    /// the signal ends (`poll`, `epoll_wait`, `sigsuspend`, a sleep, a condition wait, ...: an
    /// `Interrupt` choice). Their threads wait where a signal does not end the wait (a lock, a join):
    /// the handler runs when one of them is next granted, at the latest when its wait times out.
    /// Says so in one line, with when that will be, so a user whose Ctrl-C seems lost knows why.
    fn tell_signal_waits(&self, processes: &[ProcessId], sig: i32) {
        let when = |process: ProcessId| {
            let threads = self.processes.threads.iter().filter(|(_, p)| **p == process).map(|(t, _)| *t);
            let program = self.processes.records.get(&process).map_or("", |r| r.program.as_str());
            match threads.filter_map(|t| self.model.timer_deadline(t)).min() {
                Some(deadline) => format!("process {process} ({program}) within {:.1} s", deadline.saturating_sub(self.model.now()) as f64 / 1e9),
                None => format!("process {process} ({program}) when woken (no timeout)"),
            }
        };
        const NAMED: usize = 3;
        let mut named: Vec<String> = processes.iter().take(NAMED).map(|&p| when(p)).collect();
        if processes.len() > NAMED {
            named.push(format!("{} more", processes.len() - NAMED));
        }
        eprintln!(
            "dara: {} passed on; processes that catch it but wait where a signal does not end the wait (a lock, a join, a wait for a child) take it when their waits end: {}. A second Ctrl-C stops dara and keeps the trace",
            signal_name(sig),
            named.join(", ")
        );
    }

    /// A recording passed `sig` on, and every process ignores it (or blocks it): nothing will
    /// happen, so the user who pressed Ctrl-C is told what will (rsyslogd ignores SIGINT).
    fn tell_signal_ignored(&self, processes: &[(ProcessId, u32)], sig: i32) {
        let named: Vec<String> = processes.iter().take(3).map(|&(p, pid)| format!("process {p} ({}, pid {pid})", self.processes.records.get(&p).map_or("", |r| r.program.as_str()))).collect();
        let pid = processes[0].1;
        eprintln!("dara: {} passed on, but the program ignores it: {}. Send it SIGTERM (kill {pid}) to end it, or press Ctrl-C again to stop dara and keep the trace", signal_name(sig), named.join(", "));
    }

    /// A signal sent by a process (not raised by the kernel) reached `thread` with its last grant
    /// (its sender pid, si_code and si_value). From dara or a traced process it is part of the run.
    /// From outside, a recording records it (its replay sends it to the same thread with the same
    /// grant); anywhere else it is input dara neither controls nor records: the run stops.
    pub(super) fn signal_arrived(&mut self, thread: ThreadId, sig: i32, sender: u32, code: i32, value: u64) -> Option<Outcome> {
        // dara's own signals carry its mark (its pid would read 0 from inside a PID namespace,
        // as an outside sender's does).
        let from_dara = code == libc::SI_QUEUE && value == dara_abi::DARA_SIGNAL_VALUE;
        if from_dara || self.processes.records.values().any(|p| p.own_pid == sender) {
            return None;
        }
        let step = (self.steps.len() as u64).saturating_sub(1);
        // A signal the program blocks, told right after a poll's grant, is one a signalfd it
        // watched reports: it made the poll ready (`hooks/signalfd.rs`).
        let blocked = self.region.slot(thread as usize).program_mask.load(std::sync::atomic::Ordering::Acquire) & (1u64 << ((sig - 1) & 63)) != 0;
        let ending_wait = self.steps.last().is_some_and(|s| s.choice.thread == thread && (s.choice.kind == ChoiceKind::Interrupt || (s.choice.op == dara_abi::Op::NetPoll && blocked)));
        if self.with_world(|world, _| world.signal_from_outside(step, thread, sig, ending_wait)) {
            if let Some(process) = self.processes.of(thread) {
                self.processes.deaths.note_passed_on(process, sig); // a stop asked from outside
            }
            return None;
        }
        Some(Outcome::Uncontrolled {
            thread,
            syscall: "signal".into(),
            detail: format!("signal {} from process {sender}, which dara does not trace, reached thread {thread}: a signal from outside is input dara controls only in a recording (send it to dara-trace to have it passed on)", signal_name(sig)),
        })
    }
}

/// The outcome a relay failure ends the run with.
pub(super) fn relay_outcome(step: u64, e: RelayError) -> Outcome {
    match e {
        RelayError::Diverged { expected, seen } => Outcome::Diverged { step, expected, seen },
        RelayError::Broken(detail) => Outcome::Uncontrolled { thread: 0, syscall: "outside relay".into(), detail },
    }
}
