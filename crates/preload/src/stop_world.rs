//! A sanitizer runtime's stop-the-world helper, run for real and outside the model.
//!
//! LeakSanitizer (standalone, or inside AddressSanitizer) checks for leaks at exit from a helper
//! it starts with a raw `clone(CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_UNTRACED)` on a stack of its
//! own: the helper ptrace-attaches every thread of the process, scans their registers and
//! stacks, detaches them, and exits; meanwhile the thread that started it waits on a private
//! futex, spins on `sched_yield` and reaps the helper with `waitpid(__WALL)`. None of that can
//! be a scheduling point: the helper shares the thread's TLS (no `CLONE_SETTLS`), so it would
//! post as that thread, and the number of yields depends on real time. So while the helper lives
//! ("the world is stopped") the process makes no posts: [`active`] makes `Gated::enter` refuse
//! and the SIGSYS handler run every trapped call for real. The other threads are parked inside
//! dara (their waits go through the syscall page, never trapped) and stay parked; the decisions
//! of the run do not change, so replay is exact. The world restarts when the starting thread's
//! `wait4` reaps the helper.
//!
//! Only that exact clone is let through, and only in a process that holds a LeakSanitizer
//! runtime (`__lsan_do_leak_check` is defined, looked up once at start); any other raw clone of
//! a new process still ends the run as uncontrolled.
//!
//! The clone is issued from the syscall page (the only place the filter lets it through), whose
//! `ret` the child executes first, on the helper's stack: the stack gets [`dara_helper_resume`]
//! and the runtime's own resume address pushed under it. The resume stub unblocks SIGSYS (the
//! child inherits the handler's mask) and jumps back into the runtime's clone code with `rax` 0,
//! exactly as if the runtime's own `syscall` had returned in the child.
use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::sys;

/// LeakSanitizer's stop-the-world clone flags (compiler-rt `StopTheWorld`; no exit signal).
const STOP_THE_WORLD_FLAGS: u64 = (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_UNTRACED) as u64;

/// Whether this process holds a LeakSanitizer runtime (set at start, before any user code).
static RUNTIME: AtomicBool = AtomicBool::new(false);
/// Whether a helper lives: the world is stopped and nothing posts.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The helper's pid, once the clone returned in the starting thread.
static HELPER: AtomicI64 = AtomicI64::new(0);

core::arch::global_asm!(
    ".pushsection .text.dara_helper_resume,\"ax\",@progbits",
    ".globl dara_helper_resume",
    ".hidden dara_helper_resume",
    ".type dara_helper_resume,@function",
    "dara_helper_resume:",
    // On entry rsp points at the runtime's resume address. Unblock SIGSYS:
    // dara_raw_syscall6(SYS_rt_sigprocmask, SIG_UNBLOCK, &mask, NULL, 8, 0), a6 on the stack.
    "mov rax, {sigsys}",
    "push rax",
    "push 0",
    "mov rdi, {nr}",
    "mov rsi, {unblock}",
    "lea rdx, [rsp + 8]",
    "xor ecx, ecx",
    "mov r8, 8",
    "xor r9d, r9d",
    "call dara_raw_syscall6",
    "add rsp, 16",
    "pop r11",
    "xor eax, eax",
    "jmp r11",
    ".size dara_helper_resume, . - dara_helper_resume",
    ".popsection",
    sigsys = const 1u64 << (libc::SIGSYS - 1),
    nr = const libc::SYS_rt_sigprocmask,
    unblock = const libc::SIG_UNBLOCK,
);

extern "C" {
    fn dara_helper_resume();
}

/// Notes whether a LeakSanitizer runtime is loaded (call once, before any user code).
pub fn detect_runtime() {
    // SAFETY: a NUL-terminated static name; dlsym has no other preconditions.
    let found = !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__lsan_do_leak_check".as_ptr()) }.is_null();
    RUNTIME.store(found, Ordering::Relaxed);
}

/// Whether the world is stopped (a helper lives): no thread of this process may post.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Whether a trapped `clone` with arguments `a` is the sanitizer runtime's stop-the-world helper.
pub fn is_helper_clone(a: &[u64; 6]) -> bool {
    RUNTIME.load(Ordering::Relaxed) && a[0] == STOP_THE_WORLD_FLAGS && a[1] != 0
}

/// Starts the helper for a clone trapped at `resume` (the address after the runtime's `syscall`
/// instruction); returns what the runtime's clone returns in the starting thread.
///
/// # Safety
/// `a` must be a stop-the-world clone ([`is_helper_clone`]) whose stack `a[1]` is the top of
/// writable memory the runtime reserved for the helper, with room below it.
pub unsafe fn start(resume: u64, a: [u64; 6]) -> i64 {
    let top = a[1] as *mut u64;
    // SAFETY: the runtime's helper stack grows down from `top`; the two words below it are
    // unused until the helper runs, and then popped by the syscall page's `ret` and the stub.
    unsafe {
        top.sub(1).write(resume);
        top.sub(2).write(dara_helper_resume as *const () as u64);
    }
    ACTIVE.store(true, Ordering::Release);
    // SAFETY: the runtime's own clone, on its own stack, from the syscall page; the child starts
    // at `dara_helper_resume` (see the module doc).
    let rc = unsafe { sys::syscall6(libc::SYS_clone, [a[0], top.sub(2) as u64, a[2], a[3], a[4], a[5]]) };
    if rc < 0 {
        ACTIVE.store(false, Ordering::Release);
    } else {
        HELPER.store(rc, Ordering::Release);
    }
    rc
}

/// A trapped call while the world is stopped, run for real; a `wait4` that reaps the helper
/// restarts the world.
pub fn passthrough(nr: libc::c_long, a: [u64; 6]) -> i64 {
    // SAFETY: the exact syscall the runtime attempted, with its own arguments.
    let rc = unsafe { sys::syscall6(nr, a) };
    if nr == libc::SYS_wait4 && rc > 0 && rc == HELPER.load(Ordering::Acquire) {
        HELPER.store(0, Ordering::Release);
        ACTIVE.store(false, Ordering::Release);
    }
    rc
}
