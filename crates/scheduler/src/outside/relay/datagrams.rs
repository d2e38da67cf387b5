//! The relay's UDP side. A bound UDP socket of the program is split like a listener (the preload's
//! `hooks/outside.rs`): dara holds the *public* socket, the program a twin. Datagrams reach the
//! public socket; dara passes each one on from a socket of its own, one per sender (a [`Peer`],
//! connected to the twin), at a quiet point, and settles it (the program's next probe of the twin
//! waits until it shows). What the program sends back to a peer's socket is read at the next
//! quiet point (the traced send is owed to that socket: dara waits for each datagram) and sent
//! on from the public socket to the sender's address.
//!
//! A datagram from a traced socket that is split too (its twin sent it) is passed on from that
//! socket's public socket instead: the program shows its sockets' public addresses, so a twin
//! connected to another traced socket (squid and its pinger, each bound to `::1` port 0 and
//! connected to the other) takes datagrams only from that public address, and a receiver sees the
//! sender at the address the sender's `getsockname` gives.
//!
//! An outside sender is recorded: `Peer` when it is first heard from, `Datagram` for each of its
//! datagrams, `DatagramOutput` for each answer. A replay makes the same peers and sends the same
//! datagrams at the same steps, with nobody outside, and compares the answers. A traced sender
//! (a test script's client) is relayed the same way without being recorded, in the recording and
//! the replay alike; an outside sender in a replay is turned away.
use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::Instant;

use super::{token, Relay, RelayError, Side, TAG_DGRAM_PEER, TAG_DGRAM_PUBLIC};
use crate::choice::ProcessId;
use crate::netprobe::{self, NetProbe};
use crate::outside::{OutsideEvent, OutsideWhat};

/// Largest datagram relayed (the UDP maximum).
const MAX_DATAGRAM: usize = 65_536;

/// A bound UDP socket of the program, split: dara holds `public`, the program the twin at `twin`.
pub(super) struct DatagramSocket {
    process: ProcessId,
    fd: i32,
    public: Option<UdpSocket>,
    public_port: u16,
    twin: SocketAddr,
}

/// One sender to a datagram socket, and dara's socket that passes its datagrams on to the twin.
pub(super) struct Peer {
    socket: usize,
    /// The sender's address (None in a replay of an outside peer: nobody is there).
    addr: Option<SocketAddr>,
    inner: UdpSocket,
    inner_port: u16,
    recorded: bool,
    /// Its index among recorded peers (the `stream` of its events).
    event_index: u32,
    /// Answers from the program not yet sent on to the sender.
    to_sender: VecDeque<Vec<u8>>,
}

impl<S: Side> Relay<S> {
    /// A traced UDP `bind` was split (a `NetListen` request with `datagrams`): `public` is dara's duplicate
    /// of the program's socket, the twin is bound at `twin`.
    pub fn add_datagram_socket(&mut self, process: ProcessId, fd: i32, public: OwnedFd, twin: SocketAddr) -> Result<(), RelayError> {
        let public = UdpSocket::from(public);
        public.set_nonblocking(true).map_err(|e| RelayError::Broken(format!("O_NONBLOCK: {e}")))?;
        let public_port = public.local_addr().map_or(0, |a| a.port());
        self.watch(&public, token(TAG_DGRAM_PUBLIC, self.datagram_sockets.len() as u64), libc::EPOLLIN as u32)?;
        self.datagram_sockets.push(DatagramSocket { process, fd, public: Some(public), public_port, twin });
        Ok(())
    }

    /// The program closed descriptor `fd` of `process` (any when None: it is gone).
    pub(super) fn forget_datagram_sockets(&mut self, process: ProcessId, fd: Option<i32>) {
        for s in &mut self.datagram_sockets {
            if s.process == process && fd.is_none_or(|fd| fd == s.fd) {
                s.public = None;
            }
        }
    }

    /// Whether a datagram socket is open to outside senders.
    pub(super) fn takes_datagrams(&self) -> bool {
        self.datagram_sockets.iter().any(|s| s.public.is_some())
    }

    /// Reads what the program sent to peers (their sockets readable per `ready`, or owed
    /// datagrams by traced sends, each waited for), recording or checking it.
    pub(super) fn datagrams_from_program(&mut self, step: u64, ready: &[(u64, usize)], net: &mut NetProbe) -> Result<(), RelayError> {
        for index in 0..self.peers.len() {
            let owed = net.take_owed_datagrams(self.peers[index].inner_port);
            if owed == 0 && !ready.contains(&(TAG_DGRAM_PEER, index)) {
                continue;
            }
            for (bytes, _) in receive_all(&self.peers[index].inner, owed)? {
                let peer = &mut self.peers[index];
                let event = OutsideEvent { step, stream: peer.event_index, what: OutsideWhat::DatagramOutput(bytes.clone()) };
                if peer.addr.is_some() {
                    peer.to_sender.push_back(bytes);
                }
                if peer.recorded {
                    self.observed(event)?;
                }
            }
        }
        Ok(())
    }

    /// Takes what reached the public datagram sockets (readable per `ready`, or owed datagrams by
    /// traced sends) and passes each datagram on to the program from its sender's peer socket.
    pub(super) fn datagrams_from_senders(&mut self, step: u64, ready: &[(u64, usize)], net: &mut NetProbe) -> Result<(), RelayError> {
        for socket in 0..self.datagram_sockets.len() {
            let Some(public) = &self.datagram_sockets[socket].public else { continue };
            let owed = net.take_owed_datagrams(self.datagram_sockets[socket].public_port);
            if owed == 0 && !ready.contains(&(TAG_DGRAM_PUBLIC, socket)) {
                continue;
            }
            for (bytes, from) in receive_all(public, owed)? {
                let traced = net.is_traced_datagram_source(from.port());
                if !traced && !S::LIVE {
                    continue; // nobody outside takes part in a replay: turned away
                }
                if let Some(sender) = self.split_socket_of_twin(from).filter(|_| traced) {
                    self.between_split_sockets(sender, socket, &bytes, net);
                    continue;
                }
                let peer = match self.peer_by_sender.get(&(socket, from)) {
                    Some(&peer) => peer,
                    None => self.open_peer(step, socket, Some(from), !traced, Some(from), net)?,
                };
                self.to_program_datagram(step, peer, bytes, net);
            }
        }
        Ok(())
    }

    /// The open split socket whose twin is at `addr`.
    fn split_socket_of_twin(&self, addr: SocketAddr) -> Option<usize> {
        self.datagram_sockets.iter().position(|s| s.public.is_some() && s.twin.port() == addr.port() && (s.twin.ip() == addr.ip() || s.twin.ip().is_unspecified()))
    }

    /// Passes a datagram the twin of split socket `sender` sent to split socket `receiver`'s public
    /// socket on to `receiver`'s twin from `sender`'s public socket (see the module doc), owed to
    /// the twin as every datagram dara passes on. Lost if the twin does not take it, as UDP may
    /// lose it.
    fn between_split_sockets(&mut self, sender: usize, receiver: usize, bytes: &[u8], net: &mut NetProbe) {
        let twin = self.datagram_sockets[receiver].twin;
        let Some(public) = &self.datagram_sockets[sender].public else { return };
        if public.send_to(bytes, twin).is_ok() {
            net.owe_datagram(twin.port());
            self.changed = true;
        }
    }

    /// A new peer of datagram socket `socket`: dara's socket, connected to the twin. `addr`: where
    /// answers go (None in a replay of an outside peer); `shown`: the sender's address the
    /// program is shown (recorded).
    pub(super) fn open_peer(&mut self, step: u64, socket: usize, addr: Option<SocketAddr>, recorded: bool, shown: Option<SocketAddr>, net: &mut NetProbe) -> Result<usize, RelayError> {
        let twin = self.datagram_sockets[socket].twin;
        let local: SocketAddr = if twin.is_ipv4() { ([127, 0, 0, 1], 0).into() } else { (std::net::Ipv6Addr::LOCALHOST, 0).into() };
        let broken = |e: std::io::Error| RelayError::Broken(format!("cannot open dara's socket to the program's UDP socket ({twin}): {e}"));
        let inner = UdpSocket::bind(local).map_err(broken)?;
        inner.connect(twin).map_err(broken)?;
        inner.set_nonblocking(true).map_err(broken)?;
        let relay = inner.local_addr().map_err(broken)?;
        let inner_port = relay.port();
        net.add_relay_port(inner_port);
        let index = self.peers.len();
        self.watch(&inner, token(TAG_DGRAM_PEER, index as u64), libc::EPOLLIN as u32)?;
        let event_index = self.recorded_peers.len() as u32;
        if recorded {
            self.recorded_peers.push(index);
            self.events.push(OutsideEvent { step, stream: event_index, what: OutsideWhat::Peer { socket: socket as u32, peer: shown } });
        }
        if let Some(peer) = shown {
            self.relayed.push(super::Relayed { relay, peer, datagrams: true, dialled: false });
        }
        if let Some(addr) = addr {
            self.peer_by_sender.insert((socket, addr), index);
        }
        self.peers.push(Peer { socket, addr, inner, inner_port, recorded, event_index, to_sender: VecDeque::new() });
        Ok(index)
    }

    /// Sends `bytes` to the program from `peer`'s socket (owed to the twin: the program's probe
    /// waits until it shows), recording it for an outside peer. A datagram the program's socket
    /// does not take (gone, or its buffer full) is lost, as UDP may lose it.
    pub(super) fn to_program_datagram(&mut self, step: u64, peer: usize, bytes: Vec<u8>, net: &mut NetProbe) {
        let p = &self.peers[peer];
        if p.inner.send(&bytes).is_err() {
            return;
        }
        net.owe_datagram(self.datagram_sockets[p.socket].twin.port());
        self.changed = true;
        if p.recorded {
            self.events.push(OutsideEvent { step, stream: p.event_index, what: OutsideWhat::Datagram(bytes) });
        }
    }

    /// Replay: the peer whose events have index `event_index` (opened by its `Peer` event).
    pub(super) fn recorded_peer(&self, event_index: u32) -> Option<usize> {
        self.recorded_peers.get(event_index as usize).copied()
    }

    /// Sends the program's answers on to their senders from the public socket (a traced sender
    /// is owed each: its probe waits until it shows).
    pub(super) fn flush_to_senders(&mut self, net: &mut NetProbe) {
        for peer in &mut self.peers {
            let (Some(addr), Some(public)) = (peer.addr, self.datagram_sockets[peer.socket].public.as_ref()) else {
                peer.to_sender.clear();
                continue;
            };
            while let Some(bytes) = peer.to_sender.pop_front() {
                if public.send_to(&bytes, addr).is_ok() && !peer.recorded {
                    net.owe_datagram(addr.port());
                }
            }
        }
    }
}

/// Reads every datagram waiting on `socket` with its sender, first waiting (bounded) for the
/// `owed` ones.
fn receive_all(socket: &UdpSocket, mut owed: u32) -> Result<Vec<(Vec<u8>, SocketAddr)>, RelayError> {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                owed = owed.saturating_sub(1);
                got.push((buf[..n].to_vec(), from));
                continue;
            }
            // An error reported for an earlier datagram (ICMP), or a signal: look again.
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {}
        }
        if owed == 0 {
            return Ok(got);
        }
        if started.elapsed() > netprobe::SETTLE_LIMIT {
            return Err(RelayError::Broken(format!("a datagram a traced thread sent to dara's UDP socket did not arrive within {} ms; the run was stopped", netprobe::SETTLE_LIMIT.as_millis())));
        }
        std::thread::yield_now();
    }
}
