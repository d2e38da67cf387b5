//! Endpoint identity: what the driver learnt about a descriptor ([`Endpoint`]) and the port keys
//! (`PortKey`) it is found and owed under.

use super::*;
use dara_tracer::procfs::{self, pidfd_getfd};

/// An address pair of an INET socket: (protocol kind, local port, remote port or 0).
pub(super) type PortKey = (u64, u16, u16);

/// Marks, in the `owed` map, a TCP connection owed to an IPv6 listener. One port may have a
/// listener of each family (mosquitto, nginx with `listen 80` and `listen [::]:80`), and a
/// connection only ever shows on its own family's (or on a dual-stack IPv6 listener): keyed by the
/// port alone, dara waited on the IPv4 listener for a connection made to `[::1]`, for good.
pub(super) const OWED_V6: u64 = 1 << 62;

/// The `owed` key of a TCP connection to `server`.
pub(super) fn owed_connection(server: std::net::SocketAddr) -> PortKey {
    let v6 = matches!(server, std::net::SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_none());
    (kind::TCP | if v6 { OWED_V6 } else { 0 }, server.port(), 0)
}

/// (local, remote) addresses of a connected INET socket.
pub(crate) type AddressPair = (std::net::SocketAddr, std::net::SocketAddr);

/// What the driver learnt about one descriptor.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Endpoint {
    pub(super) id: u64,
    pub(super) kind: u64,
    pub(super) key: Option<PortKey>,
    /// (local, remote) addresses of a connected TCP socket (what sock_diag is asked about).
    pub(super) addrs: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
}

impl Endpoint {
    /// Whether what is known of it stays true as long as the socket or pipe lives: a connected
    /// TCP socket's addresses never change, a Unix socket and a pipe have none.
    pub(super) fn is_stable(&self) -> bool {
        match self.kind {
            kind::TCP => self.addrs.is_some(),
            kind::UNIX_STREAM | kind::UNIX_DGRAM | kind::PIPE => true,
            _ => false,
        }
    }
}


/// (kind, local port, remote port or 0) of an INET socket.
/// The `owed` keys what is owed to endpoint `ep` (descriptor `fd`) is counted under: its own key,
/// but for a TCP listener the key of its family's connections, and of both families' for a
/// dual-stack IPv6 listener (`IPV6_V6ONLY` off), which IPv4 clients reach too.
pub(super) fn owed_keys(fd: &OwnedFd, ep: Endpoint) -> [Option<PortKey>; 2] {
    let Some(key) = ep.key else { return [None, None] };
    if ep.kind != kind::TCP || key.2 != 0 {
        return [Some(key), None];
    }
    match socket_address(fd, false) {
        Some(std::net::SocketAddr::V6(_)) => {
            let v6 = (kind::TCP | OWED_V6, key.1, 0);
            let v6_only = sockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) != Some(0);
            [Some(v6), (!v6_only).then_some(key)]
        }
        _ => [Some(key), None],
    }
}

impl NetProbe {
    /// A process of the execution (kernel pid): its Unix sockets' peers are traced.
    pub fn add_traced(&mut self, pid: u32) {
        self.traced.insert(pid);
    }

    /// `own`, dara's duplicate of an eventfd, stands for a `timerfd` (`timer`), or no longer
    /// does (it is about to be closed).
    pub fn timer_file(&mut self, own: i32, timer: bool) {
        if timer {
            self.timer_files.insert(own);
        } else {
            self.timer_files.remove(&own);
        }
    }

    /// dara sends datagrams to the program from a socket with this port (the relay).
    pub fn add_relay_port(&mut self, port: u16) {
        self.relay_ports.insert(port);
    }

    /// Whether a datagram from this port comes from a traced thread's socket (or from dara).
    pub fn is_traced_datagram_source(&self, port: u16) -> bool {
        self.by_key.contains_key(&(kind::UDP, port, 0)) || self.relay_ports.contains(&port)
    }

    /// Resets every TCP connection between a process of `a` and a process of `b` (a `ConnReset`
    /// or `Partition` fault): `connect(AF_UNSPEC)` on one end sends a reset, so both ends see
    /// ECONNRESET, as when a middlebox or a rebooted peer kills the connection. Waits until the
    /// other end has taken the reset in, so the next probe sees it. Returns how many.
    pub fn reset_between(&mut self, a: &[u32], b: &[u32]) -> Result<usize, ProbeError> {
        let theirs = self.connections(b)?;
        let mut count = 0;
        for (key, mine) in self.connections(a)? {
            let Some((_, other)) = theirs.iter().find(|(k, _)| *k == (key.0, key.2, key.1)) else { continue };
            reset(&mine);
            let started = Instant::now();
            while tcp_state(other).is_some_and(|s| s != TCP_CLOSE) {
                if started.elapsed() > SETTLE_LIMIT {
                    return Err(ProbeError(format!("a reset connection (ports {} and {}) did not close within {} s", key.1, key.2, SETTLE_LIMIT.as_secs())));
                }
                std::thread::yield_now();
            }
            count += 1;
        }
        Ok(count)
    }

    /// Established TCP connections of the processes `pids`: their address pair and our duplicate.
    pub(super) fn connections(&mut self, pids: &[u32]) -> Result<Vec<(PortKey, OwnedFd)>, ProbeError> {
        let mut found = Vec::new();
        for &pid in pids {
            let Ok(dir) = std::fs::read_dir(format!("{}/fd", procfs::live_task_dir(pid))) else { continue };
            let mut fds: Vec<i32> = dir
                .flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            fds.sort_unstable();
            for fd in fds {
                let Some(dup) = self.dup(pid, fd)? else { continue };
                if socket_kind(&dup) != kind::TCP {
                    continue;
                }
                if let Some(key) = inet_key(&dup, kind::TCP).filter(|k| k.2 != 0 && tcp_state(&dup) != Some(TCP_CLOSE)) {
                    found.push((key, dup));
                }
            }
        }
        Ok(found)
    }

    /// Whether a traced process has a TCP endpoint with local port `local` connected to port
    /// `remote` (seen when its connect was settled): a client dara accepted on a public socket
    /// with that address pair is traced, not outside.
    pub fn is_traced_endpoint(&self, local: u16, remote: u16) -> bool {
        self.by_key.contains_key(&(kind::TCP, local, remote))
    }

    /// The target's descriptor `fd` (process `pid`) as dara's own; `None` if it has no such
    /// descriptor. The caller decides how long to keep it.
    pub fn duplicate(&mut self, pid: u32, fd: i32) -> Result<Option<OwnedFd>, ProbeError> {
        self.dup(pid, fd)
    }

    /// The target's descriptor `fd` as our own, `None` if the target has no such descriptor.
    pub(super) fn dup(&mut self, pid: u32, fd: i32) -> Result<Option<OwnedFd>, ProbeError> {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.pidfds.entry(pid) {
            let Some(pidfd) = procfs::pidfd_open(pid) else {
                let err = std::io::Error::last_os_error();
                return Err(ProbeError(format!("pidfd_open of pid {pid} failed ({err}); dara needs Linux 5.6+ to look at the target's sockets")));
            };
            slot.insert(pidfd);
        }
        match pidfd_getfd(&self.pidfds[&pid], fd) {
            Ok(dup) => return Ok(Some(dup)),
            Err(err) if matches!(err.raw_os_error(), Some(libc::EBADF) | Some(libc::ESRCH)) => {}
            Err(err) => return Err(ProbeError(format!("cannot look at a descriptor of pid {pid} (pidfd_getfd: {err})"))),
        }
        // A process whose main thread ended with `pthread_exit` while others run on has no
        // descriptor table behind its pidfd (the leader let go of it as it exited) though its
        // threads still share one: look through one of them instead. Without this, whether a
        // descriptor was found depended on how far the leader's exit had got: a pipe was taken
        // for closed, its reader granted and blocked in the kernel.
        let Some(thread) = leaderless_thread(pid) else { return Ok(None) };
        let Ok(dup) = pidfd_getfd(&thread, fd) else { return Ok(None) };
        self.pidfds.insert(pid, thread);
        Ok(Some(dup))
    }

    /// The endpoint behind `dup` if it has a name already; else what it is (kind, ports,
    /// addresses) under no name (id 0), and nothing is noted of it. For looks that happen only
    /// sometimes (waiting for what an epoll set's interest list is owed): which endpoints are
    /// named, in which order, is part of the trace, so only looks that every run makes at the same
    /// step may name one (unbound's recording named an epoll set's targets while a datagram from
    /// outside was owed to one of them, and its replay, in which that look found nothing owed,
    /// named them in the other order: "expected recv e6, offered recv e5").
    pub(super) fn endpoint_unnamed(&self, dup: &OwnedFd) -> Endpoint {
        // SAFETY: fstat fills a plain struct for a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(dup.as_raw_fd(), &mut st) };
        if let Some(ep) = self.stable.get(&st.st_ino).filter(|_| rc == 0) {
            return *ep;
        }
        let k = if rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK { socket_kind(dup) } else { kind::UNKNOWN };
        shaped(0, k, dup).0
    }

    /// Identifies the endpoint behind `dup` (descriptor `fd` of `process`), naming it on first sight.
    pub(super) fn endpoint(&mut self, process: ProcessId, fd: i32, dup: &OwnedFd) -> Endpoint {
        // SAFETY: fstat fills a plain struct for a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(dup.as_raw_fd(), &mut st) };
        if rc == 0 && matches!(st.st_mode & libc::S_IFMT, libc::S_IFSOCK | libc::S_IFIFO) {
            if let Some(ep) = self.stable.get(&st.st_ino) {
                return *ep;
            }
        }
        let (inode_key, k) = match st.st_mode & libc::S_IFMT {
            _ if rc != 0 => (ANON_INODE_KEY | (u64::from(process) << 32) | fd as u32 as u64, kind::UNKNOWN),
            libc::S_IFSOCK => (st.st_ino, socket_kind(dup)),
            libc::S_IFIFO => (st.st_ino, kind::PIPE),
            _ => (ANON_INODE_KEY | (u64::from(process) << 32) | fd as u32 as u64, self.timer_or(anon_kind(dup), dup)),
        };
        let id = self.id_of(inode_key);
        let (ep, key) = shaped(id, k, dup);
        if let Some(key) = key {
            self.by_key.insert(key, id);
            if k == kind::UDP {
                self.by_key.insert((k, key.1, 0), id);
            }
        }
        if k == kind::UNIX_STREAM {
            if let Some(peer) = unix_peer_pid(dup).filter(|p| !self.traced.contains(p) && *p != std::process::id()) {
                self.outside_peer = Some(format!("a Unix-socket connection from process {peer}, which dara does not trace,"));
            }
        }
        if rc == 0 && ep.is_stable() {
            self.stable.insert(st.st_ino, ep);
        }
        ep
    }

    /// `kind`, or [`kind::TIMERFD`] for an eventfd that stands for a timerfd.
    fn timer_or(&self, k: u64, dup: &OwnedFd) -> u64 {
        let timer = k == kind::EVENTFD && same_file_as_any(dup, &self.timer_files);
        if timer {
            kind::TIMERFD
        } else {
            k
        }
    }

    /// The logical id of the object with this key (an inode, or an anonymous inode's key), given
    /// on first sight.
    pub(super) fn id_of(&mut self, key: u64) -> u64 {
        let next = self.ids.len() as u64;
        *self.ids.entry(key).or_insert(next)
    }

    pub(super) fn peer(&self, ep: Endpoint) -> u64 {
        match ep.key {
            Some((k, l, r)) if r != 0 => self.lookup(&[(k, r, l), (k, r, 0)]),
            _ => NO_ENDPOINT,
        }
    }

    pub(super) fn lookup(&self, keys: &[PortKey]) -> u64 {
        keys.iter().find_map(|k| self.by_key.get(k)).copied().unwrap_or(NO_ENDPOINT)
    }
}

/// A pidfd of a live thread of `pid` when its main thread has ended (a zombie while others run
/// on); `None` while the main thread lives, when no other thread is left, or on kernels without
/// thread pidfds (before 6.9).
fn leaderless_thread(pid: u32) -> Option<OwnedFd> {
    procfs::thread_pidfd_open(procfs::leaderless_thread_id(pid)?).ok()
}

/// Endpoint `id` of kind `k` behind `dup`: its ports and a connected TCP socket's addresses, and
/// the ports as the kernel gives them (the endpoint's own key leaves out a UDP socket's peer:
/// datagrams come from anyone).
fn shaped(id: u64, k: u64, dup: &OwnedFd) -> (Endpoint, Option<PortKey>) {
    let key = if k == kind::TCP || k == kind::UDP { inet_key(dup, k) } else { None };
    let addrs = if k == kind::TCP && key.is_some_and(|k| k.2 != 0) { addresses(dup) } else { None };
    (Endpoint { id, kind: k, key: key.map(|(k, l, r)| if k == kind::UDP { (k, l, 0) } else { (k, l, r) }), addrs }, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look that names nothing leaves names to the looks every run makes, in their order.
    #[test]
    fn an_unnamed_look_takes_no_name() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = OwnedFd::from(std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        let b = OwnedFd::from(listener.accept().unwrap().0);
        let mut probe = NetProbe::default();
        let unnamed = probe.endpoint_unnamed(&b);
        assert_eq!(unnamed.kind, kind::TCP);
        assert!(unnamed.addrs.is_some(), "what it is is known");
        let named_a = probe.endpoint(0, 3, &a);
        let named_b = probe.endpoint(0, 4, &b);
        assert_eq!((named_a.id, named_b.id), (0, 1), "the first named endpoint is e0, as if the unnamed look had not happened");
        assert_eq!(probe.endpoint_unnamed(&b).id, named_b.id, "a named endpoint keeps its name");
    }
}
