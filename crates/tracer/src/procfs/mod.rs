//! What the kernel says about a live target, and acting on one of its processes or threads: the
//! supervision the scheduler needs beyond the process tree ([`crate::ProcessTree`]). Everything
//! here reads /proc or uses a pidfd; nothing keeps state between calls except [`ThreadFiles`].
//!
//! * [`thread`]: a thread's state, CPU time, blocked system call and signals (the watchdog).
//! * [`process`]: a process's program, signal dispositions, group, namespace pids and end.
//! * [`pidfd`]: signalling, killing and reaping through pidfds; signals marked as dara's.
//! * [`sockets`]: the descriptors, sockets and ports of a process.
//! * [`syscall_names`]: system call names for diagnostics.
//!
//! Each item is re-exported here, so callers name it `procfs::thread_sample`.
pub mod pidfd;
pub mod process;
pub mod sockets;
pub mod syscall_names;
pub mod thread;

pub use pidfd::*;
pub use process::*;
pub use sockets::*;
pub use syscall_names::*;
pub use thread::*;
