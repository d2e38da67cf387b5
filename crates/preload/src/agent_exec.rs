//! An `execve` of a program the preload cannot control (statically linked, or Go: see
//! [`crate::exec_image`]): dara's ptrace agent
//! runs the new image (crates/tracer/src/ptrace, `dara_abi::agent`).
//!
//! The exec'ing thread holds the run token. It posts `ProcessExec { via_agent }` (the scheduler
//! starts the agent if the execution has none), claims the slot of the new image's main thread
//! as any exec does, asks the agent to trace it, installs the agent's seccomp filter, makes the
//! time-stamp counter fault (the agent answers it), and execs. The new image keeps this
//! process's own filter too (filters cannot be removed): the agent answers the calls it traps,
//! and runs the others from a stub at the address this filter lets through
//! ([`sys::return_address`]).
use core::sync::atomic::AtomicU32;

use dara_abi::agent::{self, SeizeRequest};
use dara_abi::handoff::{Futex, Waited};
use dara_abi::{Addr, Request, Unsupported};
use libc::{c_long, timespec};

use crate::gate::Gated;
use crate::exec_slot::ExecSlot;
use crate::{region, sys};

/// Seconds the thread waits for the agent to attach.
const PATIENCE_SECONDS: u32 = 30;

/// The exec of the static program at `path` (the call's arguments `a`); returns only on failure,
/// with `-errno`.
pub fn exec(gate: &Gated, nr: c_long, a: [u64; 6], path: u64) -> i64 {
    gate.post(Request::ProcessExec { via_agent: true });
    let Some(header) = region::header() else { return -(libc::ENOEXEC as i64) };
    // The agent gives the new image the program's signal mask, which the claim leaves in the slot.
    let Some(claim) = ExecSlot::claim() else { return -(libc::EAGAIN as i64) };
    let request = SeizeRequest { tid: sys::host_ids().1, process: Some(region::process()), exec_slot: Some(claim.index), allowed_ip: Some(sys::return_address()) };
    let rc = match agent::ask(&header.agent, request, &Seconds, PATIENCE_SECONDS) {
        Ok(()) => {
            install_agent_filter();
            // SAFETY: PR_SET_TSC takes plain integers.
            unsafe { sys::syscall(libc::SYS_prctl, &[libc::PR_SET_TSC as u64, libc::PR_TSC_SIGSEGV as u64]) };
            // SAFETY: the exact call the program made, with its own arguments.
            unsafe { sys::syscall6(nr, a) }
        }
        Err(_) => {
            gate.post(Request::Unsupported(Unsupported::StaticExec { path: Addr(path) }));
            -(libc::ENOEXEC as i64)
        }
    };
    // Still here: the exec failed. The thread goes on with the error (traced by the agent, which
    // lets a thread it does not know run on).
    claim.release();
    rc
}

/// Installs [`agent::filter_program`] for this thread (the others end with the exec).
fn install_agent_filter() {
    let program = agent::filter_program();
    // `SockFilter` is `struct sock_filter`, field for field.
    let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut libc::sock_filter };
    // SAFETY: seccomp reads the program, which outlives the call; no_new_privs is already set
    // (the preload's own filter needed it).
    unsafe { sys::syscall(libc::SYS_seccomp, &[libc::SECCOMP_SET_MODE_FILTER as u64, 0, &fprog as *const libc::sock_fprog as u64]) };
}

/// The kernel's futex on the region's words, waits bounded by a second.
struct Seconds;

impl Futex<AtomicU32> for Seconds {
    fn wait(&self, word: &AtomicU32, expected: u32) -> Waited {
        const SECOND: timespec = timespec { tv_sec: 1, tv_nsec: 0 };
        if sys::futex_wait(word, expected, Some(&SECOND)) == -(libc::ETIMEDOUT as i64) {
            Waited::TimedOut
        } else {
            Waited::Woken
        }
    }

    fn wake(&self, word: &AtomicU32, count: u32) {
        sys::futex_wake(word, count);
    }
}
