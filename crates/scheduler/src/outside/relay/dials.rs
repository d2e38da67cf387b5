//! Outside servers the program connects to: a recording dials the server itself when it grants
//! the program's connect, and the program's socket is connected to a listening socket of dara's
//! that stands for the server (the preload, or the ptrace agent, puts its address in the call
//! after the grant: `relayed_flags::DIALED` in the region's table). From then on the connection
//! is a [`Stream`] like an outside client's, with the server in the client's place: what the
//! server sends is recorded input, settled into the program's receive queue at a quiet point;
//! what the program sends is recorded output. A replay plays the server from the recording:
//! the same stand-in socket at the same grant, the server's bytes at their steps, the program's
//! checked, with nobody outside.
//!
//! A server that refuses (or cannot be reached within [`DIAL_LIMIT`]) is recorded as such, and
//! the program's connect goes to a socket of dara's that is bound and not listening: refused by
//! the kernel, in the recording and in its replay alike.
//!
//! Name lookups are how a program finds those servers: its `getaddrinfo` is answered here too,
//! by the machine's resolver in a recording and from the recording in a replay.
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use super::streams::{accept, Stream};
use super::{set_nonblocking, token, Relay, RelayError, Relayed, Side, TAG_INNER, TAG_OUTER};
use crate::netprobe::{self, NetProbe};
use dara_model::name_lookup::{NameAnswer, NameQuery};
use crate::outside::{OutsideEvent, OutsideWhat};

/// How long a recording waits for an outside server to answer its connect.
pub(super) const DIAL_LIMIT: Duration = Duration::from_secs(10);

/// What dialling an outside server gave.
pub enum Dialled {
    /// It accepted: dara's connection to it (None in a replay, which plays the server).
    Connected(Option<OwnedFd>),
    /// It refused, or did not answer in time.
    Refused,
}

/// A listening socket of dara's that stands for an outside server, until the program's
/// connection to it is accepted (the stream's inner end).
pub(super) struct StandIn {
    stream: usize,
    listener: OwnedFd,
}

/// dara's sockets for connects that are to be refused (one per family, bound, never listening).
#[derive(Default)]
pub(super) struct Refusers {
    v4: Option<(OwnedFd, SocketAddr)>,
    v6: Option<(OwnedFd, SocketAddr)>,
}

/// The loopback address of `server`'s family, port 0.
fn loopback_like(server: SocketAddr) -> SocketAddr {
    match server {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::LOCALHOST, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::LOCALHOST, 0).into(),
    }
}

/// A recording dials `server` (blocking, at most [`DIAL_LIMIT`]).
pub(super) fn dial_for_real(server: SocketAddr) -> Dialled {
    match TcpStream::connect_timeout(&server, DIAL_LIMIT) {
        Ok(stream) => {
            stream.set_nodelay(true).ok();
            Dialled::Connected(Some(OwnedFd::from(stream)))
        }
        Err(_) => Dialled::Refused,
    }
}

impl<S: Side> Relay<S> {
    /// The program's TCP connect to `server`, a server outside dara, is granted before the
    /// decision of `step`: dials it (a recording) or finds it in the recording (a replay), and
    /// returns what the program is to connect to instead, with the server as its peer.
    pub fn dial(&mut self, step: u64, server: SocketAddr) -> Result<Relayed, RelayError> {
        let stream = self.streams.len();
        let broken = |what: &str, e: std::io::Error| RelayError::Broken(format!("{what} for the outside server {server}: {e}"));
        let (relay, refused) = match self.side.dial(step, stream as u32, server)? {
            Dialled::Refused => (self.refuser(server).map_err(|e| broken("cannot make a socket that refuses", e))?, true),
            Dialled::Connected(outer) => {
                let listener = TcpListener::bind(loopback_like(server)).map_err(|e| broken("cannot listen", e))?;
                let relay = listener.local_addr().map_err(|e| broken("cannot listen", e))?;
                let listener = OwnedFd::from(listener);
                set_nonblocking(&listener)?;
                if let Some(outer) = &outer {
                    set_nonblocking(outer)?;
                    self.watch(outer, token(TAG_OUTER, stream as u64), libc::EPOLLIN as u32)?;
                }
                self.stand_ins.push(StandIn { stream, listener });
                self.streams.push(Stream::new(None, None, outer, true));
                (relay, false)
            }
        };
        self.dialled_ports.insert(relay.port());
        self.events.push(OutsideEvent { step, stream: stream as u32, what: OutsideWhat::Dial { server, refused } });
        Ok(Relayed { relay, peer: server, datagrams: false, dialled: true })
    }

    /// The program's name lookup `query`, granted before the decision of `step`: answered by the
    /// machine's resolver (a recording) or from the recording (a replay), and kept as an event.
    pub fn name_lookup(&mut self, step: u64, query: &NameQuery) -> Result<NameAnswer, RelayError> {
        let answer = self.side.name_lookup(step, query)?;
        self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::NameLookup { query: query.clone(), answer: answer.clone() } });
        Ok(answer)
    }

    /// dara's bound, not listening socket of `server`'s family: a connect to it is refused.
    fn refuser(&mut self, server: SocketAddr) -> std::io::Result<SocketAddr> {
        use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, SockaddrStorage};
        let slot = if server.is_ipv4() { &mut self.refusers.v4 } else { &mut self.refusers.v6 };
        if let Some((_, addr)) = slot {
            return Ok(*addr);
        }
        let family = if server.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
        let socket = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
        bind(socket.as_raw_fd(), &SockaddrStorage::from(loopback_like(server)))?;
        let addr = netprobe::socket_address(&socket, false).ok_or_else(|| std::io::Error::other("no local address"))?;
        *slot = Some((socket, addr));
        Ok(addr)
    }

    /// Whether `port` is one of dara's sockets standing for an outside server (a connect to it
    /// reaches no server outside dara).
    pub(super) fn stands_for_a_server(&self, port: u16) -> bool {
        self.dialled_ports.contains(&port)
    }

    /// Takes the program's connections to the stand-ins (its connects are settled: each is in
    /// its stand-in's accept queue), and makes each its stream's inner end.
    pub(super) fn accept_dialled(&mut self, net: &mut NetProbe) -> Result<(), RelayError> {
        let mut index = 0;
        while index < self.stand_ins.len() {
            let Some(inner) = accept(&self.stand_ins[index].listener) else {
                index += 1;
                continue;
            };
            let stand_in = self.stand_ins.remove(index);
            if let Some(server) = netprobe::socket_address(&inner, false) {
                net.connection_taken(server);
            }
            set_nonblocking(&inner)?;
            nix::sys::socket::setsockopt(&inner, nix::sys::socket::sockopt::TcpNoDelay, &true).ok();
            let addrs = netprobe::addresses(&inner);
            if let Some((local, remote)) = addrs {
                self.by_inner_ports.insert((local.port(), remote.port()), stand_in.stream);
            }
            self.watch(&inner, token(TAG_INNER, stand_in.stream as u64), libc::EPOLLIN as u32)?;
            let s = &mut self.streams[stand_in.stream];
            (s.inner, s.inner_addrs) = (Some(inner), addrs);
            self.changed = true;
        }
        Ok(())
    }
}
