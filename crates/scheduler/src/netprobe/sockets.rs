//! Free socket helpers: zero-timeout polls, `ioctl`s, `TCP_INFO` fields, peeks, socket options,
//! addresses, and what /proc says of ports, epoll sets and a target's pollfds. Nothing here
//! keeps state or consumes data.

use super::*;

/// Resets TCP connection `fd` (`connect(AF_UNSPEC)` disconnects it, sending a reset).
pub(crate) fn reset(fd: &OwnedFd) {
    let unspec = libc::sockaddr { sa_family: libc::AF_UNSPEC as libc::sa_family_t, sa_data: [0; 14] };
    // SAFETY: connect reads a sockaddr of the given length from a live local.
    unsafe { libc::connect(fd.as_raw_fd(), &unspec, std::mem::size_of::<libc::sockaddr>() as libc::socklen_t) };
}

pub(super) fn poll_now(fd: &OwnedFd, events: libc::c_short) -> libc::c_short {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n > 0 { p.revents } else { 0 }
}

pub(super) fn ioctl_int(fd: &OwnedFd, request: libc::c_ulong) -> i64 {
    let mut v: libc::c_int = 0;
    // SAFETY: the request writes one int.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, &mut v) };
    if rc == 0 { i64::from(v) } else { 0 }
}

/// The kernel's TCP state of a socket (`tcpi_state`, the first byte of `struct tcp_info`).
pub(super) fn tcp_state(fd: &OwnedFd) -> Option<u8> {
    tcp_info_field::<1>(fd, 0).map(|b| b[0])
}

/// `N` bytes at `offset` of the socket's `struct tcp_info`; None when the kernel gives fewer.
pub(super) fn tcp_info_field<const N: usize>(fd: &OwnedFd, offset: usize) -> Option<[u8; N]> {
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info` and updates `len`.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len) };
    if rc != 0 || (len as usize) < offset + N {
        return None;
    }
    info[offset..offset + N].try_into().ok()
}

/// Bytes queued for reading (FIONREAD), 0 where the descriptor does not say.
pub(super) fn inq(fd: &OwnedFd) -> i64 {
    ioctl_int(fd, libc::FIONREAD)
}

/// Copies up to 4 queued bytes without consuming them; how many.
pub(super) fn peek(fd: &OwnedFd, buf: &mut [u8; 4]) -> usize {
    // SAFETY: `buf` is 4 writable bytes; MSG_PEEK leaves the queue as it was.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 4, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    n.max(0) as usize
}

/// Like [`peek`] for a datagram socket, with the sender's address of the datagram at the head of
/// the queue.
pub(super) fn peek_from(fd: &OwnedFd, buf: &mut [u8; 4]) -> (usize, Option<std::net::SocketAddr>) {
    // SAFETY: sockaddr_storage is plain data large enough for any address.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `buf` is 4 writable bytes and `from` holds `len` bytes; MSG_PEEK leaves the queue.
    let n = unsafe { libc::recvfrom(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 4, libc::MSG_PEEK | libc::MSG_DONTWAIT, (&mut from as *mut libc::sockaddr_storage).cast(), &mut len) };
    if n < 0 {
        return (0, None);
    }
    (n as usize, inet_address(&from))
}

/// The pid of the process that connected (or accepted) the other end of Unix socket `fd`
/// (`SO_PEERCRED`); None when not connected or not known.
pub(super) fn unix_peer_pid(fd: &OwnedFd) -> Option<u32> {
    // SAFETY: ucred is plain data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `cred`.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    (rc == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

/// An integer `SOL_SOCKET` option of `fd`, if it has it.
pub(super) fn sockopt(fd: &OwnedFd, opt: libc::c_int) -> Option<libc::c_int> {
    sockopt_int(fd, libc::SOL_SOCKET, opt)
}

pub(super) fn socket_kind(fd: &OwnedFd) -> u64 {
    match (sockopt(fd, libc::SO_DOMAIN), sockopt(fd, libc::SO_TYPE)) {
        (Some(libc::AF_INET | libc::AF_INET6), Some(libc::SOCK_STREAM)) => kind::TCP,
        (Some(libc::AF_INET | libc::AF_INET6), Some(libc::SOCK_DGRAM)) => kind::UDP,
        (Some(libc::AF_UNIX), Some(libc::SOCK_STREAM | libc::SOCK_SEQPACKET)) => kind::UNIX_STREAM,
        (Some(libc::AF_UNIX), Some(libc::SOCK_DGRAM)) => kind::UNIX_DGRAM,
        _ => kind::UNKNOWN,
    }
}

pub(super) fn anon_kind(fd: &OwnedFd) -> u64 {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
    let link = link.to_string_lossy();
    if link.contains("eventfd") {
        kind::EVENTFD
    } else if link.contains("eventpoll") {
        kind::EPOLL
    } else if link.contains("signalfd") {
        kind::SIGNALFD
    } else {
        kind::UNKNOWN
    }
}

/// Whether descriptor `fd` of process `pid` names the same open file as `own`, one of dara's
/// descriptors (`kcmp` with `KCMP_FILE`; false when `pid` or `fd` is gone).
pub(crate) fn same_file(pid: u32, fd: i32, own: &impl AsRawFd) -> bool {
    same_file_raw(pid, fd, own.as_raw_fd())
}

fn same_file_raw(pid: u32, fd: i32, own: i32) -> bool {
    const KCMP_FILE: libc::c_long = 0;
    // SAFETY: kcmp takes two pids, a type and two descriptor numbers; it only compares.
    let rc = unsafe { libc::syscall(libc::SYS_kcmp, pid as libc::c_long, std::process::id() as libc::c_long, KCMP_FILE, fd as libc::c_long, own as libc::c_long) };
    rc == 0
}

/// Whether `fd` (dara's own) names the same open file as one of dara's descriptors `among`.
pub(super) fn same_file_as_any(fd: &OwnedFd, among: &BTreeSet<i32>) -> bool {
    among.iter().any(|&own| same_file_raw(std::process::id(), fd.as_raw_fd(), own))
}

/// An integer socket option of `fd`, if it has it.
pub(super) fn sockopt_int(fd: &OwnedFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into the live local `value`.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&mut value as *mut libc::c_int).cast(), &mut len) };
    (rc == 0).then_some(value)
}

pub(super) fn inet_key(fd: &OwnedFd, k: u64) -> Option<PortKey> {
    Some((k, socket_address(fd, false)?.port(), socket_address(fd, true).map_or(0, |a| a.port())))
}

/// Bytes a TCP socket of dara's own has received (`tcpi_bytes_received`).
pub(crate) fn bytes_received(fd: &OwnedFd) -> Option<u64> {
    tcp_info_field::<8>(fd, tcpi::BYTES_RECEIVED).map(u64::from_ne_bytes)
}

/// Bytes a TCP socket can send now without waiting for its peer to read: the peer's advertised
/// window less what is already in flight (0 when the peer's receive queue is full), or
/// [`DEFAULT_SEND_ROOM`] when the kernel does not say.
pub(crate) fn send_window(fd: &OwnedFd) -> usize {
    TcpSnapshot::of(fd).and_then(|t| t.room()).map_or(DEFAULT_SEND_ROOM, |room| room as usize)
}

/// Connections waiting in a listening socket's accept queue.
pub(crate) fn accept_queue(fd: &OwnedFd) -> u32 {
    tcp_info_field::<4>(fd, tcpi::UNACKED).map_or(0, u32::from_ne_bytes)
}

/// Makes TCP listener `fd` queue a connection once its handshake is done, not once its first
/// bytes arrive (`TCP_DEFER_ACCEPT`, which Apache sets by default on Linux and nginx with
/// `deferred`): a deferred connection would show in no accept queue while the client that sends
/// those bytes is parked, and dara waits for every connection it knows was made. Clients must be
/// ready for a connection without data anyway (the kernel queues one after the deferral times
/// out), so the program sees nothing it could not see natively. Does nothing to other sockets.
pub(crate) fn accept_without_data(fd: &OwnedFd) {
    if sockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT).is_some_and(|seconds| seconds != 0) {
        let off: libc::c_int = 0;
        // SAFETY: sets one int option from a live local.
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, (&off as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) };
    }
}

/// Whether the TCP listener `fd` takes no more connections now (for a listener, `tcp_info`
/// holds its accept queue in `tcpi_unacked` and its backlog in `tcpi_sacked`).
pub(crate) fn backlog_full(fd: &OwnedFd) -> bool {
    let backlog = tcp_info_field::<4>(fd, tcpi::SACKED).map_or(u32::MAX, u32::from_ne_bytes);
    crate::sockdiag::is_full(accept_queue(fd), backlog)
}

/// The full (local, remote) addresses of a connected INET socket.
pub(crate) fn addresses(fd: &OwnedFd) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    Some((socket_address(fd, false)?, socket_address(fd, true)?))
}

/// The socket's own address (`getsockname`), or its peer's (`getpeername`); None for a socket
/// that is not INET or not connected.
pub(crate) fn socket_address(fd: &OwnedFd, peer: bool) -> Option<std::net::SocketAddr> {
    // SAFETY: sockaddr_storage is plain data large enough for any address.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut addr as *mut libc::sockaddr_storage).cast();
    // SAFETY: the kernel writes at most `len` bytes into `addr`.
    let rc = unsafe { if peer { libc::getpeername(fd.as_raw_fd(), p, &mut len) } else { libc::getsockname(fd.as_raw_fd(), p, &mut len) } };
    if rc != 0 {
        return None;
    }
    inet_address(&addr)
}

/// An INET or INET6 address as the kernel wrote it; None for other families.
pub(super) fn inet_address(addr: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read((addr as *const libc::sockaddr_storage).cast()) };
            Some(std::net::SocketAddr::from((u32::from_be(sin.sin_addr.s_addr).to_be_bytes(), u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read((addr as *const libc::sockaddr_storage).cast()) };
            Some(std::net::SocketAddr::from((sin6.sin6_addr.s6_addr, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

/// Whether some socket of kind `k` (TCP: listening) has local port `port`, from /proc/net.
pub(super) fn port_bound(k: u64, port: u16) -> bool {
    let (files, listen_only) = if k == kind::TCP { (["/proc/net/tcp", "/proc/net/tcp6"], true) } else { (["/proc/net/udp", "/proc/net/udp6"], false) };
    let wanted = format!(":{port:04X}");
    files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).any(|table| {
        table.lines().skip(1).any(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1).unwrap_or("");
            let state = cols.nth(1).unwrap_or("");
            local.ends_with(&wanted) && (!listen_only || state == "0A")
        })
    })
}

/// Descriptors in an epoll set, from /proc/<pid>/fdinfo/<epfd> ("tfd: N events: ..."), in
/// descriptor order: the kernel lists them in the order of its own object addresses, which
/// differ from run to run, and the first probe of a descriptor names its endpoint.
pub(super) fn epoll_targets(pid: u32, epfd: i32) -> Vec<i32> {
    let text = dara_tracer::procfs::descriptor_info(pid, epfd).unwrap_or_default();
    let mut fds: Vec<i32> = text.lines().filter_map(|l| l.strip_prefix("tfd:")).filter_map(|r| r.split_whitespace().next()?.parse().ok()).collect();
    fds.sort_unstable();
    fds
}

pub(super) fn read_pollfds(pid: u32, addr: u64, n: usize) -> Option<Vec<libc::pollfd>> {
    let mut out = vec![libc::pollfd { fd: -1, events: 0, revents: 0 }; n];
    if n == 0 {
        return Some(out);
    }
    // SAFETY: pollfd is three integers; every bit pattern is one.
    let got = unsafe { dara_tracer::procfs::read_plain(pid, addr, &mut out) }.ok()?;
    (got == std::mem::size_of_val(&out[..])).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    #[test]
    fn a_duplicate_is_the_same_file_and_another_eventfd_is_not() {
        // SAFETY: eventfd and dup take integers and return new descriptors (or -1).
        let (a, b) = unsafe { (libc::eventfd(0, 0), libc::eventfd(0, 0)) };
        // SAFETY: as above.
        let a2 = unsafe { libc::dup(a) };
        assert!(a >= 0 && b >= 0 && a2 >= 0);
        // SAFETY: descriptors just made, owned by nobody else.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(a), OwnedFd::from_raw_fd(b)) };
        let me = std::process::id();
        assert!(same_file(me, a2, &a));
        assert!(!same_file(me, a2, &b));
        assert!(same_file_as_any(&a, &[b.as_raw_fd(), a2].into_iter().collect()));
        assert!(!same_file_as_any(&b, &[a.as_raw_fd(), a2].into_iter().collect()));
        // SAFETY: closes the duplicate made above, owned by nobody else.
        unsafe { libc::close(a2) };
        assert!(!same_file(me, a2, &a), "a closed descriptor names nothing");
    }
}
