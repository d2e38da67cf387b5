//! The address a program is shown for a peer dara relays for: an INET socket address as the
//! kernel writes it (`sockaddr_in`, `sockaddr_in6`), read and written as bytes, and the lookup in
//! [`Header::relayed`](crate::Header) that turns dara's own socket (a loopback port) into the
//! outside client it stands for. Shared by the preload's `accept`/`getpeername`/`recvfrom` hooks
//! and the ptrace agent, which rewrites the same calls' results in the tracee's memory.
use core::sync::atomic::Ordering;

use crate::{relayed_flags, RelayedPeer};

/// `AF_INET`, `AF_INET6` (Linux).
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
/// Bytes of a `sockaddr_in`, a `sockaddr_in6`.
pub const SOCKADDR_IN: usize = 16;
pub const SOCKADDR_IN6: usize = 28;

/// An INET address: the socket family whose layout it had, the IP (IPv4 in the first 4 bytes),
/// the port, and whether the IP is IPv4 (also when written v4-mapped in a `sockaddr_in6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InetAddress {
    pub family: u16,
    pub ip: [u8; 16],
    pub port: u16,
    pub v4: bool,
}

const IPV6_LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

impl InetAddress {
    /// The address in the first `bytes` of a socket address; None for another family or too few
    /// bytes.
    pub fn parse(bytes: &[u8]) -> Option<InetAddress> {
        let family = u16::from_ne_bytes(bytes.get(..2)?.try_into().ok()?);
        let port = u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?);
        match family {
            AF_INET if bytes.len() >= SOCKADDR_IN => {
                let mut ip = [0u8; 16];
                ip[..4].copy_from_slice(&bytes[4..8]);
                Some(InetAddress { family, ip, port, v4: true })
            }
            AF_INET6 if bytes.len() >= SOCKADDR_IN6 => {
                let b: [u8; 16] = bytes[8..24].try_into().ok()?;
                let mapped = b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff;
                let ip = if mapped { [b[12], b[13], b[14], b[15], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] } else { b };
                Some(InetAddress { family, ip, port, v4: mapped })
            }
            _ => None,
        }
    }

    /// The address in `family`'s layout (an IPv4 address on an `AF_INET6` socket v4-mapped):
    /// the bytes and how many are used; None for an IPv6 address on an `AF_INET` socket.
    pub fn encode(&self, family: u16) -> Option<([u8; SOCKADDR_IN6], usize)> {
        let mut out = [0u8; SOCKADDR_IN6];
        out[..2].copy_from_slice(&family.to_ne_bytes());
        out[2..4].copy_from_slice(&self.port.to_be_bytes());
        match (family, self.v4) {
            (AF_INET, true) => {
                out[4..8].copy_from_slice(&self.ip[..4]);
                Some((out, SOCKADDR_IN))
            }
            (AF_INET6, v4) => {
                let ip = if v4 { [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, self.ip[0], self.ip[1], self.ip[2], self.ip[3]] } else { self.ip };
                out[8..24].copy_from_slice(&ip);
                Some((out, SOCKADDR_IN6))
            }
            _ => None,
        }
    }

    /// Whether the IP is a loopback one (127/8 or ::1).
    pub fn is_loopback(&self) -> bool {
        if self.v4 {
            self.ip[0] == 127
        } else {
            self.ip == IPV6_LOOPBACK
        }
    }
}

/// The entries of `table` in use for TCP connections, or UDP senders when `datagrams`.
pub fn in_use(table: &[RelayedPeer], datagrams: bool) -> impl Iterator<Item = &RelayedPeer> {
    table.iter().filter(move |e| e.relay_port.load(Ordering::Acquire) != 0 && (e.flags.load(Ordering::Relaxed) & relayed_flags::DATAGRAMS != 0) == datagrams)
}

/// The outside client `entry` stands for (its family says which layout `encode` gives it). An
/// IPv4 client dara heard on an IPv6 socket (`::ffff:a.b.c.d`) is the IPv4 address, as
/// [`InetAddress::parse`] reads a v4-mapped one: a program on an IPv6 socket that sends to
/// what `recvfrom` showed it (iperf3's UDP test) is then recognised.
pub fn client_of(entry: &RelayedPeer) -> InetAddress {
    let mut ip = [0u8; 16];
    for (chunk, word) in ip.chunks_mut(4).zip(&entry.ip) {
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
    }
    let port = entry.port.load(Ordering::Relaxed) as u16;
    if entry.family.load(Ordering::Relaxed) == u32::from(AF_INET) {
        return InetAddress { family: AF_INET, ip, port, v4: true };
    }
    if ip[..10].iter().all(|&b| b == 0) && ip[10] == 0xff && ip[11] == 0xff {
        let v4 = [ip[12], ip[13], ip[14], ip[15], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        return InetAddress { family: AF_INET6, ip: v4, port, v4: true };
    }
    InetAddress { family: AF_INET6, ip, port, v4: false }
}

/// What the program is shown instead of `peer`, the address the kernel wrote for a connection's
/// or a datagram's peer: the outside client, in `peer`'s layout, when `peer` is dara's loopback
/// socket that stands for it (a UDP one when `datagrams`); None to leave it as it is.
pub fn shown_peer(peer: &InetAddress, table: &[RelayedPeer], datagrams: bool) -> Option<([u8; SOCKADDR_IN6], usize)> {
    if !peer.is_loopback() || peer.port == 0 {
        return None;
    }
    let entry = in_use(table, datagrams).find(|e| e.relay_port.load(Ordering::Relaxed) == u32::from(peer.port))?;
    client_of(entry).encode(peer.family)
}

/// Where what the program sends to `to` goes instead, in `to`'s layout: a datagram (`datagrams`)
/// to an outside client dara relays for goes to dara's socket that stands for it; a TCP connect
/// to an outside server dara dialled for the program ([`relayed_flags::DIALED`]) goes to dara's
/// listening socket that stands for the server.
pub fn relayed_destination(to: &InetAddress, table: &[RelayedPeer], datagrams: bool) -> Option<([u8; SOCKADDR_IN6], usize)> {
    let entry = in_use(table, datagrams).find(|e| {
        let client = client_of(e);
        (datagrams || e.flags.load(Ordering::Relaxed) & relayed_flags::DIALED != 0) && (client.ip, client.port, client.v4) == (to.ip, to.port, to.v4)
    })?;
    let relay_v6 = entry.flags.load(Ordering::Relaxed) & relayed_flags::RELAY_V6 != 0;
    let mut ip = [0u8; 16];
    if relay_v6 {
        ip = IPV6_LOOPBACK;
    } else {
        ip[..4].copy_from_slice(&[127, 0, 0, 1]);
    }
    InetAddress { family: to.family, ip, port: entry.relay_port.load(Ordering::Relaxed) as u16, v4: !relay_v6 }.encode(to.family)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    fn entry(relay_port: u16, client: [u8; 4], port: u16, flags: u32) -> RelayedPeer {
        RelayedPeer {
            relay_port: AtomicU32::new(u32::from(relay_port)),
            flags: AtomicU32::new(flags),
            family: AtomicU32::new(u32::from(AF_INET)),
            port: AtomicU32::new(u32::from(port)),
            ip: [AtomicU32::new(u32::from_ne_bytes(client)), AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)],
        }
    }

    fn v4(ip: [u8; 4], port: u16) -> InetAddress {
        let mut full = [0u8; 16];
        full[..4].copy_from_slice(&ip);
        InetAddress { family: AF_INET, ip: full, port, v4: true }
    }

    #[test]
    fn addresses_round_trip_in_both_layouts() {
        let a = v4([10, 1, 2, 3], 4242);
        let (bytes, len) = a.encode(AF_INET).unwrap();
        assert_eq!(len, SOCKADDR_IN);
        assert_eq!(InetAddress::parse(&bytes[..len]), Some(a));
        let (mapped, len6) = a.encode(AF_INET6).unwrap();
        assert_eq!(len6, SOCKADDR_IN6);
        assert_eq!(&mapped[18..24], &[0xff, 0xff, 10, 1, 2, 3]);
        assert_eq!(InetAddress::parse(&mapped[..len6]), Some(InetAddress { family: AF_INET6, ..a }));
        let six = InetAddress { family: AF_INET6, ip: IPV6_LOOPBACK, port: 1, v4: false };
        assert_eq!(six.encode(AF_INET), None, "no IPv6 address fits a sockaddr_in");
        assert_eq!(InetAddress::parse(&bytes[..8]), None, "too short");
    }

    #[test]
    fn dara_s_socket_is_shown_as_the_client_it_stands_for() {
        let table = [entry(40000, [192, 168, 0, 7], 5555, 0), entry(40001, [10, 0, 0, 1], 6666, relayed_flags::DATAGRAMS)];
        let shown = shown_peer(&v4([127, 0, 0, 1], 40000), &table, false).unwrap();
        assert_eq!(InetAddress::parse(&shown.0[..shown.1]), Some(v4([192, 168, 0, 7], 5555)));
        assert_eq!(shown_peer(&v4([127, 0, 0, 1], 40001), &table, false), None, "a UDP entry is not a TCP peer");
        assert!(shown_peer(&v4([127, 0, 0, 1], 40001), &table, true).is_some());
        assert_eq!(shown_peer(&v4([127, 0, 0, 1], 40002), &table, false), None, "not dara's socket");
        assert_eq!(shown_peer(&v4([10, 0, 0, 9], 40000), &table, false), None, "not loopback");
        let to = relayed_destination(&v4([10, 0, 0, 1], 6666), &table, true).unwrap();
        assert_eq!(InetAddress::parse(&to.0[..to.1]), Some(v4([127, 0, 0, 1], 40001)));
        assert_eq!(relayed_destination(&v4([10, 0, 0, 1], 6666), &table, false), None, "a UDP client is no TCP server");
        assert_eq!(relayed_destination(&v4([192, 168, 0, 7], 5555), &table, false), None, "a TCP client is no server to connect to");
    }

    /// A connect to an outside server dara dialled goes to dara's socket that stands for it,
    /// and the connection's peer is shown as the server; an older entry for the same server
    /// (its `DIALED` flag cleared) still shows its own connection's peer but is no destination.
    #[test]
    fn a_connect_to_a_dialled_server_goes_to_dara_s_stand_in() {
        let table = [entry(41000, [10, 9, 8, 7], 5432, 0), entry(41001, [10, 9, 8, 7], 5432, relayed_flags::DIALED)];
        let to = relayed_destination(&v4([10, 9, 8, 7], 5432), &table, false).unwrap();
        assert_eq!(InetAddress::parse(&to.0[..to.1]), Some(v4([127, 0, 0, 1], 41001)));
        assert_eq!(relayed_destination(&v4([10, 9, 8, 7], 5432), &table, true), None, "not for datagrams");
        for relay in [41000, 41001] {
            let shown = shown_peer(&v4([127, 0, 0, 1], relay), &table, false).unwrap();
            assert_eq!(InetAddress::parse(&shown.0[..shown.1]), Some(v4([10, 9, 8, 7], 5432)));
        }
    }

    /// An IPv4 client heard on an IPv6 socket is listed as `::ffff:a.b.c.d`; a send to the
    /// v4-mapped address the program was shown still goes to dara's socket.
    #[test]
    fn a_v4_mapped_client_is_its_ipv4_address() {
        let mapped = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
        let word = |i: usize| AtomicU32::new(u32::from_ne_bytes(mapped[i * 4..i * 4 + 4].try_into().unwrap()));
        let entry = RelayedPeer {
            relay_port: AtomicU32::new(40005),
            flags: AtomicU32::new(relayed_flags::DATAGRAMS),
            family: AtomicU32::new(u32::from(AF_INET6)),
            port: AtomicU32::new(56873),
            ip: [word(0), word(1), word(2), word(3)],
        };
        let client = client_of(&entry);
        assert!(client.v4 && client.ip[..4] == [127, 0, 0, 1]);
        let (shown, size) = client.encode(AF_INET6).unwrap();
        let to = InetAddress::parse(&shown[..size]).unwrap();
        let relay = relayed_destination(&to, core::slice::from_ref(&entry), true).expect("the send goes to dara's socket");
        assert_eq!(InetAddress::parse(&relay.0[..relay.1]).map(|a| a.port), Some(40005));
    }
}
