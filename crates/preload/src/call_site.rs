//! The program's call site of a post: the return address of the first frame outside this
//! library, found by walking the preload's own frame-pointer chain (the workspace builds with
//! `-C force-frame-pointers=yes`, `.cargo/config.toml`). Only the listing uses it: `dara-replay`
//! shows each step's file and line; the handoff walks only while the scheduler asks for call
//! sites (`Header::call_sites`).
//!
//! Why the walk is safe whatever the frames hold: every frame pointer it follows must lie in the
//! thread's own stack (between the current stack pointer and the top [`crate::gate::adopt`]
//! noted), be 16-byte aligned, and rise strictly; anything else ends the walk with "unknown".
//! It stops at the first return address outside the preload's executable segment, so it never
//! follows the program's own frame pointers (a program built without them has none). A signal
//! handler's frame returns into libc's `__restore_rt`: such a call site is libc's, and the listing
//! says only the function. No allocation, no system call: a few loads a post.
use core::sync::atomic::{AtomicU64, Ordering};

/// The preload's executable segment, `[start, end)`, found once at start-up (0, 0: unknown).
static TEXT_START: AtomicU64 = AtomicU64::new(0);
static TEXT_END: AtomicU64 = AtomicU64::new(0);

/// Most frames of the preload's own between a hook's entry and the post.
const MAX_FRAMES: usize = 32;

extern "C" {
    /// The ELF header of this shared object (defined by the linker).
    static __ehdr_start: u8;
}

/// Notes where the preload's code lies, from its own ELF program headers in memory. Called once
/// by the constructor, before any post.
pub fn init() {
    // SAFETY: `__ehdr_start` is the linker-provided start of this object's mapped ELF header, which
    // stays mapped for the life of the process; the header and program headers are read in place.
    unsafe {
        let base = core::ptr::addr_of!(__ehdr_start);
        let ehdr = &*(base as *const libc::Elf64_Ehdr);
        let phdrs = core::slice::from_raw_parts(base.add(ehdr.e_phoff as usize) as *const libc::Elf64_Phdr, ehdr.e_phnum as usize);
        // The first loadable segment's address is where the header sits (0 in a shared object).
        let Some(first) = phdrs.iter().find(|p| p.p_type == libc::PT_LOAD) else { return };
        let bias = base as u64 - (first.p_vaddr & !(first.p_align.max(1) - 1));
        for p in phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0) {
            TEXT_START.store(bias + p.p_vaddr, Ordering::Relaxed);
            TEXT_END.store(bias + p.p_vaddr + p.p_memsz, Ordering::Relaxed);
        }
    }
}

fn in_preload(pc: u64) -> bool {
    (TEXT_START.load(Ordering::Relaxed)..TEXT_END.load(Ordering::Relaxed)).contains(&pc)
}

/// The return address into the first caller outside the preload; 0 when it cannot be told.
#[inline(never)]
pub fn program_caller(stack_top: u64) -> u64 {
    let (mut fp, sp): (u64, u64);
    // SAFETY: reads two registers; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rbp", "mov {}, rsp", out(reg) fp, out(reg) sp, options(nomem, nostack, preserves_flags)) };
    if stack_top == 0 || TEXT_END.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut floor = sp;
    for _ in 0..MAX_FRAMES {
        if fp < floor || fp % 16 != 0 || fp.saturating_add(16) > stack_top {
            return 0;
        }
        // SAFETY: `fp` and `fp + 8` lie in this thread's live stack, between the stack pointer and
        // its top (checked above), so both words are mapped and readable.
        let (next, ret) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if !in_preload(ret) {
            return ret;
        }
        floor = fp + 16;
        fp = next;
    }
    0
}
