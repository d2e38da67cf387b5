//! Sockets, pipes and eventfds: every call that may block (receive, send, accept) or that changes
//! what a peer sees (connect, close, shutdown) is a scheduling point. The scheduler decides when a
//! blocking call may go on (it probes the descriptor from outside, see the scheduler's `netprobe`);
//! once granted, the hook performs the real call without blocking (`MSG_DONTWAIT`, or a pipe the
//! scheduler saw ready). A blocking call that still finds nothing posts again instead of
//! returning EAGAIN; a non-blocking one returns what the kernel says.
//!
//! Which descriptors count: those created by the hooked `socket`/`socketpair`/`accept`/`pipe`/
//! `eventfd`, and any other descriptor that `fstat` says is a socket or a pipe (a pipeline's
//! stdin, inherited across `execve`), except the pipes dara forwards the program's stdout and
//! stderr through. The descriptor table ([`crate::fd`]) remembers which is which. Regular files
//! are left alone.
use dara_abi::request::grant_limit;
use dara_abi::{net_flags, Addr, CloseHow, Deadline, NetFlags, Request, Unsupported, NO_DEADLINE};
use libc::{c_int, c_uint, c_void, size_t, socklen_t, ssize_t};

use super::{set_errno, sigwait, write_now};
use crate::fd::{self, is_net, net_kind, Kind, NetKind};
use crate::gate::Gated;
use crate::{real, sys};

/// Whether network descriptor `fd` is a TCP socket.
fn is_tcp(fd: c_int) -> bool {
    net_kind(fd) == NetKind::Tcp
}

/// Whether network descriptor `fd` is a socket of any kind (not a pipe, FIFO or eventfd).
fn is_net_socket(fd: c_int) -> bool {
    net_kind(fd) != NetKind::NotSocket
}

/// Descriptor `fd` (if the call made one) is a socket, pipe end or eventfd.
fn made(fd: c_int) {
    fd::opened(fd, Kind::Net);
}

fn fd_nonblocking(fd: c_int) -> bool {
    let fl = write_now::status_flags(fd);
    fl >= 0 && fl as c_int & libc::O_NONBLOCK != 0
}

/// The `INTERRUPTIBLE` bit of a receive, accept or send: a blocking one a signal may end.
fn interruptible(nonblock: bool) -> u64 {
    if nonblock {
        0
    } else {
        sigwait::interruptible()
    }
}

fn flag(nonblock: bool) -> u64 {
    if nonblock {
        net_flags::NONBLOCK
    } else {
        0
    }
}

/// The receive timeout (SO_RCVTIMEO) of a blocking socket as a virtual deadline.
fn recv_deadline(gate: &Gated, fd: c_int) -> u64 {
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    let mut len = core::mem::size_of::<libc::timeval>() as socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `tv`.
    let rc = unsafe {
        sys::syscall(
            libc::SYS_getsockopt,
            &[fd as u64, libc::SOL_SOCKET as u64, libc::SO_RCVTIMEO as u64, &mut tv as *mut _ as u64, &mut len as *mut _ as u64],
        )
    };
    if rc != 0 {
        return NO_DEADLINE;
    }
    dara_abi::receive_timeout::deadline(gate.now(), tv.tv_sec, tv.tv_usec)
}

/// Sets errno from a `-errno` result and returns -1, or returns the count.
fn ret(r: i64) -> ssize_t {
    if r < 0 {
        set_errno(-r as c_int);
        -1
    } else {
        r as ssize_t
    }
}

fn errno() -> i64 {
    i64::from(real::errno())
}

/// The real call's result as `-errno` on failure.
fn raw(n: ssize_t) -> i64 {
    if n < 0 {
        -errno()
    } else {
        n as i64
    }
}

/// How a receive's real call fills the caller's memory.
pub enum Fill<'a> {
    /// One buffer: `call(done, most)` receives at most `most` bytes after the first `done`. A
    /// granted TCP receive goes on where it stopped until it has its whole grant
    /// ([`whole_grant`](super::whole_grant)).
    Buffer(&'a mut dyn FnMut(usize, usize) -> ssize_t),
    /// An iovec, a message or a peek: `call(most)` takes what one call finds (at most `most`,
    /// which a call that cannot take fewer than the caller asked for ignores).
    Once(&'a mut dyn FnMut(usize) -> ssize_t),
}

impl Fill<'_> {
    fn call(&mut self, most: usize) -> ssize_t {
        match self {
            Fill::Buffer(call) => call(0, most),
            Fill::Once(call) => call(most),
        }
    }
}

/// A receive: waits (in the model) until data, EOF or an error is there, then performs `fill`'s
/// call (which must not block once granted) and returns its result. `never_blocks`: the call
/// returns at once even when nothing is there (it adds MSG_DONTWAIT).
///
/// A TCP receive takes the bytes the grant says (what a traced peer wrote and this socket has not
/// read, or what the scheduler saw queued), into one buffer all of them: the schedule, not the
/// moment of the call, decides how much of a stream one receive returns.
pub fn receive(gate: &Gated, fd: c_int, len: usize, dontwait: bool, never_blocks: bool, mut fill: Fill) -> ssize_t {
    let nonblock = dontwait || fd_nonblocking(fd);
    if never_blocks || nonblock {
        if let Some(r) = receive_unposted(fd, nonblock, &mut || fill.call(len)) {
            return ret(r);
        }
    }
    let deadline = if nonblock { NO_DEADLINE } else { recv_deadline(gate, fd) };
    let tcp = is_tcp(fd);
    let whole = if matches!(fill, Fill::Buffer(_)) && tcp { net_flags::WHOLE_GRANT } else { 0 };
    loop {
        let g = gate.post(Request::NetRecv { fd, flags: NetFlags(flag(nonblock) | interruptible(nonblock) | whole), deadline: Deadline::from_ns(deadline), len: len as u64 });
        if g.result == sigwait::INTERRUPTED && !nonblock {
            if sigwait::run_handlers(gate, deadline == NO_DEADLINE) {
                continue;
            }
            return ret(g.result);
        }
        if !nonblock && g.result == -(libc::EAGAIN as i64) {
            return ret(g.result); // SO_RCVTIMEO fired
        }
        let granted = grant_limit(g.result).filter(|_| tcp);
        let most = granted.map_or(len, |n| (n as usize).min(len));
        let r = raw(fill.call(most));
        if r == -(libc::EAGAIN as i64) && !nonblock {
            continue; // not there after all: wait again, never leak EAGAIN
        }
        return match (&mut fill, granted) {
            (Fill::Buffer(call), Some(_)) if r > 0 && (r as usize) < most => match super::whole_grant::rest(fd, r as usize, most, *call) {
                Ok(received) => received as ssize_t,
                Err(super::whole_grant::Stalled(received)) => {
                    gate.post(Request::Unsupported(Unsupported::GrantStalled { fd, granted: most as u32, received: received as u32 }));
                    received as ssize_t // never granted: the run ends at the post
                }
            },
            _ => ret(r),
        };
    }
}

/// A send: waits until there is room, then sends without blocking, at most what the grant allows
/// ([`granted_most`]); a blocking caller gets all of `len` sent (posting again for the rest), as
/// the kernel would.
fn transmit(gate: &Gated, fd: c_int, buf: *const u8, len: usize, dontwait: bool, dest_port: u16, call: &mut dyn FnMut(*const u8, usize) -> ssize_t) -> ssize_t {
    let nonblock = dontwait || fd_nonblocking(fd);
    let mut done = 0usize;
    if let Some(r) = send_unposted(fd, nonblock, &mut |most| call(buf, len.min(most))) {
        if r <= 0 || nonblock || r as usize >= len {
            return ret(r);
        }
        done = r as usize; // a blocking caller: the rest waits for room the posted way
    }
    loop {
        let rest = len - done;
        let mut first = [0u8; 8];
        if !buf.is_null() {
            let n = rest.min(8);
            // SAFETY: `buf` holds `len` readable bytes (the caller's contract); we copy at most 8
            // from offset `done < len`.
            unsafe { core::ptr::copy_nonoverlapping(buf.add(done), first.as_mut_ptr(), n) };
        }
        let flags = NetFlags(flag(nonblock) | interruptible(nonblock));
        let g = gate.post(Request::NetSend { fd, len: rest as u64, flags, head: first, dest_port });
        if g.result == sigwait::INTERRUPTED && !nonblock {
            if sigwait::run_handlers(gate, true) {
                continue;
            }
            // What was sent before the signal counts, as in the kernel.
            return if done > 0 { done as ssize_t } else { ret(g.result) };
        }
        // SAFETY: in bounds of the caller's buffer.
        let r = raw(call(unsafe { buf.add(done) }, rest.min(granted_most(g.result))));
        if nonblock || r < 0 && r != -(libc::EAGAIN as i64) {
            return if done > 0 && r < 0 { done as ssize_t } else { ret(r) };
        }
        if r > 0 {
            done += r as usize;
        }
        if done >= len {
            return done as ssize_t;
        }
    }
}

/// Coarse steps: a receive on a TCP socket without a post (see [`crate::unposted`]). Performs
/// `call` (which must not block: it adds `MSG_DONTWAIT`, or reads a non-blocking descriptor) and
/// returns its raw result, or None when the receive must take the posted path: not coarse mode,
/// not a TCP socket, a send of the thread to its peer not settled yet, or a blocking caller found
/// nothing.
fn receive_unposted(fd: c_int, nonblock: bool, call: &mut dyn FnMut() -> ssize_t) -> Option<i64> {
    if !crate::solo::coarse() || !is_tcp(fd) || !crate::unposted::may_receive(fd) {
        return None;
    }
    let r = raw(call());
    if r == -(libc::EAGAIN as i64) {
        crate::unposted::fruitless();
        return if nonblock { Some(r) } else { None };
    }
    crate::unposted::received();
    Some(r)
}

/// Coarse steps: a send on a TCP socket without a post (see [`crate::unposted`]). Performs `call`
/// with the most bytes it may move (it adds `MSG_DONTWAIT`, or writes a non-blocking descriptor)
/// and returns its raw result, or None when the send must take the posted path: not coarse mode,
/// not a TCP socket, the thread's table is full or its budget spent, or a blocking caller found
/// no room at all.
fn send_unposted(fd: c_int, nonblock: bool, call: &mut dyn FnMut(usize) -> ssize_t) -> Option<i64> {
    let room = crate::unposted::send_room(fd);
    if room == 0 || !is_tcp(fd) {
        return None;
    }
    let r = raw(call(room));
    if r == -(libc::EAGAIN as i64) {
        crate::unposted::fruitless();
        if !nonblock {
            return None;
        }
    }
    if r > 0 {
        crate::unposted::sent(fd, r as usize);
    }
    Some(r)
}

fn sockaddr_port(addr: *const libc::sockaddr, len: socklen_t) -> u16 {
    if addr.is_null() || (len as usize) < core::mem::size_of::<libc::sockaddr_in>() {
        return 0;
    }
    // SAFETY: a non-null address of at least sockaddr_in's size; sin_port and sin6_port share
    // offset 2.
    let sin = unsafe { &*(addr as *const libc::sockaddr_in) };
    if sin.sin_family as c_int == libc::AF_INET || sin.sin_family as c_int == libc::AF_INET6 {
        u16::from_be(sin.sin_port)
    } else {
        0
    }
}

/// First bytes of an iovec array (at most 8, from the first entry) and the total length.
fn iov_preview(iov: *const libc::iovec, n: c_int) -> ([u8; 8], usize) {
    if iov.is_null() || n <= 0 {
        return ([0; 8], 0);
    }
    // SAFETY: the caller's iovec array of `n` entries; we read at most 8 bytes of the first.
    unsafe {
        let first = &*iov;
        let mut bytes = [0u8; 8];
        let k = first.iov_len.min(8);
        if !first.iov_base.is_null() {
            core::ptr::copy_nonoverlapping(first.iov_base as *const u8, bytes.as_mut_ptr(), k);
        }
        (bytes, iov_total(iov, n))
    }
}

/// A vectored send (`sendmsg`, `writev`): one post, then one real call. A datagram is not split:
/// sent whole or not at all; a stream moves at most what the grant allows, as in [`transmit`].
fn transmit_vector(gate: &Gated, fd: c_int, iov: *const libc::iovec, n: c_int, dontwait: bool, dest_port: u16, call: &mut dyn FnMut(*const libc::iovec, c_int) -> ssize_t) -> ssize_t {
    let nonblock = dontwait || fd_nonblocking(fd);
    let (first, total) = iov_preview(iov, n);
    if nonblock {
        // A blocking vectored send is not split (see above): only a non-blocking one goes
        // without a post, as whatever the kernel takes.
        if let Some(r) = send_unposted(fd, true, &mut |most| call_at_most(iov, n, total, most, call)) {
            return ret(r);
        }
    }
    loop {
        let flags = NetFlags(flag(nonblock) | interruptible(nonblock));
        let g = gate.post(Request::NetSend { fd, len: total as u64, flags, head: first, dest_port });
        if g.result == sigwait::INTERRUPTED && !nonblock {
            if sigwait::run_handlers(gate, true) {
                continue;
            }
            return ret(g.result);
        }
        // Less granted than offered: the first buffer, cut to that, goes first (a short write; a
        // blocking caller's rest follows buffer by buffer).
        let r = raw(call_at_most(iov, n, total, granted_most(g.result), call));
        if r == -(libc::EAGAIN as i64) && !nonblock {
            continue;
        }
        if !nonblock && r > 0 && (r as usize) < total {
            // A blocking caller gets every byte, as from the kernel: the rest by further grants.
            return ret(finish_vector(gate, fd, iov, n, r as usize, dest_port));
        }
        return ret(r);
    }
}

/// The rest of a blocking vectored write whose first `done` bytes went out: buffer by buffer,
/// each written as a blocking `write` is (posted, at most what fits, again for the rest). Returns
/// the bytes written in all, or `-errno` when none were.
fn finish_vector(gate: &Gated, fd: c_int, iov: *const libc::iovec, n: c_int, mut done: usize, dest_port: u16) -> i64 {
    let socket = is_net_socket(fd);
    // SAFETY: the caller's `n` iovecs.
    let (first, mut offset) = unsafe { write_now::skip(iov, n, done) };
    for i in first..n.max(0) as usize {
        // SAFETY: within the caller's `n` iovecs.
        let part = unsafe { *iov.add(i) };
        let len = part.iov_len - offset;
        // SAFETY: `offset` is within the buffer (`skip`), whose memory the caller names.
        let base = unsafe { (part.iov_base as *const u8).add(offset) };
        offset = 0;
        // SAFETY: `base` holds `len` readable bytes.
        let r = raw(transmit(gate, fd, base, len, false, dest_port, &mut |b, l| ret(unsafe { write_now::write(fd, socket, b, l) })));
        if r < 0 {
            return if done > 0 { done as i64 } else { r };
        }
        done += r as usize;
    }
    done as i64
}

/// Most bytes a send may move, from its grant's result: the bytes the scheduler allows
/// ([`dara_abi::request::STREAM_SEND_MOST`] to a peer that is not a traced program's), or no limit.
fn granted_most(result: i64) -> usize {
    grant_limit(result).map_or(usize::MAX, |n| n as usize)
}

/// `call` on the `n` buffers at `iov` (`total` bytes), moving at most `most`: when they hold
/// more, on the first non-empty buffer alone, cut to `most` (a short write).
fn call_at_most(iov: *const libc::iovec, n: c_int, total: usize, most: usize, call: &mut dyn FnMut(*const libc::iovec, c_int) -> ssize_t) -> ssize_t {
    // SAFETY: the caller's iovec array of `n` entries.
    let first = (0..n.max(0) as usize).map(|i| unsafe { *iov.add(i) }).find(|v| v.iov_len > 0);
    match first.filter(|_| total > most) {
        Some(part) => call(&libc::iovec { iov_base: part.iov_base, iov_len: part.iov_len.min(most) }, 1),
        None => call(iov, n),
    }
}

fn iov_total(iov: *const libc::iovec, n: c_int) -> usize {
    // SAFETY: the caller's iovec array of `n` entries.
    (0..n.max(0) as usize).map(|i| unsafe { (*iov.add(i)).iov_len }).sum()
}

// ---- descriptor creation: remembered, not scheduling points -------------------------------

#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: plain integers.
    let fd = unsafe { real::socket(domain, ty, protocol) };
    made(fd);
    fd
}

#[no_mangle]
pub unsafe extern "C" fn socketpair(domain: c_int, ty: c_int, protocol: c_int, sv: *mut c_int) -> c_int {
    // SAFETY: the program's own out-array of two ints.
    let rc = unsafe { real::socketpair(domain, ty, protocol, sv) };
    if rc == 0 {
        // SAFETY: filled by a successful socketpair.
        unsafe { (made(*sv), made(*sv.add(1))) };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: the program's own out-array of two ints.
    unsafe { pipe2(fds, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: the program's own out-array of two ints.
    let rc = unsafe { real::pipe2(fds, flags) };
    if rc == 0 {
        // SAFETY: filled by a successful pipe2.
        unsafe { (made(*fds), made(*fds.add(1))) };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn eventfd(initval: c_uint, flags: c_int) -> c_int {
    // SAFETY: plain integers.
    let fd = unsafe { real::eventfd(initval, flags) };
    made(fd);
    fd
}

// ---- connections -------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { accept4(fd, addr, len, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn accept4(fd: c_int, addr: *mut libc::sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::accept4(fd, addr, len, flags) },
    };
    let nonblock = fd_nonblocking(fd);
    let deadline = if nonblock { NO_DEADLINE } else { recv_deadline(&gate, fd) };
    // SAFETY: the program's length argument, read before a call overwrites it.
    let room = if len.is_null() { 0 } else { unsafe { *len } };
    loop {
        let g = gate.post(Request::NetAccept { fd, flags: NetFlags(flag(nonblock) | interruptible(nonblock)), deadline: Deadline::from_ns(deadline) });
        if g.result == sigwait::INTERRUPTED && !nonblock {
            if sigwait::run_handlers(&gate, deadline == NO_DEADLINE) {
                continue;
            }
            return ret(g.result) as c_int;
        }
        if !nonblock && g.result == -(libc::EAGAIN as i64) {
            return ret(g.result) as c_int;
        }
        // The listener is ready (or the caller is non-blocking): accept4 does not block.
        // SAFETY: the program's own arguments.
        let r = raw(unsafe { real::accept4(fd, addr, len, flags) } as ssize_t);
        if r == -(libc::EAGAIN as i64) && !nonblock {
            continue;
        }
        if r >= 0 {
            made(r as c_int);
            // SAFETY: a successful accept filled the caller's buffer of `room` bytes.
            unsafe { super::outside::show_relayed_peer(addr, len, room, false) };
        }
        return ret(r) as c_int;
    }
}

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const libc::sockaddr, len: socklen_t) -> c_int {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::connect(fd, addr, len) },
    };
    // A UDP socket connected to a client dara relays for is connected to dara's socket that
    // stands for it. (A TCP connect to an outside server is redirected after its grant, below:
    // the scheduler dials the server when it grants the connect.)
    let tcp = is_tcp(fd);
    // SAFETY: the program's address argument of `len` bytes.
    let relayed = if tcp { None } else { unsafe { super::outside::relayed_destination(addr, len, true) } };
    let (addr, len) = super::outside::or_instead(&relayed, addr, len);
    let nonblock = fd_nonblocking(fd);
    let request = Request::NetConnect { fd, flags: NetFlags(flag(nonblock) | interruptible(nonblock)), addr: Addr(addr as u64), len };
    loop {
        // A blocking connect is granted once the listener it goes to has room in its backlog:
        // the real call then completes (or fails) at once; the scheduler settles the handshake.
        let g = gate.post(request);
        if g.result == sigwait::INTERRUPTED && !nonblock {
            // As in Linux: SA_RESTART goes on waiting, else EINTR.
            if sigwait::run_handlers(&gate, true) {
                continue;
            }
            // Linux's TCP connect goes on in the background after EINTR (a Unix one does not):
            // start it now as a non-blocking connect, which the scheduler settles (or parks
            // while the listener is full) as any other.
            if tcp {
                gate.post(Request::NetConnect { fd, flags: NetFlags(net_flags::NONBLOCK), addr: Addr(addr as u64), len });
                // SAFETY: the program's address argument of `len` bytes.
                let dialled = unsafe { super::outside::relayed_destination(addr, len, false) };
                let (addr, len) = super::outside::or_instead(&dialled, addr, len);
                // SAFETY: the program's own arguments; O_NONBLOCK only makes the call return at once.
                write_now::with_nonblock(fd, write_now::status_flags(fd), || unsafe { real::connect(fd, addr, len) } as i64);
            }
            return ret(g.result) as c_int;
        }
        // An outside TCP server dara dialled at this grant: the connect goes to dara's socket
        // that stands for it.
        // SAFETY: the program's address argument of `len` bytes.
        let dialled = if tcp { unsafe { super::outside::relayed_destination(addr, len, false) } } else { None };
        let (addr, len) = super::outside::or_instead(&dialled, addr, len);
        // SAFETY: the program's own arguments (or the address dara's socket has instead).
        return unsafe { real::connect(fd, addr, len) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    if let (Some(gate), true) = (Gated::enter(), is_net(fd)) {
        gate.post(Request::NetClose { fd, how: CloseHow::Shutdown(how as u32) });
    }
    // SAFETY: plain integers.
    unsafe { real::shutdown(fd, how) }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let (Some(gate), true) = (Gated::enter(), is_net(fd)) {
        gate.post(Request::NetClose { fd, how: CloseHow::Close });
    }
    fd::closed(fd);
    // SAFETY: plain integer.
    unsafe { real::close(fd) }
}

// ---- receiving -----------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::recv(fd, buf, len, flags) },
    };
    // SAFETY: the program's own arguments; MSG_DONTWAIT only makes the call non-blocking, and
    // `done` stays within the caller's `len` bytes.
    receive_whole(&gate, fd, len, flags, &mut |done, most| unsafe { real::recv(fd, buf.cast::<u8>().add(done).cast(), most, flags | libc::MSG_DONTWAIT) })
}

/// Whether a receive with `flags` returns at once whatever is there, as a non-blocking one:
/// `MSG_DONTWAIT`, or `MSG_ERRQUEUE` (a read of the socket's error queue never blocks: with
/// nothing queued the kernel answers EAGAIN on a blocking socket too). socat reads the error
/// queue after every failed connect; taken as a blocking receive, its EAGAIN was waited out
/// forever.
fn never_waits(flags: c_int) -> bool {
    flags & (libc::MSG_DONTWAIT | libc::MSG_ERRQUEUE) != 0
}

/// A receive that honours `MSG_WAITALL` on a blocking TCP socket: a grant moves at most what the
/// scheduler allows (what is there, at most 32 KiB from a traced peer), so the rest is received
/// by further grants until `len` bytes, end of file or an error, as the kernel's blocking call
/// would wait for them. `call(done, most)` receives at most `most` bytes after the first `done`.
/// A peek takes what one call finds: peeking again would see the same bytes.
fn receive_whole(gate: &Gated, fd: c_int, len: usize, flags: c_int, call: &mut dyn FnMut(usize, usize) -> ssize_t) -> ssize_t {
    let dontwait = never_waits(flags);
    let peek = flags & libc::MSG_PEEK != 0;
    if flags & libc::MSG_WAITALL == 0 || dontwait || fd_nonblocking(fd) || !is_tcp(fd) {
        let fill = if peek { Fill::Once(&mut |most| call(0, most)) } else { Fill::Buffer(call) };
        return receive(gate, fd, len, dontwait, true, fill);
    }
    let mut done = 0usize;
    while done < len {
        let mut at = |more: usize, most: usize| call(done + more, most);
        let fill = if peek { Fill::Once(&mut |most| at(0, most)) } else { Fill::Buffer(&mut at) };
        let r = receive(gate, fd, len - done, false, true, fill);
        if r <= 0 {
            // What came before an error or end of file counts, as in the kernel.
            return if done > 0 { done as ssize_t } else { r };
        }
        done += r as usize;
    }
    done as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, addr: *mut libc::sockaddr, alen: *mut socklen_t) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::recvfrom(fd, buf, len, flags, addr, alen) },
    };
    // SAFETY: the program's length argument, read before the call overwrites it.
    let room = if alen.is_null() { 0 } else { unsafe { *alen } };
    // SAFETY: as for `recv`.
    let r = receive_whole(&gate, fd, len, flags, &mut |done, most| unsafe { real::recvfrom(fd, buf.cast::<u8>().add(done).cast(), most, flags | libc::MSG_DONTWAIT, addr, alen) });
    if r >= 0 {
        // SAFETY: a successful recvfrom filled the caller's address buffer of `room` bytes.
        unsafe { super::outside::show_relayed_peer(addr, alen, room, true) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe { receive_message(&gate, fd, msg, flags) },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::recvmsg(fd, msg, flags) },
    }
}

/// `recvmsg` on a gated thread (the hook's, and each message of a `recvmmsg` batch's, hooked or
/// trapped): a receive when `fd` is a socket or pipe, the real call otherwise. Sets errno as
/// `recvmsg` does.
///
/// # Safety
/// `recvmsg`'s contract: `msg` is null or a valid `msghdr` whose buffers may be written.
pub unsafe fn receive_message(gate: &Gated, fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    if !is_net(fd) {
        // SAFETY: the caller's arguments, forwarded unchanged.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's msghdr is valid for the call.
    let (len, room) = unsafe { msg.as_ref().map_or((0, 0), |m| (iov_total(m.msg_iov, m.msg_iovlen as c_int), m.msg_namelen)) };
    // SAFETY: as for `recv`.
    let r = receive(gate, fd, len, never_waits(flags), true, Fill::Once(&mut |_| unsafe { real::recvmsg(fd, msg, flags | libc::MSG_DONTWAIT) }));
    if r >= 0 && !msg.is_null() {
        // SAFETY: a successful recvmsg filled the caller's name buffer of `room` bytes.
        unsafe { super::outside::show_relayed_peer((*msg).msg_name.cast(), &mut (*msg).msg_namelen, room, true) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments.
        Some(g) if crate::fd::is_signalfd(fd) => return unsafe { super::signalfd::read(g, fd, buf, len) },
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::read(fd, buf, len) },
    };
    // A pipe or eventfd cannot take MSG_DONTWAIT; the scheduler grants a blocking read only when
    // the descriptor is readable, so the real read returns at once. A TCP socket is read as
    // `recv` with MSG_DONTWAIT (the same call for a socket), so it never blocks.
    let tcp = is_tcp(fd);
    // SAFETY: the program's own arguments; `done` stays within the caller's `len` bytes.
    receive(&gate, fd, len, false, tcp, Fill::Buffer(&mut |done, most| unsafe {
        let at = buf.cast::<u8>().add(done).cast();
        if tcp { real::recv(fd, at, most, libc::MSG_DONTWAIT) } else { real::read(fd, at, most) }
    }))
}

/// A `read`/`readv` the syscall trap caught (libc's own reads of descriptor 0, e.g. stdio reading
/// a pipeline's stdin): a receive when the descriptor is a pipe or socket, `None` otherwise (the
/// caller runs it for real). Returns the raw result (`-errno`).
pub fn trapped_read(gate: &Gated, nr: libc::c_long, a: [u64; 6]) -> Option<i64> {
    let fd = a[0] as c_int;
    if !is_net(fd) {
        return None;
    }
    let len = if nr == libc::SYS_read { a[2] as usize } else { iov_total(a[1] as *const libc::iovec, a[2] as c_int) };
    // A TCP socket is read as `recv` with MSG_DONTWAIT, as by the `read` hook: it never blocks.
    let tcp = nr == libc::SYS_read && is_tcp(fd);
    let mut call = |done: usize, most: usize| {
        let mut a = a;
        if nr == libc::SYS_read {
            a[1] += done as u64;
            a[2] = most as u64;
        }
        let (nr, a) = if tcp { (libc::SYS_recvfrom, [a[0], a[1], a[2], libc::MSG_DONTWAIT as u64, 0, 0]) } else { (nr, a) };
        // SAFETY: the syscall the program made (or a read as the same receive without blocking),
        // with its own arguments (a read's buffer and length within the caller's).
        let r = unsafe { sys::syscall6(nr, a) };
        if r < 0 {
            set_errno(-r as c_int);
            -1
        } else {
            r as ssize_t
        }
    };
    let fill = if nr == libc::SYS_read { Fill::Buffer(&mut call) } else { Fill::Once(&mut |most| call(0, most)) };
    let r = receive(gate, fd, len, false, false, fill);
    Some(if r < 0 { -errno() } else { r as i64 })
}

/// A `write`/`writev` the syscall trap caught (libc's own writes to descriptor 1, e.g. stdio
/// flushing `printf`, which bash's `printf ... >&3` sends to a socket): a send when the descriptor
/// is a socket; on a pipe, FIFO or eventfd no scheduling point while it takes the bytes (a pipe
/// delivers inside the write, so a write dara does not see cannot make a probe racy, and a
/// program printing into a pipe, `out=$(node)` in a test script, keeps the scheduling points it
/// had), a posted wait for room when it is full; `None` for other descriptors (the caller runs it
/// for real, on a non-blocking output pipe once drained: `output`). Returns the raw result.
pub fn trapped_write(gate: &Gated, nr: libc::c_long, a: [u64; 6]) -> Option<i64> {
    let fd = a[0] as c_int;
    if !is_net(fd) {
        super::output::drain_before_write(fd);
        return None;
    }
    let socket = is_net_socket(fd);
    // One buffer is a vector of one.
    let one = libc::iovec { iov_base: a[1] as *mut c_void, iov_len: a[2] as usize };
    let (iov, n) = if nr == libc::SYS_write { (&one as *const libc::iovec, 1) } else { (a[1] as *const libc::iovec, a[2] as c_int) };
    if !socket {
        // libc's own writes to a pipe (stdio into a pipeline) were never scheduling points, and
        // are not while the pipe takes them; one that finds the pipe full waits in the model.
        let flags = write_now::status_flags(fd);
        if flags >= 0 && flags as c_int & libc::O_NONBLOCK != 0 {
            crate::unposted::wrote_to_pipe(); // it may write: the readers' views are stale
            return None; // a non-blocking caller gets what the kernel says: the call as made
        }
        // SAFETY: the program's own iovecs.
        let r = write_now::with_nonblock(fd, flags, || unsafe { sys::syscall6(libc::SYS_writev, [fd as u64, iov as u64, n as u64, 0, 0, 0]) });
        if r > 0 {
            crate::unposted::wrote_to_pipe();
        }
        // A pipe with no room at all gives -EAGAIN: that waits for room below, as a part does
        // (before, `r as usize` made -EAGAIN a huge count and the program got EAGAIN).
        if (r < 0 && r != -(libc::EAGAIN as i64)) || (r >= 0 && r as usize >= iov_total(iov, n)) {
            return Some(r);
        }
        return Some(finish_vector(gate, fd, iov, n, r.max(0) as usize, 0));
    }
    let r = if nr == libc::SYS_write {
        // SAFETY: the program's own buffer, written without blocking.
        transmit(gate, fd, one.iov_base as *const u8, one.iov_len, false, 0, &mut |b, l| ret(unsafe { write_now::write(fd, true, b, l) }))
    } else {
        // SAFETY: the program's own iovecs, written without blocking.
        transmit_vector(gate, fd, iov, n, false, 0, &mut |v, k| ret(unsafe { write_now::writev(fd, true, v, k) }))
    };
    Some(if r < 0 { -errno() } else { r as i64 })
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::readv(fd, iov, n) },
    };
    let len = iov_total(iov, n);
    // SAFETY: the program's own arguments.
    receive(&gate, fd, len, false, false, Fill::Once(&mut |_| unsafe { real::readv(fd, iov, n) }))
}

// ---- sending -------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::send(fd, buf, len, flags) },
    };
    // SAFETY: the program's buffer, in bounds by `transmit`'s construction.
    transmit(&gate, fd, buf.cast(), len, flags & libc::MSG_DONTWAIT != 0, 0, &mut |b, l| unsafe { real::send(fd, b.cast(), l, flags | libc::MSG_DONTWAIT) })
}

#[no_mangle]
pub unsafe extern "C" fn sendto(fd: c_int, buf: *const c_void, len: size_t, flags: c_int, addr: *const libc::sockaddr, alen: socklen_t) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::sendto(fd, buf, len, flags, addr, alen) },
    };
    // A datagram to a client dara relays for goes to dara's socket that stands for it.
    // SAFETY: the program's address argument of `alen` bytes.
    let relayed = unsafe { super::outside::relayed_destination(addr, alen, true) };
    let (addr, alen) = super::outside::or_instead(&relayed, addr, alen);
    let port = sockaddr_port(addr, alen);
    // SAFETY: as for `send`.
    transmit(&gate, fd, buf.cast(), len, flags & libc::MSG_DONTWAIT != 0, port, &mut |b, l| unsafe { real::sendto(fd, b.cast(), l, flags | libc::MSG_DONTWAIT, addr, alen) })
}

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    match Gated::enter() {
        // SAFETY: the program's own arguments.
        Some(gate) => unsafe { send_message(&gate, fd, msg, flags) },
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { real::sendmsg(fd, msg, flags) },
    }
}

/// `sendmsg` on a gated thread (the hook's, and each message of a `sendmmsg` batch's, hooked or
/// trapped): a send when `fd` is a socket or pipe, the real call otherwise. Sets errno as
/// `sendmsg` does.
///
/// # Safety
/// `sendmsg`'s contract: `msg` is null or a valid `msghdr` whose buffers may be read.
pub unsafe fn send_message(gate: &Gated, fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    if !is_net(fd) {
        // SAFETY: the caller's arguments, forwarded unchanged.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // A datagram to a client dara relays for goes to dara's socket that stands for it: the same
    // message with the address replaced.
    // SAFETY: the caller's msghdr (and its name of `msg_namelen` bytes) is valid for the call.
    let relayed = unsafe { msg.as_ref().and_then(|m| super::outside::relayed_destination(m.msg_name as *const libc::sockaddr, m.msg_namelen, true)) };
    // SAFETY: as above; the copy points at the same buffers.
    let mut copy: Option<libc::msghdr> = unsafe { msg.as_ref().map(|m| core::ptr::read(m)) };
    let msg = match (&relayed, copy.as_mut()) {
        (Some((addr, alen)), Some(m)) => {
            m.msg_name = (addr as *const libc::sockaddr_storage).cast_mut().cast();
            m.msg_namelen = *alen;
            m as *const libc::msghdr
        }
        _ => msg,
    };
    // SAFETY: the caller's msghdr (or its copy) is valid for the call.
    let (port, iov, n) = unsafe { msg.as_ref().map_or((0, core::ptr::null(), 0), |m| (sockaddr_port(m.msg_name as *const libc::sockaddr, m.msg_namelen), m.msg_iov as *const libc::iovec, m.msg_iovlen as c_int)) };
    // SAFETY: the program's own arguments; MSG_DONTWAIT only makes the call non-blocking.
    // A cut vector goes in a copy of the message that names it.
    let mut cut = copy;
    // SAFETY: the program's own arguments (or the copy, naming its buffers or a prefix of one);
    // MSG_DONTWAIT only makes the call non-blocking.
    transmit_vector(gate, fd, iov, n, flags & libc::MSG_DONTWAIT != 0, port, &mut |v, k| unsafe {
        match cut.as_mut() {
            Some(m) if v != iov => {
                m.msg_iov = v.cast_mut();
                m.msg_iovlen = k as _;
                real::sendmsg(fd, m, flags | libc::MSG_DONTWAIT)
            }
            _ => real::sendmsg(fd, msg, flags | libc::MSG_DONTWAIT),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        gate => {
            if gate.is_some() {
                super::output::drain_before_write(fd);
            }
            // SAFETY: the program's own arguments, forwarded unchanged.
            return unsafe { real::write(fd, buf, len) };
        }
    };
    // Written without blocking (`write_now`): a blocking caller posts again for the rest.
    let socket = is_net_socket(fd);
    // SAFETY: as for `send`.
    transmit(&gate, fd, buf.cast(), len, false, 0, &mut |b, l| ret(unsafe { write_now::write(fd, socket, b, l) }))
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    let gate = match Gated::enter() {
        Some(g) if is_net(fd) => g,
        gate => {
            if gate.is_some() {
                super::output::drain_before_write(fd);
            }
            // SAFETY: the program's own arguments, forwarded unchanged.
            return unsafe { real::writev(fd, iov, n) };
        }
    };
    let socket = is_net_socket(fd);
    // SAFETY: the program's own arguments; written without blocking (`write_now`).
    transmit_vector(&gate, fd, iov, n, false, 0, &mut |v, k| ret(unsafe { write_now::writev(fd, socket, v, k) }))
}
