//! Socket options dara changes, because what they do would depend on real time or on the kernel's
//! random choices instead of the schedule.
//!
//! * `TCP_DEFER_ACCEPT` (Apache sets it on its listeners by default on Linux; nginx with `listen
//!   ... deferred`): a listener with it queues a connection only once the client's first bytes
//!   arrive. Under dara the client is parked between its connect and its first send, and the
//!   scheduler waits for every connection a traced client made to show in its listener's queue
//!   before it looks at the listener (the queue must not depend on when the softirq ran): it would
//!   wait for bytes that cannot come. So the hook sets the option to 0 instead. The program sees
//!   nothing Linux could not show it: a deferred connection is queued without data anyway once its
//!   deferral times out. (The scheduler also clears the option on a listener it looks at or relays
//!   to, for programs that set it by a raw system call or through the ptrace agent.)
//! * `SO_REUSEPORT` groups (unbound's threads each bind their own UDP and TCP socket to port 53;
//!   nginx with `reuseport`): Linux gives each datagram or connection to one socket of the group
//!   by a hash of the peer's address, whose port the kernel picked at random, so which thread
//!   hears a query differed from run to run, and dara waited for a datagram on the socket that did
//!   not get it. After a datagram socket's bind or a stream socket's listen,
//!   [`pick_first_of_group`] attaches a classic BPF program to the socket's group that always
//!   picks its first socket (the first bound, or for TCP the first listening), as a program may
//!   itself with `SO_ATTACH_REUSEPORT_CBPF`.
//!
//! Not a hot path: a program binds and sets options a few times per socket.
use libc::{c_int, c_void, socklen_t};

use crate::fd::sockets::sockopt;
use crate::{real, sys};

#[no_mangle]
pub unsafe extern "C" fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: socklen_t) -> c_int {
    let deferral = level == libc::IPPROTO_TCP && name == libc::TCP_DEFER_ACCEPT && len as usize >= core::mem::size_of::<c_int>();
    if deferral && crate::region::header().is_some() {
        let off: c_int = 0;
        // SAFETY: the program's descriptor, with a live local of the option's size.
        return unsafe { real::setsockopt(fd, level, name, (&off as *const c_int).cast(), core::mem::size_of::<c_int>() as socklen_t) };
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real::setsockopt(fd, level, name, value, len) }
}

/// `SO_ATTACH_REUSEPORT_CBPF` from `<asm-generic/socket.h>`.
const SO_ATTACH_REUSEPORT_CBPF: c_int = 51;
/// `BPF_RET | BPF_K`: return the constant.
const BPF_RET_K: u16 = 0x06;

/// After a successful bind of INET socket `fd` (a datagram socket) or its listen (a stream
/// socket): if it has `SO_REUSEPORT`, every datagram or connection to its group goes to the
/// group's first socket (see the module doc). `kind`: the socket type the call joins to a group;
/// a TCP socket joins its group when it listens, and a program attached at its bind would have a
/// group of its own that its listen cannot merge (`EADDRINUSE`).
pub fn pick_first_of_group(fd: c_int, kind: c_int) {
    if crate::region::header().is_none() || sockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE) != Some(kind) {
        return;
    }
    if sockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT).is_none_or(|on| on == 0) {
        return;
    }
    if !matches!(sockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN), Some(libc::AF_INET | libc::AF_INET6)) {
        return;
    }
    let first = [libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: 0 }];
    let program = libc::sock_fprog { len: first.len() as u16, filter: first.as_ptr() as *mut libc::sock_filter };
    // SAFETY: setsockopt reads the live `program`, whose filter array outlives the call (the
    // kernel copies it).
    unsafe { sys::syscall(libc::SYS_setsockopt, &[fd as u64, libc::SOL_SOCKET as u64, SO_ATTACH_REUSEPORT_CBPF as u64, &program as *const libc::sock_fprog as u64, core::mem::size_of::<libc::sock_fprog>() as u64]) };
}
