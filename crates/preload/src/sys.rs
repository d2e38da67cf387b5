//! Raw system calls, all issued from one instruction at a fixed address.
//!
//! Every syscall the preload makes goes through [`dara_raw_syscall6`], a tiny `global_asm!`
//! function that loads the registers and calls the *syscall page*: one page mapped at
//! [`SYSCALL_PAGE`] in every traced process, holding `syscall; ret`. The seccomp filter installed
//! by [`crate::trap`] lets a syscall through without looking at it when the instruction pointer
//! the kernel reports (the address right after the `syscall` instruction) is [`return_address`];
//! the same syscall issued from anywhere else in the process (libc, the vDSO fallback, a raw
//! `syscall` in user code) is trapped. So this module is the only place where the preload may
//! enter the kernel directly, and code that runs inside the SIGSYS handler uses nothing else.
//!
//! The address is fixed, not the preload's own code, because the filter outlives `execve`: the
//! new program's preload lands elsewhere, but maps its syscall page at the same address (before
//! its first syscall, with a bootstrap `mmap` that the filter never traps), so the filter it
//! inherited keeps letting exactly dara's syscalls through. A forked child inherits the page.
//!
//! The wrappers below return the kernel's raw result (`-errno` on failure) and never touch
//! `errno`, so they are safe to use in a signal handler.
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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
    // The syscall page: `syscall; ret` (r11 is clobbered by `syscall` anyway).
    "mov r11, {page}",
    "call r11",
    "ret",
    ".size dara_raw_syscall6, . - dara_raw_syscall6",
    ".popsection",
    page = const SYSCALL_PAGE,
);

/// Where every traced process maps its syscall page: far from where Linux places executables
/// (0x5555_5555_4000 with ASLR off), libraries and stacks (0x7fff_f7xx_xxxx and up), and the
/// heap (right after the executable).
pub const SYSCALL_PAGE: u64 = 0x3da7_a000_0000;
/// `syscall; ret`.
const SYSCALL_PAGE_CODE: [u8; 3] = [0x0f, 0x05, 0xc3];
const PAGE_SIZE: u64 = 4096;

/// Whether this process has its syscall page (inherited across `fork`, not across `execve`).
static PAGE_READY: AtomicBool = AtomicBool::new(false);

/// Maps the syscall page if this process does not have it yet. Uses its own `syscall`
/// instruction: `mmap` and `mprotect` are never trapped, so this works under a filter inherited
/// through `execve`. Dies with a one-line message if the address is taken by something else.
#[cold]
fn map_syscall_page() {
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
    // SAFETY: a fresh anonymous mapping at an address nothing else uses (NOREPLACE refuses to
    // touch an existing mapping).
    let addr = unsafe { bootstrap_syscall(libc::SYS_mmap, [SYSCALL_PAGE, PAGE_SIZE, prot, flags, u64::MAX, 0]) };
    if addr as u64 == SYSCALL_PAGE {
        // SAFETY: the page was just mapped writable and is PAGE_SIZE bytes long.
        unsafe { core::ptr::copy_nonoverlapping(SYSCALL_PAGE_CODE.as_ptr(), SYSCALL_PAGE as *mut u8, SYSCALL_PAGE_CODE.len()) };
        let exec = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        // SAFETY: changes the protection of the page mapped above only.
        unsafe { bootstrap_syscall(libc::SYS_mprotect, [SYSCALL_PAGE, PAGE_SIZE, exec, 0, 0, 0]) };
    } else if addr != -(libc::EEXIST as i64) || !page_holds_code() {
        let msg = b"dara: cannot map the syscall page at 0x3da7a0000000 (address in use)\n";
        // SAFETY: writing a static buffer to stderr, then exiting.
        unsafe {
            bootstrap_syscall(libc::SYS_write, [2, msg.as_ptr() as u64, msg.len() as u64, 0, 0, 0]);
            bootstrap_syscall(libc::SYS_exit_group, [125, 0, 0, 0, 0, 0]);
        }
    }
    PAGE_READY.store(true, Ordering::Release);
}

/// An existing mapping at the page's address: ours (set up before a `fork`) if it holds the
/// code. `mincore` tells whether the address is mapped before it is read.
fn page_holds_code() -> bool {
    let mut resident = 0u8;
    // SAFETY: mincore writes one byte for the one page asked about.
    let mapped = unsafe { bootstrap_syscall(libc::SYS_mincore, [SYSCALL_PAGE, PAGE_SIZE, &mut resident as *mut u8 as u64, 0, 0, 0]) } == 0;
    // SAFETY: the page is mapped (mincore succeeded); reading three bytes of it.
    mapped && unsafe { core::slice::from_raw_parts(SYSCALL_PAGE as *const u8, 3) } == SYSCALL_PAGE_CODE
}

/// A syscall from this function's own instruction: only for the few calls that set up the
/// syscall page, none of which the filter traps.
///
/// # Safety
/// As for [`syscall6`].
unsafe fn bootstrap_syscall(nr: c_long, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: a plain syscall; the kernel clobbers rcx and r11, declared below.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as i64 => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2], in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

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
}

/// The instruction pointer the kernel reports to seccomp for a syscall made through the syscall
/// page: right after its `syscall` instruction.
pub const fn return_address() -> u64 {
    SYSCALL_PAGE + 2
}

/// Issues syscall `nr` with six arguments; returns the kernel's raw result.
///
/// # Safety
/// The arguments must be valid for the syscall (pointers to memory of the right size and
/// lifetime, fds the caller owns, ...): this is exactly as unsafe as the syscall itself.
#[inline]
pub unsafe fn syscall6(nr: c_long, a: [u64; 6]) -> i64 {
    if !PAGE_READY.load(Ordering::Relaxed) {
        map_syscall_page();
    }
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

/// The calling thread's signal mask (the kernel's 64-signal word).
pub fn signal_mask() -> u64 {
    let mut mask: u64 = 0;
    // SAFETY: rt_sigprocmask with no new set writes the current one into a live 8-byte local.
    unsafe { syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, 0, &mut mask as *mut u64 as u64, 8]) };
    mask
}

/// Makes `mask` the calling thread's signal mask; signals it lets through that are pending are
/// delivered as this returns.
pub fn set_signal_mask(mask: u64) {
    // SAFETY: rt_sigprocmask reads one live 8-byte set.
    unsafe { syscall(libc::SYS_rt_sigprocmask, &[libc::SIG_SETMASK as u64, &mask as *const u64 as u64, 0, 8]) };
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

/// The calling thread's (pid, tid) as dara sees them: read through dara's `/proc`
/// ([`dara_abi::HOST_PROC_FD`], whose `thread-self` names `<pid>/task/<tid>` in dara's PID
/// namespace). Inside a PID namespace these differ from getpid/gettid, which the program sees.
/// Without that descriptor (dara did not pass it) the thread's own ids.
pub fn host_ids() -> (u32, u32) {
    let mut buf = [0u8; 48];
    // SAFETY: readlinkat writes at most `buf.len()` bytes into the live local buffer; the path
    // is a NUL-terminated literal.
    let n = unsafe { syscall(libc::SYS_readlinkat, &[dara_abi::HOST_PROC_FD as u64, c"thread-self".as_ptr() as u64, buf.as_mut_ptr() as u64, buf.len() as u64]) };
    if n > 0 {
        if let Some(ids) = parse_thread_self(&buf[..n as usize]) {
            return ids;
        }
    }
    (getpid(), gettid())
}

/// `<pid>/task/<tid>` as two numbers.
fn parse_thread_self(link: &[u8]) -> Option<(u32, u32)> {
    let number = |digits: &[u8]| -> Option<u32> {
        if digits.is_empty() {
            return None;
        }
        digits.iter().try_fold(0u32, |n, &d| d.is_ascii_digit().then(|| n.checked_mul(10)?.checked_add(u32::from(d - b'0'))).flatten())
    };
    let slash = link.iter().position(|&b| b == b'/')?;
    let tid = link[slash..].strip_prefix(b"/task/")?;
    Some((number(&link[..slash])?, number(tid)?))
}

#[cfg(test)]
mod host_id_tests {
    use super::parse_thread_self;

    #[test]
    fn pids_are_written_in_decimal() {
        let mut out = [0u8; 12];
        assert_eq!(super::decimal(0, &mut out), 1);
        assert_eq!(&out[..1], b"0");
        assert_eq!(super::decimal(4_294_967_295, &mut out), 10);
        assert_eq!(&out[..10], b"4294967295");
        assert_eq!(super::decimal(1234, &mut out), 4);
        assert_eq!(&out[..4], b"1234");
    }

    #[test]
    fn thread_self_links_parse_and_anything_else_does_not() {
        assert_eq!(parse_thread_self(b"1234/task/1240"), Some((1234, 1240)));
        assert_eq!(parse_thread_self(b"7/task/7"), Some((7, 7)));
        assert_eq!(parse_thread_self(b"1234"), None);
        assert_eq!(parse_thread_self(b"/task/5"), None);
        assert_eq!(parse_thread_self(b"12/task/"), None);
        assert_eq!(parse_thread_self(b"12/task/9x"), None);
        assert_eq!(parse_thread_self(b"99999999999/task/1"), None);
    }
}

/// `kill(pid, 0)`: 0 if the process exists, -ESRCH if not.
pub fn probe_process(pid: u32) -> i64 {
    // SAFETY: signal 0 only checks existence and permissions.
    unsafe { syscall(libc::SYS_kill, &[pid as u64, 0]) }
}

/// Whether process `pid` of *dara's* PID namespace is gone. Inside an execution's namespace
/// `kill(pid, 0)` would ask about another (or no) process of that number, so this looks in
/// dara's /proc ([`dara_abi::HOST_PROC_FD`]) when the process has it, and asks `kill` otherwise.
pub fn host_process_gone(pid: u32) -> bool {
    let mut path = [0u8; 12];
    let digits = decimal(pid, &mut path);
    path[digits] = 0; // NUL-terminated: 10 digits at most, then the NUL
    // SAFETY: faccessat reads the NUL-terminated path from the live local buffer.
    match unsafe { syscall(libc::SYS_faccessat, &[dara_abi::HOST_PROC_FD as u64, path.as_ptr() as u64, libc::F_OK as u64]) } {
        0 => false,
        rc if rc == -(libc::ENOENT as i64) => true,
        _ => probe_process(pid) == -(libc::ESRCH as i64),
    }
}

/// Writes `n` in decimal at the start of `out` (at least 10 bytes); returns how many digits.
pub fn decimal(mut n: u32, out: &mut [u8]) -> usize {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    len
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
