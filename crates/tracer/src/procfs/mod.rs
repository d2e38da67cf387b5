//! What the kernel says about a live target, and acting on one of its processes or threads: the
//! supervision the scheduler needs beyond the process tree ([`crate::ProcessTree`]). Everything
//! here reads /proc or uses a pidfd; nothing keeps state between calls except [`ThreadFiles`].
//!
//! * [`thread`]: a thread's state, CPU time, blocked system call and signals (the watchdog).
//! * [`process`]: a process's program, signal dispositions, group, namespace pids and end.
//! * [`memory`]: reading and writing a process's memory, also after its main thread ended.
//! * [`pidfd`]: signalling, killing and reaping through pidfds; signals marked as dara's.
//! * [`descriptors`]: a process's descriptor table, also after its main thread ended.
//! * [`sockets`]: the UDP and TCP ports of a process's network namespace.
//! * [`syscall_names`]: system call names for diagnostics.
//!
//! Each item is re-exported here, so callers name it `procfs::thread_sample`.
pub mod descriptors;
pub mod memory;
pub mod pidfd;
pub mod process;
pub mod sockets;
pub mod syscall_names;
pub mod thread;

pub use descriptors::*;
pub use memory::*;
pub use pidfd::*;
pub use process::*;
pub use sockets::*;
pub use syscall_names::*;
pub use thread::*;

/// The text of a small /proc file (a status, stat or syscall file: a few KiB at most), read with
/// one buffer of room: such files report a size of 0, and `fs::read_to_string` then starts from
/// a 32-byte read and doubles, eight `read` calls for a thread's status. The scheduler reads them
/// at many steps. None if the file cannot be read (the thread or process is gone).
pub(crate) fn read_small(path: &str) -> Option<String> {
    use std::io::Read;
    let mut text = String::with_capacity(4096);
    std::fs::File::open(path).ok()?.read_to_string(&mut text).ok()?;
    Some(text)
}
