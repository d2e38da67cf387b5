//! How many bytes a blocking TCP send to a traced peer may move, decided by the schedule alone.
//!
//! Whether a loopback socket has room for more follows its send buffer, which Linux sizes when
//! the connection opens and then grows with the congestion window, and how much of what it holds
//! the peer has acknowledged: both move with real time (delayed ACKs, the pace of the reads).
//! `sendfile_stream`'s search replayed under load found the sender without room at a step where
//! the recording had given it room (the reader had read the same bytes in both), and diverged.
//!
//! So the room is counted, not asked: the bytes this socket has written in all (`TCP_INFO`: sent
//! once and not sent yet) less those its peer's reader has taken (`sock_diag`: received less
//! still queued) are *unread*; a send may move up to [`UNREAD_MOST`] (or a third of a send buffer
//! the program made smaller) less that. Both counts follow from the grants alone, since every
//! traced receive takes exactly what its grant says. Below that mark the kernel always takes the
//! bytes at once: Linux opens a loopback connection with a send buffer of several MiB (3.9 MiB on
//! the project's machines), and a socket is writable while its queue holds under two thirds of it.
//!
//! Only for blocking callers: a non-blocking one is told what the kernel says (EAGAIN, a short
//! write), and waits for the kernel's own word that there is room (`EPOLLOUT`), which a count
//! here could not give it. A program that writes more than [`UNREAD_MOST`] each way before it
//! reads would be stopped as a deadlock here where Linux's bigger buffers let it through.
use std::os::fd::OwnedFd;

use super::ledger::TcpSnapshot;
use super::sockets::sockopt;
use super::{Endpoint, NetProbe, TCP_LISTEN};

/// The most bytes a traced TCP sender may have written that its traced reader has not taken.
pub(super) const UNREAD_MOST: u64 = 1 << 20;

/// Room a send buffer of `send_buffer` bytes (as `SO_SNDBUF` reports it) always has, with
/// `unread` bytes written and not read.
fn room(send_buffer: u64, unread: u64) -> u64 {
    UNREAD_MOST.min(send_buffer / 3).saturating_sub(unread)
}

impl NetProbe {
    /// For a blocking send on TCP endpoint `ep` (`dup`) whose peer is a traced socket: how many
    /// bytes it may move now (0: none until the peer reads). None when the kernel does not say
    /// (the caller asks the kernel whether there is room, as for any other socket).
    pub(super) fn stream_room(&mut self, dup: &OwnedFd, ep: Endpoint) -> Option<u64> {
        let (local, remote) = ep.addrs?;
        let sender = TcpSnapshot::of(dup)?;
        let peer = self.sock_diag()?.receiving(remote, local).filter(|p| p.state != TCP_LISTEN)?;
        let send_buffer = u64::try_from(sockopt(dup, libc::SO_SNDBUF)?).ok()?;
        Some(room(send_buffer, (sender.sent + sender.not_sent).saturating_sub(peer.read())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_loopback_buffer_allows_the_fixed_mark() {
        assert_eq!(room(3_939_840, 0), UNREAD_MOST);
        assert_eq!(room(3_939_840, 1000), UNREAD_MOST - 1000);
        assert_eq!(room(3_939_840, UNREAD_MOST), 0);
        assert_eq!(room(3_939_840, UNREAD_MOST + 5), 0);
    }

    #[test]
    fn a_buffer_the_program_made_small_allows_a_third_of_it() {
        // SO_SNDBUF 64 KiB set: the kernel reports twice that.
        assert_eq!(room(131_072, 0), 43_690);
        assert_eq!(room(131_072, 43_690), 0);
    }
}
