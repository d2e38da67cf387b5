//! The vDSO's entries answered by dara: each one's first bytes are overwritten with a jump to a
//! thunk in the preload that answers like the system call it stands for ([`trapped::emulate`]).
//!
//! The kernel maps the vDSO (its ELF image at `getauxval(AT_SYSINFO_EHDR)`) into every process,
//! and its functions read the real clocks from shared memory without a system call, so neither
//! the symbol hooks nor the seccomp trap see them. glibc calls them itself (`timespec_get`,
//! `ftime`, `clock`, its own internal clock reads) and so do programs that bypass libc (Go,
//! hand-written `dlvsym`/auxv lookups). rr patches each entry into a `syscall` instruction for
//! its ptrace supervisor to catch; dara is in the process already, so the patch jumps straight to
//! a thunk: no signal per call, and it works even where the program has SIGSYS blocked.
//!
//! The patch is written once, by the constructor, before any user code: the vDSO text is made
//! writable (it is a private mapping: the write gives this process its own copy, inherited by
//! forks, replaced by a fresh vDSO at `execve`), overwritten, and made executable again. An entry
//! too short to hold the jump, or a vDSO that is missing or not the ELF image expected, is left
//! alone (its calls then reach the real clock; docs/determinism.md).
use libc::{c_long, Elf64_Ehdr, Elf64_Shdr, Elf64_Sym};

use crate::{sys, trapped};

/// [`patch`] ran in this process, or in the fork server it was copied from (the patched page is
/// inherited by `fork`).
static PATCHED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether [`patch`] was attempted in this process's image already.
pub fn patched() -> bool {
    PATCHED.load(core::sync::atomic::Ordering::Relaxed)
}

/// `movabs r11, imm64; jmp r11`: 13 bytes (r11 is scratch at a call).
const JUMP_LEN: usize = 13;
const PAGE: u64 = 4096;
const SHT_DYNSYM: u32 = 11;

/// A vDSO entry and the thunk that takes its place.
struct Entry {
    name: &'static [u8],
    thunk: usize,
}

macro_rules! thunks {
    ($( $thunk:ident = $nr:expr, ($($arg:ident),*); )*) => {
        $(
            /// Called in place of the vDSO function of the same system call, with its arguments.
            extern "C" fn $thunk($($arg: u64),*) -> i64 {
                let mut a = [0u64; 6];
                let args = [$($arg),*];
                a[..args.len()].copy_from_slice(&args);
                crate::gate::vdso_clock_read(|| trapped::emulate($nr, a))
            }
        )*
    };
}

thunks! {
    clock_gettime_thunk = libc::SYS_clock_gettime, (clock, ts);
    gettimeofday_thunk = libc::SYS_gettimeofday, (tv, tz);
    time_thunk = libc::SYS_time, (t);
    clock_getres_thunk = libc::SYS_clock_getres, (clock, res);
    getcpu_thunk = libc::SYS_getcpu, (cpu, node, cache);
}

/// `getrandom(buffer, len, flags, opaque_state, opaque_len)`: the state is dara's business no
/// more; the bytes come from the seeded stream. The parameter query (`opaque_len == ~0`) is
/// refused, so a libc that asks after the patch falls back to the (trapped) system call.
extern "C" fn getrandom_thunk(buf: u64, len: u64, flags: u64, _state: u64, opaque_len: u64) -> i64 {
    if opaque_len == u64::MAX {
        return -(libc::ENOSYS as i64);
    }
    trapped::emulate(libc::SYS_getrandom as c_long, [buf, len, flags, 0, 0, 0])
}

fn entries() -> [Entry; 6] {
    [
        Entry { name: b"__vdso_clock_gettime", thunk: clock_gettime_thunk as *const () as usize },
        Entry { name: b"__vdso_gettimeofday", thunk: gettimeofday_thunk as *const () as usize },
        Entry { name: b"__vdso_time", thunk: time_thunk as *const () as usize },
        Entry { name: b"__vdso_clock_getres", thunk: clock_getres_thunk as *const () as usize },
        Entry { name: b"__vdso_getcpu", thunk: getcpu_thunk as *const () as usize },
        Entry { name: b"__vdso_getrandom", thunk: getrandom_thunk as *const () as usize },
    ]
}

/// Why the vDSO was left alone.
#[derive(Debug, PartialEq, Eq)]
pub enum PatchError {
    /// The process has no vDSO: every clock read is then a system call, which the trap sees.
    Absent,
    /// Not the 64-bit ELF image with a dynamic symbol table expected.
    Unexpected,
    /// mprotect refused to make its text writable.
    Protect,
}

/// Patches every entry of this process's vDSO; returns how many were patched.
pub fn patch() -> Result<usize, PatchError> {
    PATCHED.store(true, core::sync::atomic::Ordering::Relaxed);
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return Err(PatchError::Absent);
    }
    // SAFETY: the kernel maps the whole vDSO image, headers and section table included, at `base`.
    let symbols = unsafe { dynamic_symbols(base) }.ok_or(PatchError::Unexpected)?;
    let mut targets = [(0usize, 0usize); 6];
    let mut found = 0;
    for entry in entries() {
        if let Some(addr) = symbols.find(entry.name) {
            targets[found] = (addr, entry.thunk);
            found += 1;
        }
    }
    let targets = &targets[..found];
    if targets.is_empty() {
        return Ok(0);
    }
    // The whole mapping at once: the kernel refuses to split the vDSO's (EINVAL).
    let (start, len) = (base as u64, symbols.image_len.div_ceil(PAGE) * PAGE);
    let rwx = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
    // SAFETY: changes the protection of the vDSO's own mapping only.
    if unsafe { sys::syscall(libc::SYS_mprotect, &[start, len, rwx]) } != 0 {
        return Err(PatchError::Protect);
    }
    for &(addr, thunk) in targets {
        let mut code = [0u8; JUMP_LEN];
        code[..2].copy_from_slice(&[0x49, 0xbb]);
        code[2..10].copy_from_slice(&(thunk as u64).to_le_bytes());
        code[10..].copy_from_slice(&[0x41, 0xff, 0xe3]);
        // SAFETY: `addr` starts a vDSO function at least JUMP_LEN bytes long (checked by
        // `find`), now writable; no thread runs program code yet.
        unsafe { core::ptr::copy_nonoverlapping(code.as_ptr(), addr as *mut u8, JUMP_LEN) };
    }
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    // SAFETY: as above.
    unsafe { sys::syscall(libc::SYS_mprotect, &[start, len, rx]) };
    Ok(found)
}

/// The vDSO's dynamic symbol table.
struct Symbols {
    base: usize,
    /// Load bias: the run-time address of virtual address 0.
    bias: usize,
    table: &'static [Elf64_Sym],
    strings: usize,
    /// Bytes of the image: its section table comes last.
    image_len: u64,
}

impl Symbols {
    /// The address of the defined function `name`, if it is long enough to patch.
    fn find(&self, name: &[u8]) -> Option<usize> {
        self.table.iter().find_map(|sym| {
            let at = self.strings + sym.st_name as usize;
            // SAFETY: st_name indexes the NUL-terminated string table of the mapped image.
            let sym_name = unsafe { core::ffi::CStr::from_ptr(at as *const core::ffi::c_char) }.to_bytes();
            let usable = sym.st_value != 0 && sym.st_size as usize >= JUMP_LEN;
            (sym_name == name && usable).then(|| self.bias.wrapping_add(sym.st_value as usize))
        }).filter(|&addr| addr >= self.base)
    }
}

/// Reads the section table of the ELF image at `base`.
///
/// # Safety
/// `base` must be the address of a mapped vDSO image (its section table included).
unsafe fn dynamic_symbols(base: usize) -> Option<Symbols> {
    // SAFETY: the image starts with its ELF header.
    let header = unsafe { &*(base as *const Elf64_Ehdr) };
    if header.e_ident[..4] != *b"\x7fELF" || header.e_ident[4] != libc::ELFCLASS64 || header.e_shentsize as usize != core::mem::size_of::<Elf64_Shdr>() {
        return None;
    }
    // SAFETY: e_shoff and e_shnum describe the section table inside the image.
    let sections = unsafe { core::slice::from_raw_parts((base + header.e_shoff as usize) as *const Elf64_Shdr, header.e_shnum as usize) };
    let dynsym = sections.iter().find(|s| s.sh_type == SHT_DYNSYM)?;
    let strtab = sections.get(dynsym.sh_link as usize)?;
    // The vDSO is linked at 0 (older kernels: at a fixed high address); sections' sh_addr and
    // sh_offset then differ by the link address, which is what the bias removes.
    let bias = base.wrapping_add(dynsym.sh_offset as usize).wrapping_sub(dynsym.sh_addr as usize);
    let count = dynsym.sh_size as usize / core::mem::size_of::<Elf64_Sym>();
    // SAFETY: the dynamic symbol table lies inside the image at its file offset.
    let table = unsafe { core::slice::from_raw_parts((base + dynsym.sh_offset as usize) as *const Elf64_Sym, count) };
    let image_len = header.e_shoff + u64::from(header.e_shnum) * u64::from(header.e_shentsize);
    Some(Symbols { base, bias, table, strings: base + strtab.sh_offset as usize, image_len })
}
