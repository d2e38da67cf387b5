//! The sockets of a target's network namespace as /proc shows them: the UDP ports bound and the
//! TCP ports listened on.
use std::fs;

/// The UDP sockets bound to one local port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpPortGroup {
    /// Sockets bound to the port, on any address.
    pub sockets: usize,
    /// The most sockets bound to one address and the port (several with `SO_REUSEPORT`: a group
    /// the kernel shares datagrams out to).
    pub shared: usize,
    /// That group's receive queues' bytes and drop counts, summed: it grows with every datagram
    /// one of them receives or drops, and shrinks only when a program reads. (Sockets on other
    /// addresses are left out: they may be another program's, read at any time.)
    pub arrivals: u64,
}

/// The UDP sockets bound to local `port` in the network namespace of process `pid`; None when
/// neither `/proc/<pid>/net/udp` nor udp6 can be read.
pub fn udp_port_group(pid: u32, port: u16) -> Option<UdpPortGroup> {
    let tables: Vec<String> = ["udp", "udp6"].iter().filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
    (!tables.is_empty()).then(|| udp_tables_group(&tables, port))
}

/// [`udp_port_group`] of /proc/net/udp{,6} tables: columns `local_address` ("ADDR:PORT", hex),
/// `tx_queue:rx_queue` (hex), `inode` and `drops` (decimal, the last). A table read while other
/// programs bind and close sockets may list a socket twice (the kernel resumes its walk of the
/// hash table at a line count between reads): each inode counts once.
fn udp_tables_group(tables: &[String], port: u16) -> UdpPortGroup {
    // (address, sockets, arrivals) of each address bound with the port.
    let mut by_address: Vec<(&str, usize, u64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for cols in tables.iter().flat_map(|t| t.lines().skip(1)).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
        let Some((address, local_port)) = cols.get(1).and_then(|a| a.rsplit_once(':')) else { continue };
        if u16::from_str_radix(local_port, 16) != Ok(port) || !seen.insert(cols.get(9).copied().unwrap_or_default()) {
            continue;
        }
        let queued = cols.get(4).and_then(|q| q.split_once(':')).and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok()).unwrap_or(0);
        let drops = cols.get(12).and_then(|d| d.parse::<u64>().ok()).unwrap_or(0);
        match by_address.iter_mut().find(|(a, _, _)| *a == address) {
            Some(entry) => (entry.1, entry.2) = (entry.1 + 1, entry.2 + queued + drops),
            None => by_address.push((address, 1, queued + drops)),
        }
    }
    let largest = by_address.iter().max_by_key(|(_, sockets, _)| *sockets).copied().unwrap_or_default();
    UdpPortGroup { sockets: by_address.iter().map(|e| e.1).sum(), shared: largest.1, arrivals: largest.2 }
}

/// Inodes of the TCP sockets listening on local `port` in the network namespace of process
/// `pid` (`/proc/<pid>/net/tcp` and tcp6: state 0A, inode in the tenth column).
pub fn tcp_listener_inodes(pid: u32, port: u16) -> Vec<u64> {
    let wanted = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    (cols.get(1)?.ends_with(&wanted) && *cols.get(3)? == "0A").then(|| cols.get(9)?.parse().ok())?
                })
                .collect::<Vec<u64>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_table_names_its_bound_ports() {
        let table = concat!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n",
            " 12: 0100007F:5DC1 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n",
        );
        let tables = [table.to_string()];
        assert_eq!(udp_tables_group(&tables, 0x5DC1).sockets, 1);
        assert_eq!(udp_tables_group(&tables, 0x5DC2).sockets, 0);
        assert_eq!(udp_tables_group(&tables, 0).sockets, 0, "the remote port 0 is not a bound one");
    }

    /// Two sockets on one address and port (`SO_REUSEPORT`): their queued bytes and drops add
    /// up; a socket on another address with that port (another program's, maybe) is left out.
    #[test]
    fn a_udp_port_group_sums_its_queues_and_drops() {
        let table = concat!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n",
            " 12: 0100007F:4685 00000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n",
            " 12: 0100007F:4685 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 2\n",
            " 12: 00000000:4685 00000000:0000 07 00000000:00000500 00:00000000 00000000     0        0 4245 2 0000000000000000 0\n",
            " 13: 0100007F:4686 00000000:0000 07 00000000:00000100 00:00000000 00000000     0        0 4244 2 0000000000000000 0\n",
        );
        assert_eq!(udp_tables_group(&[table.to_string()], 0x4685), UdpPortGroup { sockets: 3, shared: 2, arrivals: 0x300 + 2 });
        // A line listed twice (a table read while other programs bind and close) is one socket.
        let twice = concat!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n",
            " 12: 0100007F:4685 00000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n",
            " 12: 0100007F:4685 00000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n",
        );
        assert_eq!(udp_tables_group(&[twice.to_string()], 0x4685), UdpPortGroup { sockets: 1, shared: 1, arrivals: 0x300 });
    }

    /// A datagram sent to a port grows the mark of its group.
    #[test]
    fn a_datagram_grows_its_port_group_s_arrivals() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let before = udp_port_group(std::process::id(), port).unwrap();
        assert_eq!((before.sockets, before.shared), (1, 1));
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"x", ("127.0.0.1", port)).unwrap();
        let started = std::time::Instant::now();
        while udp_port_group(std::process::id(), port).unwrap().arrivals <= before.arrivals {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "the datagram never showed");
            std::thread::yield_now();
        }
    }

    /// (That the port is free again after the drop is not checked live: the table is the whole
    /// network namespace's, and on a busy machine another process may take the freed ephemeral
    /// port at once; the parser's negative cases are checked on a fixed table above.)
    #[test]
    fn a_port_is_bound_while_a_socket_holds_it() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(udp_port_group(std::process::id(), port).is_some_and(|g| g.sockets == 1));
    }
}
