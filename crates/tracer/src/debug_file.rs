//! Where a stripped binary's symbols and DWARF went: its separate debug file, found as gdb finds
//! it. Debian's `-dbgsym` packages install `/usr/lib/debug/.build-id/ab/cdef....debug` named by
//! the binary's GNU build id; `objcopy --add-gnu-debuglink` names a file (`prog.debug`) looked
//! for beside the binary, in its `.debug/` directory, and under the debug root with the binary's
//! own directory. A debug file holds the symbols and lines at the binary's link-time addresses,
//! so it is read in the binary's place.
//!
//! The debug roots are `DARA_DEBUG_DIRS` (colon-separated) when set, else `/usr/lib/debug`.
use std::path::{Path, PathBuf};

/// The separate debug file of the ELF file at `binary`, if one is installed.
pub fn companion(binary: &Path) -> Option<PathBuf> {
    let bytes = crate::image::read(binary).ok()?;
    let elf = goblin::elf::Elf::parse(&bytes).ok()?;
    let roots = debug_roots();
    if let Some(id) = build_id_of(&elf, &bytes).filter(|id| id.len() > 2) {
        let found = roots.iter().map(|root| root.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]))).find(|p| p.is_file());
        if found.is_some() {
            return found;
        }
    }
    let link = debuglink(&elf, &bytes)?;
    let dir = binary.parent()?;
    let beside = [dir.join(&link), dir.join(".debug").join(&link)];
    let under_roots = roots.iter().map(|root| root.join(dir.strip_prefix("/").unwrap_or(dir)).join(&link));
    // A file naming itself as its own debug link is no companion.
    beside.into_iter().chain(under_roots).find(|p| p.is_file() && p.as_path() != binary)
}

/// `DARA_DEBUG_DIRS` split at colons, else `/usr/lib/debug`.
fn debug_roots() -> Vec<PathBuf> {
    match std::env::var_os("DARA_DEBUG_DIRS") {
        Some(dirs) => std::env::split_paths(&dirs).collect(),
        None => vec![PathBuf::from("/usr/lib/debug")],
    }
}

/// The GNU build id as lower-case hex.
pub(crate) fn build_id_of(elf: &goblin::elf::Elf<'_>, bytes: &[u8]) -> Option<String> {
    let notes = elf.iter_note_headers(bytes)?;
    notes.flatten().find(|note| note.n_type == goblin::elf::note::NT_GNU_BUILD_ID).map(|note| note.desc.iter().map(|b| format!("{b:02x}")).collect())
}

/// The file name in the `.gnu_debuglink` section (a NUL-terminated name, then a CRC).
fn debuglink(elf: &goblin::elf::Elf<'_>, bytes: &[u8]) -> Option<String> {
    let section = elf.section_headers.iter().find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(".gnu_debuglink"))?;
    let start = usize::try_from(section.sh_offset).ok()?;
    let data = bytes.get(start..start.checked_add(usize::try_from(section.sh_size).ok()?)?)?;
    let name = data.split(|&b| b == 0).next()?;
    (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
}
