//! The fork server's wire protocol: how dara asks a program parked in the preload's constructor
//! for one more copy of itself (issue 17, item 5: executions per second).
//!
//! A search runs the same program hundreds of times. Instead of a fork + exec + dynamic loading
//! per execution, dara starts the program once with a `SOCK_SEQPACKET` socket where the region's
//! memfd would be ([`crate::SHM_FD`]): the preload, finding a socket there, serves requests
//! instead of connecting (`preload/src/fork_server.rs`). Each [`ForkRequest`] comes with
//! descriptors (`SCM_RIGHTS`, in the order below); the server clones a child that becomes
//! dara's own child (`CLONE_PARENT`), lands in the execution's PID namespace, installs the
//! descriptors where a launched program has them and goes on with the constructor exactly as a
//! freshly exec'd program would: the program cannot tell the two apart, so a trace found through
//! the server replays through a plain launch. The server answers each request with a
//! [`ForkReply`].
//!
//! Descriptors of a request, in order: the execution's PID namespace (if [`ForkRequest::pid_ns`]),
//! its mount namespace (if [`ForkRequest::mount_ns`]), then [`ForkRequest::installs`] descriptors,
//! the `i`-th to become number `targets[i]` in the child.

/// The first word of a request and of the server's greeting.
pub const MAGIC: u32 = 0xDA7A_F04C;

/// Most descriptors a request installs (stdin, stdout, stderr, the region, dara's /proc, the
/// SDK pipe; one to spare).
pub const MAX_INSTALLS: usize = 7;

/// Most descriptors one request carries (the two namespaces and the installs).
pub const MAX_FDS: usize = MAX_INSTALLS + 2;

/// One request: make a child for an execution.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkRequest {
    pub magic: u32,
    /// Whether the first descriptor is a PID namespace the child is born in.
    pub pid_ns: u32,
    /// Whether the next descriptor is a mount namespace the child joins (keeping its working
    /// directory).
    pub mount_ns: u32,
    /// How many descriptors follow to install.
    pub installs: u32,
    /// The descriptor number each installed one takes in the child.
    pub targets: [i32; MAX_INSTALLS],
    /// CPU the child pins itself to; -1: it keeps the server's affinity.
    pub cpu: i32,
}

/// The answer to a request: the child's pid as dara sees it, or a negative errno; and the pid of
/// the child's *holder* (0: none), a process outside the execution that shares the child's memory
/// and exits once the child has (see `preload/src/copy_holder.rs`). dara's child without an exit
/// signal: dara reaps it with `__WALL`. Sent by the child itself when it has a holder.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkReply {
    pub magic: u32,
    pub pid: i32,
    pub holder: i32,
    pub reserved: u32,
}

/// Sent once by the server when it is ready to serve (`pid`: its own pid), or to say why it
/// cannot (`pid`: a negative errno); the program then exits.
pub type Greeting = ForkReply;

const _: () = assert!(core::mem::size_of::<ForkRequest>() == 48);
const _: () = assert!(core::mem::size_of::<ForkReply>() == 16);
