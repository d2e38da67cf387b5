//! The execution's view of the target's network: the probe that checks and settles sockets,
//! pipes and eventfds (`netprobe`, which owns the delivery ledger), whether the model's readiness
//! views are stale, which listening sockets were found to be traced servers, and whether a
//! connection was made since partitions were last enforced.
use std::collections::BTreeSet;

use dara_abi::Op;

use super::Execution;
use crate::choice::ThreadId;
use crate::model::Request;
use crate::netprobe::NetProbe;
use crate::outcome::Outcome;
use crate::procfs;

#[derive(Default)]
pub(super) struct Network {
    /// Probes and settles the target's sockets, pipes and eventfds (see `netprobe`).
    pub(super) probe: NetProbe,
    /// A network operation ran or a process died since the model's readiness views were taken.
    pub(super) dirty: bool,
    /// Inodes of listening sockets found held by a traced process (see `is_traced_listener`).
    traced_listeners: BTreeSet<u64>,
    /// A connect or accept ran since partitions were last enforced.
    pub(super) new_connections: bool,
}

impl Network {
    /// Whether a listening socket on `port` that a traced process (`pid`) connected to is held by
    /// one of the `traced` processes (kernel pids). Listeners found traced are remembered
    /// (connecting again is common).
    pub(super) fn is_traced_listener(&mut self, pid: u32, port: u16, traced: &[u32]) -> bool {
        let listeners = procfs::tcp_listener_inodes(pid, port);
        if listeners.iter().any(|inode| self.traced_listeners.contains(inode)) {
            return true;
        }
        let found = listeners.into_iter().find(|&inode| traced.iter().any(|&p| procfs::holds_socket(p, inode)));
        found.map(|inode| self.traced_listeners.insert(inode)).is_some()
    }
}

impl Execution<'_> {
    /// Brings the model's readiness views up to date: settles what granted network operations
    /// left in flight, then probes every thread parked on a network request that has no view
    /// (all of them after a network operation or a process exit). Runs while every thread is
    /// parked.
    pub(super) fn refresh_net(&mut self) -> Option<Outcome> {
        let world = self.world.as_deref().expect("not within a world hook");
        if let Err(e) = self.network.probe.settle(&|local, remote| world.received_by(local, remote)) {
            return Some(Outcome::Uncontrolled { thread: 0, syscall: "loopback delivery".into(), detail: e.0 });
        }
        for (pid, server) in self.network.probe.take_connections() {
            if !self.is_traced_server(pid, server.port()) {
                let process = self.processes.records.iter().find(|(_, r)| r.pid == pid).map_or(0, |(&p, _)| p);
                return Some(Outcome::Uncontrolled {
                    thread: 0,
                    syscall: "connect".into(),
                    detail: format!("process {process} connected to {server}, a server outside dara: what it answers would be input dara neither controls nor records; run that server under dara too (a test script that starts both)"),
                });
            }
        }
        match self.with_world(|world, ex| world.exchange(ex)) {
            // New bytes or connections change what the program's sockets show.
            Ok(changed) => self.network.dirty |= changed,
            Err(outcome) => return Some(outcome),
        }
        if std::mem::take(&mut self.network.dirty) {
            self.model.forget_net_views();
            self.network.probe.forget_views();
        }
        let requests: Vec<(ThreadId, Request)> = self.model.net_requests().into_iter().filter(|&(thread, _)| !self.model.has_net_view(thread)).collect();
        if let Some(outcome) = self.drain_output_for(&requests) {
            return Some(outcome);
        }
        let epoll_waits: Vec<(ThreadId, u32, u32, i32)> = requests
            .iter()
            .filter_map(|&(thread, r)| match r {
                Request::NetEpollWait { epoll, .. } => Some((thread, self.processes.pid_of(thread), self.tid_of(thread), epoll)),
                _ => None,
            })
            .collect();
        if let Err(e) = self.network.probe.poll_epoll_sets(&epoll_waits) {
            return Some(Outcome::Uncontrolled { thread: epoll_waits[0].0, syscall: Op::NetEpollWait.name().into(), detail: e.0 });
        }
        for (thread, request) in requests {
            let process = self.processes.threads.get(&thread).copied().unwrap_or(0);
            let pid = self.processes.pid_of(thread);
            match self.network.probe.view(thread, process, (pid, self.tid_of(thread)), &request) {
                Ok(view) => self.model.set_net_view(thread, view),
                Err(e) => return Some(Outcome::Uncontrolled { thread, syscall: request.op().name().into(), detail: e.0 }),
            }
        }
        None
    }

    /// The kernel tid of `thread` (a signalfd is readable for one thread, not for another).
    fn tid_of(&self, thread: ThreadId) -> u32 {
        self.region.slot(thread as usize).tid.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the server a traced process (`pid`) connected to on `port` is traced too: a
    /// program's listening socket dara relays for (a recording), or a listening socket some
    /// traced process holds. Listeners found traced are remembered (connecting again is common).
    pub(super) fn is_traced_server(&mut self, pid: u32, port: u16) -> bool {
        if self.world().listens_on(port) {
            return true;
        }
        let traced = self.processes.live_pids();
        self.network.is_traced_listener(pid, port, &traced)
    }

    /// Whether some thread waits for a signal: in `sigwait`, `sigsuspend` or `pause`, or in a
    /// `poll`/`epoll_wait` that watches a signalfd (which reads `/proc`: asked only when idle).
    pub(super) fn waits_for_signals(&mut self) -> bool {
        if self.model.interruptible_waits().iter().any(|(_, r)| matches!(r, Request::SigWait { .. } | Request::SigSuspend { .. })) {
            return true;
        }
        self.model.net_requests().into_iter().any(|(thread, request)| {
            matches!(request.op(), Op::NetPoll | Op::NetEpollWait) && self.network.probe.watches_signalfd(self.processes.pid_of(thread), &request)
        })
    }

    /// Whether some thread waits for what only a peer dara does not relay could bring: a datagram
    /// on a UDP socket, or a connection to a Unix-domain listening socket (directly, or through
    /// `poll` or an epoll set that watches such a socket).
    pub(super) fn waits_for_unrelayed_peers(&mut self) -> bool {
        use crate::model::net::kind;
        for (thread, request) in self.model.net_requests() {
            let waiting_on = self.model.probed_view(thread).filter(|v| !v.ready).map(|v| crate::choice::NetObject::decode(v.obj).kind);
            let unrelayed = match (request.op(), waiting_on) {
                (Op::NetRecv, Some(kind::UDP)) | (Op::NetAccept, Some(kind::UNIX_STREAM)) => true,
                (Op::NetEpollWait, Some(kind::EPOLL)) | (Op::NetPoll, Some(kind::POLL)) => {
                    let pid = self.processes.pid_of(thread);
                    self.network.probe.watches_unrelayed(pid, &request)
                }
                _ => false,
            };
            if unrelayed {
                return true;
            }
        }
        false
    }
}

