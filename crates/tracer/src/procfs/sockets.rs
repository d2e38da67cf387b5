//! The sockets of a target's network namespace as /proc shows them: the UDP ports bound and the
//! TCP ports listened on.
use std::fs;

/// Whether a UDP socket (IPv4 or IPv6) is bound to local `port` in the network namespace of
/// process `pid`, from `/proc/<pid>/net/udp` and udp6. True when neither table can be read.
pub fn udp_port_bound(pid: u32, port: u16) -> bool {
    let tables: Vec<String> = ["udp", "udp6"].iter().filter_map(|t| fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok()).collect();
    tables.is_empty() || tables.iter().any(|t| udp_table_has_port(t, port))
}

/// Whether a /proc/net/udp{,6} table lists a socket whose local address ("ADDR:PORT", hex) has
/// `port`.
fn udp_table_has_port(table: &str, port: u16) -> bool {
    table.lines().skip(1).filter_map(|l| l.split_whitespace().nth(1)?.rsplit_once(':')).any(|(_, p)| u16::from_str_radix(p, 16) == Ok(port))
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
        assert!(udp_table_has_port(table, 0x5DC1));
        assert!(!udp_table_has_port(table, 0x5DC2));
        assert!(!udp_table_has_port(table, 0), "the remote port 0 is not a bound one");
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
