//! `--preempt-on atomics`: the program's own atomic instructions as memory-level scheduling
//! points, without a rebuild.
//!
//! dara disassembled the executable and wrote its plan ([`dara_abi::atomic_sites`]): every
//! `lock`-prefixed instruction and `xchg` with memory of the program's own code, where its operand
//! is, and a copy of it that runs elsewhere. [`apply`] (the constructor, after the start grant and
//! before any of the program's code) maps the copies just below the image and writes `hlt` over
//! the first byte of each site. `hlt` is privileged, so in user mode it faults: SIGSEGV with
//! `SI_KERNEL`, the same signal and code as a trapped `rdtsc` or `cpuid`, which dara's fault
//! handler already owns whatever the program does with SIGSEGV ([`crate::fault`]). [`emulate`]
//! finds the site, computes the operand's address from the registers, and takes the same path as
//! an instrumented access ([`crate::access`]: recorded in a profiling run, a `MemoryWrite` point
//! when the granule is watched); then it resumes the thread at the copy, which performs the
//! instruction and jumps back after it. Another thread cannot run between the point and the
//! instruction: one thread runs at a time, and the granted thread goes straight on.
//!
//! Only the main executable is patched: shared libraries keep their atomics (libc's
//! synchronization is modelled through its hooks), and plain `mov`s that compile atomic loads are
//! not seen (docs/memory-preemption.md). A fork inherits the patched code; an exec'd program
//! gets its own plan.
//!
//! [`emulate`] runs in a signal handler: no allocation, no locks; the plan is a read-only mapping
//! that is never unmapped.
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use dara_abi::atomic_sites::{Plan, PlanName, PLANS_DIR_MAX, PLAN_NAME_LEN, TRAP_BYTE};
use dara_abi::{instrumented, Header};
use libc::ucontext_t;

use crate::{gate, sys};

/// The plan's mapping (0: none in this process) and its length.
static PLAN_AT: AtomicUsize = AtomicUsize::new(0);
static PLAN_LEN: AtomicUsize = AtomicUsize::new(0);
/// The program's load bias (0 for a program that runs at its link addresses).
static BIAS: AtomicU64 = AtomicU64::new(0);

const PAGE: u64 = 4096;

/// Why a plan could not be applied (each a line the constructor prints before it exits).
#[derive(Clone, Copy, Debug)]
pub enum ApplyError {
    NoPlan,
    BadPlan,
    NoImage,
    CodeArea,
    Changed,
    Protect,
}

impl ApplyError {
    pub fn message(self) -> &'static [u8] {
        match self {
            ApplyError::NoPlan => b"dara: --preempt-on atomics: no plan for this program in dara's plan directory\n",
            ApplyError::BadPlan => b"dara: --preempt-on atomics: the program's plan is damaged or of another dara\n",
            ApplyError::NoImage => b"dara: --preempt-on atomics: cannot find where the program is loaded\n",
            ApplyError::CodeArea => b"dara: --preempt-on atomics: cannot map the copies of the atomic instructions below the program\n",
            ApplyError::Changed => b"dara: --preempt-on atomics: the program's code differs from its plan (was it rebuilt while dara ran?)\n",
            ApplyError::Protect => b"dara: --preempt-on atomics: cannot write the traps into the program's code\n",
        }
    }
}

/// Traps the atomic instructions of this process's program, as its plan in the directory the
/// header names says. Returns how many were trapped.
pub fn apply(header: &Header) -> Result<usize, ApplyError> {
    let mut path = [0u8; PLANS_DIR_MAX + 1 + PLAN_NAME_LEN];
    let mut len = 0;
    for byte in header.atomic_plans.iter().map(|b| b.load(Ordering::Relaxed)).take_while(|&b| b != 0) {
        path[len] = byte;
        len += 1;
    }
    path[len] = b'/';
    let name = own_plan_name().ok_or(ApplyError::NoPlan)?.render();
    path[len + 1..len + 1 + PLAN_NAME_LEN].copy_from_slice(&name);
    let (at, size) = map_file(&path).ok_or(ApplyError::NoPlan)?;
    // SAFETY: a private read-only mapping of `size` bytes that is never unmapped.
    let bytes = unsafe { core::slice::from_raw_parts(at as *const u8, size) };
    let plan = Plan::parse(bytes).map_err(|_| ApplyError::BadPlan)?;
    let bias = if plan.header.position_independent != 0 { load_bias().ok_or(ApplyError::NoImage)? } else { 0 };

    let code = bias.wrapping_add(plan.header.code_address);
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
    let prot_rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    // SAFETY: a fresh anonymous mapping where nothing is mapped (MAP_FIXED_NOREPLACE refuses
    // otherwise).
    let mapped = unsafe { sys::syscall(libc::SYS_mmap, &[code, plan.code.len() as u64, prot_rw, flags, u64::MAX, 0]) };
    if mapped as u64 != code {
        return Err(ApplyError::CodeArea);
    }
    // SAFETY: the mapping just made is `code.len()` bytes, writable, and ours.
    unsafe { core::ptr::copy_nonoverlapping(plan.code.as_ptr(), code as *mut u8, plan.code.len()) };
    protect(code, plan.code.len() as u64, libc::PROT_READ | libc::PROT_EXEC)?;

    for site in plan.sites {
        // SAFETY: the site lies in the program's executable image (the plan was made from this
        // very file, whose identity names it), which is mapped.
        if unsafe { *(bias.wrapping_add(site.address) as *const u8) } != site.first_byte {
            return Err(ApplyError::Changed);
        }
    }
    let mut k = 0;
    while k < plan.sites.len() {
        // All sites on one page at once: writable, patched, executable again.
        let page = bias.wrapping_add(plan.sites[k].address) & !(PAGE - 1);
        let last = bias.wrapping_add(plan.sites[k].address) + plan.sites[k].len as u64 - 1;
        let end = (last | (PAGE - 1)) + 1;
        protect(page, end - page, libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC)?;
        while k < plan.sites.len() && bias.wrapping_add(plan.sites[k].address) < end {
            // SAFETY: the page was just made writable; the byte is the site's first (checked above).
            unsafe { *(bias.wrapping_add(plan.sites[k].address) as *mut u8) = TRAP_BYTE };
            k += 1;
        }
        protect(page, end - page, libc::PROT_READ | libc::PROT_EXEC)?;
    }
    BIAS.store(bias, Ordering::Relaxed);
    PLAN_LEN.store(size, Ordering::Relaxed);
    PLAN_AT.store(at, Ordering::Release);
    Ok(plan.sites.len())
}

fn protect(at: u64, len: u64, prot: i32) -> Result<(), ApplyError> {
    // SAFETY: changes the protection of pages of this process's own image or code area, while no
    // other thread of the process runs (the constructor, holding the run token).
    let rc = unsafe { sys::syscall(libc::SYS_mprotect, &[at, len, prot as u64]) };
    if rc == 0 {
        Ok(())
    } else {
        Err(ApplyError::Protect)
    }
}

/// The plan name of the file this process runs: `stat("/proc/self/exe")`, as dara computed it.
fn own_plan_name() -> Option<PlanName> {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    let path = b"/proc/self/exe\0";
    // SAFETY: a NUL-terminated path and a live stat buffer.
    let rc = unsafe { sys::syscall(libc::SYS_newfstatat, &[libc::AT_FDCWD as u64, path.as_ptr() as u64, &mut st as *mut libc::stat as u64, 0]) };
    (rc == 0).then(|| PlanName { dev: st.st_dev, ino: st.st_ino, size: st.st_size as u64, mtime_ns: (st.st_mtime as u64).wrapping_mul(1_000_000_000).wrapping_add(st.st_mtime_nsec as u64) })
}

/// Maps the file at the NUL-terminated `path` read-only: its address and length.
fn map_file(path: &[u8]) -> Option<(usize, usize)> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { sys::syscall(libc::SYS_openat, &[libc::AT_FDCWD as u64, path.as_ptr() as u64, (libc::O_RDONLY | libc::O_CLOEXEC) as u64]) };
    if fd < 0 {
        return None;
    }
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a descriptor of ours and a live stat buffer.
    let ok = unsafe { sys::syscall(libc::SYS_fstat, &[fd as u64, &mut st as *mut libc::stat as u64]) } == 0 && st.st_size > 0;
    let size = st.st_size as u64;
    // SAFETY: a new private read-only mapping of the whole file.
    let at = if ok { unsafe { sys::syscall(libc::SYS_mmap, &[0, size, libc::PROT_READ as u64, libc::MAP_PRIVATE as u64, fd as u64, 0]) } } else { -1 };
    sys::close(fd as i32);
    (at > 0 && (at as u64) < u64::MAX - 4096).then_some((at as usize, size as usize))
}

/// The main program's load bias: where its program headers are (`AT_PHDR`) less where it says they
/// are (`PT_PHDR`).
fn load_bias() -> Option<u64> {
    // SAFETY: getauxval reads the process's auxiliary vector.
    let (phdr, count) = unsafe { (libc::getauxval(libc::AT_PHDR), libc::getauxval(libc::AT_PHNUM)) };
    if phdr == 0 {
        return None;
    }
    // SAFETY: the kernel put `count` program headers at `phdr` in the mapped image.
    let headers = unsafe { core::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, count as usize) };
    headers.iter().find(|h| h.p_type == libc::PT_PHDR).map(|h| phdr.wrapping_sub(h.p_vaddr))
}

/// Handles the `hlt` at the faulting pc of `uc` if it is a trapped atomic instruction: the access
/// is offered as a scheduling point, and the thread resumes at the instruction's copy. False for
/// anything else.
pub fn emulate(uc: &mut ucontext_t) -> bool {
    let at = PLAN_AT.load(Ordering::Acquire);
    if at == 0 {
        return false;
    }
    // SAFETY: the plan's mapping, never unmapped, parsed once already by `apply`.
    let Ok(plan) = Plan::parse(unsafe { core::slice::from_raw_parts(at as *const u8, PLAN_LEN.load(Ordering::Relaxed)) }) else { return false };
    let bias = BIAS.load(Ordering::Relaxed);
    let regs = &mut uc.uc_mcontext.gregs;
    let pc = regs[libc::REG_RIP as usize] as u64;
    let Some(site) = plan.site_at(pc.wrapping_sub(bias)) else { return false };
    // SAFETY: `pc` is where the faulting instruction was fetched.
    if unsafe { *(pc as *const u8) } != TRAP_BYTE {
        return false;
    }
    if let Some(addr) = site.operand(regs, bias) {
        gate::enter_trap(pc);
        crate::access::on_access(addr as usize, site.size as u64, true, instrumented::TRAPPED_ATOMIC);
        gate::leave_trap();
    }
    regs[libc::REG_RIP as usize] = bias.wrapping_add(plan.header.code_address).wrapping_add(site.copy as u64) as i64;
    true
}
