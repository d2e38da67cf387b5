//! Keeping outside peers apart: when peers outside dara may talk to the program (a recording run
//! or its replay, [`Header::outside`](dara_abi::Header)), a TCP listener is split in two.
//!
//! The program's `listen` makes its socket listen on its own address as usual (the *public*
//! socket, the one outside clients reach). The hook then opens a *twin*: a second socket of the
//! same family bound to the same address with a port of the kernel's choice, listening too. It
//! posts [`Op::NetListen`] with both descriptors; the scheduler keeps a duplicate of the public
//! socket, and after the grant the hook puts the twin in place of the program's descriptor
//! (`dup3`) and closes its own copies. From then on the program accepts only what dara connects
//! to the twin: outside clients are accepted by dara, recorded, and handed over at a decision
//! point; in a replay dara makes the same connections from the recording, with nobody outside.
//!
//! A UDP socket is split the same way when it is bound (`bind`): dara keeps the public socket,
//! the program gets a twin bound to the same address with a port of the kernel's choice, and
//! every datagram reaches the program from a socket of dara's, one per peer (see the scheduler's
//! `outside::relay`). The post says which kind it is (`Request::NetListen`'s `datagrams`).
//!
//! `getsockname` on a swapped socket answers with the public port, so a program that binds
//! port 0 and prints the port it got tells its clients the address they can actually reach. And
//! the peer of a connection dara relays is shown as the client dara relays for (`accept`,
//! `getpeername`: the scheduler lists them in [`Header::relayed`](dara_abi::Header)), not as
//! dara's socket: the same address in a recording and in its replay.
//!
//! Not a hot path: a listen happens a few times per program. No allocation; raw syscalls only.
use dara_abi::peer_address::{self, InetAddress};
use dara_abi::Request;
use libc::{c_int, socklen_t};

use crate::fd::sockets::{local_address, port_of, sockopt};
use crate::gate::Gated;
use crate::{fd, real, sys};

fn outside_apart() -> bool {
    crate::region::header().is_some_and(|h| h.outside != 0)
}

fn set_port(addr: &mut libc::sockaddr_storage, port: u16) {
    // SAFETY: as in `port_of`.
    unsafe { (*(addr as *mut libc::sockaddr_storage as *mut libc::sockaddr_in)).sin_port = port.to_be() };
}

/// Opens the twin of socket `fd` (`kind`: SOCK_STREAM, listening with `backlog`, or SOCK_DGRAM):
/// same family and address, port 0, with the same non-blocking mode. Returns its descriptor.
fn open_twin(fd: c_int, kind: c_int, backlog: c_int) -> Option<c_int> {
    let (mut addr, len) = local_address(fd)?;
    let family = c_int::from(addr.ss_family);
    if family != libc::AF_INET && family != libc::AF_INET6 {
        return None;
    }
    // SAFETY: F_GETFL takes no pointer.
    let status = unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_GETFL as u64]) };
    // SAFETY: plain integers.
    let twin = unsafe { sys::syscall(libc::SYS_socket, &[family as u64, (kind | libc::SOCK_CLOEXEC) as u64, 0]) } as c_int;
    if twin < 0 {
        return None;
    }
    if family == libc::AF_INET6 {
        if let Some(v6only) = sockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) {
            // SAFETY: setsockopt reads one int.
            unsafe { sys::syscall(libc::SYS_setsockopt, &[twin as u64, libc::IPPROTO_IPV6 as u64, libc::IPV6_V6ONLY as u64, &v6only as *const c_int as u64, 4]) };
        }
    }
    set_port(&mut addr, 0);
    // SAFETY: bind reads `len` bytes of `addr`; listen and fcntl take integers.
    let ok = unsafe {
        sys::syscall(libc::SYS_bind, &[twin as u64, &addr as *const _ as u64, len as u64]) == 0
            && (kind != libc::SOCK_STREAM || sys::syscall(libc::SYS_listen, &[twin as u64, backlog as u64]) == 0)
            && (status < 0 || sys::syscall(libc::SYS_fcntl, &[twin as u64, libc::F_SETFL as u64, status as u64]) == 0)
    };
    if !ok {
        sys::close(twin);
        return None;
    }
    Some(twin)
}

/// After the program's socket `fd` listens (a stream socket) or is bound (a datagram socket):
/// swap in a twin (see the module doc).
fn swap_in_twin(gate: &Gated, fd: c_int, kind: c_int, backlog: c_int) {
    if sockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE) != Some(kind) {
        return;
    }
    let Some((public, _)) = local_address(fd) else { return };
    let Some(twin) = open_twin(fd, kind, backlog) else { return };
    gate.post(Request::NetListen { fd, twin, datagrams: kind == libc::SOCK_DGRAM });
    // SAFETY: F_GETFD takes no pointer.
    let cloexec = unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_GETFD as u64]) } & i64::from(libc::FD_CLOEXEC) != 0;
    // SAFETY: dup3 of two descriptors this process owns; it atomically replaces `fd`.
    let rc = unsafe { sys::syscall(libc::SYS_dup3, &[twin as u64, fd as u64, if cloexec { libc::O_CLOEXEC as u64 } else { 0 }]) };
    sys::close(twin);
    if rc >= 0 {
        fd::swapped_listener(fd, port_of(&public));
    }
}

#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    // A socket that listens already was split by its first `listen` (the program now holds the
    // twin): listening again only changes the backlog, as nginx does, and must not split the
    // twin a second time (a second listener would take dara's own connections).
    let again = outside_apart() && sockopt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN).is_some_and(|on| on != 0);
    // SAFETY: plain integers.
    let rc = unsafe { real::listen(fd, backlog) };
    if rc == 0 {
        super::sockopt::pick_first_of_group(fd, libc::SOCK_STREAM);
    }
    if rc == 0 && outside_apart() && !again {
        if let Some(gate) = Gated::enter() {
            swap_in_twin(&gate, fd, libc::SOCK_STREAM, backlog);
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const libc::sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let rc = unsafe { real::bind(fd, addr, len) };
    if rc == 0 {
        super::sockopt::pick_first_of_group(fd, libc::SOCK_DGRAM);
    }
    if rc == 0 && outside_apart() {
        if let Some(gate) = Gated::enter() {
            swap_in_twin(&gate, fd, libc::SOCK_DGRAM, 0);
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the program's length argument, read before the call overwrites it.
    let room = if len.is_null() { 0 } else { (unsafe { *len }) as usize };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let rc = unsafe { real::getsockname(fd, addr, len) };
    let public = fd::public_port(fd);
    if let (0, Some(public), false, true) = (rc, public, addr.is_null(), room >= 4) {
        let port = public.to_be_bytes();
        // SAFETY: the caller's buffer holds at least `room >= 4` bytes, and a successful
        // getsockname of an INET socket put its port at offset 2 (both families).
        unsafe {
            *(addr as *mut u8).add(2) = port[0];
            *(addr as *mut u8).add(3) = port[1];
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the program's length argument, read before the call overwrites it.
    let room = if len.is_null() { 0 } else { unsafe { *len } };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let rc = unsafe { real::getpeername(fd, addr, len) };
    if rc == 0 {
        let datagrams = sockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_DGRAM);
        // SAFETY: a successful getpeername filled the caller's buffer of `room` bytes.
        unsafe { show_relayed_peer(addr, len, room, datagrams) };
    }
    rc
}

/// The table of relayed peers (empty when outside peers are not kept apart).
fn relayed_table() -> &'static [dara_abi::RelayedPeer] {
    crate::region::header().filter(|h| h.outside != 0).map_or(&[][..], |h| &h.relayed[..])
}

/// The INET address in the first `len` bytes at `addr`; None for another family.
///
/// # Safety
/// `addr` is null or holds `len` readable bytes.
unsafe fn inet_address(addr: *const libc::sockaddr, len: socklen_t) -> Option<InetAddress> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { core::slice::from_raw_parts(addr as *const u8, (len as usize).min(core::mem::size_of::<libc::sockaddr_storage>())) };
    InetAddress::parse(bytes)
}

/// A datagram the program sends to a client dara relays for (`datagrams`), or a TCP connect to
/// an outside server dara dialled for the program, goes to dara's socket that stands for it: the
/// address to use instead of `addr`, if it is such a peer's.
///
/// # Safety
/// `addr` is null or holds `len` readable bytes.
pub unsafe fn relayed_destination(addr: *const libc::sockaddr, len: socklen_t, datagrams: bool) -> Option<(libc::sockaddr_storage, socklen_t)> {
    if !outside_apart() {
        return None;
    }
    // SAFETY: the caller's contract.
    let to = unsafe { inet_address(addr, len) }?;
    let (bytes, size) = peer_address::relayed_destination(&to, relayed_table(), datagrams)?;
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut out: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    // SAFETY: `size` bytes (at most a sockaddr_in6) fit in the storage.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), &mut out as *mut _ as *mut u8, size) };
    Some((out, size as socklen_t))
}

/// `addr` and `len`, or the address `instead` holds (what [`relayed_destination`] found).
pub fn or_instead(instead: &Option<(libc::sockaddr_storage, socklen_t)>, addr: *const libc::sockaddr, len: socklen_t) -> (*const libc::sockaddr, socklen_t) {
    instead.as_ref().map_or((addr, len), |(a, l)| ((a as *const libc::sockaddr_storage).cast(), *l))
}

/// After the kernel wrote a peer address into `addr` (`*len` its size, `room` the caller's
/// buffer): if the peer is dara's socket that stands for a client (a UDP one when `datagrams`),
/// writes the client's address instead (as much as `room` takes; `*len` says its full size, as
/// the kernel does).
///
/// # Safety
/// `addr` is null or holds `room` writable bytes; `len` is null or valid.
pub unsafe fn show_relayed_peer(addr: *mut libc::sockaddr, len: *mut socklen_t, room: socklen_t, datagrams: bool) {
    if len.is_null() || !outside_apart() {
        return;
    }
    // SAFETY: the caller's contract; the kernel wrote `*len` bytes, at most `room` of them.
    let Some(peer) = (unsafe { inet_address(addr, (*len).min(room)) }) else { return };
    let Some((bytes, size)) = peer_address::shown_peer(&peer, relayed_table(), datagrams) else { return };
    // SAFETY: copies at most `room` bytes into the caller's buffer; `len` is valid.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, size.min(room as usize));
        *len = size as socklen_t;
    }
}
