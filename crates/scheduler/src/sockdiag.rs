//! Asks the kernel, through `sock_diag` netlink, whether a UDP datagram sent over loopback has a
//! socket to go to.
//!
//! Why the driver needs it: after a UDP send, [`crate::netprobe`] counts one datagram owed to the
//! destination port and makes the receiver's probe wait until it shows. A datagram sent to a port
//! nobody has bound (a client that tries before its server is up) is dropped by the kernel and
//! never shows: counted as owed, it would stall the first receiver bound to that port later and
//! stop the run as uncontrolled. Asking at settle time, while every target thread is parked, says
//! which case it is: no other thread can bind in between.
//!
//! How: first the kernel's own receive lookup for the datagram, as if it came from the sender's
//! port on the loopback address and went to the destination port on the loopback address (a
//! `sock_diag` request for one socket: a hash lookup, about 5 µs on the project's 2-vCPU VMs).
//! The sender's destination *address* is not known here, so when that finds nothing a dump
//! filtered on the destination port looks for a socket bound to the port on any address, in both
//! families (about 10 µs per family: the kernel walks its whole UDP hash table; reading
//! `/proc/net/udp` and `udp6` costs about 85 µs). Only when both find nothing is the datagram
//! taken as dropped; an IPv6-only socket or one bound to another address errs on the side of
//! "owed" (the probe waits), as before.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SOCK_DIAG_BY_FAMILY` from `<linux/sock_diag.h>`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `INET_DIAG_REQ_BYTECODE` from `<linux/inet_diag.h>`: the request's filter attribute.
const INET_DIAG_REQ_BYTECODE: u16 = 1;
/// `INET_DIAG_BC_S_EQ`: the socket's local port equals the next op's `no` field.
const INET_DIAG_BC_S_EQ: u8 = 11;
/// `INET_DIAG_NOCOOKIE`: a one-socket request that names no particular socket instance.
const NO_COOKIE: u32 = !0;
/// Every socket state.
const ALL_STATES: u32 = !0;

/// `struct inet_diag_sockid`; ports and addresses in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagSockId {
    sport: u16,
    dport: u16,
    src: [u32; 4],
    dst: [u32; 4],
    interface: u32,
    cookie: [u32; 2],
}

/// `struct inet_diag_req_v2`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagReqV2 {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: InetDiagSockId,
}

/// `struct inet_diag_bc_op`: one filter instruction (a conditional jump forward).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct BcOp {
    code: u8,
    yes: u8,
    no: u16,
}

/// A request for the one socket that `request.id` names.
#[repr(C)]
struct OneSocket {
    header: libc::nlmsghdr,
    request: InetDiagReqV2,
}

/// A dump request with a two-op filter "local port == port".
#[repr(C)]
struct PortDump {
    header: libc::nlmsghdr,
    request: InetDiagReqV2,
    attr: libc::nlattr,
    filter: [BcOp; 2],
}

const _: () = assert!(std::mem::size_of::<InetDiagReqV2>() == 56);
const _: () = assert!(std::mem::size_of::<OneSocket>() == 16 + 56);
const _: () = assert!(std::mem::size_of::<PortDump>() == 16 + 56 + 4 + 8);

/// What the kernel answered to one request.
enum Answer {
    /// This many sockets matched.
    Sockets(usize),
    /// An error (ENOENT: no such socket).
    Error(i32),
}

/// A `NETLINK_SOCK_DIAG` socket of the driver.
pub struct SockDiag {
    fd: OwnedFd,
}

impl SockDiag {
    pub fn open() -> io::Result<Self> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor socket just returned, owned by nobody else.
        Ok(SockDiag { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Whether a UDP datagram from loopback port `from` (a socket of `family`, `AF_INET` or
    /// `AF_INET6`) to loopback port `to` has a socket to go to (see the module doc).
    pub fn udp_receiver(&self, family: i32, from: u16, to: u16) -> io::Result<bool> {
        let (family, loopback) = match family {
            libc::AF_INET6 => (libc::AF_INET6 as u8, [0, 0, 0, u32::to_be(1)]),
            _ => (libc::AF_INET as u8, [u32::to_be(libc::INADDR_LOOPBACK), 0, 0, 0]),
        };
        let id = InetDiagSockId { sport: from.to_be(), dport: to.to_be(), src: loopback, dst: loopback, cookie: [NO_COOKIE; 2], ..Default::default() };
        let request = OneSocket {
            header: header(std::mem::size_of::<OneSocket>(), libc::NLM_F_REQUEST),
            request: InetDiagReqV2 { family, protocol: libc::IPPROTO_UDP as u8, states: ALL_STATES, id, ..Default::default() },
        };
        self.send(&request)?;
        match self.answer(false)? {
            Answer::Sockets(n) if n > 0 => Ok(true),
            Answer::Sockets(_) | Answer::Error(libc::ENOENT) => self.udp_port_bound(to),
            Answer::Error(e) => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Whether a UDP socket (IPv4 or IPv6) is bound to local port `port` on any address.
    pub fn udp_port_bound(&self, port: u16) -> io::Result<bool> {
        Ok(self.any_on_port(libc::AF_INET as u8, port)? || self.any_on_port(libc::AF_INET6 as u8, port)?)
    }

    fn any_on_port(&self, family: u8, port: u16) -> io::Result<bool> {
        let op_size = std::mem::size_of::<BcOp>();
        let request = PortDump {
            header: header(std::mem::size_of::<PortDump>(), libc::NLM_F_REQUEST | libc::NLM_F_DUMP),
            request: InetDiagReqV2 { family, protocol: libc::IPPROTO_UDP as u8, states: ALL_STATES, ..Default::default() },
            attr: libc::nlattr { nla_len: (std::mem::size_of::<libc::nlattr>() + 2 * op_size) as u16, nla_type: INET_DIAG_REQ_BYTECODE },
            // Match: go on past the filter's end (accept); no match: jump one op beyond it (reject).
            // The port operand is in host byte order.
            filter: [BcOp { code: INET_DIAG_BC_S_EQ, yes: (2 * op_size) as u8, no: (3 * op_size) as u16 }, BcOp { no: port, ..Default::default() }],
        };
        self.send(&request)?;
        match self.answer(true)? {
            Answer::Sockets(n) => Ok(n > 0),
            Answer::Error(e) => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Sends one request, a plain `repr(C)` struct without padding.
    fn send<T>(&self, request: &T) -> io::Result<()> {
        // SAFETY: sends the bytes of a struct that lives for the call.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), (request as *const T).cast(), std::mem::size_of::<T>(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the answer to the request just sent: one message (or an error) for a one-socket
    /// request; for a dump, every message up to NLMSG_DONE, so the next request starts on an
    /// empty queue.
    fn answer(&self, dump: bool) -> io::Result<Answer> {
        let mut sockets = 0;
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: the kernel writes at most the buffer's size into it.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let bytes = &buf[..n as usize];
            let header_size = std::mem::size_of::<libc::nlmsghdr>();
            let mut at = 0;
            while at + header_size <= bytes.len() {
                // SAFETY: at least a header's worth of bytes, read without alignment needs.
                let header: libc::nlmsghdr = unsafe { std::ptr::read_unaligned(bytes[at..].as_ptr().cast()) };
                match i32::from(header.nlmsg_type) {
                    libc::NLMSG_DONE => return Ok(Answer::Sockets(sockets)),
                    libc::NLMSG_ERROR => {
                        // An error message carries the negative errno right after the header.
                        let Some(errno) = bytes.get(at + header_size..at + header_size + 4) else {
                            return Err(io::Error::new(io::ErrorKind::InvalidData, "a truncated sock_diag error"));
                        };
                        return Ok(Answer::Error(-i32::from_ne_bytes([errno[0], errno[1], errno[2], errno[3]])));
                    }
                    _ => sockets += 1,
                }
                let len = header.nlmsg_len as usize;
                if len < header_size {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "a sock_diag answer with a truncated message"));
                }
                at += (len + 3) & !3;
            }
            if !dump {
                return Ok(Answer::Sockets(sockets));
            }
        }
    }
}

fn header(len: usize, flags: libc::c_int) -> libc::nlmsghdr {
    libc::nlmsghdr { nlmsg_len: len as u32, nlmsg_type: SOCK_DIAG_BY_FAMILY, nlmsg_flags: flags as u16, nlmsg_seq: 0, nlmsg_pid: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_bound_udp_port_is_seen_and_a_closed_one_is_not() {
        let diag = SockDiag::open().unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let from = sender.local_addr().unwrap().port();
        for (addr, family) in [("127.0.0.1:0", libc::AF_INET), ("[::]:0", libc::AF_INET), ("[::1]:0", libc::AF_INET6)] {
            let socket = UdpSocket::bind(addr).unwrap();
            let port = socket.local_addr().unwrap().port();
            assert!(diag.udp_port_bound(port).unwrap(), "{addr} bound to {port}");
            assert!(diag.udp_receiver(family, from, port).unwrap(), "{addr}: a datagram to {port}");
            drop(socket);
            assert!(!diag.udp_port_bound(port).unwrap(), "{addr}: port {port} closed");
            assert!(!diag.udp_receiver(family, from, port).unwrap(), "{addr}: nobody on {port}");
        }
    }

    /// The exact lookup misses a socket bound to another loopback address; the port dump finds it.
    #[test]
    fn a_socket_on_another_loopback_address_still_counts() {
        let diag = SockDiag::open().unwrap();
        let socket = UdpSocket::bind("127.0.0.2:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(diag.udp_receiver(libc::AF_INET, 40000, port).unwrap());
    }
}
