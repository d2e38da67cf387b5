//! The program's own frame under a fault inside a library: `strlen(NULL)` faults in libc, and
//! "in libc.so.6+0x189ad8" tells the user nothing; "called from measure (prog.c:6)" does.
//!
//! Libraries such as Debian's libc keep no frame pointers, so the frames are not walked: the
//! stack is scanned upward from the faulting stack pointer for the first word that is a return
//! address into the program's executable, that is, one that points just past a call instruction
//! there (crash reporters call this stack scanning). A stale return address left in a library's
//! uninitialised locals could be taken for it; the call-instruction check makes that rare, and
//! the answer is only a location for people and for telling bugs apart.
use std::path::Path;

use crate::symbols::Symbolizer;

/// How far above the stack pointer to look (a libc function's frames are far smaller).
const SCAN_BYTES: usize = 16 * 1024;

/// A return address in the program's executable, named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramFrame {
    /// `measure`, or `prog+0x10ac` (the return address in the file) when the binary is stripped.
    pub function: String,
    /// `prog.c:6`, from the executable's DWARF, when it has it.
    pub line: Option<String>,
}

impl std::fmt::Display for ProgramFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.line {
            Some(line) => write!(f, "{} ({line})", self.function),
            None => write!(f, "{}", self.function),
        }
    }
}

/// The program's frame nearest the fault of process `pid` at `pc` with stack pointer `sp`: None
/// when the fault is in the program's executable already (its own name says where), or no return
/// address into the executable is found.
pub fn program_frame(pid: u32, symbolizer: &Symbolizer, pc: u64, sp: u64) -> Option<ProgramFrame> {
    // Both name the file as the kernel resolves it (d_path), so equal files have equal paths.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let in_exe = |addr: u64| symbolizer.locate(addr).filter(|site| site.module == exe);
    if sp == 0 || in_exe(pc).is_some() {
        return None;
    }
    let stack = read(pid, sp, SCAN_BYTES)?;
    let ret = stack.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))).find(|&word| in_exe(word).is_some() && follows_call(pid, word))?;
    let site = in_exe(ret)?;
    // The call instruction, not the one after it, is the line the program was on.
    let function = match symbolizer.name(ret - 1) {
        Some(name) => name.split('+').next().unwrap_or(&name).to_string(),
        None => symbolizer.module_offset(ret)?,
    };
    Some(ProgramFrame { function, line: source_line(&site.module, site.vaddr - 1) })
}

/// Whether the bytes before `ret` in the target end with a call: `call rel32` (E8), or an indirect
/// `call` (FF /2) through a register or memory, with or without a REX prefix.
fn follows_call(pid: u32, ret: u64) -> bool {
    read(pid, ret.wrapping_sub(7), 7).and_then(|code| <[u8; 7]>::try_from(code).ok()).is_some_and(|code| ends_with_call(&code))
}

/// Whether the 7 bytes `code` (those before a possible return address) end with a call.
fn ends_with_call(code: &[u8; 7]) -> bool {
    let at = |back: usize| code[7 - back];
    let indirect = |back: usize, mods: &[u8]| at(back) == 0xff && (at(back - 1) >> 3) & 7 == 2 && mods.contains(&(at(back - 1) >> 6));
    at(5) == 0xe8
        || indirect(2, &[3, 0]) // call reg / call [reg]
        || indirect(3, &[1]) // call [reg+disp8]
        || indirect(6, &[2, 0]) // call [reg+disp32] / call [rip+disp32]
        || indirect(4, &[1]) // call [reg+index*s+disp8] (a SIB byte)
        || indirect(7, &[2]) // call [reg+index*s+disp32]
}

/// `len` bytes of `pid`'s memory at `addr` (fewer when the mapping ends), None when unreadable.
fn read(pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = dara_tracer::procfs::read_memory(pid, addr, &mut buf).ok().filter(|&n| n > 0)?;
    buf.truncate(n);
    Some(buf)
}

/// `file.c:LINE` of link-time address `vaddr` in `module`, from its own DWARF: never from a
/// separate debug file, since the location is part of the bug's identity, which must not change
/// with the debug packages a machine has installed (the listing uses them: `tools::listing`).
fn source_line(module: &Path, vaddr: u64) -> Option<String> {
    let loader = addr2line::Loader::new(module).ok()?;
    let location = loader.find_location(vaddr).ok()??;
    let file = Path::new(location.file?).file_name()?.to_string_lossy().into_owned();
    Some(format!("{file}:{}", location.line?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn probe() -> u64 {
        // SAFETY: reading the return address this frame was entered with (frame pointers are on
        // in this workspace: .cargo/config.toml), at [rbp+8].
        unsafe {
            let rbp: u64;
            std::arch::asm!("mov {}, rbp", out(reg) rbp);
            *((rbp + 8) as *const u64)
        }
    }

    #[test]
    fn a_return_address_follows_a_call() {
        let ret = std::hint::black_box(probe());
        assert!(follows_call(std::process::id(), ret), "the return address of probe() follows its call");
    }

    #[test]
    fn calls_are_told_from_other_instructions() {
        let ends = |tail: &[u8]| {
            let mut code = [0x90u8; 7];
            code[7 - tail.len()..].copy_from_slice(tail);
            ends_with_call(&code)
        };
        assert!(ends(&[0xe8, 1, 2, 3, 4]), "call rel32");
        assert!(ends(&[0xff, 0xd0]), "call rax");
        assert!(ends(&[0x41, 0xff, 0xd3]), "call r11");
        assert!(ends(&[0xff, 0x55, 0x08]), "call [rbp+8]");
        assert!(ends(&[0xff, 0x15, 1, 2, 3, 4]), "call [rip+disp32]");
        assert!(!ends(&[0xff, 0xe0]), "jmp rax");
        assert!(!ends(&[0x48, 0x89, 0xc7]), "mov rdi, rax");
        assert!(!ends(&[]), "no-ops");
    }
}
