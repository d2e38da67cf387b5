//! How a new thread comes under dara: its creator's `ThreadCreate` and the slot it claims, the
//! new thread's `ThreadStart` (the start barrier), and the `clone` of a new thread, which the
//! SIGSYS handler makes itself so that no thread escapes the barrier.
//!
//! dara's `pthread_create` hook ([`crate::hooks::thread`]) is one way in. Threads are also made
//! past it: a library that looks `pthread_create` up with `dlsym(RTLD_NEXT, ...)` (jemalloc's
//! background thread in redis-server), glibc's own calls (`thrd_create`), a runtime's raw
//! `clone`. So the filter traps every `clone` with `CLONE_THREAD` ([`crate::trap`]) and
//! [`clone_thread`] makes it:
//! * from a gated thread outside the hook, with the same `ThreadCreate` grant and slot the hook
//!   gets; the child posts `ThreadStart` before it runs one instruction of the program;
//! * from inside the hook (the reentrancy guard is held: the hook posted already and its child
//!   starts in the hook's start routine) or from a thread dara does not control, alone.
//!
//! The handler issues the `clone` from the syscall page, whose `ret` the child executes first,
//! on its new stack. Under the top of that stack the handler writes the address of
//! `dara_thread_resume` and a [`Resume`] record: the registers the creator had at its own
//! `syscall`, its floating-point controls and signal mask, and the slot to start in. The stub
//! calls [`begin`] below the record (registration, then the creator's mask: the child inherited
//! the handler's, SIGSYS blocked), restores the registers and returns to the instruction after
//! the creator's `syscall` with `rax` 0 and the stack pointer the creator passed, exactly where
//! the kernel would have started it. The record is written in stack memory the new thread has
//! not used yet.
use core::mem::{offset_of, size_of};
use core::sync::atomic::Ordering;

use dara_abi::{handoff, Request};
use libc::{c_int, ucontext_t};

use crate::gate::{self, Gated};
use crate::{process, region, solo, sys};

/// A new thread's slot, claimed by its creator after the `ThreadCreate` grant.
pub struct Child {
    pub index: u32,
    pub slot: &'static dara_abi::Slot,
}

/// Posts `ThreadCreate` for the gated creator and claims the child's slot; `Err` is the error
/// `pthread_create` returns. Claimed only after the grant: the scheduler takes no decision while
/// a claimed slot has not posted, so claiming first would stall the decision itself. The creator
/// holds the token, so nobody else claims a slot until the child has posted `ThreadStart`.
pub fn claim_child(gate: &Gated) -> Result<Child, c_int> {
    let grant = gate.post(Request::ThreadCreate);
    if grant.result != 0 {
        return Err(grant.result as c_int);
    }
    let header = region::header().ok_or(libc::EAGAIN)?;
    let index = handoff::next_free(&header.next_slot);
    let slot = region::slot(index).ok_or(libc::EAGAIN)?;
    slot.process.store(region::process(), Ordering::Relaxed);
    slot.pid.store(sys::host_ids().0, Ordering::Relaxed);
    handoff::claim(slot);
    solo::thread_created();
    Ok(Child { index, slot })
}

/// The child was never made (the real `pthread_create` or `clone` failed): its slot is done.
pub fn abandon(child: Child) {
    handoff::finish(child.slot);
    solo::thread_gone();
}

/// Runs on the new thread, before any code of the program: makes it gated on slot `index` and
/// posts `ThreadStart`. `stack_top` bounds every frame it will run from above.
pub fn start_in_slot(index: u32, creator: u32, stack_top: usize) {
    let Some(slot) = region::slot(index) else {
        sys::die(b"dara: thread started without a slot\n", 125)
    };
    slot.tid.store(sys::host_ids().1, Ordering::Relaxed);
    gate::adopt(index, stack_top);
    if let Some(gate) = Gated::enter() {
        gate.post(Request::ThreadStart { creator });
    }
}

/// Sets the calling thread's signal mask to `mask` (one 64-bit kernel set).
pub fn set_mask(mask: u64) {
    // SAFETY: rt_sigprocmask reads one live 8-byte set.
    unsafe { sys::syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &mask as *const u64 as u64, 0, 8]) };
}

/// No slot: the child only resumes.
const NO_SLOT: u32 = u32::MAX;

/// What a thread cloned by [`clone_thread`] resumes with, written under the top of its stack.
/// `rip` comes last: the stub leaves the stack pointer on it and returns.
#[repr(C)]
struct Resume {
    /// rbx, rbp, r12-r15, rdi, rsi, rdx, r10, r8, r9, and rcx and r11 as the kernel leaves them
    /// after a `syscall` (the return address and the flags).
    regs: [u64; 14],
    mxcsr: u32,
    fpu_control: u16,
    _pad: u16,
    slot: u32,
    creator: u32,
    mask: u64,
    stack_top: u64,
    rip: u64,
}

const _: () = assert!(size_of::<Resume>() % 8 == 0);
const _: () = assert!(offset_of!(Resume, rip) + 8 == size_of::<Resume>());

/// The order of [`Resume::regs`], as the stub loads them.
const SAVED: [c_int; 14] = [
    libc::REG_RBX,
    libc::REG_RBP,
    libc::REG_R12,
    libc::REG_R13,
    libc::REG_R14,
    libc::REG_R15,
    libc::REG_RDI,
    libc::REG_RSI,
    libc::REG_RDX,
    libc::REG_R10,
    libc::REG_R8,
    libc::REG_R9,
    libc::REG_RIP,
    libc::REG_EFL,
];

core::arch::global_asm!(
    ".pushsection .text.dara_thread_resume,\"ax\",@progbits",
    ".globl dara_thread_resume",
    ".hidden dara_thread_resume",
    ".type dara_thread_resume,@function",
    "dara_thread_resume:",
    // rsp points at the Resume record. begin(record) on an aligned stack below it.
    "mov rbx, rsp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {begin}",
    "mov rsp, rbx",
    "ldmxcsr [rsp + {mxcsr}]",
    "fldcw [rsp + {fpu_control}]",
    "mov rbp, [rsp + 8]",
    "mov r12, [rsp + 16]",
    "mov r13, [rsp + 24]",
    "mov r14, [rsp + 32]",
    "mov r15, [rsp + 40]",
    "mov rdi, [rsp + 48]",
    "mov rsi, [rsp + 56]",
    "mov rdx, [rsp + 64]",
    "mov r10, [rsp + 72]",
    "mov r8, [rsp + 80]",
    "mov r9, [rsp + 88]",
    "mov rcx, [rsp + 96]",
    "mov r11, [rsp + 104]",
    "mov rbx, [rsp]",
    "add rsp, {rip}",
    "xor eax, eax",
    "ret",
    ".size dara_thread_resume, . - dara_thread_resume",
    ".popsection",
    begin = sym begin,
    mxcsr = const offset_of!(Resume, mxcsr),
    fpu_control = const offset_of!(Resume, fpu_control),
    rip = const offset_of!(Resume, rip),
);

extern "C" {
    fn dara_thread_resume();
}

/// The new thread's first Rust code, on its own stack under the record (see the module doc).
extern "C" fn begin(record: *const Resume) {
    // SAFETY: the stub passes the record the creator wrote under this thread's stack top.
    let record = unsafe { &*record };
    if record.slot != NO_SLOT {
        start_in_slot(record.slot, record.creator, record.stack_top as usize);
    }
    set_mask(record.mask);
}

/// A trapped `clone` with `CLONE_THREAD` (`uc`: the creator's context at its `syscall`, `a`: the
/// call's arguments: flags, stack, parent tid, child tid, TLS). Returns what the call returns in
/// the creator: the child's tid, or `-errno`.
pub fn clone_thread(uc: &ucontext_t, a: [u64; 6]) -> i64 {
    let (flags, top) = (a[0], a[1]);
    let gate = Gated::enter();
    // A thread on its creator's own stack cannot be resumed (nor run: the two would share it),
    // and one without TLS of its own would run dara's per-thread state as its creator's; dara's
    // per-thread state lives in glibc's TLS, so a runtime's own TLS layout will not do either.
    let own_stack_and_tls = top != 0 && flags & libc::CLONE_SETTLS as u64 != 0 && is_glibc_thread_block(a[4]);
    let child = match &gate {
        Some(gate) if !own_stack_and_tls => return process::unsupported(gate, libc::SYS_clone, a),
        None if top == 0 => return -(libc::EINVAL as i64),
        Some(gate) => {
            gate::enter_trap(uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64);
            let child = claim_child(gate);
            gate::leave_trap();
            match child {
                Ok(child) => Some(child),
                Err(rc) => return -(rc as i64),
            }
        }
        None => None,
    };
    let record_at = (top as usize - size_of::<Resume>()) as *mut Resume;
    let entry_at = (record_at as usize - 8) as *mut u64;
    // SAFETY: `top` is the top of the stack the creator made for the thread; the words under it
    // are not in use until the thread runs, and then first read by the stub.
    unsafe {
        record_at.write_unaligned(resume_record(uc, child.as_ref(), gate.as_ref(), top));
        entry_at.write_unaligned(dara_thread_resume as *const () as u64);
    }
    // SAFETY: the creator's own clone, on its own stack, from the syscall page; the child starts
    // at `dara_thread_resume` (see the module doc).
    let rc = unsafe { sys::syscall6(libc::SYS_clone, [flags, entry_at as u64, a[2], a[3], a[4], a[5]]) };
    if let Some(child) = child {
        if rc < 0 {
            abandon(child);
        } else {
            // glibc's `pthread_t` is the thread's TLS block: `pthread_join` of it finds the slot.
            child.slot.handle.store(a[4] as libc::pthread_t, Ordering::Release);
        }
    }
    rc
}

/// Whether `tls` is a thread block glibc made (`pthread_create` set up its thread-local storage):
/// its header names itself in its first word and in its third (`tcbhead_t`'s `tcb` and `self`).
/// Read with `process_vm_readv` on this very process, so that a bad pointer is an answer, not a
/// fault in the SIGSYS handler.
fn is_glibc_thread_block(tls: u64) -> bool {
    let mut words = [0u64; 3];
    let local = libc::iovec { iov_base: words.as_mut_ptr().cast(), iov_len: size_of::<[u64; 3]>() };
    let remote = libc::iovec { iov_base: tls as *mut libc::c_void, iov_len: size_of::<[u64; 3]>() };
    // SAFETY: reads 24 bytes of this process at `tls` into the live local array; the kernel
    // checks the remote range.
    let read = unsafe { sys::syscall(libc::SYS_process_vm_readv, &[sys::getpid() as u64, &local as *const libc::iovec as u64, 1, &remote as *const libc::iovec as u64, 1, 0]) };
    read == size_of::<[u64; 3]>() as i64 && words[0] == tls && words[2] == tls
}

/// The record a thread cloned from context `uc` resumes with.
fn resume_record(uc: &ucontext_t, child: Option<&Child>, creator: Option<&Gated>, top: u64) -> Resume {
    let gregs = &uc.uc_mcontext.gregs;
    let mut regs = [0u64; 14];
    for (value, reg) in regs.iter_mut().zip(SAVED) {
        *value = gregs[reg as usize] as u64;
    }
    // SAFETY: the kernel's saved floating-point state of the creator (or null without one).
    let (mxcsr, fpu_control) = match unsafe { uc.uc_mcontext.fpregs.as_ref() } {
        Some(fp) => (fp.mxcsr, fp.cwd),
        None => (DEFAULT_MXCSR, DEFAULT_FPU_CONTROL),
    };
    // SAFETY: the first word of the creator's saved mask (the kernel's 64-bit set).
    let mask = unsafe { *(core::ptr::addr_of!(uc.uc_sigmask) as *const u64) };
    Resume {
        regs,
        mxcsr,
        fpu_control,
        _pad: 0,
        slot: child.map_or(NO_SLOT, |c| c.index),
        creator: creator.map_or(0, |g| g.index()),
        mask,
        stack_top: top,
        rip: gregs[libc::REG_RIP as usize] as u64,
    }
}

/// The x86-64 defaults (all exceptions masked, round to nearest), used only if the kernel gave
/// no floating-point state.
const DEFAULT_MXCSR: u32 = 0x1f80;
const DEFAULT_FPU_CONTROL: u16 = 0x037f;
