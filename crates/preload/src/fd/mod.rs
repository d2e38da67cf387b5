//! What dara knows about each descriptor number of the process, in one table that owns the
//! descriptors' lifecycle: [`opened`], [`closed`], [`closed_range`], [`duplicated`].
//!
//! Per descriptor below [`TRACKED`]: its [`Kind`] (a network descriptor, and which kind: asked of
//! the kernel once, see [`kind`]), the public port of an outside listener the preload swapped for
//! its twin ([`crate::hooks::outside`]), and the local and peer port of a TCP socket sent on
//! without a post ([`crate::unposted`]). Higher numbers are asked of the kernel every time and
//! have no public port (a listener that high is not swapped back in `getsockname`).
//!
//! Who keeps it right:
//! * `opened`: every hook that makes a descriptor (`socket`, `socketpair`, `pipe`, `eventfd`, `signalfd`,
//!   `accept`, `open`, `fopen`): a new number forgets whatever its previous holder was, even one
//!   closed where no hook saw it (`fclose` closes inside libc);
//! * `closed`: the `close` hook; `closed_range`: `close_range` and `closefrom` (trapped, see
//!   [`crate::fdguard`]), and the spawn hook's `closefrom` action;
//! * `duplicated(from, to)`: the hooks of `dup`, `dup2`, `dup3`, `fcntl`/`fcntl64` with `F_DUPFD`
//!   or `F_DUPFD_CLOEXEC` ([`crate::hooks::descriptors`]), whoever calls them. Everything the
//!   table keeps belongs to the open file both numbers now name (what it is, its ports, the
//!   listener's public port), so all of it carries over to the copy; close-on-exec belongs to the
//!   number, and dara does not keep it. (A raw system call, or glibc's own `dup3` in `freopen`,
//!   is not seen: the copy keeps what its number knew before, unless that was nothing.)
//! * `exec` needs no operation: the table lives in the program image, and a successful `execve`
//!   starts the next image's preload with an empty one (every descriptor it inherits is asked
//!   again on first use); a failed one changes nothing.
//!
//! Lock-free and allocation-free: atomics only, read in the SIGSYS handler and on every hooked
//! read and write. Only the token holder changes descriptors of a traced thread, so a plain load
//! and store per field is enough; an entry copied by `duplicated` while another (ungated) thread
//! changes the source is at worst [`Kind::Unknown`] or stale the way a kernel race would be.
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering};

use libc::c_int;

pub mod kind;
pub use kind::{is_net, is_output, is_signalfd, net_kind};
pub mod sockets;

/// Descriptor numbers below this are remembered; higher ones are asked again every time.
pub const TRACKED: usize = 4096;

/// What a descriptor number names, as far as dara knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Not known (new, or its previous holder is gone): asked of the kernel on first use.
    Unknown,
    /// Not a network descriptor (a regular file, a terminal).
    Other,
    /// One of the pipes dara drains the program's output through ([`kind::is_output`]): no
    /// network descriptor either.
    Output,
    /// A socket, pipe, FIFO or eventfd whose [`NetKind`] is not asked yet.
    Net,
    /// A network descriptor of a known kind.
    Known(NetKind),
    /// A `signalfd`: its blocking reads wait in the model for a signal of its mask
    /// ([`crate::hooks::signalfd`]); no network descriptor.
    Signalfd,
}

/// What kind of network descriptor: the hooks treat each differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetKind {
    /// A TCP socket (IPv4 or IPv6 stream).
    Tcp,
    /// Any other socket (UDP, Unix).
    Socket,
    /// No socket at all: a pipe, FIFO or eventfd.
    NotSocket,
}

impl Kind {
    const fn to_u8(self) -> u8 {
        match self {
            Kind::Unknown => 0,
            Kind::Other => 1,
            Kind::Net => 2,
            Kind::Known(NetKind::Tcp) => 3,
            Kind::Known(NetKind::Socket) => 4,
            Kind::Known(NetKind::NotSocket) => 5,
            Kind::Output => 6,
            Kind::Signalfd => 7,
        }
    }

    const fn from_u8(v: u8) -> Kind {
        match v {
            1 => Kind::Other,
            2 => Kind::Net,
            3 => Kind::Known(NetKind::Tcp),
            4 => Kind::Known(NetKind::Socket),
            5 => Kind::Known(NetKind::NotSocket),
            6 => Kind::Output,
            7 => Kind::Signalfd,
            _ => Kind::Unknown,
        }
    }
}

/// A TCP socket's local and peer port (both non-zero once known).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    pub local: u16,
    pub peer: u16,
}

impl Ports {
    /// The form the slot carries ([`dara_abi::SentOn`]): local << 16 | peer.
    pub const fn packed(self) -> u32 {
        (self.local as u32) << 16 | self.peer as u32
    }
}

/// One descriptor number's entry; all zero = nothing known.
struct Entry {
    kind: AtomicU8,
    /// Public port of an outside listener swapped for its twin; 0 = not swapped.
    public_port: AtomicU16,
    /// [`Ports::packed`] of a TCP socket; 0 = not looked up yet.
    ports: AtomicU32,
}

impl Entry {
    const fn empty() -> Entry {
        Entry { kind: AtomicU8::new(0), public_port: AtomicU16::new(0), ports: AtomicU32::new(0) }
    }

    fn set(&self, kind: Kind, public_port: u16, ports: u32) {
        self.kind.store(kind.to_u8(), Ordering::Relaxed);
        self.public_port.store(public_port, Ordering::Relaxed);
        self.ports.store(ports, Ordering::Relaxed);
    }
}

static TABLE: [Entry; TRACKED] = [const { Entry::empty() }; TRACKED];

fn entry(fd: c_int) -> Option<&'static Entry> {
    usize::try_from(fd).ok().and_then(|i| TABLE.get(i))
}

/// Descriptor `fd` was just made (by the kernel, for the program): it names `kind` (a socket,
/// pipe or eventfd the hook made: [`Kind::Net`]; anything else: [`Kind::Unknown`]), and nothing
/// else known about the number holds.
pub fn opened(fd: c_int, kind: Kind) {
    if let Some(e) = entry(fd) {
        e.set(kind, 0, 0);
    }
}

/// Descriptor `fd` was closed.
pub fn closed(fd: c_int) {
    opened(fd, Kind::Unknown);
}

/// Every descriptor from `first` to `last` (inclusive, as `close_range` takes them) was closed.
pub fn closed_range(first: u64, last: u64) {
    let end = last.saturating_add(1).min(TRACKED as u64);
    for e in TABLE.iter().take(end as usize).skip(first.min(end) as usize) {
        e.set(Kind::Unknown, 0, 0);
    }
}

/// Descriptor `to` was made a copy of `from` (`dup`, `dup2`, `dup3`, `F_DUPFD`): it names the same
/// open file, so what is known of `from` holds for `to` (see the module doc).
pub fn duplicated(from: c_int, to: c_int) {
    if from == to {
        return;
    }
    let Some(copy) = entry(to) else { return };
    match entry(from) {
        Some(e) => copy.set(Kind::from_u8(e.kind.load(Ordering::Relaxed)), e.public_port.load(Ordering::Relaxed), e.ports.load(Ordering::Relaxed)),
        None => copy.set(Kind::Unknown, 0, 0),
    }
}

/// What is known of `fd` ([`Kind::Unknown`] for numbers the table does not keep).
#[inline]
pub fn known(fd: c_int) -> Kind {
    entry(fd).map_or(Kind::Unknown, |e| Kind::from_u8(e.kind.load(Ordering::Relaxed)))
}

/// Remembers what the kernel said `fd` is (see [`kind`]).
#[inline]
pub fn learned(fd: c_int, kind: Kind) {
    if let Some(e) = entry(fd) {
        e.kind.store(kind.to_u8(), Ordering::Relaxed);
    }
}

/// The public port of `fd` if it is an outside listener swapped for its twin.
pub fn public_port(fd: c_int) -> Option<u16> {
    entry(fd).map(|e| e.public_port.load(Ordering::Relaxed)).filter(|&p| p != 0)
}

/// `fd` now holds the twin of an outside listener whose public port is `port`.
pub fn swapped_listener(fd: c_int, port: u16) {
    if let Some(e) = entry(fd) {
        e.public_port.store(port, Ordering::Relaxed);
    }
}

/// The ports of TCP socket `fd`, if looked up since it was made.
pub fn ports(fd: c_int) -> Option<Ports> {
    let v = entry(fd)?.ports.load(Ordering::Relaxed);
    (v != 0).then_some(Ports { local: (v >> 16) as u16, peer: v as u16 })
}

/// Remembers the ports of TCP socket `fd` (both non-zero).
pub fn learned_ports(fd: c_int, ports: Ports) {
    if let Some(e) = entry(fd) {
        e.ports.store(ports.packed(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
