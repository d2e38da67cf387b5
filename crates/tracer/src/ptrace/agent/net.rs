//! Socket and pipe calls on the ptrace path: the same `NetRecv`/`NetSend`/`NetAccept`/
//! `NetConnect`/`NetClose` requests the preload's hooks post for them
//! (crates/preload/src/hooks/net.rs), finished by running the real call once granted.
//!
//! The filter stops every `read`/`write`/`close` and cannot see what a descriptor is, so the
//! agent asks: one `readlink` of `/proc/PID/fd/N` names a socket (`socket:[...]`), a pipe or FIFO
//! (`pipe:[...]`, or a path whose `stat` says FIFO) or anything else. Nothing is cached, so no
//! `close`/`dup`/`exec` can leave a stale answer; a regular file, a terminal or /dev/null costs
//! the stop and that one `readlink` (and a `stat` for a path). A `read`/`readv` of /dev/urandom
//! or /dev/random is answered from the process's seeded stream, as `getrandom` is. Which descriptors count is the preload's rule (`fd/kind.rs`):
//! sockets and pipes, except the pipes dara drains the program's output through (a non-blocking
//! write to one waits until dara has drained it, as in the preload). A network
//! descriptor's `O_NONBLOCK` is read from `/proc/PID/fdinfo/N`.
//!
//! What differs from the preload, and why it is sound: a blocking call is granted only once the
//! scheduler saw it ready (data queued, room to write, a connection waiting), and only one thread
//! of the whole system runs, so the real call then returns at once, as the preload's
//! `MSG_DONTWAIT` call does. A receive on a socket takes at most the bytes the grant says were
//! queued (as the preload's TCP receive), so the schedule, not the kernel's timing, decides how
//! much of a stream one read returns. A blocking receive or accept on a socket reads the socket's
//! `SO_RCVTIMEO` (a copy of the descriptor through `pidfd_getfd`, then `getsockopt`: exact through
//! `dup`, `fork` and descriptors passed over a socket, which tracking `setsockopt` would miss;
//! four system calls of the agent, against the stop's two context switches) and posts it as the
//! preload does, a virtual deadline (`dara_abi::receive_timeout`); when it fires the call is
//! answered `EAGAIN` without running. No call is made interruptible (`INTERRUPTIBLE`: the agent
//! does not run handlers inside a call).
use dara_abi::{net_flags, Addr, CloseHow, Deadline, NetFlags, Request, NO_DEADLINE};

use super::calls::{Action, Then};
use crate::ptrace::remote::{self, Syscall};

/// What a descriptor of a tracee is, for the agent's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Descriptor {
    Socket,
    /// A pipe, FIFO or eventfd: a network descriptor that is not a socket.
    Pipe,
    /// `/dev/urandom` or `/dev/random` (by path, or the character device 1:9 or 1:8): a read is
    /// answered from the process's stream, as `getrandom` is.
    Random,
    /// A regular file, a terminal, /dev/null, a closed number: the call runs as it is.
    Other,
    /// One of the pipes dara drains the program's output through: the call runs as it is, a
    /// write on an `O_NONBLOCK` description once the pipe is drained ([`drain_before_write`]).
    Output,
}

/// The kernel's random devices, by their (major, minor) numbers: /dev/random, /dev/urandom.
const RANDOM_DEVICES: [(u32, u32); 2] = [(1, 8), (1, 9)];

/// What descriptor `fd` of process `pid` is; `output_pipes`: the inodes of dara's output pipes.
pub fn descriptor(pid: i32, fd: i32, output_pipes: [u64; dara_abi::OUTPUT_PIPES]) -> Descriptor {
    if fd < 0 {
        return Descriptor::Other;
    }
    let Some((path, link)) = crate::procfs::descriptor_link(pid as u32, fd as u64) else { return Descriptor::Other };
    let link = link.as_os_str().as_encoded_bytes();
    let inode = |prefix: &[u8]| link.strip_prefix(prefix).and_then(|rest| rest.strip_suffix(b"]")).and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok());
    if link.starts_with(b"socket:[") {
        return Descriptor::Socket;
    }
    if let Some(inode) = inode(b"pipe:[") {
        return if output_pipes.contains(&inode) { Descriptor::Output } else { Descriptor::Pipe };
    }
    if link == b"anon_inode:[eventfd]" {
        return Descriptor::Pipe;
    }
    // A named FIFO shows its path: the only path that is a network descriptor. A random device
    // is known by its numbers (a path under a chroot or a copied node may not say /dev/urandom).
    if link.starts_with(b"/") {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if let Ok(m) = std::fs::metadata(&path) {
            if m.file_type().is_fifo() {
                return Descriptor::Pipe;
            }
            let device = (libc::major(m.rdev()), libc::minor(m.rdev()));
            if m.file_type().is_char_device() && RANDOM_DEVICES.contains(&device) {
                return Descriptor::Random;
            }
        }
    }
    Descriptor::Other
}

/// The deadline of a blocking receive or accept started at `now` on socket `fd` of `pid`: its
/// `SO_RCVTIMEO` read through a copy of the descriptor; `NO_DEADLINE` when unset or unreadable.
fn receive_deadline(pid: i32, fd: i32, now: u64) -> u64 {
    use std::os::fd::AsRawFd;
    let Some(copy) = copy_of(pid, fd) else { return NO_DEADLINE };
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    let mut len = core::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `tv`.
    let rc = unsafe { libc::getsockopt(copy.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&raw mut tv).cast(), &mut len) };
    if rc != 0 {
        return NO_DEADLINE;
    }
    dara_abi::receive_timeout::deadline(now, tv.tv_sec, tv.tv_usec)
}

/// A copy of descriptor `fd` of process `pid` (`pidfd_getfd`: the same open file), or None.
pub(super) fn copy_of(pid: i32, fd: i32) -> Option<std::os::fd::OwnedFd> {
    crate::procfs::pidfd_getfd(&crate::procfs::pidfd_open(pid as u32)?, fd).ok()
}

/// Whether `fd` of `pid` was opened `O_NONBLOCK` (its `fdinfo` flags, in octal).
pub(super) fn nonblocking(pid: i32, fd: i32) -> bool {
    crate::procfs::descriptor_flags(pid, fd).is_some_and(|f| f & libc::O_NONBLOCK != 0)
}

/// How long a write waits for dara to drain an output pipe before it runs anyway (as long as
/// dara-trace waits by default for a thread that computes, `--busy-limit`).
const OUTPUT_DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Before a write to `fd`, one of dara's output pipes: on an `O_NONBLOCK` description, waits until
/// dara has read everything in the pipe, so the write takes what an empty pipe takes whatever the
/// speed of dara's forwarder (`crate::output_drain`; the preload's `hooks/output.rs`). A pipe
/// nobody drains for [`OUTPUT_DRAIN_LIMIT`] is written as it is.
fn drain_before_write(pid: i32, fd: i32) {
    use std::os::fd::AsFd;
    if !nonblocking(pid, fd) {
        return;
    }
    if let Some(copy) = copy_of(pid, fd) {
        crate::output_drain::wait_empty(&[copy.as_fd()], OUTPUT_DRAIN_LIMIT);
    }
}

fn flags(nonblock: bool) -> NetFlags {
    NetFlags(if nonblock { net_flags::NONBLOCK } else { 0 })
}

/// The buffers of a `struct iovec` array of `count` entries at `addr` (at most `IOV_MAX`, 1024),
/// as (base, length); none when it cannot be read.
pub fn iovec_list(pid: i32, addr: u64, count: u64) -> Vec<(u64, u64)> {
    let count = count.min(1024) as usize;
    let mut raw = vec![0u8; count * 16];
    if count == 0 || remote::read(pid, addr, &mut raw).is_err() {
        return Vec::new();
    }
    let word = |i: usize| u64::from_le_bytes(raw[i..i + 8].try_into().expect("8 bytes"));
    (0..count).map(|i| (word(i * 16), word(i * 16 + 8))).collect()
}

/// A `struct iovec` array of `count` entries at `addr`: (first base, first length, total).
fn iovecs(pid: i32, addr: u64, count: u64) -> (u64, u64, u64) {
    let list = iovec_list(pid, addr, count);
    let total = list.iter().map(|&(_, len)| len).fold(0u64, u64::saturating_add);
    list.first().map_or((0, 0, 0), |&(base, len)| (base, len, total))
}

/// A `struct msghdr` at `addr`: (name, name length, iovec array, iovec count).
pub(super) fn msghdr(pid: i32, addr: u64) -> (u64, u32, u64, u64) {
    let mut raw = [0u8; 32];
    if remote::read(pid, addr, &mut raw).is_err() {
        return (0, 0, 0, 0);
    }
    let word = |i: usize| u64::from_le_bytes(raw[i..i + 8].try_into().expect("8 bytes"));
    (word(0), word(8) as u32, word(16), word(24))
}

/// The first (at most 8) bytes of the `len` at `addr`, zero-padded.
fn head(pid: i32, addr: u64, len: u64) -> [u8; 8] {
    let mut bytes = [0u8; 8];
    let n = len.min(8) as usize;
    if addr != 0 && remote::read(pid, addr, &mut bytes[..n]).is_err() {
        bytes = [0; 8];
    }
    bytes
}

/// The port of the `len`-byte socket address at `addr` (0 for none, or not IPv4/IPv6), as the
/// preload's `sockaddr_port`.
fn dest_port(pid: i32, addr: u64, len: u32) -> u16 {
    let mut raw = [0u8; 4];
    if addr == 0 || (len as usize) < core::mem::size_of::<libc::sockaddr_in>() || remote::read(pid, addr, &mut raw).is_err() {
        return 0;
    }
    let family = i32::from(u16::from_le_bytes([raw[0], raw[1]]));
    if family == libc::AF_INET || family == libc::AF_INET6 {
        u16::from_be_bytes([raw[2], raw[3]])
    } else {
        0
    }
}

/// What socket or pipe call `call` of process `pid` means; None for a call that is none of them.
/// `now`: the thread's virtual time, from which a receive timeout counts.
pub fn decode(call: Syscall, pid: i32, output_pipes: [u64; dara_abi::OUTPUT_PIPES], now: u64) -> Option<Action> {
    let a = call.args;
    let fd = a[0] as i32;
    let is_net_call = matches!(
        call.nr,
        libc::SYS_read
            | libc::SYS_readv
            | libc::SYS_recvfrom
            | libc::SYS_recvmsg
            | libc::SYS_write
            | libc::SYS_writev
            | libc::SYS_sendto
            | libc::SYS_sendmsg
            | libc::SYS_connect
            | libc::SYS_accept
            | libc::SYS_accept4
            | libc::SYS_close
            | libc::SYS_shutdown
    );
    if !is_net_call {
        return None;
    }
    let kind = descriptor(pid, fd, output_pipes);
    match (kind, call.nr) {
        (Descriptor::Random, libc::SYS_read) => return Some(Action::Random { addr: a[1], len: a[2] }),
        (Descriptor::Random, libc::SYS_readv) => return Some(Action::RandomVector { iov: a[1], count: a[2] }),
        (Descriptor::Output, libc::SYS_write | libc::SYS_writev) => {
            drain_before_write(pid, fd);
            return Some(Action::Run);
        }
        (Descriptor::Random | Descriptor::Other | Descriptor::Output, _) => return Some(Action::Run),
        _ => {}
    }
    let socket = kind == Descriptor::Socket;
    let dontwait = |flags: u64| flags as i32 & libc::MSG_DONTWAIT != 0;
    // A blocking call on a socket waits at most its SO_RCVTIMEO.
    let deadline = |nonblock: bool| if socket && !nonblock { receive_deadline(pid, fd, now) } else { NO_DEADLINE };
    // `into`: the buffer of a receive into one buffer that takes its whole grant (`whole_grant`).
    let receive = |len: u64, dontwait: bool, len_arg: Option<usize>, into: Option<u64>| {
        let nonblock = dontwait || nonblocking(pid, fd);
        let deadline = deadline(nonblock);
        let into = into.filter(|_| socket);
        let whole = if into.is_some() { net_flags::WHOLE_GRANT } else { 0 };
        let request = Request::NetRecv { fd, flags: NetFlags(flags(nonblock).0 | whole), deadline: Deadline::from_ns(deadline), len };
        Action::Post(request, Then::Receive { len_arg: len_arg.filter(|_| socket), timed: deadline != NO_DEADLINE, into })
    };
    // A `recvfrom` the agent may take for the program: no address to fill, and no flag but those
    // that change nothing of what it takes.
    let plain = |flags: u64, addr: u64| addr == 0 && flags as i32 & !(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_CMSG_CLOEXEC) == 0;
    // `len_arg`: the length argument of a single-buffer send, cut to what the grant allows when
    // the caller does not wait (a Go server's write of a 4 MiB answer to dara's relay moved what
    // the socket's autotuned buffers took, and its replay diverged).
    let send = |buf: u64, len: u64, dontwait: bool, dest_port: u16, len_arg: Option<usize>| {
        let nonblock = dontwait || nonblocking(pid, fd);
        let request = Request::NetSend { fd, len: len.min((1 << net_flags::SEND_SHIFT) - 1), flags: flags(nonblock), head: head(pid, buf, len), dest_port };
        Action::Post(request, Then::Send { len_arg: len_arg.filter(|_| socket && nonblock) })
    };
    Some(match call.nr {
        libc::SYS_read => receive(a[2], false, Some(2), Some(a[1])),
        // A receive with MSG_WAITALL is not cut: its caller takes nothing shorter.
        libc::SYS_recvfrom => receive(a[2], dontwait(a[3]), Some(2).filter(|_| a[3] as i32 & libc::MSG_WAITALL == 0), Some(a[1]).filter(|_| plain(a[3], a[4]))),
        libc::SYS_readv => receive(iovecs(pid, a[1], a[2]).2, false, None, None),
        libc::SYS_recvmsg => {
            let (_, _, iov, count) = msghdr(pid, a[1]);
            receive(iovecs(pid, iov, count).2, dontwait(a[2]), None, None)
        }
        libc::SYS_write => send(a[1], a[2], false, 0, Some(2)),
        libc::SYS_sendto => send(a[1], a[2], dontwait(a[3]), dest_port(pid, a[4], a[5] as u32), Some(2)),
        libc::SYS_writev => {
            let (base, first, total) = iovecs(pid, a[1], a[2]);
            let mut request = send(base, first, false, 0, None);
            set_send_len(&mut request, total);
            request
        }
        libc::SYS_sendmsg => {
            let (name, name_len, iov, count) = msghdr(pid, a[1]);
            let (base, first, total) = iovecs(pid, iov, count);
            let mut request = send(base, first, dontwait(a[2]), dest_port(pid, name, name_len), None);
            set_send_len(&mut request, total);
            request
        }
        libc::SYS_connect if socket => Action::Post(Request::NetConnect { fd, flags: flags(nonblocking(pid, fd)), addr: Addr(a[1]), len: a[2] as u32 }, Then::Run),
        libc::SYS_accept | libc::SYS_accept4 if socket => {
            let nonblock = nonblocking(pid, fd);
            let deadline = deadline(nonblock);
            Action::Post(Request::NetAccept { fd, flags: flags(nonblock), deadline: Deadline::from_ns(deadline) }, Then::Receive { len_arg: None, timed: deadline != NO_DEADLINE, into: None })
        }
        libc::SYS_close => Action::Post(Request::NetClose { fd, how: CloseHow::Close }, Then::Run),
        libc::SYS_shutdown if socket => Action::Post(Request::NetClose { fd, how: CloseHow::Shutdown(a[1] as u32) }, Then::Run),
        _ => Action::Run,
    })
}

/// A vectored send offers all its buffers' bytes (its head is the first buffer's).
fn set_send_len(action: &mut Action, total: u64) {
    if let Action::Post(Request::NetSend { len, .. }, _) = action {
        *len = total.min((1 << net_flags::SEND_SHIFT) - 1);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    fn call(nr: i64, args: [u64; 6]) -> Syscall {
        Syscall { nr, args }
    }

    #[test]
    fn sockets_and_pipes_are_told_from_files_and_dara_s_output_pipes() {
        let pid = std::process::id() as i32;
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let (reader, writer) = std::io::pipe().expect("pipe");
        let file = std::fs::File::open("/dev/null").expect("/dev/null");
        assert_eq!(descriptor(pid, a.as_raw_fd(), [0; 3]), Descriptor::Socket);
        assert_eq!(descriptor(pid, reader.as_raw_fd(), [0; 3]), Descriptor::Pipe);
        assert_eq!(descriptor(pid, file.as_raw_fd(), [0; 3]), Descriptor::Other);
        assert_eq!(descriptor(pid, 999, [0; 3]), Descriptor::Other);
        use std::os::unix::fs::MetadataExt;
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", writer.as_raw_fd())).expect("stat").ino();
        assert_eq!(descriptor(pid, writer.as_raw_fd(), [0, inode, 0]), Descriptor::Output);
    }

    #[test]
    fn a_send_posts_its_length_head_and_blocking_as_the_preload_does() {
        let pid = std::process::id() as i32;
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let bytes = *b"PUT x 1\n!";
        let write = decode(call(libc::SYS_write, [a.as_raw_fd() as u64, bytes.as_ptr() as u64, 9, 0, 0, 0]), pid, [0; 3], 0);
        let expected = Request::NetSend { fd: a.as_raw_fd(), len: 9, flags: NetFlags(0), head: *b"PUT x 1\n", dest_port: 0 };
        assert_eq!(write, Some(Action::Post(expected, Then::Send { len_arg: None })), "a blocking caller's write is never cut");
        a.set_nonblocking(true).expect("O_NONBLOCK");
        let write = decode(call(libc::SYS_write, [a.as_raw_fd() as u64, bytes.as_ptr() as u64, 9, 0, 0, 0]), pid, [0; 3], 0);
        let Some(Action::Post(Request::NetSend { flags, .. }, then)) = write else { panic!("not a send") };
        assert_eq!((flags.0 & net_flags::NONBLOCK, then), (net_flags::NONBLOCK, Then::Send { len_arg: Some(2) }), "a non-blocking write takes what its grant allows");
        let Some(Action::Post(Request::NetRecv { flags, len, .. }, Then::Receive { len_arg, .. })) = decode(call(libc::SYS_read, [a.as_raw_fd() as u64, 0, 64, 0, 0, 0]), pid, [0; 3], 0) else { panic!("not a receive") };
        assert_eq!((flags.0 & net_flags::NONBLOCK, len, len_arg), (net_flags::NONBLOCK, 64, Some(2)));
    }

    #[test]
    fn a_blocking_receive_waits_at_most_the_socket_s_receive_timeout() {
        let pid = std::process::id() as i32;
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let read = |fd: &std::os::unix::net::UnixStream| decode(call(libc::SYS_read, [fd.as_raw_fd() as u64, 0, 8, 0, 0, 0]), pid, [0; 3], 7);
        let Some(Action::Post(Request::NetRecv { deadline, .. }, Then::Receive { timed: false, .. })) = read(&a) else { panic!("not an untimed receive") };
        assert_eq!(deadline, Deadline::from_ns(NO_DEADLINE));
        a.set_read_timeout(Some(std::time::Duration::from_millis(100))).expect("SO_RCVTIMEO");
        let Some(Action::Post(Request::NetRecv { deadline, .. }, Then::Receive { timed: true, .. })) = read(&a) else { panic!("not a timed receive") };
        assert_eq!(deadline, Deadline::from_ns(7 + 100_000_000));
    }

    #[test]
    fn a_random_device_s_reads_are_answered_from_the_stream() {
        let pid = std::process::id() as i32;
        let file = std::fs::File::open("/dev/urandom").expect("/dev/urandom");
        let fd = file.as_raw_fd() as u64;
        assert_eq!(descriptor(pid, fd as i32, [0; 3]), Descriptor::Random);
        assert_eq!(decode(call(libc::SYS_read, [fd, 0x1000, 16, 0, 0, 0]), pid, [0; 3], 0), Some(Action::Random { addr: 0x1000, len: 16 }));
        assert_eq!(decode(call(libc::SYS_readv, [fd, 0x2000, 2, 0, 0, 0]), pid, [0; 3], 0), Some(Action::RandomVector { iov: 0x2000, count: 2 }));
        assert_eq!(decode(call(libc::SYS_close, [fd, 0, 0, 0, 0, 0]), pid, [0; 3], 0), Some(Action::Run));
    }

    #[test]
    fn a_file_s_read_and_write_run_without_a_post() {
        let pid = std::process::id() as i32;
        let file = std::fs::File::open("/dev/null").expect("/dev/null");
        assert_eq!(decode(call(libc::SYS_read, [file.as_raw_fd() as u64, 0, 8, 0, 0, 0]), pid, [0; 3], 0), Some(Action::Run));
        assert_eq!(decode(call(libc::SYS_getpid, [0; 6]), pid, [0; 3], 0), None);
    }
}
