//! What a descriptor is, asked of the kernel on a miss and kept in the table: whether calls on it
//! are network scheduling points ([`is_net`]) and which kind of network descriptor it is
//! ([`net_kind`]).
//!
//! Network descriptors are sockets, pipes, FIFOs and eventfds, except the pipes dara forwards the
//! program's stdout and stderr through (their inodes are in the region header; dara drains them,
//! so writes never block). One `fstat` per descriptor number (and one or two `getsockopt` for the
//! kind) while the table keeps it; every call for numbers at or above [`super::TRACKED`].
use core::sync::atomic::Ordering;

use libc::c_int;

use super::{sockets::sockopt, Kind, NetKind};
use crate::sys;

/// Whether `inode` is one of the pipes dara drains (the program's stdout and stderr, the SDK's
/// lines): dara always holds their reading end.
pub fn is_output_pipe(inode: u64) -> bool {
    crate::region::header().is_some_and(|h| h.output_pipes.iter().any(|p| p.load(Ordering::Relaxed) == inode))
}

/// Whether calls on `fd` are network scheduling points.
pub fn is_net(fd: c_int) -> bool {
    if fd < 0 {
        return false;
    }
    match super::known(fd) {
        Kind::Other => return false,
        Kind::Net | Kind::Known(_) => return true,
        Kind::Unknown => {}
    }
    // SAFETY: an all-zero stat is a valid out-buffer; fstat writes at most its size.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat on a descriptor number with a live out-buffer.
    let rc = unsafe { sys::syscall(libc::SYS_fstat, &[fd as u64, &mut st as *mut libc::stat as u64]) };
    let net = rc == 0
        && match st.st_mode & libc::S_IFMT {
            libc::S_IFSOCK => true,
            libc::S_IFIFO => !is_output_pipe(st.st_ino),
            _ => false,
        };
    if rc == 0 {
        super::learned(fd, if net { Kind::Net } else { Kind::Other });
    }
    net
}

/// The kind of network descriptor `fd` (which [`is_net`] said is one).
pub fn net_kind(fd: c_int) -> NetKind {
    let known = super::known(fd);
    match known {
        Kind::Known(kind) => return kind,
        Kind::Net | Kind::Unknown => {}
        Kind::Other => return NetKind::NotSocket,
    }
    let option = |name| sockopt(fd, libc::SOL_SOCKET, name);
    let kind = match option(libc::SO_TYPE) {
        None => NetKind::NotSocket,
        Some(libc::SOCK_STREAM) if matches!(option(libc::SO_DOMAIN), Some(libc::AF_INET | libc::AF_INET6)) => NetKind::Tcp,
        Some(_) => NetKind::Socket,
    };
    if known == Kind::Net {
        super::learned(fd, Kind::Known(kind));
    }
    kind
}
