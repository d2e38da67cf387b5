//! The relay between outside peers and the program: the public listening sockets dara holds, one
//! [`Stream`] per accepted connection (dara's socket to the program's twin, and in a recording the
//! outside client's socket), and the pump that moves bytes at quiet points. Runs on the scheduler
//! thread while every target thread is parked; nothing here blocks (all sockets are non-blocking,
//! and every wait is bounded).
//!
//! One epoll set holds every socket dara relays, so a quiet point where nothing happened costs a
//! single `epoll_wait` with a zero timeout however many clients are connected.
//!
//! A recording and a replay share this machinery and differ in their [`Side`] (`sides.rs`): a
//! [`RecordSession`] admits outside peers and records what crosses; a [`ReplaySession`] turns
//! them away, feeds the recorded inputs back and compares the program's outputs. Files:
//! `streams.rs` (TCP connections), `dials.rs` (outside TCP servers the program connects to),
//! `datagrams.rs` (UDP peers), `stdin.rs` (the program's stdin pipe), `sides.rs` (what differs
//! between recording and replay).
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

mod datagrams;
mod dials;
mod sides;
mod stdin;
mod streams;

pub use sides::{Recorder, Replayer, Side};
use stdin::StdinPipe;
use streams::{local_port, Stream};

use super::OutsideEvent;
use crate::choice::ProcessId;
use crate::netprobe::{self, NetProbe};
use crate::sockdiag::SockDiag;

/// Most bytes taken from one outside client and not yet delivered to the program.
pub(super) const INBOUND_BUFFER: usize = 256 * 1024;
/// Bytes read in one call.
pub(super) const CHUNK: usize = 64 * 1024;
/// Most bytes one delivery from outside hands the program (see `streams::delivery_bound`): an
/// eighth of the receive buffer Linux gives a TCP socket by default (`tcp_rmem`, 131,072 bytes).
pub(super) const DELIVERY_MOST: usize = 16 * 1024;
/// Most steps the program's output to outside clients is held back while the program keeps
/// sending (see [`Relay::pump`]), and most bytes held.
const HOLD_STEPS: u64 = 64;
const HOLD_BYTES: usize = 256 * 1024;
/// epoll tokens: the low bits say what the high bits index.
pub(super) const TAG_LISTENER: u64 = 0;
pub(super) const TAG_INNER: u64 = 1;
pub(super) const TAG_OUTER: u64 = 2;
pub(super) const TAG_DGRAM_PUBLIC: u64 = 3;
pub(super) const TAG_DGRAM_PEER: u64 = 4;
const TAG_BITS: u32 = 3;

/// A socket of dara's that stands for a client: the program is shown `peer` wherever it would
/// see dara's `relay` address.
#[derive(Clone, Copy, Debug)]
pub struct Relayed {
    pub relay: SocketAddr,
    pub peer: SocketAddr,
    /// A UDP socket (else TCP).
    pub datagrams: bool,
    /// dara's listening socket that stands for an outside TCP server the program connects to
    /// (see `dials.rs`): the program's connect to `peer` goes to `relay`.
    pub dialled: bool,
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

/// The relay of one execution; `S` says whether it records or replays (see the module doc).
pub struct Relay<S: Side> {
    /// What makes a recording's relay differ from a replay's.
    side: S,
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
    /// Output for clients is held back (since this step, this many bytes): see [`Relay::pump`].
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
    /// Connections and datagram peers opened since the last [`Relay::take_relayed`].
    relayed: Vec<Relayed>,
    /// Outside servers the program connects to: stand-ins whose connection is not accepted
    /// yet, the sockets that refuse, and the ports of both (see `dials.rs`).
    stand_ins: Vec<dials::StandIn>,
    refusers: dials::Refusers,
    dialled_ports: std::collections::BTreeSet<u16>,
}

/// A recording's relay: outside peers may come, and what crosses is recorded.
pub type RecordSession = Relay<Recorder>;
/// A replay's relay: the recorded inputs are fed back and the program's outputs compared.
pub type ReplaySession = Relay<Replayer>;

impl<S: Side> Relay<S> {
    /// A relay on `side`, with a stdin pipe for the program when `stdin`.
    pub fn new(side: S, stdin: bool) -> Result<Relay<S>, RelayError> {
        // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(RelayError::Broken(format!("epoll_create1: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: a descriptor epoll_create1 just returned, owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let stdin = if stdin { Some(StdinPipe::new()?) } else { None };
        Ok(Relay { side, listeners: Vec::new(), streams: Vec::new(), epoll, events: Vec::new(), changed: false, stdin, by_inner_ports: Default::default(), diag: SockDiag::open(), held_since: None, held_bytes: 0, scratch: Vec::new(), datagram_sockets: Vec::new(), peers: Vec::new(), peer_by_sender: Default::default(), recorded_peers: Vec::new(), relayed: Vec::new(), stand_ins: Vec::new(), refusers: Default::default(), dialled_ports: Default::default() })
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
        S::LIVE
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
    /// there and relays to the program), or dara's socket that stands for an outside server.
    pub fn listens_on(&self, port: u16) -> bool {
        self.listeners.iter().any(|l| l.public.is_some() && l.public_port == port) || self.stands_for_a_server(port)
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
        self.accept_dialled(net)?;
        let ready = self.ready_tokens(0)?;
        for &(tag, index) in &ready {
            if tag == TAG_INNER {
                self.from_program(step, index)?;
            }
        }
        self.datagrams_from_program(step, &ready, net)?;
        self.side.overdue_output(step)?;
        for &(tag, index) in &ready {
            if tag == TAG_LISTENER {
                self.accept_clients(step, index, net)?;
            }
        }
        S::apply_recorded(self, step, net)?;
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
            // A traced client is the program: never held back.
            if !hold || !self.streams[index].recorded {
                self.changed |= self.flush_to_client(index)?;
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

    /// Waits (up to `limit`, forever if None) until an outside peer or a signal brings something;
    /// true if something came, false on timeout or when `stop` was set.
    pub fn wait(&mut self, limit: Option<Duration>, stop: &std::sync::atomic::AtomicBool) -> Result<bool, RelayError> {
        let started = Instant::now();
        loop {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(false);
            }
            if self.side.has_pending_signal() {
                return Ok(true);
            }
            let left = limit.map(|l| l.saturating_sub(started.elapsed()));
            if left == Some(Duration::ZERO) {
                return Ok(false);
            }
            let slice = left.unwrap_or(Duration::MAX).min(Duration::from_millis(50));
            // Bytes for a traced client that has read since: they change the program's side.
            if self.flush_clients()? {
                return Ok(true);
            }
            let stdin_open = self.stdin.as_ref().is_some_and(|s| !s.eof && s.pending.len() < INBOUND_BUFFER);
            if stdin_open && wait_readable(&[self.epoll.as_raw_fd(), 0], slice) == Some(1) {
                return Ok(true);
            }
            let ready = self.ready_tokens(if stdin_open { 0 } else { timeout_ms(slice) })?;
            // A client whose bytes cannot be delivered yet (the program is not reading) stays
            // readable, and so does a listener whose clients wait for room in the program's
            // backlog: that is not news.
            if ready.iter().any(|&(tag, index)| match tag {
                TAG_OUTER => self.streams.get(index).is_some_and(|s| s.to_inner.len() < INBOUND_BUFFER),
                TAG_LISTENER => !self.listeners.get(index).is_some_and(|l| l.twin_socket.as_ref().is_some_and(netprobe::backlog_full)),
                _ => true,
            }) {
                return Ok(true);
            }
            if !ready.is_empty() {
                std::thread::sleep(slice);
            }
        }
    }

    /// Writes what the program sent to every client, as much as each takes now (output held back
    /// by [`Relay::pump`] goes out here when the program waits, and when the run ends). Returns
    /// whether a traced client got something (the program's side changed).
    pub fn flush_clients(&mut self) -> Result<bool, RelayError> {
        let mut changed = false;
        for index in 0..self.streams.len() {
            changed |= self.flush_to_client(index)?;
        }
        self.held_since = None;
        self.held_bytes = 0;
        Ok(changed)
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

}


/// Waits up to `limit` until one of `fds` is readable; the index of the first that is.
/// A timeout in whole milliseconds for `poll`/`epoll_wait`, rounded up: rounded down, a wait for
/// a timer less than a millisecond away would be a zero timeout, and [`Relay::wait`] would poll
/// without sleeping until the deadline (it did: 49 `epoll_wait` calls per memcached request, for
/// the LRU maintainer's millisecond sleeps).
pub(super) fn timeout_ms(d: Duration) -> i32 {
    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

pub(super) fn wait_readable(fds: &[i32], limit: Duration) -> Option<usize> {
    let mut polls: Vec<libc::pollfd> = fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: a live array of pollfds of the given length.
    let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout_ms(limit)) };
    if n <= 0 {
        return None;
    }
    polls.iter().position(|p| p.revents != 0)
}


pub(super) fn token(tag: u64, index: u64) -> u64 {
    index << TAG_BITS | tag
}

pub(super) fn set_nonblocking(fd: &OwnedFd) -> Result<(), RelayError> {
    // SAFETY: F_GETFL/F_SETFL take integers.
    let ok = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    ok.then_some(()).ok_or_else(|| RelayError::Broken(format!("fcntl O_NONBLOCK: {}", std::io::Error::last_os_error())))
}

