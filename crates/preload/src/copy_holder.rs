//! A fork server's copy whose memory a second process holds, so that the copy's exit does not
//! take its address space down on the CPU executions run on.
//!
//! When a process exits, the kernel tears its address space down (`exit_mmap`: every page-table
//! entry, every private page) in the exiting process, before it becomes a zombie: for a copy of a
//! small C program about a third of its whole CPU time, spent on the executions' CPU while the
//! execution's end waits for it. The server therefore makes each copy in two steps: it forks a
//! *holder* (its own pid namespace: the program never sees it, dara's child), which clones the
//! copy with `CLONE_VM | CLONE_VFORK` (in the execution's PID namespace, dara's child too). The
//! copy shares the holder's memory and runs on, on the same stack, exactly as a forked copy
//! would; the holder waits in the kernel (vfork) until the copy exits or execs and lets go of the
//! memory, then exits itself: the address space dies with the holder, on the CPU the holder was
//! born on (the one dara launches on, off the executions').
//!
//! The holder never returns through the stack it shares with the copy (the copy has long since
//! overwritten it): [`clone_sharing_memory`] switches the holder to a small stack of its own
//! before the clone and exits from there. What `CLONE_VM` changes for the copy is put back: the
//! kernel drops a `CLONE_VM` child's rseq registration, which glibc made for the main thread (its
//! `cpu_id` would go stale), so the copy registers the same area again ([`learn_rseq`], in the
//! server). The copy learns its own pid as dara sees it from `CLONE_PARENT_SETTID`.
//!
//! The vfork completion comes when the copy's *main thread* lets go of the memory: a program
//! whose main thread ends with `pthread_exit` wakes the holder while its other threads run on.
//! The holder then only closes its own descriptors and exits (the memory stays with the copy's
//! threads, and the last of them takes it down, as without a holder): it shares nothing else
//! with the copy (fixture `main_exits_first.c`).
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::sys;

/// glibc's rseq signature on x86-64.
const RSEQ_SIG: u64 = 0x5305_3053;
const RSEQ_FLAG_UNREGISTER: u64 = 1;
/// `sizeof(struct rseq)` of the original rseq ABI, which every glibc registers with at least.
const RSEQ_ORIGINAL_LEN: u32 = 32;

/// The main thread's rseq registration as glibc made it: area address and length (0: none
/// learnt; `NOT_REGISTERED`: glibc registered none).
static RSEQ_AREA: AtomicU64 = AtomicU64::new(0);
static RSEQ_LEN: AtomicU32 = AtomicU32::new(0);
const NOT_REGISTERED: u64 = u64::MAX;

/// The copy's pid as dara sees it, written by the kernel (`CLONE_PARENT_SETTID`) before the copy
/// runs, in the memory the copy shares with its holder.
static COPY_PID: AtomicI32 = AtomicI32::new(0);

/// The holder's stack from the clone on (it calls the syscall page on it: the clone, `close_range`,
/// `exit`).
#[repr(C, align(16))]
struct HolderStack(UnsafeCell<[u8; 256]>);
// SAFETY: used by one holder process at a time, in its own copy of this memory until it clones
// the copy, and only by the holder afterwards (the copy never touches it).
unsafe impl Sync for HolderStack {}
static HOLDER_STACK: HolderStack = HolderStack(UnsafeCell::new([0; 256]));

/// Learns glibc's rseq registration of this (main) thread: `__rseq_offset` and `__rseq_size`
/// name the area, and unregistering with a length tells whether it is the one registered (then
/// registered again at once). Call in the server before it serves: uses libc (`dlsym`). If the
/// registration cannot be learnt, copies are made without a holder ([`usable`]).
pub fn learn_rseq() {
    // SAFETY: dlsym of NUL-terminated names in the global scope; the symbols are plain data.
    let (offset, size) = unsafe { (libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()), libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr())) };
    if offset.is_null() || size.is_null() {
        RSEQ_AREA.store(NOT_REGISTERED, Ordering::Relaxed);
        return; // a glibc before 2.35 registers none
    }
    // SAFETY: glibc's exported rseq variables: a ptrdiff_t and an unsigned int.
    let (offset, size) = unsafe { (*(offset as *const isize), *(size as *const u32)) };
    if size == 0 {
        RSEQ_AREA.store(NOT_REGISTERED, Ordering::Relaxed);
        return; // registration off (glibc.pthread.rseq=0) or refused by the kernel
    }
    let area = thread_pointer().wrapping_add_signed(offset as i64);
    let registered = [RSEQ_ORIGINAL_LEN, size.next_multiple_of(RSEQ_ORIGINAL_LEN)].into_iter().find(|&len| rseq(area, len, RSEQ_FLAG_UNREGISTER) == 0);
    // Registered again at once; learnt only if that worked.
    if let Some(len) = registered.filter(|&len| rseq(area, len, 0) == 0) {
        RSEQ_AREA.store(area, Ordering::Relaxed);
        RSEQ_LEN.store(len, Ordering::Relaxed);
    }
}

/// Registers the main thread's rseq area again, as glibc had it (in a copy: the kernel dropped
/// the registration at the `CLONE_VM` clone).
fn register_rseq_again() {
    let area = RSEQ_AREA.load(Ordering::Relaxed);
    if area != 0 && area != NOT_REGISTERED {
        rseq(area, RSEQ_LEN.load(Ordering::Relaxed), 0);
    }
}

fn rseq(area: u64, len: u32, flags: u64) -> i64 {
    // SAFETY: rseq with glibc's own area (inside this thread's descriptor), length and signature.
    unsafe { sys::syscall(libc::SYS_rseq, &[area, len as u64, flags, RSEQ_SIG]) }
}

fn thread_pointer() -> u64 {
    let tp: u64;
    // SAFETY: on x86-64 glibc's thread descriptor starts with a pointer to itself at %fs:0.
    unsafe { core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags)) };
    tp
}

/// Whether copies can be made with a holder (the server learnt what the copy must put back).
pub fn usable() -> bool {
    RSEQ_AREA.load(Ordering::Relaxed) != 0
}

/// In the holder: clones the copy (`flags` plus `CLONE_VM | CLONE_VFORK | CLONE_PARENT_SETTID`;
/// the tid address for `CLONE_CHILD_SETTID`/`CLEARTID` is `child_tid`). Returns only in the copy,
/// with its pid as dara sees it, or in the holder on failure (`-errno`); the holder itself exits
/// once the copy has let go of the memory.
///
/// Not `CLONE_FILES`, though the holder uses no descriptor once the copy runs: the vfork
/// completion wakes the holder when the copy's *main thread* lets go of the memory, which a
/// program whose main thread ends with `pthread_exit` does while its other threads run on; a
/// holder sharing the table would then close it under them (fixture `main_exits_first.c`).
pub fn clone_copy(flags: u64, child_tid: u64) -> Result<i32, i32> {
    let flags = flags | (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PARENT_SETTID) as u64;
    // SAFETY: the holder's stack is this static's memory, used by nobody else (see HolderStack).
    let top = unsafe { (*HOLDER_STACK.0.get()).as_mut_ptr().add(256) } as u64;
    // SAFETY: see `clone_sharing_memory`.
    let rc = unsafe { clone_sharing_memory(flags, COPY_PID.as_ptr() as u64, child_tid, top) };
    if rc < 0 {
        return Err(-rc as i32);
    }
    register_rseq_again();
    Ok(COPY_PID.load(Ordering::Relaxed))
}

/// `clone(flags, stack, parent_tid, child_tid, 0)` for a `CLONE_VM | CLONE_VFORK` child that runs
/// on this very stack as if this function had returned 0, while the caller moves to `holder_top`
/// before the clone and, once the child has let go of the memory, closes every descriptor and
/// exits from there without touching this stack again. Returns 0 in the child, `-errno` in the caller if the clone failed.
///
/// # Safety
/// Single-threaded caller; `holder_top` is the top of memory nothing else uses; the flags must
/// include `CLONE_VM | CLONE_VFORK` (a child that runs alongside the caller on shared memory
/// would race it on the stack).
unsafe fn clone_sharing_memory(flags: u64, parent_tid: u64, child_tid: u64, holder_top: u64) -> i64 {
    let rc: i64;
    // SAFETY: the caller's contract. The child resumes in the syscall page after its `syscall`
    // with rsp at the pushed label, so its `ret` lands on label 2 with rsp as on entry and rax 0;
    // the caller runs on `holder_top` from the clone on, and only returns (to rsp as on entry)
    // when the clone failed. Registers the kernel clobbers (rcx, r11) and the ones used are
    // declared.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "lea r11, [rip + 2f]",
            "push r11",
            "mov rsi, rsp",
            "mov rsp, {top}",
            "mov rax, {clone}",
            "mov r11, {page}",
            "call r11",
            "test rax, rax",
            "js 3f",
            // The holder, once the copy's main thread has exited or exec'd: close its own
            // descriptors (the copy's output pipes reach their end when the copy's close, without
            // waiting for the holder's exit), then exit, on its own stack.
            "mov rax, {close_range}",
            "xor edi, edi",
            "mov esi, 0xffffffff",
            "xor edx, edx",
            "mov r11, {page}",
            "call r11",
            "mov rax, {exit}",
            "xor edi, edi",
            "mov r11, {page}",
            "call r11",
            "ud2",
            "3:",
            "mov rsp, r12",
            "jmp 4f",
            "2:",
            "4:",
            top = in(reg) holder_top,
            clone = const libc::SYS_clone,
            exit = const libc::SYS_exit,
            close_range = const libc::SYS_close_range,
            page = const sys::SYSCALL_PAGE,
            in("rdi") flags,
            in("rdx") parent_tid,
            in("r10") child_tid,
            in("r8") 0u64,
            lateout("rax") rc,
            out("rsi") _, out("rcx") _, out("r11") _, out("r12") _,
        );
    }
    rc
}
