//! The sockets of a target's network namespace as /proc shows them: the UDP ports bound and the
//! TCP ports listened on.
use std::fs;

/// Whether a UDP socket (IPv4 or IPv6) is bound to local `port` in the network namespace of
/// process `pid`, from `/proc/<pid>/net/udp` and udp6. True when neither table can be read.
pub fn udp_port_bound(pid: u32, port: u16) -> bool {
    udp_port_group(pid, port).is_none_or(|group| group.sockets > 0)
}

/// The UDP sockets bound to one local port (several with `SO_REUSEPORT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpPortGroup {
    pub sockets: usize,
    /// Their receive queues' bytes and drop counts, summed: it grows with every datagram one of
    /// them receives or drops, and shrinks only when a program reads.
    pub arrivals: u64,
}

/// The UDP sockets bound to local `port` in the network namespace of process `pid`; None when
/// neither `/proc/<pid>/net/udp` nor udp6 can be read.
pub fn udp_port_group(pid: u32, port: u16) -> Option<UdpPortGroup> {
    let tables: Vec<String> = ["udp", "udp6"].iter().filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
    (!tables.is_empty()).then(|| tables.iter().map(|t| udp_table_group(t, port)).fold(UdpPortGroup::default(), |a, b| UdpPortGroup { sockets: a.sockets + b.sockets, arrivals: a.arrivals + b.arrivals }))
}

/// The sockets of a /proc/net/udp{,6} table whose local address ("ADDR:PORT", hex) has `port`:
/// columns `local_address`, `tx_queue:rx_queue` (hex) and `drops` (decimal, the last).
fn udp_table_group(table: &str, port: u16) -> UdpPortGroup {
    let mut group = UdpPortGroup::default();
    for cols in table.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
        let local_port = cols.get(1).and_then(|a| a.rsplit_once(':')).and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if local_port != Some(port) {
            continue;
        }
        let queued = cols.get(4).and_then(|q| q.split_once(':')).and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok()).unwrap_or(0);
        let drops = cols.get(12).and_then(|d| d.parse::<u64>().ok()).unwrap_or(0);
        group.sockets += 1;
        group.arrivals += queued + drops;
    }
    group
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
        assert_eq!(udp_table_group(table, 0x5DC1).sockets, 1);
        assert_eq!(udp_table_group(table, 0x5DC2).sockets, 0);
        assert_eq!(udp_table_group(table, 0).sockets, 0, "the remote port 0 is not a bound one");
    }

    /// Two sockets on one port (`SO_REUSEPORT`): their queued bytes and drops add up.
    #[test]
    fn a_udp_port_group_sums_its_queues_and_drops() {
        let table = concat!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n",
            " 12: 0100007F:4685 00000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n",
            " 12: 0100007F:4685 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 2\n",
            " 13: 0100007F:4686 00000000:0000 07 00000000:00000100 00:00000000 00000000     0        0 4244 2 0000000000000000 0\n",
        );
        assert_eq!(udp_table_group(table, 0x4685), UdpPortGroup { sockets: 2, arrivals: 0x300 + 2 });
    }

    /// A datagram sent to a port grows the mark of its group.
    #[test]
    fn a_datagram_grows_its_port_group_s_arrivals() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let before = udp_port_group(std::process::id(), port).unwrap();
        assert_eq!(before.sockets, 1);
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
        assert!(udp_port_bound(std::process::id(), port));
    }
}
