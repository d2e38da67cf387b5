//! How many bytes a TCP receive from a traced peer takes: what the peer has written and this
//! socket has not read, at most the receive's length and 32 KiB, a count that follows from the
//! grants alone (docs/networking.md, "How much one receive takes from a traced peer").
//!
//! The probe waits until the socket's queue holds that count, so that a receive that can take only
//! what one call finds (an iovec, a peek, a static program's call) finds all of it. But some of
//! those bytes may wait behind a window only this receive can open: on loopback a segment is
//! about 64 KiB, Linux opens no window smaller than a segment, and a segment the reader has mostly
//! read keeps its whole buffer charged to the socket until its last byte is taken. An rsync
//! daemon's 4 MB pull left 1,294 bytes queued holding 73,898 bytes of a 128 KiB buffer: the
//! window stayed shut, the writer's kernel held 678 KB, and the probe, waiting with the reader
//! parked, stopped the run after the settle limit ("did not arrive within 2000 ms") although
//! nothing was lost. So for a receive that takes its whole grant (into one buffer, waiting for the
//! bytes its read lets through: `net_flags::WHOLE_GRANT`, the preload's `hooks/whole_grant.rs`
//! and the ptrace agent's `agent/whole_grant.rs`) the wait ends, the count unchanged, once the
//! writer waits for this reader: everything it transmitted is in this socket's queue and it holds
//! the rest for want of room in the window. The count is the decision's in a recording and in its
//! replay, whatever the kernel's segments and buffers. A receive that takes what one call finds
//! (an iovec, a peek, a splice, a static program's `recvfrom` that fills an address) would take
//! what the kernel happened to queue, and its replay could diverge unseen: it still waits, and a
//! run where only its own read could bring the bytes stops, saying so.
use super::*;

impl NetProbe {
    /// For a receive of `len` bytes on TCP endpoint `ep` (`dup`), whose peer is a traced socket
    /// whose sends were settled: the bytes the receive may take, waited for until they are in
    /// the socket's queue or, for a receive that takes its `whole` grant, wait for it (see the
    /// module doc); None when the peer is not a traced sender (dara's relay settles its own
    /// deliveries) or the kernel does not say.
    ///
    /// How many bytes a loopback socket holds when its reader looks depends on real time once a
    /// writer has sent more than the reader's window: the rest waits in the writer's queue until
    /// the reader's read opens the window, and arrives a little later (`sendfile_stream`: a
    /// replay's receive took 61,440 bytes where the recording's took 65,536). So the count is
    /// what the peer has written and this socket has not read, at most `len` and at most
    /// [`STREAM_SEND_MOST`] (a quarter of a smaller receive buffer). A reset connection takes
    /// what it has.
    pub(super) fn unread_arrived(&mut self, dup: &OwnedFd, ep: Endpoint, len: u64, whole: bool) -> Result<Option<u64>, ProbeError> {
        let Some((written, read)) = self.traced_writes(dup, ep) else { return Ok(None) };
        // A program that made its receive buffer small (SO_RCVBUF reports twice what it set) gets
        // a window of about half of it.
        let admits = sockopt(dup, libc::SO_RCVBUF).map_or(STREAM_SEND_MOST, |b| (b.max(0) as u64 / 4).min(STREAM_SEND_MOST));
        let most = written.saturating_sub(read).min(len).min(admits.max(1));
        let started = Instant::now();
        while (inq(dup).max(0) as u64) < most {
            let t = TcpSnapshot::of(dup);
            if t.is_some_and(|t| t.state == TCP_CLOSE) {
                return Ok(None);
            }
            let waits_for_read = |me: &mut Self| t.is_some_and(|t| me.writer_waits_for_read(ep, t.received));
            if whole && waits_for_read(self) {
                break;
            }
            if started.elapsed() > SETTLE_LIMIT {
                if waits_for_read(self) {
                    return Err(ProbeError(format!("bytes a traced thread wrote to endpoint e{} wait behind a receive window only the reader's own read can open (its peer wrote {written}, it has read {read}, {} are queued), and this receive takes only what one call finds (a readv or recvmsg, a peek, a splice, or a static or Go program's recvfrom that fills an address), so how many it would get follows the kernel's timing; the run was stopped rather than decided on a racy count (docs/networking.md)", ep.id, inq(dup).max(0))));
                }
                return Err(ProbeError(format!("bytes a traced thread wrote to endpoint e{} did not arrive within {} ms (its peer wrote {written}, it has read {read}); the run was stopped rather than decided on a racy probe", ep.id, SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        Ok(Some(most))
    }

    /// Whether the traced writer of TCP endpoint `ep`, asked by sock_diag, sends nothing more
    /// until this socket's reader reads, this socket having `received` what it has
    /// ([`TcpSnapshot::waits_for_reader`]). False when the kernel does not say (no sock_diag, a
    /// kernel before 5.4 that does not tell the window): the probe then waits as before.
    fn writer_waits_for_read(&mut self, ep: Endpoint, received: u64) -> bool {
        let Some((local, remote)) = ep.addrs else { return false };
        let writer = self.sock_diag().and_then(|d| d.tcp_info(remote, local)).and_then(|info| TcpSnapshot::from_info(&info));
        writer.is_some_and(|w| w.waits_for_reader(received))
    }

    /// What the traced peer of TCP endpoint `ep` (`dup`) has written to it in all, and what it
    /// has read of that: None when the peer is no traced sender, the kernel does not say, or the
    /// connection is over (a reset, or both ends done: it takes what it has).
    pub(super) fn traced_writes(&self, dup: &OwnedFd, ep: Endpoint) -> Option<(u64, u64)> {
        let (_, local, remote) = ep.key.filter(|k| k.2 != 0)?;
        let &written = self.written.get(&(remote, local))?;
        let t = TcpSnapshot::of(dup)?;
        // The kernel counts a FIN as one byte received.
        let fin = match t.state {
            TCP_CLOSE => return None,
            TCP_CLOSE_WAIT | TCP_LAST_ACK | TCP_CLOSING | TCP_TIME_WAIT => 1,
            _ => 0,
        };
        let queued = inq(dup).max(0) as u64;
        Some((written, t.received.saturating_sub(queued + fin)))
    }
}
