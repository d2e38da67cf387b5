//! Endpoint identity: what the driver learnt about a descriptor ([`Endpoint`]) and the port keys
//! (`PortKey`) it is found and owed under.

use super::*;

/// An address pair of an INET socket: (protocol kind, local port, remote port or 0).
pub(super) type PortKey = (u64, u16, u16);

/// Marks, in the `owed` map, a TCP connection owed to an IPv6 listener. One port may have a
/// listener of each family (mosquitto, nginx with `listen 80` and `listen [::]:80`), and a
/// connection only ever shows on its own family's (or on a dual-stack IPv6 listener): keyed by the
/// port alone, dara waited on the IPv4 listener for a connection made to `[::1]`, for good.
pub(super) const OWED_V6: u64 = 1 << 62;

/// The `owed` key of a TCP connection to `server`.
pub(super) fn owed_connection(server: std::net::SocketAddr) -> PortKey {
    let v6 = matches!(server, std::net::SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_none());
    (kind::TCP | if v6 { OWED_V6 } else { 0 }, server.port(), 0)
}

/// (local, remote) addresses of a connected INET socket.
pub(crate) type AddressPair = (std::net::SocketAddr, std::net::SocketAddr);

/// What the driver learnt about one descriptor.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Endpoint {
    pub(super) id: u64,
    pub(super) kind: u64,
    pub(super) key: Option<PortKey>,
    /// (local, remote) addresses of a connected TCP socket (what sock_diag is asked about).
    pub(super) addrs: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
}

impl Endpoint {
    /// Whether what is known of it stays true as long as the socket or pipe lives: a connected
    /// TCP socket's addresses never change, a Unix socket and a pipe have none.
    pub(super) fn is_stable(&self) -> bool {
        match self.kind {
            kind::TCP => self.addrs.is_some(),
            kind::UNIX_STREAM | kind::UNIX_DGRAM | kind::PIPE => true,
            _ => false,
        }
    }
}


/// (kind, local port, remote port or 0) of an INET socket.
/// The `owed` keys what is owed to endpoint `ep` (descriptor `fd`) is counted under: its own key,
/// but for a TCP listener the key of its family's connections, and of both families' for a
/// dual-stack IPv6 listener (`IPV6_V6ONLY` off), which IPv4 clients reach too.
pub(super) fn owed_keys(fd: &OwnedFd, ep: Endpoint) -> [Option<PortKey>; 2] {
    let Some(key) = ep.key else { return [None, None] };
    if ep.kind != kind::TCP || key.2 != 0 {
        return [Some(key), None];
    }
    match socket_address(fd, false) {
        Some(std::net::SocketAddr::V6(_)) => {
            let v6 = (kind::TCP | OWED_V6, key.1, 0);
            let v6_only = sockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) != Some(0);
            [Some(v6), (!v6_only).then_some(key)]
        }
        _ => [Some(key), None],
    }
}
