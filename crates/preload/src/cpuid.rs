//! `cpuid` answered with the hardware random-number instructions hidden.
//!
//! `rdrand` and `rdseed` return the CPU's own random numbers: no hook, filter or fault sees them,
//! so a program that mixes them into its state (libgcrypt's fast entropy poll does, at every
//! random draw) computes other numbers in every run, and its replay diverges (gpg's key
//! generation: another prime, another count of progress callbacks; docs/real-programs.md).
//! Programs ask `cpuid` before they use them, and `cpuid` *can* be made to fault:
//! `arch_prctl(ARCH_SET_CPUID, 0)` (CPUID faulting, a feature of the CPU or of the hypervisor,
//! `cpuid_fault` in /proc/cpuinfo) turns it into a SIGSEGV, which [`crate::fault`] hands to
//! [`emulate`]: the real answer, with the RDRAND (leaf 1, ecx bit 30) and RDSEED (leaf 7, ebx bit
//! 18) bits cleared (`dara_abi::cpuid`, shared with the ptrace agent, which does the same for the
//! processes it traces). The program then takes its other entropy sources, which dara serves from
//! the run's seeded streams.
//!
//! The setting is per thread and inherited by new threads and processes; `execve` resets it (the
//! next image's dynamic loader asks `cpuid` before its preload exists, and the constructor sets
//! it again). Where the CPU cannot fault on `cpuid` the instructions stay visible and their
//! numbers uncontrolled (docs/determinism.md). A program that uses `rdrand` without asking is not
//! caught either.
//!
//! **Answers kept.** Asking the CPU from the handler turns faulting off and on again around the
//! instruction: two MSR writes, each an exit to the hypervisor on a virtual machine (a `cpuid`
//! answered so costs about 10 µs, one answered from memory about 4.6). Every answer given is kept
//! in a small table by [`key`] (the sub-leaf only where it matters), and the fork server learns the
//! common ones before it serves ([`learn_common_answers`]): its copies inherit the table. The
//! answers hold no CPU's own identity (`CpuidAnswer::for_program`), so one learnt on another CPU
//! is the one this CPU would give. The server also runs libgcc's start-up questions (its
//! `__cpu_indicator_init`, a dozen `cpuid`s) once with those answers
//! ([`libgcc_cpu_model_filler`]), so its copies ask none.
//!
//! Runs in signal context: no allocation, no locks.
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use libc::ucontext_t;

use dara_abi::cpuid::{key, subleaves_to_learn, CpuidAnswer, ARCH_SET_CPUID, CPUID, CPUID_FAULTS, CPUID_RUNS};

use crate::sys;

/// Whether this process's threads fault on `cpuid` (set by the constructor).
static FAULTING: AtomicBool = AtomicBool::new(false);

/// One kept answer; `filled` is set last, so a reader sees all of it or skips it.
struct Kept {
    leaf: AtomicU32,
    subleaf: AtomicU32,
    answer: [AtomicU32; 4],
    filled: AtomicBool,
}

/// Room for the learnt answers (about 90 on a current CPU) and those asked later.
const KEPT_CAPACITY: usize = 160;

static KEPT: [Kept; KEPT_CAPACITY] = [const { Kept { leaf: AtomicU32::new(0), subleaf: AtomicU32::new(0), answer: [const { AtomicU32::new(0) }; 4], filled: AtomicBool::new(false) } }; KEPT_CAPACITY];
/// Entries claimed in `KEPT` (may exceed the capacity: then nothing more is kept).
static KEPT_CLAIMED: AtomicUsize = AtomicUsize::new(0);

fn kept(leaf: u32, subleaf: u32) -> Option<CpuidAnswer> {
    let (leaf, subleaf) = key(leaf, subleaf);
    let claimed = KEPT_CLAIMED.load(Ordering::Acquire).min(KEPT_CAPACITY);
    KEPT[..claimed].iter().find(|k| k.filled.load(Ordering::Acquire) && k.leaf.load(Ordering::Relaxed) == leaf && k.subleaf.load(Ordering::Relaxed) == subleaf).map(|k| {
        let [eax, ebx, ecx, edx] = [0, 1, 2, 3].map(|i| k.answer[i].load(Ordering::Relaxed));
        CpuidAnswer { eax, ebx, ecx, edx }
    })
}

fn keep(leaf: u32, subleaf: u32, answer: CpuidAnswer) {
    let (leaf, subleaf) = key(leaf, subleaf);
    let Some(slot) = KEPT.get(KEPT_CLAIMED.fetch_add(1, Ordering::AcqRel)) else { return };
    slot.leaf.store(leaf, Ordering::Relaxed);
    slot.subleaf.store(subleaf, Ordering::Relaxed);
    for (word, value) in slot.answer.iter().zip([answer.eax, answer.ebx, answer.ecx, answer.edx]) {
        word.store(value, Ordering::Relaxed);
    }
    slot.filled.store(true, Ordering::Release);
}

/// Asks the CPU the common questions and keeps the answers (the fork server, before it serves:
/// `cpuid` does not fault in it yet). Every basic and extended leaf up to the CPU's last (bounded),
/// the enumerated ones with their first sub-leaves (`subleaves_to_learn`).
pub fn learn_common_answers() {
    let ask = |leaf: u32, subleaf: u32| {
        let r = core::arch::x86_64::__cpuid_count(leaf, subleaf);
        CpuidAnswer { eax: r.eax, ebx: r.ebx, ecx: r.ecx, edx: r.edx }
    };
    let last_basic = ask(0, 0).eax.min(0x24);
    let last_extended = ask(0x8000_0000, 0).eax.clamp(0x8000_0000, 0x8000_0028);
    for leaf in (0..=last_basic).chain(0x8000_0000..=last_extended) {
        for subleaf in 0..subleaves_to_learn(leaf) {
            if kept(leaf, subleaf).is_none() {
                keep(leaf, subleaf, ask(leaf, subleaf).for_program(leaf, subleaf));
            }
        }
    }
}

/// libgcc_s's `__cpu_indicator_init`, which fills libgcc's CPU model (libgcc_s is loaded by the
/// preload itself), for the fork server to run once its fault handler answers `cpuid` as a
/// copy's would. The preload's constructor runs first (`-z initfirst`) and a copy continues from
/// inside it, so every copy ran libgcc's constructor after its grant: twelve `cpuid` faults,
/// about 55 µs of each execution. Run in the server, the copies' constructor finds the model
/// filled and returns at once. Nothing a copy can see differs: the same function, the same
/// answers (the kept ones, `for_program`, or the CPU's own where `cpuid` cannot fault, as in a
/// copy), before the program's own code either way. None where libgcc_s has no such function.
pub fn libgcc_cpu_model_filler() -> Option<extern "C" fn() -> libc::c_int> {
    // Looked up, not dlopen'ed: dlopen would run every constructor still pending (libc's among
    // them) with an environment libc has not taken yet. The version names libgcc_s's own
    // function (libgcc exports it under its version only); an executable's copy would not be.
    // SAFETY: NUL-terminated name and version; RTLD_DEFAULT searches the loaded objects.
    let init = unsafe { libc::dlvsym(libc::RTLD_DEFAULT, c"__cpu_indicator_init".as_ptr(), c"GCC_4.8.0".as_ptr()) };
    // SAFETY: libgcc's `int __cpu_indicator_init(void)`, exported for exactly such calls; it asks
    // `cpuid` and fills libgcc's own variables, calling nothing else.
    (!init.is_null()).then(|| unsafe { core::mem::transmute::<*mut libc::c_void, extern "C" fn() -> libc::c_int>(init) })
}

/// Whether `cpuid` faults into dara in this process.
pub fn faulting() -> bool {
    FAULTING.load(Ordering::Relaxed)
}

fn set_cpuid(mode: u64) -> i64 {
    // SAFETY: ARCH_SET_CPUID takes a plain integer.
    unsafe { sys::syscall(libc::SYS_arch_prctl, &[ARCH_SET_CPUID, mode]) }
}

/// Makes `cpuid` fault from now on (call once the SIGSEGV handler is in place); false where the
/// CPU cannot (the instructions then stay visible).
pub fn start_faulting() -> bool {
    let ok = set_cpuid(CPUID_FAULTS) == 0;
    FAULTING.store(ok, Ordering::Relaxed);
    ok
}

/// The CPU's own answer, asked with faulting briefly off on this thread.
fn real_cpuid(leaf: u32, subleaf: u32) -> CpuidAnswer {
    set_cpuid(CPUID_RUNS);
    let r = core::arch::x86_64::__cpuid_count(leaf, subleaf);
    set_cpuid(CPUID_FAULTS);
    CpuidAnswer { eax: r.eax, ebx: r.ebx, ecx: r.ecx, edx: r.edx }
}

/// Answers the `cpuid` at the faulting pc of `uc`, if that is one; false otherwise (a real
/// fault, or a counter read).
pub fn emulate(uc: &mut ucontext_t) -> bool {
    if !faulting() {
        return false;
    }
    let regs = &mut uc.uc_mcontext.gregs;
    let pc = regs[libc::REG_RIP as usize] as usize;
    // SAFETY: `pc` is where the faulting instruction was fetched, so its first byte is mapped.
    if unsafe { *(pc as *const u8) } != CPUID[0] {
        return false;
    }
    // SAFETY: `0f` opens a two-byte opcode, whose second byte the CPU fetched too.
    if unsafe { *((pc + 1) as *const u8) } != CPUID[1] {
        return false;
    }
    let (leaf, subleaf) = (regs[libc::REG_RAX as usize] as u32, regs[libc::REG_RCX as usize] as u32);
    let answer = kept(leaf, subleaf).unwrap_or_else(|| {
        let answer = real_cpuid(leaf, subleaf).for_program(leaf, subleaf);
        keep(leaf, subleaf, answer);
        answer
    });
    // cpuid writes the low 32 bits and zeroes the high ones.
    regs[libc::REG_RAX as usize] = answer.eax as i64;
    regs[libc::REG_RBX as usize] = answer.ebx as i64;
    regs[libc::REG_RCX as usize] = answer.ecx as i64;
    regs[libc::REG_RDX as usize] = answer.edx as i64;
    regs[libc::REG_RIP as usize] = (pc + CPUID.len()) as i64;
    true
}
