//! Keeping outside peers apart on the ptrace path: when peers outside dara may talk to the
//! program (a recording or its replay, `Header::outside`), a TCP listener is split in two, as
//! the preload splits one (crates/preload/src/hooks/outside.rs has the whole story): the
//! program's socket listens on its own address (the *public* socket, which dara keeps and where
//! outside clients arrive), and a *twin* bound to the same address with a port of the kernel's
//! choice takes its place under the program's descriptor, so the program accepts only what dara
//! connects to the twin, at a decision point, recorded.
//!
//! The agent does for a traced `listen` what the preload's hook does around the real one:
//! 1. at the call's stop, look at the socket (a duplicate taken with `pidfd_getfd`): an INET
//!    stream socket that does not listen yet is split, anything else runs as it is;
//! 2. let the call run to its exit; if it listens now, open the twin *in the program* by calls
//!    made from the thread ([`inject::syscall_after_call`]: `socket`, `bind` to the address with
//!    port 0, `listen`, the same non-blocking mode), the address passed in a scratch page mapped
//!    into the process once;
//! 3. post `NetListen { fd, twin }` from that exit stop (the scheduler duplicates both);
//! 4. at the grant, `dup3` the twin onto the program's descriptor (close-on-exec kept) and close
//!    the twin's own number.
//!
//! A `getsockname` of a split socket answers with the public port (a server that listened on
//! port 0 tells its clients an address they can reach): the call runs, and at its exit a twin's
//! port in the answer becomes the public one.
//!
//! The peer of a connection dara relays for an outside client is shown as that client (`accept`,
//! `accept4`, `getpeername`: the call runs to its exit, where dara's own loopback address in the
//! answer is replaced, as the preload's hooks do), so a recording and its replay show the same
//! address.
//!
//! A UDP socket is split when it is bound (`bind`), as the preload splits one; the addresses of
//! the datagrams that cross it are `datagrams.rs`'s.
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

use dara_abi::{Request, Unsupported};

use super::calls::Then;
use super::{resume, resume_to_exit, Agent};
use crate::ptrace::inject;
use crate::ptrace::remote::{self, Registers};

/// Where the scratch page goes in a process that needs one: beside the preload's call page, out
/// of the way of the program's own mappings (`MAP_FIXED_NOREPLACE`).
const SCRATCH_PAGE: u64 = 0x3da7_a010_0000;
/// Offset in the scratch page of the address `bind` reads (an int for `setsockopt` is at 0).
const ADDRESS_AT: u64 = 64;

/// What the agent does when a call it let run comes back (a syscall-exit stop).
#[derive(Clone, Copy, Debug)]
pub enum AfterCall {
    /// The program's `listen(fd, backlog)`: split the socket if it listens now.
    Listened { fd: i32, backlog: i32 },
    /// The program's `bind(fd, ..)` of a UDP socket: split it if the bind succeeded.
    Bound { fd: i32 },
    /// A `getsockname(fd, addr, ..)` of a split socket: show the public port.
    LocalName { fd: i32, addr: u64 },
    /// A `sendfile`/`splice`/`tee` run non-blocking (`agent/transfer.rs`).
    Transfer(super::transfer::Running),
    /// An `accept`/`accept4`/`getpeername` (or, `datagrams`, a `recvfrom`/`recvmsg`) that
    /// writes its peer's address at `addr` (`room` bytes), its size at `len_at`: the peer dara
    /// relays for is shown.
    PeerName { addr: u64, len_at: u64, room: u32, datagrams: bool },
    /// A call run with argument registers of the agent's (`datagrams.rs`): the program's, put
    /// back at its exit.
    PutBack([u64; 6]),
}

/// A split listener: the program's descriptor, and the ports of the twin under it and of the
/// public socket dara keeps.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    pub fd: i32,
    pub twin_port: u16,
    pub public_port: u16,
}

/// The split listeners and scratch pages of the agent's processes.
#[derive(Clone, Default)]
pub struct Listeners {
    splits: BTreeMap<u32, Vec<Split>>,
    scratch: BTreeMap<u32, u64>,
}

impl Listeners {
    /// A forked `child` has its parent's descriptors and memory.
    pub fn forked(&mut self, parent: u32, child: u32) {
        if let Some(splits) = self.splits.get(&parent).cloned() {
            self.splits.insert(child, splits);
        }
        if let Some(&page) = self.scratch.get(&parent) {
            self.scratch.insert(child, page);
        }
    }

    /// `process` has a new image: its memory is new (its descriptors may stay, but a split
    /// socket a new image inherits is shown as it is).
    pub fn new_image(&mut self, process: u32) {
        self.splits.remove(&process);
        self.scratch.remove(&process);
    }

    fn split_of(&self, process: u32, fd: i32) -> Option<Split> {
        self.splits.get(&process)?.iter().rev().find(|s| s.fd == fd).copied()
    }
}

impl Agent {
    fn outside_apart(&self) -> bool {
        self.region.header().outside != 0
    }

    /// `listen(fd, backlog)` stopped at the filter (see the module doc, step 1).
    pub(super) fn listen_stop(&mut self, tid: i32, regs: Registers, fd: i32, backlog: i32) {
        let pid = self.tracees[&tid].pid;
        let splits = self.outside_apart() && Socket::of(pid, fd).is_some_and(|s| s.inet_of(libc::SOCK_STREAM) && !s.listening());
        if !splits || self.tracees[&tid].stop != super::tracees::CallStop::Seccomp {
            self.run_call(tid, regs);
            return;
        }
        self.tracees.get_mut(&tid).expect("a known tracee").after = Some(AfterCall::Listened { fd, backlog });
        resume_to_exit(tid);
    }

    /// `bind(fd, ..)` stopped at the filter: an INET datagram socket is split at its exit, as the
    /// preload splits one after the real `bind` (outside senders reach the public socket dara
    /// keeps, the program reads from the twin what dara passes on from a socket per sender).
    pub(super) fn bind_stop(&mut self, tid: i32, regs: Registers, fd: i32) {
        let pid = self.tracees[&tid].pid;
        let splits = self.outside_apart() && Socket::of(pid, fd).is_some_and(|s| s.inet_of(libc::SOCK_DGRAM));
        if !splits || self.tracees[&tid].stop != super::tracees::CallStop::Seccomp {
            self.run_call(tid, regs);
            return;
        }
        self.tracees.get_mut(&tid).expect("a known tracee").after = Some(AfterCall::Bound { fd });
        resume_to_exit(tid);
    }

    /// `getsockname(fd, addr, ..)` stopped at the filter: looked at on return if `fd` is split.
    pub(super) fn local_name_stop(&mut self, tid: i32, regs: Registers, fd: i32, addr: u64) {
        let tracee = &self.tracees[&tid];
        if addr == 0 || tracee.stop != super::tracees::CallStop::Seccomp || self.processes.listeners.split_of(tracee.process, fd).is_none() {
            self.run_call(tid, regs);
            return;
        }
        self.tracees.get_mut(&tid).expect("a known tracee").after = Some(AfterCall::LocalName { fd, addr });
        resume_to_exit(tid);
    }

    /// An `accept`, `accept4` or `getpeername` about to run (its grant, or its stop at the
    /// filter) that asks for its peer's address, while outside peers are kept apart: run to its
    /// exit, where a peer that is dara's socket standing for an outside client is shown as that
    /// client (`dara_abi::peer_address`), the same address in a recording and its replay, as the
    /// preload's hooks show it. True then; false (nothing done) otherwise.
    pub(super) fn peer_shown_on_return(&mut self, tid: i32, regs: &Registers) -> bool {
        let call = regs.syscall();
        let tracee = &self.tracees[&tid];
        if !self.outside_apart() || tracee.stop != super::tracees::CallStop::Seccomp {
            return false;
        }
        let datagrams = match call.nr {
            libc::SYS_accept | libc::SYS_accept4 | libc::SYS_getpeername => false,
            libc::SYS_recvfrom | libc::SYS_recvmsg => true,
            _ => return false,
        };
        // No exit stop (a ptrace round trip) while dara relays for no peer of that kind: the
        // table's entry is written before the program can see the peer.
        if dara_abi::peer_address::in_use(&self.region.header().relayed, datagrams).next().is_none() {
            return false;
        }
        let (addr, len_at) = match call.nr {
            libc::SYS_recvfrom => (call.args[4], call.args[5]),
            // struct msghdr: msg_name, then msg_namelen at byte 8.
            libc::SYS_recvmsg => (super::net::msghdr(tracee.pid, call.args[1]).0, call.args[1] + 8),
            _ => (call.args[1], call.args[2]),
        };
        if addr == 0 || len_at == 0 {
            return false;
        }
        let mut room = [0u8; 4];
        if remote::read(tracee.pid, len_at, &mut room).is_err() {
            return false;
        }
        let after = AfterCall::PeerName { addr, len_at, room: u32::from_ne_bytes(room), datagrams };
        self.tracees.get_mut(&tid).expect("a known tracee").after = Some(after);
        resume_to_exit(tid);
        true
    }

    /// A call with an [`AfterCall`] came back.
    pub(super) fn after_call(&mut self, tid: i32, after: AfterCall) {
        let Ok(regs) = Registers::read(tid) else { return };
        let tracee = &self.tracees[&tid];
        let (pid, process) = (tracee.pid, tracee.process);
        match after {
            AfterCall::Transfer(running) => self.transfer_returned(tid, regs, running),
            AfterCall::Listened { fd, backlog } if regs.result() == 0 => self.split(tid, pid, process, fd, Some(backlog)),
            AfterCall::Bound { fd } if regs.result() == 0 => self.split(tid, pid, process, fd, None),
            AfterCall::PeerName { addr, len_at, room, datagrams } if regs.result() >= 0 => {
                show_relayed_peer(pid, addr, len_at, room, &self.region.header().relayed, datagrams);
                resume(tid, 0);
            }
            AfterCall::PutBack(args) => {
                let mut regs = regs;
                let r = &mut regs.regs;
                (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
                let _ = regs.write();
                resume(tid, 0);
            }
            AfterCall::LocalName { fd, addr } if regs.result() == 0 => {
                if let Some(split) = self.processes.listeners.split_of(process, fd) {
                    show_public_port(pid, addr, split);
                }
                resume(tid, 0);
            }
            _ => resume(tid, 0),
        }
    }

    /// Splits socket `fd`, a TCP one that listens now (`backlog`) or a UDP one just bound (None):
    /// opens its twin and posts `NetListen`; a twin that cannot be opened stops the run.
    fn split(&mut self, tid: i32, pid: i32, process: u32, fd: i32, backlog: Option<i32>) {
        match self.open_twin(tid, pid, process, fd, backlog) {
            Ok((twin, cloexec)) => self.post(tid, Request::NetListen { fd, twin, datagrams: backlog.is_none() }, Then::SwapTwin { fd, twin, cloexec }),
            Err(e) => {
                let (what, nr, arg) = match backlog {
                    Some(backlog) => ("listening socket", libc::SYS_listen, backlog as u64),
                    None => ("UDP socket", libc::SYS_bind, 0),
                };
                eprintln!("dara-agent: cannot take over the {what} {fd} of process {pid}: {e}");
                let refused = Unsupported::Syscall { nr: nr as u64, args: [fd as u64, arg, 0] };
                self.post(tid, Request::Unsupported(refused), Then::Return);
            }
        }
    }

    /// The twin of socket `fd` (a TCP one that listens with `backlog`, or a UDP one: None),
    /// opened in process `pid` by calls made from `tid` (stopped at the exit of the program's
    /// `listen` or `bind`), and whether `fd` is close-on-exec.
    fn open_twin(&mut self, tid: i32, pid: i32, process: u32, fd: i32, backlog: Option<i32>) -> Result<(i32, bool), String> {
        let public = Socket::of(pid, fd).ok_or("the socket is gone")?;
        let (mut address, len) = public.local_address().ok_or("it has no address")?;
        let (family, public_port) = (i32::from(address.ss_family), port_of(&address));
        let scratch = self.scratch_page(tid, process)?;
        let call = |nr: i64, args: [u64; 6]| inject::syscall_after_call(tid, nr, args).map_err(|e| e.to_string());
        let kind = if backlog.is_some() { libc::SOCK_STREAM } else { libc::SOCK_DGRAM };
        let twin = call(libc::SYS_socket, [family as u64, (kind | libc::SOCK_CLOEXEC) as u64, 0, 0, 0, 0])?;
        if twin < 0 {
            return Err(format!("socket: {}", std::io::Error::from_raw_os_error(-twin as i32)));
        }
        let mut set_up = || -> Result<(), String> {
            if family == libc::AF_INET6 {
                let v6only = public.option(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY).unwrap_or(0);
                remote::write(pid, scratch, &v6only.to_ne_bytes()).map_err(|e| e.to_string())?;
                call(libc::SYS_setsockopt, [twin as u64, libc::IPPROTO_IPV6 as u64, libc::IPV6_V6ONLY as u64, scratch, 4, 0])?;
            }
            set_port(&mut address, 0);
            // SAFETY: `len` bytes of the storage are the address getsockname wrote.
            let bytes = unsafe { std::slice::from_raw_parts(&address as *const libc::sockaddr_storage as *const u8, len as usize) };
            remote::write(pid, scratch + ADDRESS_AT, bytes).map_err(|e| e.to_string())?;
            let status = public.status_flags();
            let listen = backlog.map(|backlog| ("listen", libc::SYS_listen, [twin as u64, backlog as u64, 0, 0, 0, 0]));
            let bind = ("bind", libc::SYS_bind, [twin as u64, scratch + ADDRESS_AT, u64::from(len), 0, 0, 0]);
            let fcntl = ("fcntl", libc::SYS_fcntl, [twin as u64, libc::F_SETFL as u64, status as u64, 0, 0, 0]);
            for (name, nr, args) in std::iter::once(bind).chain(listen).chain(std::iter::once(fcntl)) {
                let rc = call(nr, args)?;
                if rc < 0 {
                    return Err(format!("{name} of the twin: {}", std::io::Error::from_raw_os_error(-rc as i32)));
                }
            }
            Ok(())
        };
        if let Err(e) = set_up() {
            let _ = call(libc::SYS_close, [twin as u64, 0, 0, 0, 0, 0]);
            return Err(e);
        }
        let twin = twin as i32;
        let twin_port = Socket::of(pid, twin).and_then(|s| s.local_address()).map_or(0, |(a, _)| port_of(&a));
        let splits = self.processes.listeners.splits.entry(process).or_default();
        splits.retain(|s| s.fd != fd);
        splits.push(Split { fd, twin_port, public_port });
        Ok((twin, close_on_exec(pid, fd)))
    }

    /// The grant of a split's `NetListen`: the twin takes the program's descriptor.
    pub(super) fn swap_twin(&mut self, tid: i32, fd: i32, twin: i32, cloexec: bool) {
        let flags = if cloexec { libc::O_CLOEXEC as u64 } else { 0 };
        let swapped = inject::syscall_after_call(tid, libc::SYS_dup3, [twin as u64, fd as u64, flags, 0, 0, 0]);
        let _ = inject::syscall_after_call(tid, libc::SYS_close, [twin as u64, 0, 0, 0, 0, 0]);
        if !matches!(swapped, Ok(rc) if rc >= 0) {
            let process = self.tracees[&tid].process;
            if let Some(splits) = self.processes.listeners.splits.get_mut(&process) {
                splits.retain(|s| s.fd != fd);
            }
        }
        resume(tid, 0);
    }

    /// The scratch page of `process`, mapped by a call from `tid` the first time.
    fn scratch_page(&mut self, tid: i32, process: u32) -> Result<u64, String> {
        if let Some(&page) = self.processes.listeners.scratch.get(&process) {
            return Ok(page);
        }
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
        let mapped = inject::syscall_after_call(tid, libc::SYS_mmap, [SCRATCH_PAGE, 4096, prot, flags, u64::MAX, 0]).map_err(|e| e.to_string())?;
        if mapped as u64 != SCRATCH_PAGE {
            return Err(format!("the scratch page {SCRATCH_PAGE:#x} is taken (mmap answered {mapped:#x})"));
        }
        self.processes.listeners.scratch.insert(process, SCRATCH_PAGE);
        Ok(SCRATCH_PAGE)
    }
}

/// Rewrites the port of the address at `addr` in `pid` (a successful getsockname's answer) from
/// the twin's to the public one.
fn show_public_port(pid: i32, addr: u64, split: Split) {
    let mut port = [0u8; 2];
    // The port is at offset 2 in both families' addresses.
    if remote::read(pid, addr + 2, &mut port).is_ok() && u16::from_be_bytes(port) == split.twin_port {
        let _ = remote::write(pid, addr + 2, &split.public_port.to_be_bytes());
    }
}

/// After an `accept`/`getpeername` of `pid` wrote its peer's address at `addr` (`room` bytes of
/// buffer, the address's size at `len_at`): a peer that is dara's socket standing for an outside
/// client becomes that client (as much as `room` takes; the size written says its full size, as
/// the kernel does).
fn show_relayed_peer(pid: i32, addr: u64, len_at: u64, room: u32, table: &[dara_abi::RelayedPeer], datagrams: bool) {
    use dara_abi::peer_address::{shown_peer, InetAddress, SOCKADDR_IN6};
    let mut len = [0u8; 4];
    if remote::read(pid, len_at, &mut len).is_err() {
        return;
    }
    let mut bytes = [0u8; SOCKADDR_IN6];
    let written = (u32::from_ne_bytes(len).min(room) as usize).min(SOCKADDR_IN6);
    if remote::read(pid, addr, &mut bytes[..written]).is_err() {
        return;
    }
    let Some(peer) = InetAddress::parse(&bytes[..written]) else { return };
    let Some((shown, size)) = shown_peer(&peer, table, datagrams) else { return };
    if remote::write(pid, addr, &shown[..size.min(room as usize)]).is_ok() {
        let _ = remote::write(pid, len_at, &(size as u32).to_ne_bytes());
    }
}

/// Whether descriptor `fd` of `pid` is close-on-exec.
fn close_on_exec(pid: i32, fd: i32) -> bool {
    crate::procfs::descriptor_flags(pid, fd).is_some_and(|f| f & libc::O_CLOEXEC != 0)
}

fn set_port(address: &mut libc::sockaddr_storage, port: u16) {
    // SAFETY: both INET families keep the port at the same offset as sockaddr_in's.
    unsafe { (*(address as *mut libc::sockaddr_storage as *mut libc::sockaddr_in)).sin_port = port.to_be() };
}

fn port_of(address: &libc::sockaddr_storage) -> u16 {
    // SAFETY: as in `set_port`.
    u16::from_be(unsafe { (*(address as *const libc::sockaddr_storage as *const libc::sockaddr_in)).sin_port })
}

/// The agent's own duplicate of a descriptor of a traced process (`pidfd_getfd`).
struct Socket(OwnedFd);

impl Socket {
    fn of(pid: i32, fd: i32) -> Option<Socket> {
        super::net::copy_of(pid, fd).map(Socket)
    }

    fn option(&self, level: i32, name: i32) -> Option<i32> {
        let (mut value, mut len) = (0i32, std::mem::size_of::<i32>() as libc::socklen_t);
        // SAFETY: getsockopt writes at most `len` bytes into the live local.
        let rc = unsafe { libc::getsockopt(self.0.as_raw_fd(), level, name, &mut value as *mut i32 as *mut libc::c_void, &mut len) };
        (rc == 0).then_some(value)
    }

    fn local_address(&self) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
        // SAFETY: all-zero is a valid sockaddr_storage; getsockname writes at most `len` bytes.
        let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: as above.
        let rc = unsafe { libc::getsockname(self.0.as_raw_fd(), &mut address as *mut _ as *mut libc::sockaddr, &mut len) };
        (rc == 0).then_some((address, len))
    }

    /// An INET or INET6 socket of type `kind` (`SOCK_STREAM`, `SOCK_DGRAM`).
    fn inet_of(&self, kind: i32) -> bool {
        let family = self.local_address().map(|(a, _)| i32::from(a.ss_family));
        self.option(libc::SOL_SOCKET, libc::SO_TYPE) == Some(kind) && matches!(family, Some(libc::AF_INET | libc::AF_INET6))
    }

    fn listening(&self) -> bool {
        self.option(libc::SOL_SOCKET, libc::SO_ACCEPTCONN).is_some_and(|on| on != 0)
    }

    /// The open file's status flags (`O_NONBLOCK`), shared by every duplicate.
    fn status_flags(&self) -> i32 {
        // SAFETY: F_GETFL takes no pointer.
        unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_GETFL) }.max(0)
    }
}
