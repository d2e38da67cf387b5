//! What a trace records about peers outside dara (docs/outside.md): each input from an outside
//! client, signal or stdin, and each output the program sent to one, stamped with the step it
//! preceded; how a peer's address is written as bytes; and how such an event is shown to people.
//!
//! Only the records live here. Relaying them to and from a running program (sockets, the stdin
//! pipe, passing on signals) is the scheduler's `outside` module.

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
/// by step, signals first, then by stream, each stream's inputs before its outputs, each direction's
/// own events in their order. A Ctrl-C and a client's close that reached dara in the same wait reach
/// the program before the same decision, whichever came first; a replay applies them in its own
/// order. Likewise a client's close and the program's own close of that connection (haproxy dying
/// of that Ctrl-C) noticed in one wait: neither caused the other, as the program cannot react to an
/// input before its next decision, and dara may notice the two in either order.
pub fn in_step_order(events: &[OutsideEvent]) -> Vec<OutsideEvent> {
    let mut sorted = events.to_vec();
    sorted.sort_by_key(|e| (e.step, !e.what.is_signal(), e.stream, e.what.is_output()));
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
    /// A signal `dara-trace` received and passed on to every traced process (stream 0), or one a
    /// process outside sent straight to the thread `stream - 1`, which found it pending when it
    /// came back from its grant at the event's step (a replay sends it after that step's decision,
    /// before the grant).
    Signal(i32),
    /// A signal a process outside sent straight to the thread `stream - 1` that ended the thread's
    /// wait: the event's step granted that thread's `Interrupt`, offered because the signal was
    /// pending. A replay sends it before that step's decision, so that it is offered again.
    SignalEndingWait(i32),
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
    /// The recording brought the program's clock up to real time: virtual time became this many
    /// nanoseconds before the decision of the event's step (stream 0). A replay moves it the same.
    Clock(u64),
    /// The program connected to `server`, a TCP server outside dara, with the connect granted at
    /// the event's step: dara dialled it and relays the stream (new unless `refused`: the server
    /// refused or could not be reached, and so was the program's connect). Checked in a replay,
    /// which plays the server from the recording.
    Dial { server: std::net::SocketAddr, refused: bool },
    /// The program's `getaddrinfo`, granted at the event's step (stream 0), and what the
    /// machine's resolver answered: given back in a replay, which checks the question.
    NameLookup { query: crate::name_lookup::NameQuery, answer: crate::name_lookup::NameAnswer },
}

impl OutsideWhat {
    /// Whether this is something the program did (checked in a replay) rather than an input.
    pub fn is_output(&self) -> bool {
        matches!(self, OutsideWhat::Output(_) | OutsideWhat::OutputClosed | OutsideWhat::DatagramOutput(_))
    }

    /// The signal's number, for a signal from outside (passed on, or sent straight to a thread).
    pub fn signal(&self) -> Option<i32> {
        match self {
            OutsideWhat::Signal(s) | OutsideWhat::SignalEndingWait(s) => Some(*s),
            _ => None,
        }
    }

    /// Whether this is a signal from outside, passed on or sent straight to a thread.
    pub fn is_signal(&self) -> bool {
        self.signal().is_some()
    }

    /// Whether this is something an outside peer brought (a client, its bytes or end, a
    /// datagram sender and its datagrams, stdin); not a signal, an output or a clock move.
    pub fn is_input(&self) -> bool {
        !self.is_output() && !self.is_signal() && !matches!(self, OutsideWhat::Clock(_) | OutsideWhat::Dial { .. } | OutsideWhat::NameLookup { .. })
    }
}

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

/// One line for an event, with the bytes shown escaped (at most 80 of them).
pub fn describe_event(e: &OutsideEvent) -> String {
    let at = format!("at step {} on outside connection {}", e.step, e.stream);
    match &e.what {
        OutsideWhat::Connect { listener, .. } => format!("an outside client to connect to listening socket {listener} ({at})"),
        OutsideWhat::Data(b) => format!("{} bytes from outside {} ({at})", b.len(), shown(b)),
        OutsideWhat::Close => format!("the outside peer to close ({at})"),
        OutsideWhat::Reset => format!("the outside peer to reset the connection ({at})"),
        OutsideWhat::Output(b) => format!("the program to send {} bytes {} ({at})", b.len(), shown(b)),
        OutsideWhat::OutputClosed => format!("the program to close its side ({at})"),
        OutsideWhat::Signal(s) if e.stream == 0 => format!("signal {s} passed on at step {}", e.step),
        OutsideWhat::Signal(s) => format!("signal {s} sent to thread {} with the grant of step {}", e.stream - 1, e.step),
        OutsideWhat::SignalEndingWait(s) => format!("signal {s} sent to thread {}, ending its wait at step {}", e.stream.saturating_sub(1), e.step),
        OutsideWhat::Stdin(b) => format!("{} bytes {} on stdin at step {}", b.len(), shown(b), e.step),
        OutsideWhat::StdinClosed => format!("stdin to end at step {}", e.step),
        OutsideWhat::Peer { socket, .. } => format!("an outside peer to send to UDP socket {socket} (at step {}, outside peer {})", e.step, e.stream),
        OutsideWhat::Datagram(b) => format!("a datagram of {} bytes {} from outside peer {} at step {}", b.len(), shown(b), e.stream, e.step),
        OutsideWhat::DatagramOutput(b) => format!("the program to send a datagram of {} bytes {} to outside peer {} at step {}", b.len(), shown(b), e.stream, e.step),
        OutsideWhat::Clock(ns) => format!("the clock to move to {} ns at step {} (real time)", ns, e.step),
        OutsideWhat::Dial { server, refused: false } => format!("the program to connect to the outside server {server} ({at})"),
        OutsideWhat::Dial { server, refused: true } => format!("the program to connect to the outside server {server}, which refused (at step {})", e.step),
        OutsideWhat::NameLookup { query, answer } => format!("the program to look up {} (answered {}) at step {}", query.describe(), answer.describe(), e.step),
    }
}

fn shown(bytes: &[u8]) -> String {
    quoted(bytes, 80)
}

/// `bytes` (at most `max` of them) escaped and in quotes, with `…` when cut: how network data
/// is shown to people (listings, divergences).
pub fn quoted(bytes: &[u8], max: usize) -> String {
    let head: String = bytes.iter().take(max).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    format!("\"{head}{}\"", if bytes.len() > max { "…" } else { "" })
}

/// Where two outputs of the program first differ, for a divergence whose excerpts (the first 80
/// bytes of each) look the same: the offset, and a few bytes of each from just before it
/// (` (they differ from byte 113: recorded "...", sent "...")`); None when neither is an output
/// or they do not differ in their common length and have the same one.
pub fn first_difference(recorded: &OutsideWhat, sent: &OutsideWhat) -> Option<String> {
    let (a, b) = match (recorded, sent) {
        (OutsideWhat::Output(a), OutsideWhat::Output(b)) | (OutsideWhat::DatagramOutput(a), OutsideWhat::DatagramOutput(b)) => (a, b),
        _ => return None,
    };
    let at = a.iter().zip(b.iter()).position(|(x, y)| x != y).or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))?;
    let from = at.saturating_sub(16);
    Some(format!(" (they differ from byte {at}: recorded {}, sent {})", quoted(&a[from..], 48), quoted(&b[from..], 48)))
}

#[cfg(test)]
mod difference_tests {
    use super::*;

    #[test]
    fn the_first_difference_is_named_past_the_excerpt() {
        let mut recorded = vec![b'x'; 120];
        recorded.extend_from_slice(b"Set-Cookie: a1");
        let mut sent = vec![b'x'; 120];
        sent.extend_from_slice(b"Set-Cookie: b2");
        let said = first_difference(&OutsideWhat::Output(recorded.clone()), &OutsideWhat::Output(sent)).unwrap();
        assert!(said.starts_with(" (they differ from byte 132: recorded \"xxxx"), "{said}");
        assert!(said.contains("Set-Cookie: a1\"") && said.contains("Set-Cookie: b2\""), "{said}");
        assert_eq!(first_difference(&OutsideWhat::Output(recorded.clone()), &OutsideWhat::Output(recorded.clone())), None);
        let shorter = first_difference(&OutsideWhat::Output(recorded.clone()), &OutsideWhat::Output(recorded[..100].to_vec())).unwrap();
        assert!(shorter.starts_with(" (they differ from byte 100"), "{shorter}");
        assert_eq!(first_difference(&OutsideWhat::Close, &OutsideWhat::Output(vec![])), None);
    }
}
