//! NetProbe's side of the ledger: a granted network operation is recorded ([`Settle`]) and settled
//! at the next quiet point (sends, connects, datagrams owed to a port), and what is owed is paid
//! back by accepts, datagram receives and receive-buffer drops.

use super::*;

impl NetProbe {
    /// A network request of a thread of process `pid` was granted (or timed out).
    /// Called before the thread runs: a UDP send's receiver is looked up now.
    pub fn granted(&mut self, thread: ThreadId, pid: u32, request: Request, timed_out: bool) {
        if request.op() == Op::NetEpollWait {
            self.epolls.wait_ended(thread);
        }
        let (datagram_to, datagram_group) = match (request, timed_out) {
            (R::NetSend { fd, dest_port, .. }, false) => self.datagram_receiver(pid, fd, dest_port).unzip(),
            _ => (None, None),
        };
        if let R::NetClose { fd, how: CloseHow::Close } = request {
            // The descriptor number may name another socket next time.
            self.probed.remove(&(pid, fd));
        }
        let sender = match (request, timed_out) {
            (R::NetSend { fd, .. }, false) => self.send_dups.remove(&(pid, fd)).or_else(|| self.dup(pid, fd).ok().flatten()),
            _ => None,
        };
        let connect_to = match (request, timed_out) {
            (R::NetConnect { addr, len, .. }, false) => backlog::read_address(pid, addr.0, len).and_then(|a| inet_address(&a)),
            _ => None,
        };
        // A port several sockets share: what they hold before the thread runs (see `groups`).
        let group_mark = match (datagram_group, connect_to) {
            (Some(group), _) => groups::udp_mark(group),
            (_, Some(to)) => self.listener_mark(to),
            _ => None,
        };
        self.settles.push(Settle { pid, request, timed_out, datagram_to, sent_total: None, sender, connect_to, group_mark });
    }

    /// A thread of process `pid` sent on TCP socket `fd` without a post (coarse steps): settled
    /// at the next quiet point like a granted send. `total`: the socket's (local port, peer port,
    /// bytes sent in all) if the thread could tell.
    pub fn sent_unposted(&mut self, pid: u32, fd: i32, total: Option<(u16, u16, u64)>) {
        let request = R::NetSend { fd, len: 0, flags: NetFlags::default(), head: [0; 8], dest_port: 0 };
        self.settles.push(Settle { pid, request, timed_out: false, datagram_to: None, sent_total: total, sender: None, connect_to: None, group_mark: None });
    }

    /// The destination port of a UDP send on `fd` (`dest_port`, or the connected peer's), if a
    /// socket is bound to it now, with the sockets bound to it; None for other sockets and for a
    /// datagram the kernel will drop.
    pub(super) fn datagram_receiver(&mut self, pid: u32, fd: i32, dest_port: u16) -> Option<(u16, crate::procfs::UdpPortGroup)> {
        if self.probed.get(&(pid, fd)).is_some_and(|ep| ep.kind != kind::UDP) {
            return None;
        }
        let dup = self.dup(pid, fd).ok()??;
        if socket_kind(&dup) != kind::UDP {
            return None;
        }
        let port = if dest_port != 0 { dest_port } else { inet_key(&dup, kind::UDP)?.2 };
        if port == 0 {
            return None;
        }
        // Neither table readable: taken for bound, as a group of one.
        let group = crate::procfs::udp_port_group(pid, port).unwrap_or(crate::procfs::UdpPortGroup { sockets: 1, shared: 1, arrivals: 0 });
        (group.sockets > 0).then_some((port, group))
    }

    /// Settles what the operations granted since the last call left in flight.
    pub fn settle(&mut self, own: OwnReceived) -> Result<(), ProbeError> {
        for s in std::mem::take(&mut self.settles) {
            let fd = s.request.fd().unwrap_or(-1);
            match (s.request.op(), s.timed_out) {
                (Op::NetSend, false) => match (s.sent_total, s.datagram_to.zip(s.group_mark)) {
                    (Some(total), _) if own_received_all(total, own)? => {}
                    (_, Some((port, mark))) => self.wait_udp_group(s.pid, port, mark)?,
                    _ => self.settle_send(s.pid, fd, s.sender, s.datagram_to, own)?,
                },
                (Op::NetConnect, false) => self.settle_connect(s.pid, fd, s.connect_to, s.group_mark)?,
                (Op::NetAccept, false) => self.pay_back(s.pid, fd, kind::TCP)?,
                // Only a datagram pays something back: a stream receive is settled already.
                (Op::NetRecv, false) if self.probed.get(&(s.pid, fd)).is_none_or(|ep| ep.kind == kind::UDP) => self.pay_back(s.pid, fd, kind::UDP)?,
                _ => {}
            }
        }
        self.settle_parked_connects()?;
        self.no_outside_peer(|| "a traced process".to_string())
    }

    /// dara sent a datagram to the UDP socket bound to `port`: the next probe of it waits until
    /// the datagram shows.
    pub fn owe_datagram(&mut self, port: u16) {
        *self.owed.entry((kind::UDP, port, 0)).or_default() += 1;
    }

    /// Datagrams traced threads sent to dara's UDP socket bound to `port` that dara has not read
    /// yet; the caller reads them (waiting for each) and so pays them back.
    pub fn take_owed_datagrams(&mut self, port: u16) -> u32 {
        self.owed.remove(&(kind::UDP, port, 0)).unwrap_or(0)
    }

    /// `poll` that first waits for anything owed to `ep` to show, and on a TCP socket for bytes
    /// its traced peer wrote and it has not read: those behind a window its reader's last read
    /// opened leave the writer a moment after that read, through the softirq.
    pub(super) fn settled_poll(&mut self, fd: &OwnedFd, ep: Endpoint, events: libc::c_short) -> Result<libc::c_short, ProbeError> {
        let keys = owed_keys(fd, ep);
        let owed = |me: &Self| keys.iter().flatten().filter_map(|k| me.owed.get(k)).sum::<u32>();
        let revents = poll_now(fd, events);
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            return Ok(revents);
        }
        let unread = events & libc::POLLIN != 0 && ep.kind == kind::TCP && self.traced_writes(fd, ep).is_some_and(|(written, read)| written > read);
        if owed(self) == 0 && !unread {
            return Ok(revents);
        }
        if ep.key.is_some_and(|(k, _, remote)| k == kind::TCP && remote == 0) {
            // A connection owed to a listener that defers it until data comes (the listener was
            // not looked at before the connect): its handshake is answered again in a second.
            accept_without_data(fd);
        }
        let started = Instant::now();
        while started.elapsed() < SETTLE_LIMIT {
            if ep.kind == kind::UDP {
                self.pay_back_drops(fd, ep);
                if owed(self) == 0 {
                    return Ok(poll_now(fd, events));
                }
            }
            std::thread::yield_now();
            let revents = poll_now(fd, events);
            if revents != 0 {
                return Ok(revents);
            }
        }
        Err(ProbeError(format!("loopback delivery to endpoint e{} did not arrive within {} ms although a traced thread sent it; the run was stopped rather than decided on a racy probe", ep.id, SETTLE_LIMIT.as_millis())))
    }

    /// `sender`: the socket the send was granted on, when known (else descriptor `fd` now).
    pub(super) fn settle_send(&mut self, pid: u32, fd: i32, sender: Option<OwnedFd>, datagram_to: Option<u16>, own: OwnReceived) -> Result<(), ProbeError> {
        if let Some(port) = datagram_to {
            self.owe_datagram(port);
            // A socket's first send binds it: learn its port, which the datagram comes from (a
            // receiver's probe tells traced senders from outside ones by it).
            if self.probed.get(&(pid, fd)).is_some_and(|ep| ep.key.is_some_and(|k| k.1 == 0)) {
                if let Some(dup) = self.dup(pid, fd)? {
                    let ep = self.endpoint(0, fd, &dup);
                    self.probed.insert((pid, fd), ep);
                }
            }
            return Ok(());
        }
        if self.probed.get(&(pid, fd)).is_some_and(|ep| ep.kind != kind::TCP) {
            return Ok(());
        }
        let dup = match sender {
            Some(dup) => dup,
            None => match self.dup(pid, fd)? {
                Some(dup) => dup,
                None => return Ok(()),
            },
        };
        // A socket not probed yet is not named here: which sockets get endpoint ids, in which
        // order, is part of the trace, and whether a send takes this slower way depends on timing
        // (bytes Nagle held back), so naming it here made replays diverge ("close e4" / "close e5").
        let (k, addrs, name) = match self.probed.get(&(pid, fd)) {
            Some(ep) => (ep.kind, ep.addrs, format!("endpoint e{}", ep.id)),
            None => (socket_kind(&dup), addresses(&dup), format!("descriptor {fd} of pid {pid}")),
        };
        if k != kind::TCP {
            return Ok(());
        }
        let started = Instant::now();
        self.sock_diag();
        while !sent_bytes_arrived(&dup, addrs, self.diag.as_ref(), false, own) {
            if started.elapsed() > SETTLE_LIMIT {
                return Err(ProbeError(format!("bytes sent on {name} were not acknowledged by the loopback peer within {} ms; the run was stopped", SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        if let (Some((local, remote)), Some(t)) = (addrs, TcpSnapshot::of(&dup)) {
            self.written.insert((local.port(), remote.port()), t.sent + t.not_sent);
        }
        Ok(())
    }

    /// `to`: where the connect goes (read when it was granted); `group_mark`: what the listeners
    /// sharing its port held then, when several do (see `groups`).
    pub(super) fn settle_connect(&mut self, pid: u32, fd: i32, to: Option<std::net::SocketAddr>, group_mark: Option<u64>) -> Result<(), ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(()) };
        let ep = self.endpoint(0, fd, &dup);
        if ep.kind != kind::TCP {
            return Ok(());
        }
        if self.park_if_dropped(pid, fd, &dup, to) {
            return Ok(());
        }
        let started = Instant::now();
        loop {
            let revents = poll_now(&dup, libc::POLLOUT);
            if revents & libc::POLLERR != 0 {
                return Ok(()); // refused: nothing owed
            }
            if revents & libc::POLLOUT != 0 {
                break;
            }
            if started.elapsed() > SETTLE_LIMIT {
                return Err(ProbeError(format!("the loopback TCP handshake of endpoint e{} did not complete within {} ms; the run was stopped", ep.id, SETTLE_LIMIT.as_millis())));
            }
            std::thread::yield_now();
        }
        if let Some((to, mark)) = to.zip(group_mark) {
            // In one of the group's queues already: nothing is owed to a particular listener.
            self.wait_listener_group(to, mark)?;
            self.connection_made(pid, ep, &dup, false);
            return Ok(());
        }
        self.owe_connection(pid, ep, &dup);
        Ok(())
    }

    /// A connect whose handshake is done: one connection is owed to the listener.
    pub(super) fn owe_connection(&mut self, pid: u32, ep: Endpoint, dup: &OwnedFd) {
        self.connection_made(pid, ep, dup, true);
    }

    /// A connect whose handshake is done: noted, and (`owed`) owed to the listener.
    fn connection_made(&mut self, pid: u32, ep: Endpoint, dup: &OwnedFd, owed: bool) {
        // A socket with no peer was refused (its error already taken by a second connect call);
        // one already counted is being checked again by a second connect call.
        let key = ep.key.or_else(|| inet_key(dup, kind::TCP));
        if let Some((_, local, remote)) = key {
            // A new connection on an old pair of ports: what the old one wrote counts no more.
            self.written.remove(&(local, remote));
            self.written.remove(&(remote, local));
        }
        if key.is_some_and(|k| k.2 != 0) {
            if let Some(server) = socket_address(dup, true).filter(|_| self.connected.insert(ep.id)) {
                if owed {
                    *self.owed.entry(owed_connection(server)).or_default() += 1;
                }
                self.connections.push((pid, server));
            }
        }
    }

    /// The connections made since the last call: (connecting pid, server address).
    pub fn take_connections(&mut self) -> Vec<(u32, std::net::SocketAddr)> {
        std::mem::take(&mut self.connections)
    }

    /// Drops the datagram at the head of `fd`'s receive queue in process `pid` (a `DropDatagram`
    /// fault), as if the network had lost it.
    pub fn drop_datagram(&mut self, pid: u32, fd: i32) -> Result<(), ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(()) };
        let mut byte = 0u8;
        // SAFETY: reads at most one byte into a live local; MSG_TRUNC discards the rest of the
        // datagram, MSG_DONTWAIT never blocks.
        let n = unsafe { libc::recv(dup.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
        if n >= 0 {
            self.pay_back(pid, fd, kind::UDP)?;
        }
        Ok(())
    }

    /// Datagrams the UDP socket `fd` dropped because its receive buffer was full (the kernel's
    /// per-socket drop count, `SO_MEMINFO`) will never show: each one pays back an owed datagram.
    pub(super) fn pay_back_drops(&mut self, fd: &OwnedFd, ep: Endpoint) {
        let Some(key) = ep.key else { return };
        let mut meminfo = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
        let mut len = std::mem::size_of_val(&meminfo) as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `meminfo` and updates `len`.
        let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, SO_MEMINFO, meminfo.as_mut_ptr().cast(), &mut len) };
        if rc != 0 || (len as usize) < std::mem::size_of_val(&meminfo) {
            return;
        }
        let drops = meminfo[libc::SK_MEMINFO_DROPS as usize];
        let paid = self.paid_drops.entry(ep.id).or_default();
        let new = drops.saturating_sub(*paid);
        *paid = drops;
        if let Some(n) = self.owed.get_mut(&key) {
            *n = n.saturating_sub(new);
        }
    }

    /// An accept (TCP listener) or a datagram receive took one owed item.
    pub(super) fn pay_back(&mut self, pid: u32, fd: i32, want: u64) -> Result<(), ProbeError> {
        let Some(dup) = self.dup(pid, fd)? else { return Ok(()) };
        let ep = self.endpoint(0, fd, &dup);
        if ep.kind == want {
            let keys = owed_keys(&dup, ep);
            let key = keys.iter().flatten().find(|k| self.owed.get(k).is_some_and(|&n| n > 0));
            if let Some(n) = key.and_then(|k| self.owed.get_mut(k)) {
                *n -= 1;
            }
        }
        Ok(())
    }

    /// A process was killed (a crash fault): what was owed to a port nobody listens on or is
    /// bound to any more died with its socket, and a node restarted on the same port must not
    /// wait for it.
    pub fn forget_owed_to_closed_ports(&mut self) {
        self.owed.retain(|&(k, port, _), _| port_bound(k & !OWED_V6, port));
    }

    /// dara accepted a connection a traced client made to `server`: it is no longer owed there.
    pub fn connection_taken(&mut self, server: std::net::SocketAddr) {
        if let Some(n) = self.owed.get_mut(&owed_connection(server)) {
            *n = n.saturating_sub(1);
        }
    }
}
