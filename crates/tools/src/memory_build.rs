//! Which memory-level points a program's build offers, read from its ELF file when a search
//! without them found nothing: the memory instrumentation its symbol tables name (the
//! ThreadSanitizer ABI's plain-access callbacks `__tsan_read*`, `__tsan_write*`, ... and atomic
//! ones `__tsan_atomic*`, sancov's `__sanitizer_cov_load*` / `__sanitizer_cov_store*`), and
//! the atomic instructions of its own code that `--preempt-on atomics` would trap. A search
//! without those options never sees either (the receivers return at once), so this is how it
//! can tell the user that points were available and off (`dara_explorer::hint`). Only the
//! executable itself is read: an instrumented library or a child program is not seen.
use std::path::Path;

use dara_model::preempt::Instrumented;

/// The instrumentation `path`'s symbol tables name (none when it cannot be read or parsed).
pub fn memory_instrumentation(path: &Path) -> Instrumented {
    std::fs::read(path).map(|bytes| from_image(&bytes)).unwrap_or_default()
}

/// The atomic instructions of `path`'s own code, as `--preempt-on atomics` finds them (0 when it
/// cannot be read or is not an ELF file).
pub fn atomic_instructions(path: &Path) -> usize {
    std::fs::read(path).ok().and_then(|bytes| dara_tracer::ptrace::atomics::program_sites(&bytes).ok()).map_or(0, |sites| sites.len())
}

fn from_image(bytes: &[u8]) -> Instrumented {
    let Ok(elf) = goblin::elf::Elf::parse(bytes) else { return Instrumented::default() };
    let mut found = Instrumented::default();
    let mut note = |name: &str| {
        if name.starts_with("__tsan_atomic") {
            found.tsan_atomics = true;
        } else if ["__tsan_read", "__tsan_write", "__tsan_unaligned_", "__tsan_volatile_"].iter().any(|p| name.starts_with(p)) {
            found.tsan = true;
        } else if name.starts_with("__sanitizer_cov_load") || name.starts_with("__sanitizer_cov_store") {
            found.sancov = true;
        }
    };
    for (syms, strtab) in [(&elf.dynsyms, &elf.dynstrtab), (&elf.syms, &elf.strtab)] {
        for sym in syms.iter() {
            if let Some(name) = strtab.get_at(sym.st_name) {
                note(name);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uninstrumented_binary_and_a_non_elf_file_have_none() {
        let own = std::env::current_exe().unwrap();
        assert!(!memory_instrumentation(&own).any(), "the test binary is not instrumented");
        assert!(!from_image(b"#!/bin/sh\nexit 0\n").any());
        assert!(!memory_instrumentation(Path::new("/nonexistent/program")).any());
        assert_eq!(atomic_instructions(Path::new("/nonexistent/program")), 0);
    }
}
