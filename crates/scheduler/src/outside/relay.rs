//! The relay between outside peers and the program: the public listening sockets dara holds, one
//! [`Stream`] per accepted connection (dara's socket to the program's twin, and in a recording the
//! outside client's socket), and the pump that moves bytes at quiet points. Runs on the scheduler
//! thread while every target thread is parked; nothing here blocks (all sockets are non-blocking,
//! and every wait is bounded).
//!
//! One epoll set holds every socket dara relays, so a quiet point where nothing happened costs a
//! single `epoll_wait` with a zero timeout however many clients are connected.
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod datagrams;

use super::{describe_event, OutsideEvent, OutsideMode, OutsideWhat};
use crate::choice::ProcessId;
use crate::netprobe::{self, NetProbe};
use crate::sockdiag::SockDiag;

/// Most bytes taken from one outside client and not yet delivered to the program.
const INBOUND_BUFFER: usize = 256 * 1024;
/// Bytes read in one call.
const CHUNK: usize = 64 * 1024;
/// Most steps the program's output to outside clients is held back while the program keeps
/// sending (see [`Outside::pump`]), and most bytes held.
const HOLD_STEPS: u64 = 64;
const HOLD_BYTES: usize = 256 * 1024;
/// epoll tokens: the low bits say what the high bits index.
const TAG_LISTENER: u64 = 0;
const TAG_INNER: u64 = 1;
const TAG_OUTER: u64 = 2;
const TAG_DGRAM_PUBLIC: u64 = 3;
const TAG_DGRAM_PEER: u64 = 4;
const TAG_BITS: u32 = 3;

/// A socket of dara's that stands for a client: the program is shown `peer` wherever it would
/// see dara's `relay` address.
#[derive(Clone, Copy, Debug)]
pub struct Relayed {
    pub relay: SocketAddr,
    pub peer: SocketAddr,
    /// A UDP socket (else TCP).
    pub datagrams: bool,
}

/// Why the relay stopped the run.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Replay: the program did not do what the recording says (or the recording asks for a
    /// listener the program does not have).
    #[error("the replay expected {expected}, the run did {seen}")]
    Diverged { expected: String, seen: String },
    /// A relay socket failed or a delivery did not settle: dara cannot go on deterministically.
    #[error("{0}")]
    Broken(String),
}

/// A listening socket the program made, split by the preload into the public socket dara holds
/// and the twin the program accepts from.
struct Listener {
    process: ProcessId,
    fd: i32,
    public: Option<OwnedFd>,
    public_port: u16,
    /// dara's duplicate of the twin, to see each connection it makes land in the accept queue.
    twin_socket: Option<OwnedFd>,
    twin: SocketAddr,
}

/// One connection relayed to the program.
struct Stream {
    /// dara's socket connected to the program's twin; None once both directions are over.
    inner: Option<OwnedFd>,
    /// Its (local, remote) addresses: what sock_diag is asked about when a delivery settles.
    inner_addrs: Option<(SocketAddr, SocketAddr)>,
    /// The client's socket (an outside client in a recording, or a traced client); None in a
    /// replay of an outside stream, and once gone.
    outer: Option<OwnedFd>,
    /// An outside peer: its traffic is recorded (recording) or fed back and checked (replay).
    recorded: bool,
    /// Bytes from the client not yet written to the program's side.
    to_inner: Vec<u8>,
    /// Room the program's receive window had after the last delivery settled (a lower bound
    /// until dara sends again: the program's reads only open it); 0 when unknown. A delivery
    /// that fits goes without reading the window first (see [`deliver`]).
    room: usize,
    /// Bytes from the program not yet written to the client.
    to_outer: Vec<u8>,
    /// The client closed its side (`outer_reset`: with a reset); `closed_inner`: the program has
    /// been told (FIN, or a reset).
    outer_eof: bool,
    outer_reset: bool,
    closed_inner: bool,
    /// The program closed its side.
    inner_eof: bool,
}

pub struct Outside {
    /// Replay: the recording's inputs (applied) and outputs (checked), and how far each got.
    replay: Option<Replaying>,
    listeners: Vec<Listener>,
    streams: Vec<Stream>,
    epoll: OwnedFd,
    /// What happened at the outside boundary in this run (the recording, or what the replay saw).
    events: Vec<OutsideEvent>,
    /// The program's side changed during this pump (a connection, bytes or a FIN arrived).
    changed: bool,
    /// The program's stdin, when dara feeds it.
    stdin: Option<StdinPipe>,
    /// Tells when the program's socket has what dara sent (see `netprobe::wait_acknowledged`).
    diag: Option<SockDiag>,
    /// Streams by the (local, remote) ports of dara's end (on loopback).
    by_inner_ports: std::collections::BTreeMap<(u16, u16), usize>,
    /// Output for clients is held back (since this step, this many bytes): see [`Outside::pump`].
    held_since: Option<u64>,
    held_bytes: usize,
    /// Where the program's output is read first.
    scratch: Vec<u8>,
    /// The program's bound UDP sockets, and the peers that sent to them (see `datagrams`).
    datagram_sockets: Vec<datagrams::DatagramSocket>,
    peers: Vec<datagrams::Peer>,
    peer_by_sender: std::collections::BTreeMap<(usize, SocketAddr), usize>,
    /// Peers by the index their events carry (recorded peers only).
    recorded_peers: Vec<usize>,
    /// Connections and datagram peers opened since the last [`Outside::take_relayed`].
    relayed: Vec<Relayed>,
}

/// The pipe that is the program's stdin: dara writes what it reads on its own stdin (recording)
/// or what the recording says (replay).
struct StdinPipe {
    /// dara's end; None once the program was told the input ended.
    write: Option<OwnedFd>,
    /// The program's end, until it is launched.
    read: Option<OwnedFd>,
    /// Read from dara's stdin, not yet in the pipe (the program has not read enough).
    pending: Vec<u8>,
    /// dara's stdin ended.
    eof: bool,
}

struct Replaying {
    inputs: VecDeque<OutsideEvent>,
    signals: VecDeque<OutsideEvent>,
    /// Signals sent to one thread with one grant (`stream` = thread + 1).
    grant_signals: VecDeque<OutsideEvent>,
    outputs: VecDeque<OutsideEvent>,
}

impl Outside {
    /// The relay of a recording (`Live`) or replay run; None for a closed world.
    pub fn new(mode: &OutsideMode) -> Result<Option<Outside>, RelayError> {
        let replay = match mode {
            OutsideMode::Closed => return Ok(None),
            OutsideMode::Live { .. } => None,
            OutsideMode::Replay { events, .. } => Some(Replaying::new(events)),
        };
        // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(RelayError::Broken(format!("epoll_create1: {}", std::io::Error::last_os_error())));
        }
        super::set_recording(replay.is_none());
        // SAFETY: a descriptor epoll_create1 just returned, owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let stdin = if mode.stdin() { Some(StdinPipe::new()?) } else { None };
        Ok(Some(Outside { replay, listeners: Vec::new(), streams: Vec::new(), epoll, events: Vec::new(), changed: false, stdin, by_inner_ports: Default::default(), diag: SockDiag::open(), held_since: None, held_bytes: 0, scratch: Vec::new(), datagram_sockets: Vec::new(), peers: Vec::new(), peer_by_sender: Default::default(), recorded_peers: Vec::new(), relayed: Vec::new() }))
    }

    /// The descriptor to launch the program with as its stdin (None: /dev/null).
    pub fn stdin_for_program(&self) -> Option<i32> {
        self.stdin.as_ref().and_then(|s| s.read.as_ref()).map(|fd| fd.as_raw_fd())
    }

    /// The program is launched: dara closes its copy of the program's end of the stdin pipe, so
    /// the program sees end-of-file once dara closes its own end.
    pub fn launched(&mut self) {
        if let Some(s) = &mut self.stdin {
            s.read = None;
        }
    }

    /// Whether this is a recording (outside peers may come at any time).
    pub fn live(&self) -> bool {
        self.replay.is_none()
    }

    /// What happened at the outside boundary so far.
    pub fn events(&self) -> &[OutsideEvent] {
        &self.events
    }

    /// Whether an outside peer could still bring input: a listener dara holds or an open outside
    /// stream (recording only; a replay's inputs are all in the recording).
    pub fn may_receive(&self) -> bool {
        self.live()
            && (self.listeners.iter().any(|l| l.public.is_some())
                || self.takes_datagrams()
                || self.streams.iter().any(|s| s.recorded && s.outer.is_some() && !s.outer_eof)
                || self.stdin.as_ref().is_some_and(|s| !s.eof))
    }

    /// How many bytes dara's end of a relayed connection with these (local, remote) ports has
    /// received from the program, if it is one (see `netprobe::OwnReceived`).
    pub fn received_by(&self, local: u16, remote: u16) -> Option<u64> {
        let stream = &self.streams[*self.by_inner_ports.get(&(local, remote))?];
        netprobe::bytes_received(stream.inner.as_ref()?)
    }

    /// The connections and datagram peers opened since the last call: the program is to be shown
    /// the client as the peer of its accepted socket, or as the sender of its datagrams.
    pub fn take_relayed(&mut self) -> Vec<Relayed> {
        std::mem::take(&mut self.relayed)
    }

    /// Whether `port` is the public port of a listening socket the program made (dara accepts
    /// there and relays to the program).
    pub fn listens_on(&self, port: u16) -> bool {
        self.listeners.iter().any(|l| l.public.is_some() && l.public_port == port)
    }

    /// A traced `listen` was swapped (`NetListen`): `public` is dara's duplicate of the program's
    /// listening socket, `twin` of the twin it will accept from (at address `addr`).
    pub fn add_listener(&mut self, process: ProcessId, fd: i32, public: OwnedFd, twin: OwnedFd, addr: SocketAddr) -> Result<(), RelayError> {
        set_nonblocking(&public)?;
        let public_port = local_port(&public).unwrap_or(0);
        let index = self.listeners.len() as u64;
        self.watch(&public, token(TAG_LISTENER, index), libc::EPOLLIN as u32)?;
        self.listeners.push(Listener { process, fd, public: Some(public), public_port, twin_socket: Some(twin), twin: addr });
        Ok(())
    }

    /// Closes the sockets dara holds for the listeners of `process` (it closed descriptor `fd`,
    /// or any when None: it is gone), so the port is free again as it would be without dara.
    pub fn forget_listeners(&mut self, process: ProcessId, fd: Option<i32>) {
        for l in &mut self.listeners {
            if l.process == process && fd.is_none_or(|fd| fd == l.fd) {
                l.public = None;
                l.twin_socket = None;
            }
        }
        self.forget_datagram_sockets(process, fd);
    }

    /// Signals to pass on to every traced process before the decision of `step`: those
    /// `dara-trace` received (recording) or the recorded ones (replay).
    pub fn signals(&mut self, step: u64) -> Vec<i32> {
        let signals = match &mut self.replay {
            None => super::take_pending_signals(),
            Some(r) => {
                let mut found = Vec::new();
                while let Some(e) = r.signals.front().filter(|e| e.step <= step) {
                    if let OutsideWhat::Signal(s) = e.what {
                        found.push(s);
                    }
                    r.signals.pop_front();
                }
                found
            }
        };
        for &s in &signals {
            self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::Signal(s) });
        }
        signals
    }

    /// A signal sent to `thread` straight from outside reached it with the grant of `step`
    /// (recording): recorded, to be sent to the same thread with the same grant in the replay.
    pub fn signal_with_grant(&mut self, step: u64, thread: u32, sig: i32) {
        self.events.push(OutsideEvent { step, stream: thread + 1, what: OutsideWhat::Signal(sig) });
    }

    /// Replay: the signals to send, as (thread, signal), before the decision of `step`: those
    /// that reached the thread granted at `step` in the recording (see
    /// [`Outside::signal_with_grant`]).
    pub fn signals_before(&mut self, step: u64) -> Vec<(u32, i32)> {
        let Some(r) = &mut self.replay else { return Vec::new() };
        let mut found = Vec::new();
        while let Some(e) = r.grant_signals.front().filter(|e| e.step <= step) {
            if let (true, OutsideWhat::Signal(s)) = (e.step == step && e.stream > 0, &e.what) {
                found.push((e.stream - 1, *s));
            }
            r.grant_signals.pop_front();
        }
        for &(thread, s) in &found {
            self.events.push(OutsideEvent { step, stream: thread + 1, what: OutsideWhat::Signal(s) });
        }
        found
    }

    /// Moves what is waiting at the boundary, before the decision of `step`: first what the
    /// program sent (its sends are settled: the bytes are in dara's sockets), then new clients
    /// and their bytes (written to the program's side and settled before anything is probed).
    /// Returns whether the program's side changed.
    ///
    /// `sending`: the thread that ran last now waits to send again. What the program sent is then
    /// held back from the clients (up to [`HOLD_STEPS`] steps and [`HOLD_BYTES`] bytes) and goes
    /// out together once it waits for something else: a server answering a batch of requests
    /// wakes each client once per batch instead of once per answer, as it does without dara
    /// (which wakes a client on another CPU, the dearest thing dara does per request). Only
    /// timing at the outside changes: what is recorded, and when it reaches the program, does
    /// not.
    pub fn pump(&mut self, step: u64, net: &mut NetProbe, sending: bool) -> Result<bool, RelayError> {
        self.changed = false;
        let ready = self.ready_tokens(0)?;
        for &(tag, index) in &ready {
            if tag == TAG_INNER {
                self.from_program(step, index)?;
            }
        }
        self.datagrams_from_program(step, &ready, net)?;
        self.check_missing_outputs(step)?;
        for &(tag, index) in &ready {
            if tag == TAG_LISTENER {
                self.accept_clients(step, index, net)?;
            }
        }
        if self.replay.is_some() {
            self.apply_recorded(step, net)?;
        }
        // Traced clients are relayed in a replay too; outside ones only in a recording.
        for &(tag, index) in &ready {
            if tag == TAG_OUTER {
                self.from_client(index)?;
            }
        }
        self.datagrams_from_senders(step, &ready, net)?;
        let hold = sending && self.held_bytes < HOLD_BYTES && step < self.held_since.unwrap_or(step) + HOLD_STEPS;
        for index in 0..self.streams.len() {
            self.to_program(step, index)?;
            if !hold {
                self.flush_to_client(index);
            }
        }
        if hold {
            self.held_since.get_or_insert(step);
        } else {
            self.flush_to_senders(net);
            self.held_since = None;
            self.held_bytes = 0;
        }
        if self.live() {
            self.pump_stdin(step)?;
        }
        Ok(self.changed)
    }

    /// Recording: passes what arrived on dara's stdin into the program's stdin pipe (as much as
    /// the pipe takes), and its end once everything is in.
    fn pump_stdin(&mut self, step: u64) -> Result<(), RelayError> {
        let Some(s) = &mut self.stdin else { return Ok(()) };
        if !s.eof && s.pending.len() < INBOUND_BUFFER && stdin_readable(0) {
            let mut buf = vec![0u8; CHUNK];
            // SAFETY: reads into a live buffer; poll said it will not block.
            let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                n if n > 0 => s.pending.extend_from_slice(&buf[..n as usize]),
                _ => s.eof = true,
            }
        }
        let Some(write) = &s.write else { return Ok(()) };
        if !s.pending.is_empty() {
            // SAFETY: writes from a live buffer to our non-blocking pipe end.
            let n = unsafe { libc::write(write.as_raw_fd(), s.pending.as_ptr().cast(), s.pending.len()) };
            if n > 0 {
                let data: Vec<u8> = s.pending.drain(..n as usize).collect();
                self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::Stdin(data) });
                self.changed = true;
            }
        }
        if s.eof && s.pending.is_empty() {
            s.write = None;
            self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::StdinClosed });
            self.changed = true;
        }
        Ok(())
    }

    /// Waits (up to `limit`, forever if None) until an outside peer or a signal brings something;
    /// true if something came, false on timeout or when `stop` was set.
    pub fn wait(&mut self, limit: Option<Duration>, stop: &std::sync::atomic::AtomicBool) -> Result<bool, RelayError> {
        let started = Instant::now();
        loop {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(false);
            }
            if super::PENDING.load(std::sync::atomic::Ordering::SeqCst) != 0 {
                return Ok(true);
            }
            let left = limit.map(|l| l.saturating_sub(started.elapsed()));
            if left == Some(Duration::ZERO) {
                return Ok(false);
            }
            let slice = left.unwrap_or(Duration::MAX).min(Duration::from_millis(50));
            self.flush_clients();
            let stdin_open = self.stdin.as_ref().is_some_and(|s| !s.eof && s.pending.len() < INBOUND_BUFFER);
            if stdin_open && wait_readable(&[self.epoll.as_raw_fd(), 0], slice) == Some(1) {
                return Ok(true);
            }
            let ready = self.ready_tokens(if stdin_open { 0 } else { timeout_ms(slice) })?;
            // A client whose bytes cannot be delivered yet (the program is not reading) stays
            // readable: that is not news.
            if ready.iter().any(|&(tag, index)| tag != TAG_OUTER || self.streams.get(index).is_some_and(|s| s.to_inner.len() < INBOUND_BUFFER)) {
                return Ok(true);
            }
            if !ready.is_empty() {
                std::thread::sleep(slice);
            }
        }
    }

    /// Writes what the program sent to every client, as much as each takes now (output held back
    /// by [`Outside::pump`] goes out here when the program waits, and when the run ends).
    pub fn flush_clients(&mut self) {
        for index in 0..self.streams.len() {
            self.flush_to_client(index);
        }
        self.held_since = None;
        self.held_bytes = 0;
    }

    /// Replay: recorded outputs nobody produced, once the run is over.
    pub fn finish(&self, steps: u64) -> Option<(u64, String, String)> {
        let r = self.replay.as_ref()?;
        let e = r.outputs.front().or_else(|| r.inputs.front()).or_else(|| r.signals.front()).or_else(|| r.grant_signals.front())?;
        let what = if e.what.is_output() { "did not send it" } else { "ended before it was delivered" };
        Some((e.step.min(steps), describe_event(e), format!("the run {what}")))
    }

    fn watch(&self, fd: &impl AsRawFd, token: u64, events: u32) -> Result<(), RelayError> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: epoll_ctl reads one live epoll_event.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        if rc != 0 {
            return Err(RelayError::Broken(format!("epoll_ctl: {}", std::io::Error::last_os_error())));
        }
        Ok(())
    }

    /// (tag, index) of the relay sockets that are ready, in a deterministic order.
    fn ready_tokens(&self, timeout_ms: i32) -> Result<Vec<(u64, usize)>, RelayError> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
        // SAFETY: the kernel writes at most `events.len()` entries into the array.
        let n = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, timeout_ms) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return if err.kind() == std::io::ErrorKind::Interrupted { Ok(Vec::new()) } else { Err(RelayError::Broken(format!("epoll_wait: {err}"))) };
        }
        let tag_mask = (1 << TAG_BITS) - 1;
        let mut ready: Vec<(u64, usize)> = events[..n as usize].iter().map(|e| (e.u64 & tag_mask, (e.u64 >> TAG_BITS) as usize)).collect();
        if n as usize == events.len() {
            // More may be ready than one call returns: look at every socket instead.
            ready = (0..self.listeners.len())
                .map(|i| (TAG_LISTENER, i))
                .chain((0..self.streams.len()).flat_map(|i| [(TAG_INNER, i), (TAG_OUTER, i)]))
                .chain((0..self.datagram_sockets.len()).map(|i| (TAG_DGRAM_PUBLIC, i)))
                .chain((0..self.peers.len()).map(|i| (TAG_DGRAM_PEER, i)))
                .collect();
        }
        ready.sort_unstable_by_key(|&(tag, index)| (index, tag));
        ready.dedup();
        Ok(ready)
    }

    /// Takes every client waiting on listener `index`'s public socket: traced clients are relayed
    /// (recording and replay), outside ones recorded (recording) or turned away (replay).
    fn accept_clients(&mut self, step: u64, index: usize, net: &mut NetProbe) -> Result<(), RelayError> {
        loop {
            let Some(public) = self.listeners[index].public.as_ref() else { return Ok(()) };
            let Some(client) = accept(public) else { return Ok(()) };
            let port = self.listeners[index].public_port;
            let traced = peer_port(&client).is_some_and(|p| net.is_traced_endpoint(p, port));
            if traced {
                if let Some(server) = netprobe::socket_address(&client, false) {
                    net.connection_taken(server);
                }
            } else if self.replay.is_some() {
                continue; // nobody outside takes part in a replay: turned away
            }
            let peer = netprobe::socket_address(&client, true);
            self.open_stream(step, index, Some(client), !traced, peer)?;
        }
    }

    /// A new stream through listener `index`: dara connects to the twin and waits until the
    /// connection is in its accept queue, so it shows before anything that comes after it.
    /// `peer`: the client's address, shown to the program as its peer's (see [`Outside::take_relayed`]).
    fn open_stream(&mut self, step: u64, index: usize, outer: Option<OwnedFd>, recorded: bool, peer: Option<SocketAddr>) -> Result<(), RelayError> {
        let twin = self.listeners[index].twin;
        let Some(twin_socket) = &self.listeners[index].twin_socket else {
            return Err(RelayError::Broken(format!("listening socket {index} is closed")));
        };
        let queued = netprobe::accept_queue(twin_socket);
        let inner = TcpStream::connect(twin).map_err(|e| RelayError::Broken(format!("cannot connect to the program's listening socket ({twin}): {e}")))?;
        inner.set_nodelay(true).ok();
        let inner = OwnedFd::from(inner);
        set_nonblocking(&inner)?;
        let inner_addrs = netprobe::addresses(&inner);
        netprobe::wait_queued(twin_socket, queued + 1).map_err(|e| RelayError::Broken(e.0))?;
        let stream = self.streams.len() as u64;
        if let Some((local, remote)) = inner_addrs {
            self.by_inner_ports.insert((local.port(), remote.port()), stream as usize);
            if let Some(peer) = peer {
                self.relayed.push(Relayed { relay: local, peer, datagrams: false });
            }
        }
        self.watch(&inner, token(TAG_INNER, stream), libc::EPOLLIN as u32)?;
        if let Some(outer) = &outer {
            set_nonblocking(outer)?;
            self.watch(outer, token(TAG_OUTER, stream), libc::EPOLLIN as u32)?;
        }
        if recorded {
            self.events.push(OutsideEvent { step, stream: stream as u32, what: OutsideWhat::Connect { listener: index as u32, peer } });
        }
        self.changed = true;
        self.streams.push(Stream { inner: Some(inner), inner_addrs, outer, recorded, to_inner: Vec::new(), room: 0, to_outer: Vec::new(), outer_eof: false, outer_reset: false, closed_inner: false, inner_eof: false });
        Ok(())
    }

    /// Reads what the client sent into the stream's buffer (up to its bound); notes its EOF.
    fn from_client(&mut self, index: usize) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(outer) = &s.outer else { return Ok(()) };
        while !s.outer_eof && s.to_inner.len() < INBOUND_BUFFER {
            let max = CHUNK.min(INBOUND_BUFFER - s.to_inner.len());
            match read_some(outer, &mut s.to_inner, max) {
                Read::End => s.outer_eof = true,
                Read::Reset => (s.outer_eof, s.outer_reset) = (true, true),
                Read::Bytes(n) if n < max => break, // drained for now: the next pump hears of more
                Read::Bytes(_) => {}
                Read::Nothing => break,
            }
        }
        if s.outer_eof && s.to_outer.is_empty() && s.inner_eof {
            s.outer = None;
        }
        Ok(())
    }

    /// Writes what the stream holds for the program (as much as its receive window takes), settles
    /// it, and records it; then, once the client's EOF is all that is left, tells the program.
    fn to_program(&mut self, step: u64, index: usize) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(inner) = &s.inner else { return Ok(()) };
        if !s.to_inner.is_empty() && !s.inner_eof {
            let n = deliver(inner, s.inner_addrs, &s.to_inner, Some(&mut s.room), self.diag.as_ref())?;
            if n > 0 {
                self.changed = true;
                let data: Vec<u8> = s.to_inner.drain(..n).collect();
                if s.recorded {
                    self.events.push(OutsideEvent { step, stream: index as u32, what: OutsideWhat::Data(data) });
                }
            }
        }
        let s = &mut self.streams[index];
        if s.outer_eof && s.to_inner.is_empty() && !s.closed_inner {
            s.closed_inner = true;
            let reset = s.outer_reset;
            let what = if reset { OutsideWhat::Reset } else { OutsideWhat::Close };
            self.end_inner(index, reset)?;
            self.changed = true;
            if self.streams[index].recorded {
                self.events.push(OutsideEvent { step, stream: index as u32, what });
            }
        }
        Ok(())
    }

    /// Tells the program that the client is gone: a FIN after everything it sent, or (`reset`) a
    /// reset, after which dara's end of the connection is closed. Settled either way: the
    /// program's socket shows it before anything is probed.
    fn end_inner(&mut self, index: usize, reset: bool) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(inner) = &s.inner else { return Ok(()) };
        if !reset {
            return close_sending_side(inner, s.inner_addrs, self.diag.as_ref());
        }
        let program_end = s.inner_addrs.map(|(local, remote)| (remote, local));
        netprobe::reset(inner);
        (s.inner, s.inner_eof) = (None, true);
        let (Some((local, remote)), Some(diag)) = (program_end, self.diag.as_ref()) else { return Ok(()) };
        let started = Instant::now();
        // Gone, closed, or (when the connection is gone) the listener the lookup falls back to.
        while diag.received(local, remote).is_some_and(|(state, _)| state != netprobe::TCP_CLOSE && state != netprobe::TCP_LISTEN) {
            if started.elapsed() > netprobe::SETTLE_LIMIT {
                return Err(RelayError::Broken(format!("the program's end of a connection dara reset ({local}) did not see the reset within {} ms; the run was stopped", netprobe::SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Reads what the program sent on stream `index`: recorded (recording), checked against the
    /// recording (replay), and queued for the client.
    fn from_program(&mut self, step: u64, index: usize) -> Result<(), RelayError> {
        let s = &mut self.streams[index];
        let Some(inner) = &s.inner else { return Ok(()) };
        // Read into the reused buffer (a fresh 64 KiB per read costs page faults, and kept in
        // the recording would hold that much per answer), kept in an exactly sized copy.
        let scratch = &mut self.scratch;
        scratch.clear();
        let mut eof = false;
        loop {
            match read_some(inner, scratch, CHUNK) {
                Read::End | Read::Reset => {
                    eof = !s.inner_eof;
                    s.inner_eof = true;
                    break;
                }
                // The program's sends are settled: a short read took all there is, and an end
                // of file behind the bytes shows at the next pump.
                Read::Bytes(n) if n < CHUNK => break,
                Read::Bytes(_) => {}
                Read::Nothing => break,
            }
        }
        let sent = scratch.to_vec();
        if s.outer.is_some() {
            s.to_outer.extend_from_slice(&sent);
            self.held_bytes += sent.len();
        }
        let recorded = s.recorded;
        if s.inner_eof && (s.outer_eof || s.outer.is_none()) {
            s.inner = None;
        }
        if !recorded {
            return Ok(());
        }
        if !sent.is_empty() {
            self.observed(OutsideEvent { step, stream: index as u32, what: OutsideWhat::Output(sent) })?;
        }
        if eof {
            self.observed(OutsideEvent { step, stream: index as u32, what: OutsideWhat::OutputClosed })?;
        }
        Ok(())
    }

    /// Something the program did at the boundary: recorded, and in a replay compared with the
    /// recording's next output.
    fn observed(&mut self, event: OutsideEvent) -> Result<(), RelayError> {
        if let Some(r) = &mut self.replay {
            let expected = r.outputs.pop_front();
            if expected.as_ref() != Some(&event) {
                return Err(RelayError::Diverged {
                    expected: expected.map_or_else(|| "the program to send nothing more to outside peers".to_string(), |e| describe_event(&e)),
                    seen: describe_event(&event),
                });
            }
        }
        self.events.push(event);
        Ok(())
    }

    /// Replay: a recorded output whose step has passed without the program producing it.
    fn check_missing_outputs(&self, step: u64) -> Result<(), RelayError> {
        match self.replay.as_ref().and_then(|r| r.outputs.front()) {
            Some(e) if e.step < step => Err(RelayError::Diverged { expected: describe_event(e), seen: format!("nothing sent by step {step}") }),
            _ => Ok(()),
        }
    }

    /// Replay: the recording's inputs of this step (new clients, their bytes, their EOF).
    fn apply_recorded(&mut self, step: u64, net: &mut NetProbe) -> Result<(), RelayError> {
        loop {
            let Some(r) = &mut self.replay else { return Ok(()) };
            let Some(e) = r.inputs.front().filter(|e| e.step <= step).cloned() else { return Ok(()) };
            r.inputs.pop_front();
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
                OutsideWhat::Signal(_) | OutsideWhat::Output(_) | OutsideWhat::OutputClosed | OutsideWhat::DatagramOutput(_) => {}
            }
        }
    }

    /// Writes what the program sent to the client, as much as it takes now (recording, or a traced
    /// client); a client that went away gets nothing more.
    fn flush_to_client(&mut self, index: usize) {
        let s = &mut self.streams[index];
        let Some(outer) = &s.outer else { return };
        while !s.to_outer.is_empty() {
            // SAFETY: writes from a live buffer of the given length.
            let n = unsafe { libc::send(outer.as_raw_fd(), s.to_outer.as_ptr().cast(), s.to_outer.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if n > 0 {
                s.to_outer.drain(..n as usize);
                continue;
            }
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
                return;
            }
            s.to_outer.clear(); // the client is gone
            s.outer = None;
            return;
        }
        if s.inner_eof {
            // SAFETY: shutdown of a socket we own.
            unsafe { libc::shutdown(outer.as_raw_fd(), libc::SHUT_WR) };
            if s.outer_eof {
                s.outer = None;
            }
        }
    }
}

impl Replaying {
    fn new(events: &Arc<Vec<OutsideEvent>>) -> Replaying {
        let (outputs, rest): (Vec<_>, Vec<_>) = events.iter().cloned().partition(|e| e.what.is_output());
        let (signals, inputs): (Vec<_>, Vec<_>) = rest.into_iter().partition(|e| matches!(e.what, OutsideWhat::Signal(_)));
        let (grant_signals, signals): (Vec<_>, Vec<_>) = signals.into_iter().partition(|e| e.stream != 0);
        Replaying { inputs: inputs.into(), signals: signals.into(), grant_signals: grant_signals.into(), outputs: outputs.into() }
    }
}

impl StdinPipe {
    fn new() -> Result<StdinPipe, RelayError> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(RelayError::Broken(format!("pipe2: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: descriptors pipe2 just returned, owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        set_nonblocking(&write)?;
        Ok(StdinPipe { write: Some(write), read: Some(read), pending: Vec::new(), eof: false })
    }
}

/// Whether `fd` has something to read (or its end) now.
fn stdin_readable(fd: i32) -> bool {
    wait_readable(&[fd], Duration::ZERO) == Some(0)
}

/// Waits up to `limit` until one of `fds` is readable; the index of the first that is.
/// A timeout in whole milliseconds for `poll`/`epoll_wait`, rounded up: rounded down, a wait for
/// a timer less than a millisecond away would be a zero timeout, and [`Outside::wait`] would poll
/// without sleeping until the deadline (it did: 49 `epoll_wait` calls per memcached request, for
/// the LRU maintainer's millisecond sleeps).
fn timeout_ms(d: Duration) -> i32 {
    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

fn wait_readable(fds: &[i32], limit: Duration) -> Option<usize> {
    let mut polls: Vec<libc::pollfd> = fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: a live array of pollfds of the given length.
    let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout_ms(limit)) };
    if n <= 0 {
        return None;
    }
    polls.iter().position(|p| p.revents != 0)
}

/// Writes all of `bytes` to a non-blocking pipe the program reads, waiting (bounded) while it is
/// full: in a replay the program's reads free the room they freed in the recording.
fn write_all_bounded(fd: &OwnedFd, bytes: &[u8]) -> Result<(), RelayError> {
    let started = Instant::now();
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writes from a live buffer.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n > 0 {
            done += n as usize;
        } else if started.elapsed() > netprobe::SETTLE_LIMIT {
            return Err(RelayError::Broken("the program's stdin pipe did not take the recorded input".into()));
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}

fn token(tag: u64, index: u64) -> u64 {
    index << TAG_BITS | tag
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), RelayError> {
    // SAFETY: F_GETFL/F_SETFL take integers.
    let ok = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    ok.then_some(()).ok_or_else(|| RelayError::Broken(format!("fcntl O_NONBLOCK: {}", std::io::Error::last_os_error())))
}

fn accept(listener: &OwnedFd) -> Option<OwnedFd> {
    // SAFETY: accept4 without an address buffer; returns a new descriptor or -1.
    let fd = unsafe { libc::accept4(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
    // SAFETY: a descriptor accept4 just returned, owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Appends up to `max` bytes read from `fd` to `out`. Some(0) at end-of-file (or a reset),
/// Some(n) bytes read, None when nothing is there now.
/// What one read of a relay socket got.
enum Read {
    /// This many bytes (more than 0).
    Bytes(usize),
    /// End of file (or an error other than a reset: the connection is over).
    End,
    /// The peer reset the connection.
    Reset,
    /// Nothing now.
    Nothing,
}

fn read_some(fd: &OwnedFd, out: &mut Vec<u8>, max: usize) -> Read {
    out.reserve(max);
    let spare = &mut out.spare_capacity_mut()[..max];
    // SAFETY: reads at most `max` bytes into the vector's reserved, unused capacity.
    let n = unsafe { libc::recv(fd.as_raw_fd(), spare.as_mut_ptr().cast(), max, libc::MSG_DONTWAIT) };
    if n > 0 {
        // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
        unsafe { out.set_len(out.len() + n as usize) };
        return Read::Bytes(n as usize);
    }
    if n == 0 {
        return Read::End;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Read::Nothing,
        Some(libc::ECONNRESET) => Read::Reset,
        _ => Read::End,
    }
}

/// Writes `bytes` (all of them when `room` is None, else what the peer's receive window takes
/// now) to dara's socket toward the program, and waits until the program's side acknowledged
/// them: they are in its receive queue before anything is probed. Returns how many were written.
/// `room`: what the window had left when the last delivery settled (updated here); when the
/// bytes fit in it the window is not read again (one `TCP_INFO` read less a request).
fn deliver(fd: &OwnedFd, addrs: Option<(SocketAddr, SocketAddr)>, bytes: &[u8], mut room: Option<&mut usize>, diag: Option<&SockDiag>) -> Result<usize, RelayError> {
    let started = Instant::now();
    let mut done = 0;
    while done < bytes.len() {
        let left = bytes.len() - done;
        let take = match room.as_deref() {
            None => left,
            Some(&known) if known >= left => left,
            Some(_) => netprobe::send_window(fd).min(left),
        };
        if take == 0 {
            break;
        }
        // SAFETY: writes from a live buffer of the given length.
        let n = unsafe { libc::send(fd.as_raw_fd(), bytes[done..].as_ptr().cast(), take, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
            return Ok(done); // the program closed: what was written is what it could get
        }
        let left_after = netprobe::wait_acknowledged(fd, addrs, diag, started).map_err(|e| RelayError::Broken(e.0))?;
        if let Some(known) = room.as_deref_mut() {
            *known = left_after;
            break;
        }
    }
    Ok(done)
}

/// Shuts dara's sending side toward the program and waits until the program's side has the FIN.
fn close_sending_side(fd: &OwnedFd, addrs: Option<(SocketAddr, SocketAddr)>, diag: Option<&SockDiag>) -> Result<(), RelayError> {
    // SAFETY: shutdown of a socket we own.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) };
    netprobe::wait_acknowledged(fd, addrs, diag, Instant::now()).map(|_room| ()).map_err(|e| RelayError::Broken(e.0))
}

fn local_port(fd: &OwnedFd) -> Option<u16> {
    netprobe::socket_address(fd, false).map(|a| a.port())
}

fn peer_port(fd: &OwnedFd) -> Option<u16> {
    netprobe::socket_address(fd, true).map(|a| a.port())
}
