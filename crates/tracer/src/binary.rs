//! Classifies the program a command names, so dara can refuse what it cannot control with a
//! message that says what to do, instead of running it uncontrolled.
use std::path::{Path, PathBuf};

use goblin::elf::program_header::PT_INTERP;

use crate::file_memo::FileMemo;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinaryKind {
    /// A dynamically linked ELF executable: the preload can enter it.
    Dynamic,
    /// A statically linked ELF executable: no dynamic loader, so LD_PRELOAD has no effect.
    Static,
    /// A `#!` script; its interpreter is what runs (and is checked in turn).
    Script { interpreter: PathBuf },
    /// Something else (another architecture, a foreign format).
    Other(String),
}

/// Finds `program` the way execvp would: as given if it contains a slash, else on `PATH`.
pub fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// Reads the start of `path` and classifies it.
pub fn classify(path: &Path) -> std::io::Result<BinaryKind> {
    let bytes = crate::image::read(path)?;
    if let Some(rest) = bytes.strip_prefix(b"#!") {
        let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let interpreter = line.split_whitespace().next().unwrap_or_default();
        return Ok(BinaryKind::Script { interpreter: PathBuf::from(interpreter) });
    }
    let elf = match goblin::elf::Elf::parse(&bytes) {
        Ok(elf) => elf,
        Err(_) => return Ok(BinaryKind::Other("not an ELF executable or script".into())),
    };
    if elf.header.e_machine != goblin::elf::header::EM_X86_64 {
        return Ok(BinaryKind::Other(format!("ELF for machine {}, dara runs x86_64 only", elf.header.e_machine)));
    }
    if elf.program_headers.iter().any(|ph| ph.p_type == PT_INTERP) {
        Ok(BinaryKind::Dynamic)
    } else {
        Ok(BinaryKind::Static)
    }
}

/// Whether `path` is a Go program (it has Go's build-info section). A Go program linked
/// against libc (cgo) is dynamically linked, but the preload cannot control it: Go's runtime
/// makes its own system calls, keeps goroutines off libc's locks, and reads the CPU count and
/// the clock by raw calls. dara runs every Go program through its ptrace agent.
pub fn is_go(path: &Path) -> bool {
    let Ok(bytes) = crate::image::read(path) else { return false };
    let Ok(elf) = goblin::elf::Elf::parse(&bytes) else { return false };
    elf.section_headers.iter().any(|sh| matches!(elf.shdr_strtab.get_at(sh.sh_name), Some(".go.buildinfo" | ".note.go.buildid")))
}

/// Whether dara runs `path` through its ptrace agent rather than its preload: statically linked
/// programs (no dynamic loader to load the preload) and Go programs. Asked at every launch, and
/// the answer reads the whole file, so it is kept per version of the file
/// ([`FileMemo`](crate::file_memo::FileMemo)): a search reads each program once.
pub fn needs_agent(path: &Path) -> bool {
    static KNOWN: FileMemo<bool> = FileMemo::new();
    KNOWN.get(path, reads_needs_agent)
}

/// Whether the command `program` (a name on PATH or a path) runs under dara's ptrace agent.
pub fn program_needs_agent(program: &str) -> bool {
    resolve(program).is_some_and(|p| needs_agent(&p))
}

/// [`needs_agent`], from the file's bytes.
fn reads_needs_agent(path: &Path) -> bool {
    match classify(path) {
        Ok(BinaryKind::Static) => true,
        Ok(BinaryKind::Dynamic) => is_go(path),
        _ => false,
    }
}

/// GNU build-id of an ELF file as lower-case hex, if it has one.
pub fn build_id(path: &Path) -> Option<String> {
    let bytes = crate::image::read(path).ok()?;
    let elf = goblin::elf::Elf::parse(&bytes).ok()?;
    crate::debug_file::build_id_of(&elf, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_system_binaries() {
        let sh = resolve("sh").expect("sh on PATH");
        let kind = classify(&sh).unwrap();
        assert!(matches!(kind, BinaryKind::Dynamic), "{kind:?}");
        assert!(resolve("definitely-not-a-program-dara").is_none());
    }

    #[test]
    fn a_changed_file_is_read_again() {
        let dir = std::env::temp_dir().join(format!("dara-binary-agent-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let program = dir.join("prog");
        std::fs::copy(resolve("sh").expect("sh on PATH"), &program).unwrap();
        assert!(!needs_agent(&program), "a dynamic C program runs under the preload");
        assert!(!needs_agent(&program), "asked again: the same answer");
        // The same inode, rewritten as an ELF file without a dynamic loader (PT_INTERP renamed).
        let mut bytes = std::fs::read(&program).unwrap();
        let elf = goblin::elf::Elf::parse(&bytes).unwrap();
        let (phoff, phentsize) = (elf.header.e_phoff as usize, elf.header.e_phentsize as usize);
        let interp = elf.program_headers.iter().position(|ph| ph.p_type == PT_INTERP).unwrap();
        bytes[phoff + interp * phentsize..][..4].copy_from_slice(&goblin::elf::program_header::PT_NOTE.to_le_bytes());
        std::fs::write(&program, &bytes).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&program).unwrap().set_modified(later).unwrap();
        assert!(needs_agent(&program), "now static: the cached answer is not used");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn classifies_scripts() {
        let dir = std::env::temp_dir().join(format!("dara-binary-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/bin/bash -e\necho hi\n").unwrap();
        assert_eq!(classify(&script).unwrap(), BinaryKind::Script { interpreter: "/bin/bash".into() });
        std::fs::write(&script, "plain text").unwrap();
        assert!(matches!(classify(&script).unwrap(), BinaryKind::Other(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
