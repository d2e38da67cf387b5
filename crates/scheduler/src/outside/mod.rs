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

pub use dara_model::outside::{address_bytes, address_from_bytes, describe_event, in_step_order, quoted, OutsideEvent, OutsideWhat};
pub use inbox::SignalInbox;
pub use relay::{RecordSession, Recorder, Relay, RelayError, Relayed, ReplaySession, Replayer, Side};

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
        // The peer's close and the program's own close, noticed in one wait, in either order.
        let recorded = [ev(207, 7, OutsideWhat::Output(b"HTTP".to_vec())), ev(207, 7, OutsideWhat::OutputClosed), ev(207, 7, OutsideWhat::Close)];
        let replayed = [ev(207, 7, OutsideWhat::Output(b"HTTP".to_vec())), ev(207, 7, OutsideWhat::Close), ev(207, 7, OutsideWhat::OutputClosed)];
        assert_eq!(in_step_order(&recorded), in_step_order(&replayed));
        // The program's outputs keep their order.
        let closed_first = [ev(9, 3, OutsideWhat::OutputClosed), ev(9, 3, OutsideWhat::Output(b"x".to_vec()))];
        let sent_first = [ev(9, 3, OutsideWhat::Output(b"x".to_vec())), ev(9, 3, OutsideWhat::OutputClosed)];
        assert_ne!(in_step_order(&closed_first), in_step_order(&sent_first));
    }
}
