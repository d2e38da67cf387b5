//! Peers outside dara: clients that are not traced processes (a load generator, a browser, `nc`)
//! talking to a traced server, and the signals a user sends `dara-trace` from the terminal.
//!
//! What reaches the program from outside is an *input*, like a clock reading: it is recorded in a
//! recording run and fed back in a replay, where nobody outside is needed. dara keeps the program
//! and its outside peers apart so that every input arrives at a decision point:
//!
//! * **Listeners.** A traced TCP `listen` posts `NetListen`; the preload swaps a private *twin*
//!   in place of the program's socket (see the preload's `hooks/outside.rs`) and dara keeps the
//!   public socket. dara accepts outside clients on the public socket itself and, at a quiet
//!   point, connects a socket of its own to the twin: the program accepts that connection.
//! * **Streams.** dara relays between the outside client and its own socket to the program. Bytes
//!   from outside are written to the program's side at a quiet point, and settled (acknowledged,
//!   so in the program's receive queue) before any probe; bytes the program sends are read from
//!   dara's side once the send settled. Each relayed piece is an [`OutsideEvent`] stamped with
//!   the step it preceded.
//! * **Signals.** SIGINT or SIGTERM to `dara-trace` during a recording is passed on to the traced
//!   processes at the next quiet point, as the terminal would have sent it to them (a second one
//!   stops dara; the trace up to there is kept).
//!
//! In a replay the recorded inputs are applied before the decision of the same step, the
//! connections to the twin are made by dara from the recording, and whatever the program sends to
//! an outside peer is compared with what it sent in the recording: the first difference ends the
//! replay as a divergence naming the step and the bytes.
//!
//! A client that is itself traced (a test script's `curl`) reaches the public socket too: dara
//! recognises it by its port (netprobe knows every traced endpoint) and relays it without
//! recording, in the recording and the replay alike. See docs/outside.md.
mod inbox;
mod relay;

use std::sync::Arc;

pub use inbox::SignalInbox;
pub use relay::{describe_event, quoted, RecordSession, Recorder, Relay, RelayError, Relayed, ReplaySession, Replayer, Side};

/// An address as bytes for the trace: family (4 or 6), port (big-endian), the IP's octets;
/// nothing for None.
pub fn address_bytes(addr: Option<std::net::SocketAddr>) -> Vec<u8> {
    let Some(addr) = addr else { return Vec::new() };
    let mut out = vec![if addr.is_ipv4() { 4 } else { 6 }];
    out.extend_from_slice(&addr.port().to_be_bytes());
    match addr.ip() {
        std::net::IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out
}

/// The address [`address_bytes`] wrote; None for no bytes, Err for bytes that are no address.
pub fn address_from_bytes(bytes: &[u8]) -> Result<Option<std::net::SocketAddr>, ()> {
    let port = |b: &[u8]| u16::from_be_bytes([b[1], b[2]]);
    match bytes.len() {
        0 => Ok(None),
        7 if bytes[0] == 4 => Ok(Some((<[u8; 4]>::try_from(&bytes[3..7]).map_err(|_| ())?, port(bytes)).into())),
        19 if bytes[0] == 6 => Ok(Some((<[u8; 16]>::try_from(&bytes[3..19]).map_err(|_| ())?, port(bytes)).into())),
        _ => Err(()),
    }
}

/// Whether peers outside dara may talk to the program.
#[derive(Clone, Debug, Default)]
pub enum OutsideMode {
    /// A closed world (searches, cluster runs): every peer is traced; a thread that waits for
    /// anything else is deadlocked.
    #[default]
    Closed,
    /// A recording run: outside clients may connect; their inputs are recorded. With `stdin`,
    /// what dara-trace reads on its own stdin is passed to the program (through a pipe) and
    /// recorded too; without, the program's stdin is /dev/null. `signals`: where the tool's
    /// signal handler leaves the signals to pass on.
    Live { stdin: bool, signals: SignalInbox },
    /// The replay of a recording: its inputs are fed back and its outputs compared.
    Replay { events: Arc<Vec<OutsideEvent>>, stdin: bool },
}

impl OutsideMode {
    pub fn is_closed(&self) -> bool {
        matches!(self, OutsideMode::Closed)
    }

    /// Whether the program's stdin is a pipe dara feeds.
    pub fn stdin(&self) -> bool {
        matches!(self, OutsideMode::Live { stdin: true, .. } | OutsideMode::Replay { stdin: true, .. })
    }
}

/// Whether dara's own stdin carries input worth passing on: open, and not /dev/null.
pub fn stdin_has_input() -> bool {
    // SAFETY: fstat fills a plain struct for descriptor 0.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(0, &mut st) } != 0 {
        return false;
    }
    let null = std::fs::metadata("/dev/null").map(|m| std::os::unix::fs::MetadataExt::rdev(&m)).ok();
    !(st.st_mode & libc::S_IFMT == libc::S_IFCHR && Some(st.st_rdev) == null)
}

/// One input from outside, or one output to an outside peer, at a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutsideEvent {
    /// The decision it came before (the step index the next decision gets).
    pub step: u64,
    /// The connection (outside streams numbered from 0 in the order they connected); 0 for
    /// signals.
    pub stream: u32,
    pub what: OutsideWhat,
}

/// `events` in an order that does not depend on when, within one quiet point, dara noticed them:
/// by step, signals first, then by stream, each stream's own events in their order. A Ctrl-C and
/// a client's close that reached dara in the same wait reach the program before the same decision,
/// whichever came first; a replay applies them in its own order.
pub fn in_step_order(events: &[OutsideEvent]) -> Vec<OutsideEvent> {
    let mut sorted = events.to_vec();
    sorted.sort_by_key(|e| (e.step, !matches!(e.what, OutsideWhat::Signal(_)), e.stream));
    sorted
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutsideWhat {
    /// An outside client connected to the program's `listener`-th listening socket (in the order
    /// of their `listen`) from address `peer` (what the program is shown as its peer); the stream
    /// is new.
    Connect { listener: u32, peer: Option<std::net::SocketAddr> },
    /// Bytes the outside peer sent, now in the program's receive queue.
    Data(Vec<u8>),
    /// The outside peer closed its side (the program reads end-of-file).
    Close,
    /// The outside peer reset the connection (the program reads `ECONNRESET`).
    Reset,
    /// Bytes the program sent to the outside peer (compared in a replay).
    Output(Vec<u8>),
    /// The program closed or shut down its sending side (compared in a replay).
    OutputClosed,
    /// A signal `dara-trace` received and passed on to every traced process.
    Signal(i32),
    /// Bytes dara-trace read on its stdin, now in the program's stdin pipe.
    Stdin(Vec<u8>),
    /// dara-trace's stdin ended: the program reads end-of-file once the pipe is empty.
    StdinClosed,
    /// A new outside peer sent datagrams to the program's `socket`-th bound UDP socket (in the
    /// order of their `bind`) from address `peer` (what the program is shown as the sender); the
    /// event's `stream` numbers outside datagram peers from 0.
    Peer { socket: u32, peer: Option<std::net::SocketAddr> },
    /// A datagram from the outside peer, now in the program's socket.
    Datagram(Vec<u8>),
    /// A datagram the program sent to the outside peer (compared in a replay).
    DatagramOutput(Vec<u8>),
}

impl OutsideWhat {
    /// Whether this is something the program did (checked in a replay) rather than an input.
    pub fn is_output(&self) -> bool {
        matches!(self, OutsideWhat::Output(_) | OutsideWhat::OutputClosed | OutsideWhat::DatagramOutput(_))
    }
}

/// The address dara connects to for a socket listening on `fd`'s address: the same port, on
/// loopback when it listens on every address.
pub fn loopback_address(fd: &std::os::fd::OwnedFd) -> Option<std::net::SocketAddr> {
    let mut addr = crate::netprobe::socket_address(fd, false)?;
    match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into()),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => addr.set_ip(std::net::Ipv6Addr::LOCALHOST.into()),
        _ => {}
    }
    Some(addr)
}

#[cfg(test)]
mod step_order_tests {
    use super::*;

    #[test]
    fn a_signal_and_a_close_of_one_quiet_point_compare_alike_in_either_order() {
        let ev = |step, stream, what| OutsideEvent { step, stream, what };
        let recorded = [ev(3, 1, OutsideWhat::Data(b"a".to_vec())), ev(75, 0, OutsideWhat::Signal(2)), ev(75, 4, OutsideWhat::Close), ev(76, 4, OutsideWhat::Output(b"x".to_vec()))];
        let replayed = [ev(3, 1, OutsideWhat::Data(b"a".to_vec())), ev(75, 4, OutsideWhat::Close), ev(75, 0, OutsideWhat::Signal(2)), ev(76, 4, OutsideWhat::Output(b"x".to_vec()))];
        assert_eq!(in_step_order(&recorded), in_step_order(&replayed));
        // One stream's own events keep their order.
        let swapped = [ev(5, 2, OutsideWhat::Data(b"2".to_vec())), ev(5, 2, OutsideWhat::Data(b"1".to_vec()))];
        let straight = [ev(5, 2, OutsideWhat::Data(b"1".to_vec())), ev(5, 2, OutsideWhat::Data(b"2".to_vec()))];
        assert_ne!(in_step_order(&swapped), in_step_order(&straight));
    }
}
