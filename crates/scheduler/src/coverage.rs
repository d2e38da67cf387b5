//! Reading coverage off a live execution: the process areas of the shared region (the types and
//! the trace's encoding are `dara_model::coverage`), and the module map of a process from
//! /proc/<pid>/maps while it is alive.
//!
//! Reading a module map costs about 40 µs, a fiftieth of a small execution, so it is only done
//! for processes that have or will have coverage (see `Execution::note_modules`). Only executable
//! mappings backed by a file are kept: a handful per process. Libraries loaded with dlopen after
//! the read are not in it.
pub use dara_model::coverage::*;

use std::path::Path;

use crate::region::Region;

impl CoverageAreas for Region {
    fn coverage(&self, p: usize) -> &dara_abi::Coverage {
        Region::coverage(self, p)
    }
}

/// The executable, file-backed mappings of process `pid` (empty if its maps cannot be read).
pub fn executable_modules(pid: u32) -> Vec<Module> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|maps| parse_maps(&maps)).unwrap_or_default()
}

/// Whether the executable of process `pid` calls a sancov edge receiver (imports or defines
/// `__sanitizer_cov_trace_pc_guard` or `__sanitizer_cov_trace_pc`). Answered from the file's
/// symbol tables once per version of the file for the life of the dara process
/// ([`FileMemo`](dara_tracer::file_memo::FileMemo)), so a search pays the ELF parse once and every
/// later process start one `stat` of `/proc/<pid>/exe`.
pub fn executable_is_instrumented(pid: u32) -> bool {
    static KNOWN: dara_tracer::file_memo::FileMemo<bool> = dara_tracer::file_memo::FileMemo::new();
    KNOWN.get(Path::new(&format!("/proc/{pid}/exe")), |exe| dara_tracer::image::read(exe).ok().is_some_and(|bytes| calls_receiver(&bytes)))
}

/// Whether an ELF image names a sancov edge receiver in its symbol tables.
fn calls_receiver(bytes: &[u8]) -> bool {
    const RECEIVERS: [&str; 2] = ["__sanitizer_cov_trace_pc_guard", "__sanitizer_cov_trace_pc"];
    let Ok(elf) = goblin::elf::Elf::parse(bytes) else { return false };
    let named = |syms: &goblin::elf::Symtab<'_>, strtab: &goblin::strtab::Strtab<'_>| syms.iter().any(|s| strtab.get_at(s.st_name).is_some_and(|n| RECEIVERS.contains(&n)));
    named(&elf.dynsyms, &elf.dynstrtab) || named(&elf.syms, &elf.strtab)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_not_instrumented() {
        assert!(!executable_is_instrumented(std::process::id()));
        assert!(!executable_is_instrumented(u32::MAX), "no such process");
        assert!(calls_receiver(&elf_naming_a_receiver()));
    }

    /// This test binary with one dynamic symbol name overwritten to a receiver's.
    fn elf_naming_a_receiver() -> Vec<u8> {
        let mut bytes = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let elf = goblin::elf::Elf::parse(&bytes).unwrap();
        let sh = elf.section_headers.iter().find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(".dynstr")).unwrap();
        let sym = elf.dynsyms.iter().find(|s| elf.dynstrtab.get_at(s.st_name).is_some_and(|n| n.len() >= "__sanitizer_cov_trace_pc".len())).unwrap();
        let at = sh.sh_offset as usize + sym.st_name;
        let name = b"__sanitizer_cov_trace_pc\0";
        bytes[at..at + name.len()].copy_from_slice(name);
        bytes
    }

    #[test]
    fn reads_this_process() {
        let m = executable_modules(std::process::id());
        let here = std::env::current_exe().unwrap();
        assert!(m.iter().any(|m| std::path::Path::new(&m.path) == here), "{m:?}");
        let pc = reads_this_process as fn() as usize as u64;
        assert!(m.iter().any(|m| m.start <= pc && pc < m.end));
    }
}
