//! Raw system calls, all issued from one instruction.
//!
//! Every syscall the preload makes goes through [`dara_raw_syscall6`], a tiny `global_asm!`
//! trampoline. The seccomp filter installed by [`crate::trap`] lets a syscall through without
//! looking at it when the instruction pointer the kernel reports (the address right after the
//! `syscall` instruction) is [`return_address`]; the same syscall issued from anywhere else in
//! the process (libc, the vDSO fallback, a raw `syscall` in user code) is trapped. So this module
//! is the only place where the preload may enter the kernel directly, and code that runs inside
//! the SIGSYS handler uses nothing else.
//!
//! The wrappers below return the kernel's raw result (`-errno` on failure) and never touch
//! `errno`, so they are safe to use in a signal handler.
use core::sync::atomic::AtomicU32;

use libc::{c_long, timespec};

core::arch::global_asm!(
    ".pushsection .text.dara_raw_syscall6,\"ax\",@progbits",
    ".globl dara_raw_syscall6",
    ".hidden dara_raw_syscall6",
    ".type dara_raw_syscall6,@function",
    ".p2align 4",
    "dara_raw_syscall6:",
    // SysV: nr=rdi a1=rsi a2=rdx a3=rcx a4=r8 a5=r9 a6=[rsp+8]
    // kernel: nr=rax a1=rdi a2=rsi a3=rdx a4=r10 a5=r8 a6=r9
    "mov rax, rdi",
    "mov rdi, rsi",
    "mov rsi, rdx",
    "mov rdx, rcx",
    "mov r10, r8",
    "mov r8, r9",
    "mov r9, [rsp + 8]",
    "syscall",
    ".globl dara_raw_syscall6_return",
    ".hidden dara_raw_syscall6_return",
    "dara_raw_syscall6_return:",
    "ret",
    ".size dara_raw_syscall6, . - dara_raw_syscall6",
    ".popsection",
);

extern "C" {
    fn dara_raw_syscall6(
        nr: c_long,
        a1: c_long,
        a2: c_long,
        a3: c_long,
        a4: c_long,
        a5: c_long,
        a6: c_long,
    ) -> c_long;
    /// The label right after the trampoline's `syscall` instruction (never read, only its
    /// address is taken).
    static dara_raw_syscall6_return: u8;
}

/// The instruction pointer the kernel reports to seccomp for a syscall made by the trampoline.
pub fn return_address() -> u64 {
    // Only the address of the label is taken; it is never read.
    core::ptr::addr_of!(dara_raw_syscall6_return) as u64
}

/// Issues syscall `nr` with six arguments; returns the kernel's raw result.
///
/// # Safety
/// The arguments must be valid for the syscall (pointers to memory of the right size and
/// lifetime, fds the caller owns, ...): this is exactly as unsafe as the syscall itself.
#[inline]
pub unsafe fn syscall6(nr: c_long, a: [u64; 6]) -> i64 {
    // SAFETY: the trampoline follows the C ABI and performs exactly this syscall; the caller
    // guarantees the arguments are valid for it.
    unsafe {
        dara_raw_syscall6(
            nr,
            a[0] as c_long,
            a[1] as c_long,
            a[2] as c_long,
            a[3] as c_long,
            a[4] as c_long,
            a[5] as c_long,
        ) as i64
    }
}

/// `syscall6` with fewer arguments (the rest are zero).
///
/// # Safety
/// As for [`syscall6`].
#[inline]
pub unsafe fn syscall(nr: c_long, args: &[u64]) -> i64 {
    let mut a = [0u64; 6];
    a[..args.len()].copy_from_slice(args);
    // SAFETY: forwarded from the caller.
    unsafe { syscall6(nr, a) }
}

const FUTEX_WAIT: u64 = 0;
const FUTEX_WAKE: u64 = 1;

/// Waits while `*word == expected`, up to `timeout` (relative). Shared (not private) futex: the
/// word lives in memory mapped by several processes. Returns 0, -EAGAIN, -ETIMEDOUT or -EINTR.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<&timespec>) -> i64 {
    let ts = timeout.map_or(0, |t| t as *const timespec as u64);
    // SAFETY: `word` is a live 4-byte aligned atomic and `ts` is null or a live timespec.
    unsafe {
        syscall(
            libc::SYS_futex,
            &[word.as_ptr() as u64, FUTEX_WAIT, expected as u64, ts],
        )
    }
}

/// Wakes up to `n` waiters on `word` (shared futex).
pub fn futex_wake(word: &AtomicU32, n: u32) -> i64 {
    // SAFETY: `word` is a live 4-byte aligned atomic; FUTEX_WAKE touches nothing else.
    unsafe {
        syscall(
            libc::SYS_futex,
            &[word.as_ptr() as u64, FUTEX_WAKE, n as u64],
        )
    }
}

/// Ends the whole process at once, without running atexit handlers or flushing stdio.
pub fn exit_group(code: i32) -> ! {
    // SAFETY: exit_group takes a plain integer and does not return.
    unsafe {
        syscall(libc::SYS_exit_group, &[code as u64]);
    }
    // exit_group cannot fail; satisfy the type checker without unreachable_unchecked.
    loop {
        core::hint::spin_loop();
    }
}

pub fn getpid() -> u32 {
    // SAFETY: no arguments.
    unsafe { syscall(libc::SYS_getpid, &[]) as u32 }
}

pub fn gettid() -> u32 {
    // SAFETY: no arguments.
    unsafe { syscall(libc::SYS_gettid, &[]) as u32 }
}

/// `kill(pid, 0)`: 0 if the process exists, -ESRCH if not.
pub fn probe_process(pid: u32) -> i64 {
    // SAFETY: signal 0 only checks existence and permissions.
    unsafe { syscall(libc::SYS_kill, &[pid as u64, 0]) }
}

pub fn sched_yield() -> i64 {
    // SAFETY: no arguments.
    unsafe { syscall(libc::SYS_sched_yield, &[]) }
}

pub fn close(fd: i32) -> i64 {
    // SAFETY: closing an fd the caller owns.
    unsafe { syscall(libc::SYS_close, &[fd as u64]) }
}

/// Writes `msg` to stderr, ignoring errors (used only for fatal one-line diagnostics).
pub fn write_stderr(msg: &[u8]) {
    // SAFETY: `msg` is a live buffer of `msg.len()` bytes.
    unsafe {
        syscall(libc::SYS_write, &[2, msg.as_ptr() as u64, msg.len() as u64]);
    }
}

/// Prints one fatal diagnostic line and ends the process with `code`.
pub fn die(msg: &[u8], code: i32) -> ! {
    write_stderr(msg);
    exit_group(code)
}
