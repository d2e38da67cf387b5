//! Whether a blocking `connect` can go on now: it waits in the kernel while the listener it goes
//! to has a full backlog (TCP drops the SYN and retransmits it a second or more later; a
//! Unix-domain connect sleeps until an `accept` makes room), so the model keeps it waiting until
//! the listener has room. A connect nobody listens for (refused at once), one to a socket of
//! another kind, a UDP connect and a non-blocking connect never wait.
//!
//! The listener is found by the address the connect names (read from the target), among the
//! listening sockets sock_diag reports: a TCP listener on that port and address (or on the
//! unspecified address of its family; an IPv6 wildcard listener for an IPv4 address when no IPv4
//! one listens), a Unix listener by the inode of the file the path names (resolved in the
//! connecting process's root and working directory) or by its abstract name. A TCP listener's
//! queue counts the connections owed to it too (a handshake done that the listener's softirq has
//! not queued yet), so the answer never depends on when the kernel gets to it.
//!
//! A non-blocking connect goes at once; when its listener is full the kernel drops the SYN and
//! sends it again a second or more later. Such a connect is parked, not settled, and once an
//! accept made room dara waits (in real time, at that quiet point) until the retransmission has
//! completed it, so no probe sees it half-done.
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use super::*;
use crate::sockdiag::{InetListener, UnixListener};

/// Most bytes of a socket address read from the target.
const MAX_ADDRESS: usize = std::mem::size_of::<libc::sockaddr_storage>();
/// `tcpi_state` of a socket whose SYN is sent and not answered.
const TCP_SYN_SENT: u8 = 2;
/// How long a parked connect may take to complete once its listener has room: its SYN is sent
/// again 1, 3, 7, 15, 31 and 63 s after the first, so the next one comes within 32 s.
const RETRANSMIT_LIMIT: Duration = Duration::from_secs(40);

/// A non-blocking TCP connect whose SYN a full listener dropped (see
/// [`NetProbe::park_if_dropped`]): descriptor `fd` of `pid`, the socket's inode, its destination.
pub(super) struct ParkedConnect {
    pid: u32,
    fd: i32,
    inode: u64,
    to: std::net::SocketAddr,
}

/// The inode of a [`Destination`] not looked up (named by the socket's peer instead).
const NO_LISTENER: u64 = 0;

/// The listener a connect goes to: its inode and whether its backlog is full.
struct Destination {
    inode: u64,
    full: bool,
}

impl NetProbe {
    /// In a recording, dara listens on `public_port` for the program, whose listening socket is
    /// now the twin at `twin`.
    pub fn split_listener(&mut self, public_port: u16, twin: std::net::SocketAddr) {
        self.split.insert(public_port, twin);
    }

    /// The address a connect of `fd` of process `pid` to the `len`-byte address at `addr` names,
    /// if `fd` is a TCP socket not yet connecting or connected (a first connect, which may go to
    /// a server outside dara).
    pub fn fresh_tcp_connect(&mut self, pid: u32, fd: i32, addr: u64, len: u32) -> Option<std::net::SocketAddr> {
        let dup = self.dup(pid, fd).ok()??;
        if socket_kind(&dup) != kind::TCP || tcp_state(&dup) != Some(TCP_CLOSE) {
            return None;
        }
        inet_address(&read_address(pid, addr, len)?)
    }

    /// The connect granted last goes to `to` instead of the address it names (dara's socket that
    /// stands for an outside server): its settle waits for the handshake with `to`.
    pub fn connect_goes_to(&mut self, to: std::net::SocketAddr) {
        let mark = self.listener_mark(to);
        if let Some(settle) = self.settles.last_mut().filter(|s| s.connect_to.is_some()) {
            (settle.connect_to, settle.group_mark) = (Some(to), mark);
        }
    }

    /// The view of a pending `connect` on `fd` of process `pid` to the `len`-byte address at
    /// `addr` in the target.
    pub(super) fn connect_view(&mut self, process: ProcessId, pid: u32, fd: i32, flags: NetFlags, addr: u64, len: u32) -> Result<NetView, ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(NetView { ready: true, ..closed_view() }) };
        let ep = self.endpoint(process, fd, &dup);
        let to = match (flags.nonblocking(), ep.kind, tcp_state(&dup)) {
            (true, _, _) => None,
            // Connecting already (a connect a signal interrupted goes on in the background, see
            // `park_if_dropped`): the call waits for that to end; connected: it answers at once.
            (false, kind::TCP, Some(TCP_SYN_SENT)) => Some(Destination { inode: NO_LISTENER, full: true }),
            (false, kind::TCP, Some(state)) if state != TCP_CLOSE => None,
            _ => self.destination(pid, ep.kind, addr, len),
        };
        let listener = match &to {
            Some(d) if d.inode != NO_LISTENER => self.id_of(d.inode),
            _ => self.peer(ep),
        };
        let ready = !to.is_some_and(|d| d.full);
        Ok(NetView { ready, ready_entries: u32::from(ready), size: 0, obj: describe(ep.id, listener, ep.kind, &[]) })
    }

    /// The listener a connect of a socket of kind `k` to the address at `addr` goes to, if one
    /// listens there.
    fn destination(&mut self, pid: u32, k: u64, addr: u64, len: u32) -> Option<Destination> {
        let raw = read_address(pid, addr, len)?;
        let diag = self.sock_diag()?;
        match (k, inet_address(&raw)) {
            (kind::TCP, Some(to)) => self.tcp_destination(to),
            (kind::UNIX_STREAM, None) if i32::from(raw.ss_family) == libc::AF_UNIX => {
                let l = unix_listener(diag, pid, &raw, len)?;
                Some(Destination { inode: l.inode, full: crate::sockdiag::is_full(l.queued, l.backlog) })
            }
            _ => None,
        }
    }

    /// In a recording and its replay, TCP connects may go to servers outside dara (see
    /// [`NetProbe::fresh_tcp_connect`]).
    pub fn take_outside_servers(&mut self) {
        self.outside_servers = true;
    }

    /// The TCP listener a connection to `to` reaches, if one listens there. Where servers
    /// outside dara are taken, every traced listener is split, so a listener that is not is an
    /// outside server's (dara dials it): not looked up, nor named (a replay has no such listener),
    /// and never full.
    fn tcp_destination(&mut self, to: std::net::SocketAddr) -> Option<Destination> {
        if self.outside_servers && !self.split.contains_key(&to.port()) {
            return Some(Destination { inode: NO_LISTENER, full: false });
        }
        self.sock_diag()?;
        let diag = self.diag.as_ref()?;
        let owed = self.owed.get(&owed_connection(to)).copied().unwrap_or(0);
        let l = tcp_listener(diag, to)?;
        let waiting = l.queued.max(owed);
        // A recording's public listener is dara's: what it holds goes on to the twin.
        match self.split.get(&to.port()).and_then(|&twin| tcp_listener(diag, twin)) {
            Some(twin) => Some(Destination { inode: twin.inode, full: crate::sockdiag::is_full(twin.queued + waiting, twin.backlog) }),
            None => Some(Destination { inode: l.inode, full: crate::sockdiag::is_full(waiting, l.backlog) }),
        }
    }

    /// After a granted TCP connect to `to` (descriptor `fd` of `pid`, our duplicate `dup`):
    /// whether a full listener dropped its SYN (the handshake is not done and the listener is
    /// full). Such a connect (a non-blocking one; a blocking one waited for room) is parked
    /// instead of settled: Linux sends the SYN again 1 s later, then 3 s, 7 s ... after the first.
    pub(super) fn park_if_dropped(&mut self, pid: u32, fd: i32, dup: &OwnedFd, to: Option<std::net::SocketAddr>) -> bool {
        let Some(to) = to else { return false };
        if handshake_over(dup) || tcp_state(dup) != Some(TCP_SYN_SENT) || !self.tcp_destination(to).is_some_and(|d| d.full) {
            return false;
        }
        self.parked.push(ParkedConnect { pid, fd, inode: inode_of(dup), to });
        true
    }

    /// At every quiet point after a granted operation: a parked connect whose listener has room
    /// now (an accept made it) is waited for until the kernel's retransmitted SYN completes it
    /// (real time, up to [`RETRANSMIT_LIMIT`]), so nothing is probed before it shows; then one
    /// connection is owed to the listener as after any connect. One the program closed is
    /// forgotten.
    pub(super) fn settle_parked_connects(&mut self) -> Result<(), ProbeError> {
        for p in std::mem::take(&mut self.parked) {
            let Some(dup) = self.dup(p.pid, p.fd)? else { continue };
            if inode_of(&dup) != p.inode {
                continue;
            }
            if !handshake_over(&dup) {
                if self.tcp_destination(p.to).is_none_or(|d| d.full) {
                    self.parked.push(p);
                    continue;
                }
                let started = Instant::now();
                while !handshake_over(&dup) {
                    if started.elapsed() > RETRANSMIT_LIMIT {
                        return Err(ProbeError(format!("a connect to {} whose SYN the full listener dropped was not completed by its retransmission within {} s of an accept making room; the run was stopped", p.to, RETRANSMIT_LIMIT.as_secs())));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            let ep = self.endpoint(0, p.fd, &dup);
            self.owe_connection(p.pid, ep, &dup);
        }
        Ok(())
    }
}

/// Whether a connecting socket's handshake is over (connected, refused or reset).
fn handshake_over(fd: &OwnedFd) -> bool {
    poll_now(fd, libc::POLLOUT) & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0
}

fn inode_of(fd: &OwnedFd) -> u64 {
    // SAFETY: fstat fills a plain struct for a descriptor we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0 {
        st.st_ino
    } else {
        0
    }
}

/// The socket address of `len` bytes at `addr` in process `pid`.
pub(super) fn read_address(pid: u32, addr: u64, len: u32) -> Option<libc::sockaddr_storage> {
    let n = (len as usize).min(MAX_ADDRESS);
    if addr == 0 || n < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut out: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: a byte view of our own value, n <= its size.
    let bytes = unsafe { std::slice::from_raw_parts_mut((&mut out as *mut libc::sockaddr_storage).cast::<u8>(), n) };
    (dara_tracer::procfs::read_memory(pid, addr, bytes).ok()? == n).then_some(out)
}

/// The TCP listener a connection to `to` reaches, as the kernel's lookup prefers: one bound to
/// that very address, then one on its family's unspecified address, then (for IPv4) an IPv6
/// wildcard listener, which takes IPv4 connections unless it is IPv6-only.
fn tcp_listener(diag: &SockDiag, to: std::net::SocketAddr) -> Option<InetListener> {
    tcp_listeners_reached(diag, to).into_iter().next()
}

/// Every TCP listener on the address a connection to `to` reaches: those on its very address
/// if one listens there, else those of its family on every address, else (for IPv4) the IPv6
/// ones on every address. Several with `SO_REUSEPORT` (see `groups`).
pub(super) fn tcp_listeners_reached(diag: &SockDiag, to: std::net::SocketAddr) -> Vec<InetListener> {
    let family = if to.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let on_port = |family| diag.inet_listeners(family).into_iter().filter(move |l| l.local.port() == to.port());
    let mine: Vec<InetListener> = on_port(family).collect();
    if mine.iter().any(|l| l.local.ip() == to.ip()) {
        return mine.into_iter().filter(|l| l.local.ip() == to.ip()).collect();
    }
    let wildcard: Vec<InetListener> = mine.into_iter().filter(|l| l.local.ip().is_unspecified()).collect();
    if !wildcard.is_empty() || !to.is_ipv4() {
        return wildcard;
    }
    on_port(libc::AF_INET6).filter(|l| l.local.ip().is_unspecified()).collect()
}

/// The Unix listener bound to the name in `raw` (`len` bytes), the path resolved as process
/// `pid` sees it.
fn unix_listener(diag: &SockDiag, pid: u32, raw: &libc::sockaddr_storage, len: u32) -> Option<UnixListener> {
    // SAFETY: the family says the storage holds a sockaddr_un, which fits in it.
    let un: libc::sockaddr_un = unsafe { std::ptr::read((raw as *const libc::sockaddr_storage).cast()) };
    let path_len = (len as usize).saturating_sub(std::mem::size_of::<libc::sa_family_t>()).min(un.sun_path.len());
    let name: Vec<u8> = un.sun_path[..path_len].iter().map(|&c| c as u8).collect();
    let listeners = diag.unix_listeners();
    if name.first() == Some(&0) {
        return listeners.into_iter().find(|l| l.name == name);
    }
    let path = name.split(|&b| b == 0).next().unwrap_or_default();
    if path.is_empty() {
        return None;
    }
    let task = dara_tracer::procfs::live_task_dir(pid);
    let root = if path[0] == b'/' { format!("{task}/root") } else { format!("{task}/cwd/") };
    let mut full = std::ffi::OsString::from(root);
    full.push(std::ffi::OsStr::from_bytes(path));
    let st = std::fs::metadata(full).ok()?;
    listeners.into_iter().find(|l| l.file.is_some_and(|(ino, _)| ino == st.ino() as u32))
}
