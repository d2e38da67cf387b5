//! The execution's side of the boundary with peers outside dara (recording and replay runs; see
//! [`crate::outside`]): listening sockets taken over, waiting for outside input while the
//! program idles, signals from the user passed on (recording) or sent again (replay), relayed
//! peers shown to the program, and signals from outside judged.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{signal_name, Execution};
use crate::choice::{ProcessId, ThreadId};
use crate::model::Request;
use crate::outcome::Outcome;
use crate::outside::{OutsideMode, RelayError};
use crate::procfs;
use crate::time::TimerPolicy;

impl Execution<'_> {
    /// A listening socket was split (`NetListen`, before its grant: both descriptors are still
    /// the program's): dara takes a duplicate of the public one and notes the twin's address.
    pub(super) fn note_listener(&mut self, thread: ThreadId) {
        let Some(Request::NetListen { fd, twin: twin_fd, datagrams }) = self.posted(thread) else { return };
        let process = self.processes.threads.get(&thread).copied().unwrap_or(0);
        let pid = self.processes.pid_of(thread);
        let taken = (|| {
            let public = self.network.probe.duplicate(pid, fd).map_err(|e| e.0)?.ok_or("the listening socket is gone")?;
            let twin = self.network.probe.duplicate(pid, twin_fd).map_err(|e| e.0)?.ok_or("the twin socket is gone")?;
            let addr = crate::outside::loopback_address(&twin).ok_or("the twin has no INET address")?;
            let outside = self.outside.as_mut().ok_or("no relay in a closed world")?;
            if datagrams {
                return outside.add_datagram_socket(process, fd, public, addr).map_err(|e| e.to_string());
            }
            outside.add_listener(process, fd, public, twin, addr).map_err(|e| e.to_string())
        })();
        if let Err(detail) = taken {
            self.pending_end.get_or_insert(Outcome::Uncontrolled { thread, syscall: "listen".into(), detail: format!("dara could not take over a listening socket: {detail}") });
        }
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
    /// calling it a deadlock.
    pub(super) fn await_outside(&mut self, choices: &[crate::choice::Choice], stop: &AtomicBool) -> Result<bool, Outcome> {
        let Some((live, may_receive)) = self.outside.as_ref().map(|o| (o.live(), o.may_receive())) else { return Ok(false) };
        let idle = choices.iter().all(|c| c.kind == crate::choice::ChoiceKind::Timeout);
        let next_timer = match self.cfg.time.timers {
            TimerPolicy::Deadline => self.model.next_deadline(None),
            TimerPolicy::Any => choices.iter().filter_map(|c| self.model.timer_deadline(c.thread)).min(),
        };
        if !idle || (next_timer.is_none() && self.model.net_requests().is_empty()) {
            self.idle_since = None;
            return Ok(false);
        }
        // (Looked for only when no relayed peer may come: it reads epoll interest lists.)
        let unrelayed = live && !may_receive && self.waits_for_unrelayed_peers();
        if !may_receive && !unrelayed {
            return Ok(false);
        }
        // Virtual time follows real time while the program idles: its next timer fires when it
        // would have without dara (virtual 0 is the start of the run), unless a client comes first.
        let real_ns = self.started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        let limit = next_timer.map(|t| Duration::from_nanos(t.saturating_sub(real_ns)));
        if limit == Some(Duration::ZERO) {
            self.idle_since = None;
            return Ok(false);
        }
        let (since, told) = *self.idle_since.get_or_insert((Instant::now(), false));
        if !told && next_timer.is_none() && since.elapsed() >= IDLE_NOTICE {
            eprintln!("dara: waiting for outside input ({}); Ctrl-C passes SIGINT on to the program, a second one stops dara and keeps the trace", self.waiting_for());
            self.idle_since = Some((since, true));
        }
        // A signal someone outside sends straight to a parked thread (`kill <server pid>`) ends
        // a wait only once dara looks: while some wait could be ended so, look every
        // SIGNAL_LOOK (before, such a recording waited for good unless something else woke it).
        let interruptible = self.model.has_interruptible_wait();
        let outside = self.outside.as_mut().expect("checked above");
        let slice = match (unrelayed, limit) {
            (false, limit) => Some(limit.map_or(IDLE_NOTICE, |l| l.min(IDLE_NOTICE))),
            (true, None) => Some(UNRELAYED_POLL),
            (true, Some(limit)) => Some(limit.min(UNRELAYED_POLL)),
        };
        let slice = if interruptible { slice.map(|s| s.min(SIGNAL_LOOK)) } else { slice };
        match outside.wait(slice, stop) {
            Ok(true) => {
                self.idle_since = None;
                Ok(true)
            }
            Ok(false) if stop.load(Ordering::Relaxed) => Err(Outcome::Interrupted),
            Ok(false) => {
                if unrelayed {
                    self.network.dirty = true; // look at the sockets again
                }
                if interruptible {
                    self.signals_may_be_pending();
                }
                Ok(true) // look again: the deadline may have come, or more waiting is due
            }
            Err(e) => Err(relay_outcome(self.steps.len() as u64, e)),
        }
    }

    /// What the idle threads wait for, for the waiting notice.
    pub(super) fn waiting_for(&mut self) -> String {
        let report = self.deadlock_report();
        report.iter().take(3).map(|t| format!("thread {} {}", t.thread, t.detail)).collect::<Vec<_>>().join("; ")
    }

    /// Passes the signals dara-trace received (recording) or the recorded ones (replay) on to every
    /// traced process. True when some process will die of it: the next decision waits for that.
    pub(super) fn pass_on_signals(&mut self) -> bool {
        let step = self.steps.len() as u64;
        let Some(signals) = self.outside.as_mut().map(|o| o.signals(step)) else { return false };
        let mut dies = false;
        for sig in signals {
            self.signals_may_be_pending();
            let now = Instant::now();
            let mut catching = Vec::new();
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
                    self.processes.dying.push((process, now));
                    self.processes.exiting.push(process);
                    dies = true;
                } else if caught {
                    catching.push(process);
                }
            }
            // A process with a thread in a wait the signal ends (an `Interrupt`) takes it at once.
            let interruptible: Vec<ProcessId> = self.model.interruptible_waits().iter().filter_map(|(t, _)| self.processes.threads.get(t).copied()).collect();
            catching.retain(|p| !interruptible.contains(p));
            if !catching.is_empty() && matches!(self.cfg.outside, OutsideMode::Live { .. }) {
                self.tell_signal_waits(&catching, sig);
            }
        }
        dies
    }

    /// A recording passed `sig` on to `processes`, which catch it and have no thread in a wait
    /// the signal ends (`poll`, `epoll_wait`, `sigsuspend`, a sleep, a condition wait, ...: an
    /// `Interrupt` choice). Their threads wait where a signal does not end the wait (a lock, a join):
    /// the handler runs when one of them is next granted, at the latest when its wait times out.
    /// Says so in one line, with when that will be, so a user whose Ctrl-C seems lost knows why.
    pub(super) fn tell_signal_waits(&self, processes: &[ProcessId], sig: i32) {
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

    /// Tells the preload to show the client where the program would see dara's socket that
    /// stands for it (before the program can see it: its accept or receive is granted later).
    pub(super) fn show_relayed_peer(&mut self, relayed: crate::outside::Relayed) {
        use dara_abi::relayed_flags;
        let peer = relayed.peer;
        let entry = &self.region.header().relayed[self.relayed_count % dara_abi::MAX_RELAYED];
        self.relayed_count += 1;
        entry.relay_port.store(0, Ordering::Release);
        let (family, ip) = match peer.ip() {
            std::net::IpAddr::V4(v4) => (libc::AF_INET, [u32::from_ne_bytes(v4.octets()), 0, 0, 0]),
            std::net::IpAddr::V6(v6) => (libc::AF_INET6, std::array::from_fn(|i| u32::from_ne_bytes(v6.octets()[i * 4..i * 4 + 4].try_into().expect("4 bytes")))),
        };
        entry.family.store(family as u32, Ordering::Relaxed);
        let flags = if relayed.datagrams { relayed_flags::DATAGRAMS } else { 0 } | if relayed.relay.is_ipv6() { relayed_flags::RELAY_V6 } else { 0 };
        entry.flags.store(flags, Ordering::Relaxed);
        entry.port.store(u32::from(peer.port()), Ordering::Relaxed);
        for (word, value) in entry.ip.iter().zip(ip) {
            word.store(value, Ordering::Relaxed);
        }
        entry.relay_port.store(u32::from(relayed.relay.port()), Ordering::Release);
    }

    /// Replay: sends the signals that reached a thread from outside with its grant of `step` in
    /// the recording, before that step's decision: the thread, parked and blocking them, lets
    /// them through as it comes back from the grant, as it did then. Sent before the decision
    /// because one may be what ended its wait (an `Interrupt` choice, offered only for a signal
    /// that is pending).
    pub(super) fn replay_signals_before(&mut self, step: u64) {
        let Some(outside) = self.outside.as_mut() else { return };
        let signals = outside.signals_before(step);
        for &(thread, sig) in &signals {
            let (pid, tid) = (self.processes.pid_of(thread as ThreadId), self.region.slot(thread as usize).tid.load(Ordering::Acquire));
            procfs::thread_signal(pid, tid, sig);
        }
        if !signals.is_empty() {
            self.signals_may_be_pending();
        }
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
        match self.outside.as_mut() {
            Some(outside) if outside.live() => {
                outside.signal_with_grant(step, thread, sig);
                None
            }
            _ => Some(Outcome::Uncontrolled {
                thread,
                syscall: "signal".into(),
                detail: format!("signal {} from process {sender}, which dara does not trace, reached thread {thread}: a signal from outside is input dara controls only in a recording (send it to dara-trace to have it passed on)", signal_name(sig)),
            }),
        }
    }
}

/// The outcome a relay failure ends the run with.
pub(super) fn relay_outcome(step: u64, e: RelayError) -> Outcome {
    match e {
        RelayError::Diverged { expected, seen } => Outcome::Diverged { step, expected, seen },
        RelayError::Broken(detail) => Outcome::Uncontrolled { thread: 0, syscall: "outside relay".into(), detail },
    }
}

/// How often a recording that waits for a peer dara does not relay looks at the program's sockets
/// again.
const UNRELAYED_POLL: Duration = Duration::from_millis(20);

/// How often a recording waiting for outside input looks for signals sent straight to its parked
/// threads.
const SIGNAL_LOOK: Duration = Duration::from_millis(50);

/// How long the run waits for outside input before it says so.
const IDLE_NOTICE: Duration = Duration::from_secs(2);
