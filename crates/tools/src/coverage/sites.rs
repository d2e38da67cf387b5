//! Instrumented call sites of one ELF file, found statically: every `call` to a sancov edge
//! receiver (`__sanitizer_cov_trace_pc_guard` for clang and rustc, `__sanitizer_cov_trace_pc` for
//! gcc) in the file's executable sections. A site is named by its return address (the byte after
//! the `call`), which is what the receivers store at run time, so covered and static sites match.
//!
//! Calls reach the receiver three ways on x86-64, and all three are recognised:
//! * `call rel32` (`E8`) to a PLT stub (`.plt`, `.plt.sec`, `.plt.got`) whose `jmp *slot(%rip)`
//!   (`FF 25`, possibly after `endbr64` and a `bnd` prefix) goes through the receiver's GOT slot;
//! * `call *slot(%rip)` (`FF 15`), the `-fno-plt` form rustc emits by default;
//! * `call rel32` straight to a receiver defined in the file itself.
//!
//! GOT slots are the targets of the file's `JUMP_SLOT`/`GLOB_DAT` relocations for the receivers.
//! The scan decodes no instructions: a byte pattern inside another instruction could in principle
//! look like such a call, but it must then also land exactly on a receiver's stub or slot.
use std::collections::{HashMap, HashSet};

use goblin::elf::program_header::PT_LOAD;
use goblin::elf::section_header::{SHF_EXECINSTR, SHT_PROGBITS};
use goblin::elf::Elf;

/// The sancov receivers whose call sites are edges.
pub const RECEIVERS: [&str; 2] = ["__sanitizer_cov_trace_pc_guard", "__sanitizer_cov_trace_pc"];

/// What `dara coverage` needs of one binary: its instrumented sites and how file offsets map to
/// addresses.
#[derive(Debug, Default)]
pub struct ModuleSites {
    /// Return addresses (link-time virtual addresses) of the instrumented calls, sorted.
    pub sites: Vec<u64>,
    /// (file offset, virtual address, file size) of each PT_LOAD segment.
    loads: Vec<(u64, u64, u64)>,
    /// GNU build-id, lowercase hex, when the file has one.
    pub build_id: Option<String>,
}

impl ModuleSites {
    /// Scans an ELF image. Errors say why the bytes are not a usable ELF file.
    pub fn scan(bytes: &[u8]) -> Result<ModuleSites, String> {
        let elf = Elf::parse(bytes).map_err(|e| format!("not a readable ELF file: {e}"))?;
        let loads = elf.program_headers.iter().filter(|ph| ph.p_type == PT_LOAD).map(|ph| (ph.p_offset, ph.p_vaddr, ph.p_filesz)).collect();
        let build_id = build_id(&elf, bytes);
        let code: Vec<Code<'_>> = elf
            .section_headers
            .iter()
            .filter(|sh| sh.sh_type == SHT_PROGBITS && sh.sh_flags & u64::from(SHF_EXECINSTR) != 0)
            .filter_map(|sh| {
                let data = bytes.get(sh.sh_offset as usize..(sh.sh_offset.checked_add(sh.sh_size)?) as usize)?;
                let name = elf.shdr_strtab.get_at(sh.sh_name).unwrap_or("");
                Some(Code { addr: sh.sh_addr, data, plt: name.starts_with(".plt") })
            })
            .collect();
        let (slots, defined) = receiver_addresses(&elf);
        let mut sites = Vec::new();
        if !slots.is_empty() || !defined.is_empty() {
            let mut stubs: HashMap<u64, bool> = HashMap::new();
            for c in code.iter().filter(|c| !c.plt) {
                scan_section(c, &code, &slots, &defined, &mut stubs, &mut sites);
            }
        }
        sites.sort_unstable();
        sites.dedup();
        Ok(ModuleSites { sites, loads, build_id })
    }

    /// The link-time address of file offset `offset`, if a loaded segment holds it.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        self.loads.iter().find(|&&(off, _, size)| offset >= off && offset - off < size).map(|&(off, vaddr, _)| vaddr.wrapping_add(offset - off))
    }
}

/// An executable section's bytes at its link-time address.
struct Code<'a> {
    addr: u64,
    data: &'a [u8],
    plt: bool,
}

/// GOT slots bound to a receiver, and receivers defined in the file itself.
fn receiver_addresses(elf: &Elf<'_>) -> (HashSet<u64>, HashSet<u64>) {
    let mut slots = HashSet::new();
    for reloc in elf.pltrelocs.iter().chain(elf.dynrelas.iter()).chain(elf.dynrels.iter()) {
        let name = elf.dynsyms.get(reloc.r_sym).and_then(|s| elf.dynstrtab.get_at(s.st_name));
        if name.is_some_and(|n| RECEIVERS.contains(&n)) {
            slots.insert(reloc.r_offset);
        }
    }
    let mut defined = HashSet::new();
    for (syms, strtab) in [(&elf.syms, &elf.strtab), (&elf.dynsyms, &elf.dynstrtab)] {
        for sym in syms.iter() {
            if sym.st_value != 0 && sym.st_shndx != 0 && strtab.get_at(sym.st_name).is_some_and(|n| RECEIVERS.contains(&n)) {
                defined.insert(sym.st_value);
            }
        }
    }
    (slots, defined)
}

fn read_i32(data: &[u8], at: usize) -> Option<i64> {
    Some(i64::from(i32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?)))
}

fn scan_section(c: &Code<'_>, code: &[Code<'_>], slots: &HashSet<u64>, defined: &HashSet<u64>, stubs: &mut HashMap<u64, bool>, sites: &mut Vec<u64>) {
    let d = c.data;
    for i in 0..d.len() {
        match d[i] {
            0xE8 => {
                let Some(rel) = read_i32(d, i + 1) else { continue };
                let ret = c.addr.wrapping_add(i as u64 + 5);
                let target = ret.wrapping_add(rel as u64);
                if defined.contains(&target) || *stubs.entry(target).or_insert_with(|| stub_slot(code, target).is_some_and(|s| slots.contains(&s))) {
                    sites.push(ret);
                }
            }
            0xFF if d.get(i + 1) == Some(&0x15) => {
                let Some(disp) = read_i32(d, i + 2) else { continue };
                let ret = c.addr.wrapping_add(i as u64 + 6);
                if slots.contains(&ret.wrapping_add(disp as u64)) {
                    sites.push(ret);
                }
            }
            _ => {}
        }
    }
}

/// The GOT slot a PLT stub at `target` jumps through: `[endbr64] [bnd] jmp *disp32(%rip)`.
fn stub_slot(code: &[Code<'_>], target: u64) -> Option<u64> {
    let c = code.iter().find(|c| c.plt && target >= c.addr && target - c.addr < c.data.len() as u64)?;
    let mut at = (target - c.addr) as usize;
    if c.data.get(at..at + 4) == Some(&[0xF3, 0x0F, 0x1E, 0xFA]) {
        at += 4;
    }
    if c.data.get(at) == Some(&0xF2) {
        at += 1;
    }
    if c.data.get(at..at + 2) != Some(&[0xFF, 0x25]) {
        return None;
    }
    let disp = read_i32(c.data, at + 2)?;
    Some(c.addr.wrapping_add(at as u64 + 6).wrapping_add(disp as u64))
}

fn build_id(elf: &Elf<'_>, bytes: &[u8]) -> Option<String> {
    let notes = elf.iter_note_sections(bytes, Some(".note.gnu.build-id"))?;
    for note in notes.flatten() {
        if note.n_type == goblin::elf::note::NT_GNU_BUILD_ID {
            return Some(note.desc.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `call rel32` at `at` to `target`, in a section at `base`.
    fn call(base: u64, at: usize, target: u64) -> Vec<u8> {
        let rel = target.wrapping_sub(base + at as u64 + 5) as i64 as i32;
        [vec![0xE8], rel.to_le_bytes().to_vec()].concat()
    }

    #[test]
    fn finds_calls_through_plt_stubs_got_slots_and_local_definitions() {
        const SLOT: u64 = 0x4000;
        const PLT: u64 = 0x1000;
        const LOCAL: u64 = 0x3000;
        // .plt.sec: stub 0 is `endbr64; bnd jmp *SLOT(%rip)`, stub 1 jumps through another slot.
        let mut plt = Vec::new();
        for slot in [SLOT, 0x4008] {
            let at = plt.len() as u64;
            let disp = (slot.wrapping_sub(PLT + at + 4 + 1 + 6)) as i64 as i32;
            plt.extend_from_slice(&[0xF3, 0x0F, 0x1E, 0xFA, 0xF2, 0xFF, 0x25]);
            plt.extend_from_slice(&disp.to_le_bytes());
            plt.extend_from_slice(&[0x90; 5]);
        }
        const TEXT: u64 = 0x2000;
        let mut text = vec![0x90];
        text.extend(call(TEXT, text.len(), PLT)); // site 1: through the receiver's stub
        text.extend(call(TEXT, text.len(), PLT + 16)); // another function's stub: not a site
        let at = text.len();
        let disp = SLOT.wrapping_sub(TEXT + at as u64 + 6) as i64 as i32;
        text.extend([vec![0xFF, 0x15], disp.to_le_bytes().to_vec()].concat()); // site 2: -fno-plt
        text.extend(call(TEXT, text.len(), LOCAL)); // site 3: local definition
        text.extend([0xE8, 0x01]); // a truncated call at the end: ignored, no panic
        let code = [Code { addr: PLT, data: &plt, plt: true }, Code { addr: TEXT, data: &text, plt: false }];
        let (slots, defined) = ([SLOT].into(), [LOCAL].into());
        let mut sites = Vec::new();
        scan_section(&code[1], &code, &slots, &defined, &mut HashMap::new(), &mut sites);
        assert_eq!(sites, vec![TEXT + 6, TEXT + 17, TEXT + 22]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(ModuleSites::scan(b"not an elf file").is_err());
        assert!(ModuleSites::scan(&[0x7f, b'E', b'L', b'F', 2, 1, 1]).is_err());
    }
}
