//! `libdara_preload.so`: dara's agent inside every traced process, injected with `LD_PRELOAD`.
//!
//! It turns the target's scheduling points into posts to dara's scheduler over the shared-memory
//! region of `dara_abi`, so that exactly one thread of the whole system runs at a time and every
//! interleaving, clock reading and random draw is dara's decision. Two interception layers:
//!
//! * [`hooks`]: symbols that shadow libc's (pthreads, semaphores, sleeps, clocks, randomness, CPU
//!   count). An uncontended `pthread_mutex_lock` never enters the kernel, so only a symbol hook
//!   can see it.
//! * [`trap`]: a seccomp filter + SIGSYS handler ([`trapped`]) for what the hooks cannot see:
//!   glibc-internal and raw syscalls (futex, clocks, sleeps, getrandom, /dev/urandom, new
//!   processes); with [`sigmask`] it keeps SIGSYS out of every signal mask libc sets.
//!
//! [`coverage`] counts sancov edges of instrumented programs into the region (and posts
//! `EdgeQuantum` every N edges under `--preempt-on edges:N`); [`access`] turns sancov load/store
//! callbacks into memory-level scheduling points (`--preempt-on memory`), and [`atomics`] the program's
//! own atomic instructions, trapped (`--preempt-on atomics`); [`fault`] names the
//! faulting function of a crash; [`written`] notes the files the program opens for writing.
//!
//! [`solo`] lets a single-threaded process (and in a recording, every thread) take and release
//! its private locks without a post; [`unposted`] lets a recording send and receive on TCP sockets
//! without one.
//!
//! The plumbing: [`init`] (the constructor and start barrier; [`fork_server`] parks a search's
//! program there and clones it per execution), [`gate`] (per-thread state, the
//! reentrancy guard and the handoff), [`region`] (the mapping), [`sys`] (the one syscall
//! trampoline every raw syscall goes through), [`real`] (the libc functions behind the hooks),
//! [`fd`] (what dara knows about each descriptor number, and its lifecycle), [`exec_image`] and
//! [`agent_exec`] (an exec of a program the preload cannot control, statically linked or Go,
//! recognised and handed to dara's ptrace agent), [`dispositions`]
//! and [`interrupt`] (which signals the program catches, and what a wait one ends does),
//! [`vclock`] and [`entropy`] (virtual time and seeded randomness, shared by both layers),
//! [`thread_start`] (how a new thread comes under dara, however it is started: the SIGSYS handler
//! makes every thread's `clone` itself), [`deferred_signals`] (a signal from outside that lands
//! while a thread runs, held back to its next post by the signal entry in `hooks`).
//!
//! The modules form layers, bottom first; a module imports from its own layer or lower ones,
//! never from a higher one, and no imports go round in a circle (the `layers` unit test checks
//! both against this list). What runs in the SIGSYS handler or on every post sits low, with no
//! policy; the entry points the program reaches (symbols, the SIGSYS handler's dispatch, the
//! vDSO thunks, the constructor) sit on top and call down.
//!
//! 1. base: `sys`, `call_site`, `region`, `real`, `stop_world`, `solo`, `entropy`, `written`, `fd`,
//!    `fdguard`, `dispositions`, `deferred_signals`, `fault::program_action`, `sigmask`, `trap`, `exec_image`,
//!    `cpuid`, `prefault`, `copy_holder`, `fork_server`
//! 2. handoff: `unposted`, `gate`
//! 3. services over the handoff: `interrupt`, `vclock`, `timecalls`, `tsc`, `thread_end`,
//!    `exec_slot`, `agent_exec`, `process`, `thread_start`, `fault`, `coverage`, `access`, `atomics`
//! 4. entry points: `hooks`, `trapped`, `vdso`, `init`
//!
//! Without `DARA_SHM` in the environment the library is inert: the constructor returns at once
//! and every hook forwards to libc.
//!
//! This code runs inside someone else's process: no allocation, no locks and no formatting on
//! hot paths or in the signal handler, `# Safety` on every unsafe function and a `SAFETY:` note
//! on every unsafe block.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![deny(unsafe_op_in_unsafe_fn)]
// The hooks are C entry points named after the libc functions they shadow; their safety
// contract is libc's, documented once in `hooks`.
#![allow(clippy::missing_safety_doc)]

#[cfg(test)]
mod layers;

pub mod access;
pub mod agent_exec;
pub mod atomics;
pub mod call_site;
pub mod copy_holder;
pub mod coverage;
pub mod cpuid;
pub mod deferred_signals;
pub mod dispositions;
pub mod entropy;
pub mod exec_image;
pub mod exec_slot;
pub mod fault;
pub mod fd;
pub mod fork_server;
pub mod fdguard;
pub mod gate;
pub mod hooks;
pub mod init;
pub mod interrupt;
pub mod prefault;
pub mod process;
pub mod real;
pub mod region;
pub mod sigmask;
pub mod solo;
pub mod stop_world;
pub mod sys;
pub mod thread_end;
pub mod thread_start;
pub mod timecalls;
pub mod tsc;
pub mod trap;
pub mod trapped;
pub mod unposted;
pub mod vclock;
pub mod vdso;
pub mod written;
