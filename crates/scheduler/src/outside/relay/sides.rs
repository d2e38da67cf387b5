//! What makes a recording's relay differ from a replay's (rr's RecordSession and ReplaySession):
//! a [`Recorder`] admits peers outside dara, takes the user's signals from its
//! [`SignalInbox`](crate::outside::SignalInbox), and records outputs; a [`Replayer`] turns
//! outside peers away, feeds the recording's inputs and signals back at their steps, and compares
//! every output with the recording's (the first difference is a divergence).
use std::collections::VecDeque;
use std::sync::Arc;

use super::dials::{dial_for_real, Dialled};
use super::stdin::write_all_bounded;
use super::streams::deliver;
use super::{Relay, RelayError};
use crate::outside::describe_event;
use crate::netprobe::NetProbe;
use crate::outside::{OutsideEvent, OutsideWhat, SignalInbox};
use dara_model::name_lookup::{NameAnswer, NameQuery};

/// The recording or the replay side of a relay.
pub trait Side: Sized {
    /// A recording: peers outside dara may come at any time, and are recorded.
    const LIVE: bool;

    /// Signals to pass on to every traced process before the decision of `step`.
    fn signals(&mut self, step: u64) -> Vec<i32>;

    /// Whether a signal waits to be passed on (a recording's wait for input ends for it).
    fn has_pending_signal(&self) -> bool {
        false
    }

    /// The signals, as (thread, signal), that reached that thread with the grant of `step` in
    /// the recording (a replay's): those that ended the thread's wait (`ending_wait`, sent before
    /// the decision), or the others (sent after it).
    fn grant_signals(&mut self, _step: u64, _ending_wait: bool) -> Vec<(u32, i32)> {
        Vec::new()
    }

    /// Something the program sent to an outside peer: a replay compares it with the
    /// recording's next output.
    fn check_output(&mut self, _event: &OutsideEvent) -> Result<(), RelayError> {
        Ok(())
    }

    /// A replay's recorded output whose step has passed without the program producing it.
    fn overdue_output(&self, _step: u64) -> Result<(), RelayError> {
        Ok(())
    }

    /// Applies the side's recorded inputs of `step` to `relay` (a replay's).
    fn apply_recorded(_relay: &mut Relay<Self>, _step: u64, _net: &mut NetProbe) -> Result<(), RelayError> {
        Ok(())
    }

    /// What the recording had and the run did not use, once the run is over after `steps`:
    /// (step, expected, seen).
    fn unused(&self, _steps: u64) -> Option<(u64, String, String)> {
        None
    }

    /// The program's connect to `server`, an outside TCP server, is granted before the decision
    /// of `step` (stream `stream` if it connects): a recording dials it, a replay finds it in the
    /// recording (anything else is a divergence).
    fn dial(&mut self, step: u64, stream: u32, server: std::net::SocketAddr) -> Result<Dialled, RelayError>;

    /// The program's name lookup `query`, granted before the decision of `step`: a recording
    /// asks the machine's resolver, a replay takes the recorded answer (a different question, or
    /// none recorded there, is a divergence).
    fn name_lookup(&mut self, step: u64, query: &NameQuery) -> Result<NameAnswer, RelayError>;

    /// The virtual time to move the clock to before the decision of `step`, if it moves: a
    /// recording's real time (`real_ns`, since the run started) once the clock (`virtual_ns`)
    /// has fallen more than [`PACE_SLACK_NS`] behind it; a replay's recorded move.
    fn clock(&mut self, step: u64, virtual_ns: u64, real_ns: u64) -> Option<u64>;
}

/// How far a recording's clock may fall behind real time before it is moved up: at most one
/// recorded move a millisecond.
pub const PACE_SLACK_NS: u64 = 1_000_000;

/// The recording side: the user's signals come through the inbox, open while it lives.
pub struct Recorder {
    inbox: SignalInbox,
}

impl Recorder {
    pub fn new(inbox: SignalInbox) -> Recorder {
        inbox.open();
        Recorder { inbox }
    }
}

impl Drop for Recorder {
    /// The recording is over: signals to dara-trace stop it again.
    fn drop(&mut self) {
        self.inbox.close();
    }
}

impl Side for Recorder {
    const LIVE: bool = true;

    fn signals(&mut self, _step: u64) -> Vec<i32> {
        self.inbox.take_pending()
    }

    fn has_pending_signal(&self) -> bool {
        self.inbox.has_pending()
    }

    fn dial(&mut self, _step: u64, _stream: u32, server: std::net::SocketAddr) -> Result<Dialled, RelayError> {
        Ok(dial_for_real(server))
    }

    fn name_lookup(&mut self, _step: u64, query: &NameQuery) -> Result<NameAnswer, RelayError> {
        Ok(crate::names::resolve(query))
    }

    fn clock(&mut self, _step: u64, virtual_ns: u64, real_ns: u64) -> Option<u64> {
        (real_ns > virtual_ns.saturating_add(PACE_SLACK_NS)).then_some(real_ns)
    }
}

/// The replay side: the recording's events, split by what the replay does with them.
pub struct Replayer {
    inputs: VecDeque<OutsideEvent>,
    signals: VecDeque<OutsideEvent>,
    /// Signals sent to one thread with one grant (`stream` = thread + 1), found pending after it.
    grant_signals: VecDeque<OutsideEvent>,
    /// Signals sent to one thread that ended its wait with the grant of their step.
    wait_ending_signals: VecDeque<OutsideEvent>,
    outputs: VecDeque<OutsideEvent>,
    /// The recording's clock moves.
    clocks: VecDeque<OutsideEvent>,
    /// The program's connects to outside servers.
    dials: VecDeque<OutsideEvent>,
    /// The program's name lookups and their answers.
    lookups: VecDeque<OutsideEvent>,
}

impl Replayer {
    pub fn new(events: &Arc<Vec<OutsideEvent>>) -> Replayer {
        let (outputs, rest): (Vec<_>, Vec<_>) = events.iter().cloned().partition(|e| e.what.is_output());
        let (clocks, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|e| matches!(e.what, OutsideWhat::Clock(_)));
        let (dials, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|e| matches!(e.what, OutsideWhat::Dial { .. }));
        let (lookups, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|e| matches!(e.what, OutsideWhat::NameLookup { .. }));
        let (signals, inputs): (Vec<_>, Vec<_>) = rest.into_iter().partition(|e| e.what.is_signal());
        let (wait_ending_signals, signals): (Vec<_>, Vec<_>) = signals.into_iter().partition(|e| matches!(e.what, OutsideWhat::SignalEndingWait(_)));
        let (grant_signals, signals): (Vec<_>, Vec<_>) = signals.into_iter().partition(|e| e.stream != 0);
        Replayer {
            inputs: inputs.into(),
            signals: signals.into(),
            grant_signals: grant_signals.into(),
            wait_ending_signals: wait_ending_signals.into(),
            outputs: outputs.into(),
            clocks: clocks.into(),
            dials: dials.into(),
            lookups: lookups.into(),
        }
    }
}

impl Side for Replayer {
    const LIVE: bool = false;

    fn signals(&mut self, step: u64) -> Vec<i32> {
        let mut found = Vec::new();
        while let Some(e) = self.signals.front().filter(|e| e.step <= step) {
            if let OutsideWhat::Signal(s) = e.what {
                found.push(s);
            }
            self.signals.pop_front();
        }
        found
    }

    fn grant_signals(&mut self, step: u64, ending_wait: bool) -> Vec<(u32, i32)> {
        let queue = if ending_wait { &mut self.wait_ending_signals } else { &mut self.grant_signals };
        let mut found = Vec::new();
        while let Some(e) = queue.front().filter(|e| e.step <= step) {
            if let (true, OutsideWhat::Signal(s) | OutsideWhat::SignalEndingWait(s)) = (e.step == step && e.stream > 0, &e.what) {
                found.push((e.stream - 1, *s));
            }
            queue.pop_front();
        }
        found
    }

    fn check_output(&mut self, event: &OutsideEvent) -> Result<(), RelayError> {
        let expected = self.outputs.pop_front();
        if expected.as_ref() == Some(event) {
            return Ok(());
        }
        let difference = expected.as_ref().and_then(|e| dara_model::outside::first_difference(&e.what, &event.what)).unwrap_or_default();
        Err(RelayError::Diverged {
            expected: expected.map_or_else(|| "the program to send nothing more to outside peers".to_string(), |e| describe_event(&e)),
            seen: format!("{}{difference}", describe_event(event)),
        })
    }

    fn overdue_output(&self, step: u64) -> Result<(), RelayError> {
        match self.outputs.front() {
            Some(e) if e.step < step => Err(RelayError::Diverged { expected: describe_event(e), seen: format!("nothing sent by step {step}") }),
            _ => Ok(()),
        }
    }

    /// The recording's inputs of this step (new clients, their bytes, their EOF, stdin, UDP
    /// peers and their datagrams).
    fn apply_recorded(relay: &mut Relay<Replayer>, step: u64, net: &mut NetProbe) -> Result<(), RelayError> {
        loop {
            let Some(e) = relay.side.inputs.front().filter(|e| e.step <= step).cloned() else { return Ok(()) };
            relay.side.inputs.pop_front();
            relay.apply_input(step, e, net)?;
        }
    }

    fn dial(&mut self, step: u64, stream: u32, server: std::net::SocketAddr) -> Result<Dialled, RelayError> {
        let seen = OutsideEvent { step, stream, what: OutsideWhat::Dial { server, refused: false } };
        match self.dials.pop_front() {
            Some(e) if (e.step, e.stream, &e.what) == (step, stream, &seen.what) => Ok(Dialled::Connected(None)),
            Some(e) if e.step == step && e.what == (OutsideWhat::Dial { server, refused: true }) => Ok(Dialled::Refused),
            expected => Err(RelayError::Diverged {
                expected: expected.map_or_else(|| "no connection to an outside server".to_string(), |e| describe_event(&e)),
                seen: describe_event(&seen),
            }),
        }
    }

    fn clock(&mut self, step: u64, _virtual_ns: u64, _real_ns: u64) -> Option<u64> {
        let mut moved = None;
        while let Some(e) = self.clocks.front().filter(|e| e.step <= step) {
            if let (true, OutsideWhat::Clock(ns)) = (e.step == step, &e.what) {
                moved = Some(*ns);
            }
            self.clocks.pop_front();
        }
        moved
    }

    fn name_lookup(&mut self, step: u64, query: &NameQuery) -> Result<NameAnswer, RelayError> {
        let expected = self.lookups.pop_front();
        if let Some(OutsideEvent { step: at, what: OutsideWhat::NameLookup { query: asked, answer }, .. }) = &expected {
            if (*at, asked) == (step, query) {
                return Ok(answer.clone());
            }
        }
        Err(RelayError::Diverged {
            expected: expected.map_or_else(|| "no name lookup".to_string(), |e| describe_event(&e)),
            seen: format!("a lookup of {} at step {step}", query.describe()),
        })
    }

    /// The third part reads after "the run offered" (`DIVERGED at step 59: the trace expected
    /// the program to close its side (...); the run offered nothing more: it ended after 59 steps
    /// without sending it`).
    fn unused(&self, steps: u64) -> Option<(u64, String, String)> {
        let e = self.outputs.front().or_else(|| self.inputs.front()).or_else(|| self.signals.front()).or_else(|| self.grant_signals.front()).or_else(|| self.wait_ending_signals.front()).or_else(|| self.dials.front()).or_else(|| self.lookups.front())?;
        let what = match e.what {
            OutsideWhat::Dial { .. } => "without connecting",
            OutsideWhat::NameLookup { .. } => "without looking the name up",
            _ if e.what.is_output() => "without sending it",
            _ => "before it was delivered",
        };
        Some((e.step.min(steps), describe_event(e), format!("nothing more: it ended after {steps} steps {what}")))
    }
}

impl Relay<Replayer> {
    /// Applies one recorded input at `step`.
    fn apply_input(&mut self, step: u64, e: OutsideEvent, net: &mut NetProbe) -> Result<(), RelayError> {
        match &e.what {
            OutsideWhat::Connect { listener, peer } => {
                let index = *listener as usize;
                if index >= self.listeners.len() || e.stream as usize != self.streams.len() {
                    return Err(RelayError::Diverged {
                        expected: describe_event(&e),
                        seen: format!("{} listening socket(s) and {} connection(s)", self.listeners.len(), self.streams.len()),
                    });
                }
                self.open_stream(step, index, None, true, *peer)?;
            }
            OutsideWhat::Data(bytes) => {
                let stream = self.streams.get(e.stream as usize);
                let Some((inner, addrs)) = stream.and_then(|s| Some((s.inner.as_ref()?, s.inner_addrs))) else {
                    return Err(RelayError::Diverged { expected: describe_event(&e), seen: "that connection closed".into() });
                };
                deliver(inner, addrs, bytes, None, self.diag.as_ref())?;
                self.changed = true;
                self.events.push(e);
            }
            OutsideWhat::Close | OutsideWhat::Reset => {
                if let Some(s) = self.streams.get_mut(e.stream as usize) {
                    s.outer_eof = true;
                    s.closed_inner = true;
                    self.end_inner(e.stream as usize, e.what == OutsideWhat::Reset)?;
                }
                self.changed = true;
                self.events.push(e);
            }
            OutsideWhat::Stdin(bytes) => {
                let write = self.stdin.as_ref().and_then(|s| s.write.as_ref());
                let Some(write) = write else { return Err(RelayError::Diverged { expected: describe_event(&e), seen: "no stdin pipe".into() }) };
                write_all_bounded(write, bytes)?;
                self.changed = true;
                self.events.push(e);
            }
            OutsideWhat::StdinClosed => {
                if let Some(s) = &mut self.stdin {
                    s.write = None;
                }
                self.changed = true;
                self.events.push(e);
            }
            OutsideWhat::Peer { socket, peer } => {
                if *socket as usize >= self.datagram_sockets.len() || e.stream as usize != self.recorded_peers.len() {
                    return Err(RelayError::Diverged {
                        expected: describe_event(&e),
                        seen: format!("{} UDP socket(s) and {} outside peer(s)", self.datagram_sockets.len(), self.recorded_peers.len()),
                    });
                }
                self.open_peer(step, *socket as usize, None, true, *peer, net)?;
            }
            OutsideWhat::Datagram(bytes) => {
                let Some(peer) = self.recorded_peer(e.stream) else {
                    return Err(RelayError::Diverged { expected: describe_event(&e), seen: "no such outside peer".into() });
                };
                self.to_program_datagram(step, peer, bytes.clone(), net);
            }
            OutsideWhat::Signal(_) | OutsideWhat::SignalEndingWait(_) | OutsideWhat::Output(_) | OutsideWhat::OutputClosed | OutsideWhat::DatagramOutput(_) | OutsideWhat::Clock(_) | OutsideWhat::Dial { .. } | OutsideWhat::NameLookup { .. } => {}
        }
        Ok(())
    }
}

impl<S: Side> Relay<S> {
    /// Signals to pass on to every traced process before the decision of `step`: those
    /// `dara-trace` received (recording) or the recorded ones (replay).
    pub fn signals(&mut self, step: u64) -> Vec<i32> {
        let signals = self.side.signals(step);
        for &s in &signals {
            self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::Signal(s) });
        }
        signals
    }

    /// A signal sent to `thread` straight from outside reached it with the grant of `step`
    /// (recording): recorded, to be sent to the same thread with the same grant in the replay,
    /// before the decision if it ended the thread's wait (`ending_wait`: the grant was the
    /// thread's interrupt), else after it.
    pub fn signal_with_grant(&mut self, step: u64, thread: u32, sig: i32, ending_wait: bool) {
        let what = if ending_wait { OutsideWhat::SignalEndingWait(sig) } else { OutsideWhat::Signal(sig) };
        self.events.push(OutsideEvent { step, stream: thread + 1, what });
    }

    /// Replay: the signals to send, as (thread, signal), that reached the thread granted at
    /// `step` in the recording (see [`Relay::signal_with_grant`]): those that ended its wait,
    /// to be sent before the decision (`ending_wait`), or the others, after it.
    pub fn signals_with_grant(&mut self, step: u64, ending_wait: bool) -> Vec<(u32, i32)> {
        let found = self.side.grant_signals(step, ending_wait);
        for &(thread, s) in &found {
            let what = if ending_wait { OutsideWhat::SignalEndingWait(s) } else { OutsideWhat::Signal(s) };
            self.events.push(OutsideEvent { step, stream: thread + 1, what });
        }
        found
    }

    /// The virtual time to move the program's clock to before the decision of `step` (see
    /// [`Side::clock`]), recorded.
    pub fn pace(&mut self, step: u64, virtual_ns: u64, real_ns: u64) -> Option<u64> {
        let moved = self.side.clock(step, virtual_ns, real_ns)?;
        self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::Clock(moved) });
        Some(moved)
    }

    /// Replay: recorded events nobody produced or used, once the run is over after `steps`.
    pub fn finish(&self, steps: u64) -> Option<(u64, String, String)> {
        self.side.unused(steps)
    }

    /// Something the program did at the boundary: recorded, and in a replay compared with the
    /// recording's next output.
    pub(super) fn observed(&mut self, event: OutsideEvent) -> Result<(), RelayError> {
        self.side.check_output(&event)?;
        self.events.push(event);
        Ok(())
    }
}
