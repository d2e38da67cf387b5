//! What the kernel says about a socket: an option, its own and its peer's address and port.
//! Raw syscalls through the trampoline, no allocation: used by the descriptor table's lookups,
//! the outside listener swap and the unposted sends' ports.
use libc::{c_int, socklen_t};

use crate::sys;

/// `getsockopt(fd, level, opt)` as an int, None on failure.
pub fn sockopt(fd: c_int, level: c_int, opt: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = core::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`.
    let rc = unsafe { sys::syscall(libc::SYS_getsockopt, &[fd as u64, level as u64, opt as u64, &mut v as *mut c_int as u64, &mut len as *mut socklen_t as u64]) };
    (rc == 0).then_some(v)
}

/// The socket's own address, and its length.
pub fn local_address(fd: c_int) -> Option<(libc::sockaddr_storage, socklen_t)> {
    socket_address(fd, libc::SYS_getsockname)
}

/// The socket's own (`SYS_getsockname`) or its peer's (`SYS_getpeername`) address, and its length.
fn socket_address(fd: c_int, nr: libc::c_long) -> Option<(libc::sockaddr_storage, socklen_t)> {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `addr`.
    let rc = unsafe { sys::syscall(nr, &[fd as u64, &mut addr as *mut _ as u64, &mut len as *mut socklen_t as u64]) };
    (rc == 0).then_some((addr, len))
}

/// The port of an INET socket's own address, or (`peer`) of its peer's; None for other sockets.
pub fn inet_port(fd: c_int, peer: bool) -> Option<u16> {
    let (addr, _) = socket_address(fd, if peer { libc::SYS_getpeername } else { libc::SYS_getsockname })?;
    matches!(c_int::from(addr.ss_family), libc::AF_INET | libc::AF_INET6).then(|| port_of(&addr))
}

/// The port of an AF_INET/AF_INET6 address (both keep it at offset 2).
pub fn port_of(addr: &libc::sockaddr_storage) -> u16 {
    // SAFETY: sockaddr_in and sockaddr_in6 both start with family then port, and the storage is
    // large enough for either.
    u16::from_be(unsafe { (*(addr as *const libc::sockaddr_storage as *const libc::sockaddr_in)).sin_port })
}
