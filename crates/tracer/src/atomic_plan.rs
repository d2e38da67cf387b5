//! Finding a prebuilt program's atomic instructions (`--preempt-on atomics`) and writing the plan
//! its preload applies ([`dara_abi::atomic_sites`]).
//!
//! A site is an instruction of the executable's own code that is atomic on memory: one with a
//! `lock` prefix (`lock cmpxchg`, `lock xadd`, `lock add`, `lock bts`, ...) or an `xchg` with a
//! memory operand (locked implicitly; a sequentially consistent store compiles to it). Fences
//! have no address and are not sites: with one thread running at a time every execution is
//! sequentially consistent, so a fence orders nothing dara does not already order. Plain `mov`s
//! that C11/C++ atomic loads and release stores compile to cannot be told from ordinary ones and
//! are not sites either (docs/memory-preemption.md). Left out as well: operands through `fs`/`gs`
//! (thread-local storage) or the stack pointer (the thread's own stack, e.g. the
//! `lock or [rsp], 0` fence idiom), and 32-bit addressing.
//!
//! Where the code is: with a symbol table, each function's extent within the executable sections
//! (nothing between functions is decoded); without one (a stripped program), a linear sweep of
//! each executable section, which is exact for compiler output on x86-64 (no data in `.text`) but
//! can misread hand-written assembly that embeds data. The shared libraries the program loads are
//! not looked at: libc's synchronization stays with dara's hooks.
//!
//! Each site's copy (the instruction re-encoded for its new address, then a jump back) goes to an
//! area just below the image, within the reach of a `rip`-relative operand and of `jmp rel32`.
//! The copies are encoded for a nominal load address; every displacement in them is relative, so
//! they are right wherever the loader put a position-independent program.
use goblin::elf::{program_header, section_header, sym, Elf};
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};
use thiserror::Error;

use dara_abi::atomic_sites::{AtomicSite, PlanHeader, NO_REGISTER, PLAN_MAGIC, PLAN_VERSION, RIP_RELATIVE};

use crate::out_of_line::relocate_decoded;

const PAGE: u64 = 0x1000;
/// The load address the copies of a position-independent program are encoded for (x86-64 Linux
/// loads one there with ASLR off; any page-aligned address would do).
const NOMINAL_BIAS: u64 = 0x5555_5555_4000;
/// Lowest address a mapping may have (`vm.mmap_min_addr`'s usual value).
const LOWEST_MAPPING: u64 = 0x10000;
/// Copies are aligned to this many bytes.
const COPY_ALIGN: usize = 16;
/// Room reserved per site before encoding: an instruction grows by at most a few bytes when
/// re-encoded, and the jump back takes 5.
const COPY_ROOM: u64 = 40;

/// Why a program has no plan.
#[derive(Debug, Error)]
pub enum PlanError {
    #[error("it is not an ELF file dara can read: {0}")]
    NotElf(String),
    #[error("it is not an x86-64 program")]
    NotX86_64,
    #[error("there is no room below the program image for the copies of its {0} atomic instructions")]
    NoRoom(usize),
}

/// What a plan holds, for the user.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanSummary {
    /// Atomic instructions trapped.
    pub sites: usize,
    /// Atomic instructions found that could not be copied (not trapped).
    pub skipped: usize,
}

/// An atomic instruction found in the code.
struct Found {
    instruction: Instruction,
    site: AtomicSite,
}

/// The atomic instructions of the ELF file `bytes`, sorted by address, and whether the file is
/// position-independent. With a symbol table, only those of functions `keep` accepts by name.
pub fn sites(bytes: &[u8], keep: impl Fn(&str) -> bool) -> Result<(Vec<AtomicSite>, bool), PlanError> {
    let (found, position_independent) = find(bytes, NOMINAL_BIAS, &keep)?;
    Ok((found.into_iter().map(|f| f.site).collect(), position_independent))
}

/// The atomic instructions of functions `keep` accepts, decoded as loaded at `bias` (for a
/// position-independent file; 0 otherwise), sorted and unique.
fn find(bytes: &[u8], bias: u64, keep: &dyn Fn(&str) -> bool) -> Result<(Vec<Found>, bool), PlanError> {
    let elf = Elf::parse(bytes).map_err(|e| PlanError::NotElf(e.to_string()))?;
    if elf.header.e_machine != goblin::elf::header::EM_X86_64 || !elf.is_64 {
        return Err(PlanError::NotX86_64);
    }
    let position_independent = elf.header.e_type == goblin::elf::header::ET_DYN;
    let bias = if position_independent { bias } else { 0 };
    let mut found = Vec::new();
    for range in code_ranges(&elf, keep) {
        let Some(code) = bytes.get(range.offset as usize..(range.offset + range.len) as usize) else { continue };
        find_in(code, bias + range.address, bias, &mut found);
    }
    found.sort_by_key(|f| f.site.address);
    found.dedup_by_key(|f| f.site.address);
    Ok((found, position_independent))
}

/// The plan of the ELF file `bytes`: its file's bytes, and what it holds.
pub fn plan(bytes: &[u8]) -> Result<(Vec<u8>, PlanSummary), PlanError> {
    let elf = Elf::parse(bytes).map_err(|e| PlanError::NotElf(e.to_string()))?;
    let (found, position_independent) = find(bytes, NOMINAL_BIAS, &|_| true)?;
    let bias = if position_independent { NOMINAL_BIAS } else { 0 };

    let image_low = elf.program_headers.iter().filter(|p| p.p_type == program_header::PT_LOAD).map(|p| p.p_vaddr).min().unwrap_or(0) & !(PAGE - 1);
    let pages = (found.len() as u64 * COPY_ROOM).div_ceil(PAGE).max(1);
    let code_address = (bias + image_low).checked_sub((pages + 1) * PAGE).filter(|&a| a >= LOWEST_MAPPING).ok_or(PlanError::NoRoom(found.len()))?;

    let mut code = Vec::new();
    let mut sites = Vec::new();
    let mut skipped = 0;
    for f in &found {
        let at = code_address + code.len() as u64;
        match relocate_decoded(&f.instruction, at).filter(|c| (code.len() + c.len()) as u64 <= pages * PAGE) {
            Some(copy) => {
                sites.push(AtomicSite { copy: code.len() as u32, ..f.site });
                code.extend_from_slice(&copy);
                code.resize(code.len().next_multiple_of(COPY_ALIGN), 0xcc);
            }
            None => skipped += 1,
        }
    }
    code.resize((pages * PAGE) as usize, 0xcc);

    let header = PlanHeader {
        magic: PLAN_MAGIC,
        version: PLAN_VERSION,
        sites: sites.len() as u32,
        code_address: code_address.wrapping_sub(bias),
        code_len: code.len() as u64,
        skipped,
        position_independent: u32::from(position_independent),
    };
    let mut out = Vec::with_capacity(std::mem::size_of::<PlanHeader>() + sites.len() * std::mem::size_of::<AtomicSite>() + code.len());
    out.extend_from_slice(bytes_of(&header));
    for site in &sites {
        out.extend_from_slice(bytes_of(site));
    }
    out.extend_from_slice(&code);
    Ok((out, PlanSummary { sites: sites.len(), skipped: skipped as usize }))
}

/// A stretch of code: its virtual address, file offset and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CodeRange {
    address: u64,
    offset: u64,
    len: u64,
}

/// The code to decode: functions of the symbol table within executable sections (those `keep`
/// accepts by name), else the executable sections whole (else the executable segments, for a
/// file without sections).
fn code_ranges(elf: &Elf, keep: &dyn Fn(&str) -> bool) -> Vec<CodeRange> {
    let sections: Vec<CodeRange> = elf
        .section_headers
        .iter()
        .filter(|s| s.sh_type == section_header::SHT_PROGBITS && s.sh_flags & u64::from(section_header::SHF_EXECINSTR) != 0)
        .filter(|s| !elf.shdr_strtab.get_at(s.sh_name).is_some_and(|n| n.starts_with(".plt")))
        .map(|s| CodeRange { address: s.sh_addr, offset: s.sh_offset, len: s.sh_size })
        .collect();
    if sections.is_empty() {
        return elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == program_header::PT_LOAD && p.p_flags & program_header::PF_X != 0)
            .map(|p| CodeRange { address: p.p_vaddr, offset: p.p_offset, len: p.p_filesz })
            .collect();
    }
    let functions: Vec<(u64, u64, &str)> = elf.syms.iter().filter(|s| s.st_type() == sym::STT_FUNC && s.st_size > 0 && s.st_value != 0).map(|s| (s.st_value, s.st_size, elf.strtab.get_at(s.st_name).unwrap_or(""))).collect();
    if functions.is_empty() {
        return sections;
    }
    let mut ranges = Vec::new();
    for (start, size, _) in functions.into_iter().filter(|&(_, _, name)| keep(name)) {
        if let Some(section) = sections.iter().find(|s| start >= s.address && start + size <= s.address + s.len) {
            ranges.push(CodeRange { address: start, offset: section.offset + (start - section.address), len: size });
        }
    }
    ranges
}

/// Decodes `code` (loaded at `address`, for a program loaded `bias` above its link addresses) and
/// adds its atomic instructions to `found`, with their link addresses.
fn find_in(code: &[u8], address: u64, bias: u64, found: &mut Vec<Found>) {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            continue;
        }
        if let Some(site) = site_of(&instruction, code, address, bias) {
            found.push(Found { instruction, site });
        }
    }
}

/// The site of `instruction` (decoded from `code`, which is loaded at `address`, `bias` above its
/// link address) if it is an atomic operation on memory dara can trap.
fn site_of(instruction: &Instruction, code: &[u8], address: u64, bias: u64) -> Option<AtomicSite> {
    let on_memory = (0..instruction.op_count()).any(|i| instruction.op_kind(i) == OpKind::Memory);
    if !on_memory || !(instruction.has_lock_prefix() || instruction.mnemonic() == Mnemonic::Xchg) {
        return None;
    }
    if matches!(instruction.memory_segment(), Register::FS | Register::GS) || instruction.memory_base() == Register::RSP {
        return None;
    }
    let (base, disp) = if instruction.is_ip_rel_memory_operand() {
        (RIP_RELATIVE, instruction.ip_rel_memory_address().wrapping_sub(bias) as i64)
    } else {
        (register_index(instruction.memory_base())?, instruction.memory_displacement64() as i64)
    };
    let index = register_index(instruction.memory_index())?;
    let first_byte = *code.get((instruction.ip() - address) as usize)?;
    Some(AtomicSite {
        address: instruction.ip() - bias,
        disp,
        copy: 0,
        base,
        index,
        scale: instruction.memory_index_scale() as u8,
        size: instruction.memory_size().size() as u8,
        len: instruction.len() as u8,
        first_byte,
        reserved: [0; 6],
    })
}

/// `ucontext_t`'s index of a 64-bit general register ([`NO_REGISTER`] for none); None for a
/// register it cannot be (32-bit addressing, a segment).
fn register_index(register: Register) -> Option<u8> {
    let index = match register {
        Register::None => return Some(NO_REGISTER),
        Register::R8 => libc::REG_R8,
        Register::R9 => libc::REG_R9,
        Register::R10 => libc::REG_R10,
        Register::R11 => libc::REG_R11,
        Register::R12 => libc::REG_R12,
        Register::R13 => libc::REG_R13,
        Register::R14 => libc::REG_R14,
        Register::R15 => libc::REG_R15,
        Register::RDI => libc::REG_RDI,
        Register::RSI => libc::REG_RSI,
        Register::RBP => libc::REG_RBP,
        Register::RBX => libc::REG_RBX,
        Register::RDX => libc::REG_RDX,
        Register::RAX => libc::REG_RAX,
        Register::RCX => libc::REG_RCX,
        Register::RSP => libc::REG_RSP,
        _ => return None,
    };
    Some(index as u8)
}

/// The bytes of a `#[repr(C)]` plan record.
fn bytes_of<T: Copy>(value: &T) -> &[u8] {
    // SAFETY: PlanHeader and AtomicSite are repr(C) with no padding (their sizes are asserted
    // in dara_abi), so every byte is initialised.
    unsafe { std::slice::from_raw_parts(value as *const T as *const u8, std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dara_abi::atomic_sites::Plan;

    fn sites_in(code: &[u8]) -> Vec<AtomicSite> {
        let mut found = Vec::new();
        find_in(code, 0x401000, 0, &mut found);
        found.into_iter().map(|f| f.site).collect()
    }

    #[test]
    fn finds_locked_and_exchanging_instructions_only() {
        let code = [
            0xf0, 0x0f, 0xb1, 0x17, // lock cmpxchg [rdi], edx
            0x87, 0x06, // xchg [rsi], eax
            0x8b, 0x07, // mov eax, [rdi]: a plain load
            0x0f, 0xae, 0xf0, // mfence
            0xf0, 0x48, 0x83, 0x0c, 0x24, 0x00, // lock or qword [rsp], 0: the stack
            0x64, 0xf0, 0x0f, 0xc1, 0x03, // lock xadd fs:[rbx], eax: thread-local
            0xf0, 0x48, 0x0f, 0xc1, 0x05, 0x10, 0x00, 0x00, 0x00, // lock xadd [rip+0x10], rax
        ];
        let sites = sites_in(&code);
        assert_eq!(sites.len(), 3, "{sites:?}");
        assert_eq!((sites[0].address, sites[0].base, sites[0].size, sites[0].len, sites[0].first_byte), (0x401000, libc::REG_RDI as u8, 4, 4, 0xf0));
        assert_eq!((sites[1].address, sites[1].base, sites[1].size), (0x401004, libc::REG_RSI as u8, 4));
        let rip = sites[2];
        assert_eq!(rip.base, RIP_RELATIVE);
        assert_eq!(rip.disp as u64, 0x401016 + 9 + 0x10, "the operand's own address");
        assert_eq!(rip.size, 8);
    }

    #[test]
    fn an_indexed_operand_keeps_its_registers() {
        // lock add dword [rbx + rcx*4 + 8], 1
        let sites = sites_in(&[0xf0, 0x83, 0x44, 0x8b, 0x08, 0x01]);
        assert_eq!(sites.len(), 1);
        let s = sites[0];
        assert_eq!((s.base, s.index, s.scale, s.disp), (libc::REG_RBX as u8, libc::REG_RCX as u8, 4, 8));
    }

    #[test]
    fn a_real_program_s_plan_parses_and_its_copies_jump_back() {
        // The test binary itself: Rust's std is full of atomics.
        let me = std::env::current_exe().unwrap();
        let bytes = crate::image::read(&me).unwrap();
        let (file, summary) = plan(&bytes).unwrap();
        assert!(summary.sites > 10, "{summary:?}");
        let aligned: Vec<u64> = file.chunks(8).map(|c| { let mut w = [0u8; 8]; w[..c.len()].copy_from_slice(c); u64::from_le_bytes(w) }).collect();
        // SAFETY: a u64 vector is 8-byte aligned and as long as the file (rounded up).
        let view = unsafe { std::slice::from_raw_parts(aligned.as_ptr() as *const u8, file.len()) };
        let parsed = Plan::parse(view).unwrap();
        assert_eq!(parsed.sites.len(), summary.sites);
        assert!(parsed.sites.windows(2).all(|w| w[0].address < w[1].address));
        let bias = if parsed.header.position_independent != 0 { NOMINAL_BIAS } else { 0 };
        for site in parsed.sites.iter().take(200) {
            let at = bias.wrapping_add(parsed.header.code_address) + site.copy as u64;
            let mut decoder = Decoder::with_ip(64, &parsed.code[site.copy as usize..], at, DecoderOptions::NONE);
            let copy = decoder.decode();
            assert!(copy.has_lock_prefix() || copy.mnemonic() == Mnemonic::Xchg, "{copy:?}");
            let jump = decoder.decode();
            assert_eq!(jump.near_branch_target(), bias + site.address + site.len as u64, "{jump:?}");
            if site.base == RIP_RELATIVE {
                assert_eq!(copy.ip_rel_memory_address(), bias.wrapping_add(site.disp as u64));
            }
        }
    }
}
