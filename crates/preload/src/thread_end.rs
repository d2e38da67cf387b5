//! The end of a thread: `ThreadExit` is posted from the thread's last system call, the `exit`
//! that glibc makes once the thread's teardown is over, not when its start routine returns.
//!
//! Between the two glibc runs the C++ `thread_local` destructors (`__call_tls_dtors`), the
//! `pthread_key` destructors, its own per-thread cleanup (`free`, arena locks) and, for
//! `pthread_exit` and cancellation, the cleanup handlers unwound on the way. That code takes
//! locks: a destructor that locks a mutex held by a parked thread blocked on the real futex,
//! outside dara's control, when the thread had already posted its exit (a false 10 s hang in
//! NSPR programs). So the thread stays gated to the end: its teardown's locks and futex waits are
//! scheduling points like any other, and the exit is posted when the kernel is asked to end the
//! thread (`SYS_exit`, trapped; a process's end is `exit_group`, which is not).
//!
//! The thread's TLS (dara's per-thread state lives there) is still valid at that point: glibc
//! reuses a thread's stack and TLS block only once the kernel has cleared its tid at the exit.
use libc::c_long;

use crate::gate::Gated;
use crate::sys;

/// A trapped `exit(status)` of the calling thread: posts `ThreadExit` if the thread is gated,
/// then ends the thread. Never returns.
pub fn exit_syscall(status: u64) -> ! {
    if let Some(gate) = Gated::enter() {
        gate.exit_thread();
    }
    loop {
        // SAFETY: ends the calling thread, as the program (glibc's thread teardown) asked.
        unsafe { sys::syscall(libc::SYS_exit as c_long, &[status]) };
    }
}
