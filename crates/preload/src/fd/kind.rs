//! What a descriptor is, asked of the kernel on a miss and kept in the table: whether calls on it
//! are network scheduling points ([`is_net`]), which kind of network descriptor it is
//! ([`net_kind`]), and whether it is one of dara's output pipes ([`is_output`]).
//!
//! Network descriptors are sockets, pipes, FIFOs and eventfds, except the pipes dara forwards the
//! program's stdout and stderr through (their inodes are in the region header; dara drains them,
//! so writes never block; they are [`Kind::Output`], and a write on an `O_NONBLOCK` one first
//! waits until dara has drained it: `hooks/output.rs`). One `fstat` per descriptor number (and one or two `getsockopt` for the
//! kind) while the table keeps it; every call for numbers at or above [`super::TRACKED`].
//!
//! A `signalfd` is [`Kind::Signalfd`] ([`is_signalfd`]): the `signalfd` hook says so, and one made
//! by a raw `signalfd4` is recognised on first use by its `/proc/self/fd` link (one `readlink`,
//! only for anonymous inodes, whose `fstat` shows no file type).
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
    fd >= 0 && matches!(kind_of(fd), Kind::Net | Kind::Known(_))
}

/// Whether `fd` is a `signalfd` ([`Kind::Signalfd`]).
pub fn is_signalfd(fd: c_int) -> bool {
    fd >= 0 && kind_of(fd) == Kind::Signalfd
}

/// Whether `/proc/self/fd/<fd>` reads `anon_inode:[signalfd]`. Stack buffers only.
fn is_signalfd_link(fd: c_int) -> bool {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    const TARGET: &[u8] = b"anon_inode:[signalfd]";
    let mut path = [0u8; 32];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    let end = PREFIX.len() + sys::decimal(fd as u32, &mut path[PREFIX.len()..]);
    path[end] = 0;
    let mut link = [0u8; 32];
    // SAFETY: readlinkat reads a NUL-terminated path and writes at most `link.len()` bytes.
    let n = unsafe { sys::syscall(libc::SYS_readlinkat, &[libc::AT_FDCWD as u64, path.as_ptr() as u64, link.as_mut_ptr() as u64, link.len() as u64]) };
    n == TARGET.len() as i64 && &link[..TARGET.len()] == TARGET
}

/// Whether `fd` is one of the pipes dara drains ([`is_output_pipe`]).
pub fn is_output(fd: c_int) -> bool {
    fd >= 0 && kind_of(fd) == Kind::Output
}

/// What `fd` is: the table's answer, else the kernel's ([`Kind::Unknown`] for a closed number).
fn kind_of(fd: c_int) -> Kind {
    match super::known(fd) {
        Kind::Unknown => asked(fd),
        known => known,
    }
}

/// What the kernel says `fd` is (one `fstat`), remembered in the table.
fn asked(fd: c_int) -> Kind {
    // SAFETY: an all-zero stat is a valid out-buffer; fstat writes at most its size.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat on a descriptor number with a live out-buffer.
    let rc = unsafe { sys::syscall(libc::SYS_fstat, &[fd as u64, &mut st as *mut libc::stat as u64]) };
    if rc != 0 {
        return Kind::Unknown;
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => Kind::Net,
        libc::S_IFIFO if is_output_pipe(st.st_ino) => Kind::Output,
        libc::S_IFIFO => Kind::Net,
        0 if is_signalfd_link(fd) => Kind::Signalfd,
        _ => Kind::Other,
    };
    super::learned(fd, kind);
    kind
}

/// The kind of network descriptor `fd` (which [`is_net`] said is one).
pub fn net_kind(fd: c_int) -> NetKind {
    let known = super::known(fd);
    match known {
        Kind::Known(kind) => return kind,
        Kind::Net | Kind::Unknown => {}
        Kind::Other | Kind::Output | Kind::Signalfd => return NetKind::NotSocket,
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
