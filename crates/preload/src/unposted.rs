//! Network operations that need no scheduling point: in coarse mode (a recording,
//! [`dara_abi::preempt::COARSE`]) a thread sends and receives on a TCP socket without a post when
//! the kernel can answer at once.
//!
//! A recording runs one schedule, so neither needs a decision. What they need is what a granted
//! one gets. A send must be *settled* (see the scheduler's `netprobe`: its bytes are in the peer's
//! receive queue) before the scheduler looks at any socket again; a receive changes what the
//! socket shows. In both cases the readiness the scheduler saw is stale. Between two posts of a
//! thread only that thread runs, so it is enough that the scheduler hears of them at the thread's
//! next post, before any decision: every post carries the TCP sockets sent on since the previous
//! one ([`dara_abi::Slot::sent`]) and how many receives went without a post.
//!
//! A receive without a post is deterministic because everything that can put bytes into the
//! socket is settled before the thread was granted: dara's deliveries from outside (at quiet
//! points), and every other thread's sends. Only the thread's own sends since its last post are
//! not, and of those only the ones on the socket's peer can bring it bytes (a TCP socket's bytes
//! come from its peer alone, and in a recording every peer is a traced socket or dara's end of a
//! relayed connection: a connection to an untraced server stops the run). So it receives without
//! a post unless it sent on that peer since its last post ([`may_receive`]): a server that reads
//! again after answering (memcached reads until `EAGAIN`) goes on without a step.
//!
//! The calls themselves are the real ones with `MSG_DONTWAIT`: a non-blocking caller gets what the
//! kernel says; a blocking caller that finds nothing to receive, or no room for all its bytes,
//! goes on with the posted path (the scheduler decides when it may go on, as always). A server
//! answering requests over TCP (redis) is left with one step per batch of requests.
//!
//! With each socket sent on, the post says how many bytes it has sent in all and its ports:
//! when the peer is dara's own end of a connection it relays, the scheduler settles the send by
//! reading its own socket's count, without looking into the program. That costs the thread one
//! `TCP_INFO` read per socket and post (and, once per descriptor, its addresses, kept in the
//! descriptor table [`crate::fd`]).
//!
//! The tables are per thread, emptied into the slot by every post; no allocation, no lock.
use core::cell::Cell;
use core::sync::atomic::Ordering;

use dara_abi::request::STREAM_SEND_MOST;
use dara_abi::{Slot, SENT_MAX};

use crate::fd::{self, sockets::inet_port, Ports};
use crate::sys;

/// `struct tcp_info` offsets: bytes written but not sent yet (a u32), bytes sent and
/// retransmitted (Linux 4.19 and later).
const TCPI_NOTSENT_BYTES: usize = 144;
const TCPI_BYTES_SENT: usize = 200;
const TCPI_BYTES_RETRANS: usize = 208;

struct Table {
    len: Cell<usize>,
    fds: [Cell<u32>; SENT_MAX],
}

thread_local! {
    static TABLE: Table = const { Table { len: Cell::new(0), fds: [const { Cell::new(0) }; SENT_MAX] } };
    /// Receives made without a post since the thread's last post.
    static RECEIVED: Cell<u32> = const { Cell::new(0) };
    /// Bytes sent without a post since the thread's last post (see [`SEND_BUDGET`]).
    static SENT_BYTES: Cell<usize> = const { Cell::new(0) };
    /// Calls without a post since the thread's last post that found nothing to receive or no
    /// room to send (see [`FRUITLESS_MAX`]).
    static FRUITLESS: Cell<u32> = const { Cell::new(0) };
}

/// Calls in a row that may find nothing (`EAGAIN`) without a post. Nothing arrives while the
/// thread holds the token, so a thread polling a socket in a loop would spin for ever: after this
/// many, its calls post again (and so yield), as every call does outside coarse mode.
const FRUITLESS_MAX: u32 = 8;

/// Most bytes a thread sends without a post between two posts: what one grant moves to a peer
/// that is not traced ([`STREAM_SEND_MOST`]). The preload does not know the peer; to a traced one
/// this only means a post sooner. Unbounded, a non-blocking `writev` loop of nginx's 4 MiB file
/// to dara's relay moved what the socket's autotuned buffers took between two posts (1,208,320 or
/// 3,808,768 bytes), and its replay's moved another amount.
const SEND_BUDGET: usize = STREAM_SEND_MOST as usize;

/// Notes a call without a post that found nothing (`EAGAIN`).
pub fn fruitless() {
    FRUITLESS.with(|f| f.set(f.get().saturating_add(1)));
}

#[inline]
fn may_go_on() -> bool {
    crate::solo::coarse() && FRUITLESS.with(|f| f.get()) < FRUITLESS_MAX
}

/// Whether a receive on `fd` may go without a post: coarse mode, and no send of the thread that
/// waits to be settled went out on `fd`'s peer (it could be on its way to this very socket). A
/// socket whose ports cannot be learnt counts as that peer. The caller checks that `fd` is a TCP
/// socket.
#[inline]
pub fn may_receive(fd: i32) -> bool {
    if !may_go_on() {
        return false;
    }
    TABLE.with(|t| {
        let sent_on = &t.fds[..t.len.get()];
        if sent_on.is_empty() {
            return true;
        }
        let Some(mine) = ports(fd) else { return false };
        sent_on.iter().all(|sent| ports(sent.get() as i32).is_some_and(|theirs| !(theirs.local == mine.peer && theirs.peer == mine.local)))
    })
}

/// Notes a receive that went without a post (after [`may_receive`]).
pub fn received() {
    RECEIVED.with(|r| r.set(r.get().saturating_add(1)));
}

/// Notes bytes written into a pipe without a post (libc's own writes the syscall trap caught:
/// `hooks::net::trapped_write`, in any mode). A reader the scheduler saw waiting on that pipe while
/// it was empty has data now: the readiness it saw is stale, as after a receive without a post.
/// Before, `head -c 1M /dev/zero | cat` in a search ended in a false deadlock (cat "waits for
/// data", head "waits for room" on the same pipe) once head's stdio filled the pipe unseen.
pub fn wrote_to_pipe() {
    received();
}

/// How many bytes a send on `fd` may move without a post: none unless coarse mode, room in the
/// table (or `fd` in it already) and some of [`SEND_BUDGET`] left. The caller checks that `fd`
/// is a TCP socket.
#[inline]
pub fn send_room(fd: i32) -> usize {
    let listed = TABLE.with(|t| t.len.get() < SENT_MAX || t.fds[..t.len.get()].iter().any(|f| f.get() == fd as u32));
    if !may_go_on() || !listed {
        return 0;
    }
    SEND_BUDGET.saturating_sub(SENT_BYTES.with(|b| b.get()))
}

/// Notes a send of `bytes` on `fd` that went without a post (after [`send_room`]).
pub fn sent(fd: i32, bytes: usize) {
    SENT_BYTES.with(|b| b.set(b.get() + bytes));
    TABLE.with(|t| {
        let len = t.len.get();
        if t.fds[..len].iter().any(|f| f.get() == fd as u32) {
            return;
        }
        if len < SENT_MAX {
            t.fds[len].set(fd as u32);
            t.len.set(len + 1);
        }
    })
}

/// Publishes the table in `slot` (part of every post, before the slot is marked posted) and
/// empties it.
#[inline]
pub fn publish(slot: &Slot) {
    let len = TABLE.with(|t| t.len.replace(0));
    for (i, entry) in slot.sent[..len].iter().enumerate() {
        let fd = TABLE.with(|t| t.fds[i].get()) as i32;
        entry.fd.store(fd as u32, Ordering::Relaxed);
        entry.ports.store(ports(fd).map_or(0, Ports::packed), Ordering::Relaxed);
        entry.bytes_sent.store(bytes_sent(fd), Ordering::Relaxed);
    }
    slot.sent_count.store(len as u32, Ordering::Relaxed);
    slot.received_unposted.store(RECEIVED.with(|r| r.replace(0)), Ordering::Relaxed);
    SENT_BYTES.with(|b| b.set(0));
    FRUITLESS.with(|f| f.set(0));
}

/// The socket's local port and its peer's (remembered in the descriptor table), None if unknown.
fn ports(fd: i32) -> Option<Ports> {
    if let Some(known) = fd::ports(fd) {
        return Some(known);
    }
    let (Some(local), Some(peer)) = (inet_port(fd, false), inet_port(fd, true)) else { return None };
    if local == 0 || peer == 0 {
        return None;
    }
    let ports = Ports { local, peer };
    fd::learned_ports(fd, ports);
    Some(ports)
}

/// Bytes the program has written to TCP socket `fd` in all: sent (retransmissions counted once)
/// and still queued unsent (Nagle holds a small segment while an earlier one is unacknowledged:
/// counting only what was sent, dara took such a send as settled while its bytes were still in
/// the program's queue, and read them one step later than when recorded: mosquitto's replays
/// diverged). `u64::MAX` if the kernel does not say.
fn bytes_sent(fd: i32) -> u64 {
    let mut info = [0u8; TCPI_BYTES_RETRANS + 8];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    let rc = unsafe { sys::syscall(libc::SYS_getsockopt, &[fd as u64, libc::IPPROTO_TCP as u64, libc::TCP_INFO as u64, info.as_mut_ptr() as u64, &mut len as *mut _ as u64]) };
    if rc != 0 || (len as usize) < info.len() {
        return u64::MAX;
    }
    let at = |offset: usize| u64::from_ne_bytes(info[offset..offset + 8].try_into().unwrap_or([0; 8]));
    let not_sent = u32::from_ne_bytes(info[TCPI_NOTSENT_BYTES..TCPI_NOTSENT_BYTES + 4].try_into().unwrap_or([0; 4]));
    at(TCPI_BYTES_SENT).saturating_sub(at(TCPI_BYTES_RETRANS)) + u64::from(not_sent)
}
