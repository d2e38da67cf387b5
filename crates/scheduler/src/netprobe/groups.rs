//! Ports several sockets share (`SO_REUSEPORT`: unbound's threads each bind a UDP and a TCP socket
//! to port 53; nginx with `reuseport`): settled by watching the whole group.
//!
//! A datagram or connection is owed to its port, and a probe of a socket on that port waits until
//! it shows (see the module doc of `netprobe`). With several sockets on the port the kernel gives
//! it to one of them (the preload makes that the group's first socket, `hooks/sockopt.rs`), and a
//! probe of another waited for it in vain: unbound's search stopped at once ("loopback delivery to
//! endpoint e14 did not arrive"). So for a group, the settle itself waits: before the sender or
//! connecting thread runs, dara notes how much the group's sockets hold (UDP: their receive queues'
//! bytes and drop counts, from `/proc/<pid>/net/udp`; TCP: their accept queues, from sock_diag;
//! only sockets on the very address: a socket elsewhere with the port may be another program's),
//! and at the next quiet point waits until that grew, nobody having read meanwhile. Nothing is
//! owed then, and every probe sees the delivery where it landed.
use std::net::SocketAddr;
use std::time::Instant;

use super::{NetProbe, ProbeError, SETTLE_LIMIT};

/// How much the UDP sockets bound to one address and a port hold, when two or more are (a
/// socket of another program on another address with that port is no group: sockets that share
/// a port bind the same address).
pub(super) fn udp_mark(group: crate::procfs::UdpPortGroup) -> Option<u64> {
    (group.shared >= 2).then_some(group.arrivals)
}

impl NetProbe {
    /// How many connections wait in the accept queues of the TCP listeners a connect to `to` may
    /// reach, when there are two or more.
    pub(super) fn listener_mark(&mut self, to: SocketAddr) -> Option<u64> {
        let (count, queued) = self.listener_group(to)?;
        (count >= 2).then_some(queued)
    }

    /// (listeners, connections in their queues) of those on the address a connect to `to`
    /// reaches (sockets that share a port bind the same address; a listener on another address
    /// may be another program's, whose queue changes at any time).
    fn listener_group(&mut self, to: SocketAddr) -> Option<(usize, u64)> {
        let group = super::backlog::tcp_listeners_reached(self.sock_diag()?, to);
        Some((group.len(), group.iter().map(|l| u64::from(l.queued)).sum()))
    }

    /// Waits until the group read by `now` holds more than `mark` (a delivery to it landed),
    /// bounded by [`SETTLE_LIMIT`]; `what` names it in the error.
    pub(super) fn wait_group_grew(&mut self, mark: u64, what: &str, mut now: impl FnMut(&mut Self) -> Option<u64>) -> Result<(), ProbeError> {
        let started = Instant::now();
        while now(self).is_some_and(|held| held <= mark) {
            if started.elapsed() > SETTLE_LIMIT {
                return Err(ProbeError(format!("{what} did not reach any of the sockets sharing its port within {} ms; the run was stopped rather than decided on a racy probe", SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// The connect to `to` settled into the group of listeners whose queues held `mark`.
    pub(super) fn wait_listener_group(&mut self, to: SocketAddr, mark: u64) -> Result<(), ProbeError> {
        self.wait_group_grew(mark, &format!("a connection to {to}"), |me| me.listener_group(to).map(|g| g.1))
    }

    /// The datagram to `port` of process `pid`'s network settled into the group that held `mark`.
    pub(super) fn wait_udp_group(&mut self, pid: u32, port: u16, mark: u64) -> Result<(), ProbeError> {
        self.wait_group_grew(mark, &format!("a datagram to port {port}"), |_| crate::procfs::udp_port_group(pid, port).map(|g| g.arrivals))
    }
}
