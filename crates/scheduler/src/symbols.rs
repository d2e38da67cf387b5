//! Names for addresses in a target: `counter_lock`, `g_state+8`. Used to make deadlock reports and
//! interleaving listings readable. With ASLR off the names are also stable across runs. Only the
//! binaries' own symbol tables are read, never separate debug files: names enter bugs' identities,
//! which must not depend on the debug packages a machine has installed.
//!
//! Each ELF file mapped by the process is located through /proc/<pid>/maps (its mapping at file
//! offset 0 gives the load base); an address is resolved against the symbol tables of the file
//! whose loaded range (including .bss, which maps anonymously) contains it.
use std::collections::BTreeMap;
use std::path::PathBuf;

struct Image {
    path: PathBuf,
    base: u64,
    lo: u64,
    hi: u64,
    /// (start vaddr, size, name), sorted by start.
    symbols: Vec<(u64, u64, String)>,
}

/// Symbol tables of the images of one process, loaded once.
#[derive(Default)]
pub struct Symbolizer {
    images: Vec<Image>,
}

impl Symbolizer {
    /// Reads the maps of `pid` and the symbol tables of its ELF images. Best effort: images that
    /// cannot be read are skipped.
    pub fn for_process(pid: u32) -> Symbolizer {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return Symbolizer::default() };
        let mut bases: BTreeMap<PathBuf, u64> = BTreeMap::new();
        for line in maps.lines() {
            let mut fields = line.splitn(6, ' ');
            let (Some(range), Some(offset), Some(path)) = (fields.next(), fields.nth(1), fields.nth(2)) else { continue };
            let path = path.trim_start();
            // `/dev/zero (deleted)` is a shared anonymous mapping, not a file.
            if !path.starts_with('/') || path.ends_with(" (deleted)") {
                continue;
            }
            let (Some(start), Ok(offset)) = (range.split('-').next().and_then(|s| u64::from_str_radix(s, 16).ok()), u64::from_str_radix(offset, 16)) else { continue };
            if offset == 0 {
                bases.entry(PathBuf::from(path)).or_insert(start);
            }
        }
        let images = bases.into_iter().filter_map(|(path, base)| load_image(&path, Some(base))).collect();
        Symbolizer { images }
    }

    /// `name` or `name+off` for `addr`, if it lies in a known image and near a symbol.
    pub fn name(&self, addr: u64) -> Option<String> {
        let image = self.images.iter().find(|im| addr >= im.lo && addr < im.hi)?;
        let vaddr = addr - image.base;
        let idx = image.symbols.partition_point(|(start, _, _)| *start <= vaddr);
        let (start, size, name) = image.symbols.get(idx.checked_sub(1)?)?;
        let off = vaddr - start;
        if off != 0 && off >= (*size).max(1) {
            return None;
        }
        Some(if off == 0 { name.clone() } else { format!("{name}+{off}") })
    }
}

/// A code address of a program as its binary names it: the file and the link-time address, which
/// the tools resolve to a function and a source line (DWARF) after the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    pub module: PathBuf,
    pub vaddr: u64,
}

impl Symbolizer {
    /// `libc.so.6+0x189ad8`: the file mapped at `addr` and the offset there, for an address no
    /// symbol names (a stripped library's local function).
    pub fn module_offset(&self, addr: u64) -> Option<String> {
        let site = self.locate(addr)?;
        Some(format!("{}+{:#x}", site.module.file_name()?.to_string_lossy(), site.vaddr))
    }

    /// The file mapped at `addr` and the link-time address there.
    pub fn locate(&self, addr: u64) -> Option<CallSite> {
        let image = self.images.iter().find(|im| addr >= im.lo && addr < im.hi)?;
        Some(CallSite { module: image.path.clone(), vaddr: addr - image.base })
    }
}

/// `name+off` for link-time address `vaddr` of the ELF file at `path` (a sanitizer's
/// `(module+offset)` frame), if it lies near a symbol.
pub fn name_in_file(path: &str, vaddr: u64) -> Option<String> {
    let image = load_image(&PathBuf::from(path), None)?;
    Symbolizer { images: vec![image] }.name(vaddr)
}

/// The symbols of the ELF file at `path`, loaded at `base` (the address of its first mapping),
/// or at its link-time addresses for `None`.
fn load_image(path: &PathBuf, base: Option<u64>) -> Option<Image> {
    let bytes = dara_tracer::image::read(path).ok()?;
    let elf = goblin::elf::Elf::parse(&bytes).ok()?;
    let first = elf.program_headers.iter().filter(|ph| ph.p_type == goblin::elf::program_header::PT_LOAD).map(|ph| ph.p_vaddr).min()?;
    let end = elf.program_headers.iter().filter(|ph| ph.p_type == goblin::elf::program_header::PT_LOAD).map(|ph| ph.p_vaddr + ph.p_memsz).max()?;
    // Executables linked at a fixed address (non-PIE) map at their vaddr; PIEs and libraries at
    // base + vaddr.
    let base = match base {
        Some(base) if elf.header.e_type != goblin::elf::header::ET_EXEC => base - first,
        _ => 0,
    };
    let mut symbols: Vec<(u64, u64, String)> = Vec::new();
    let mut add = |syms: &goblin::elf::Symtab, strtab: &goblin::strtab::Strtab| {
        for sym in syms.iter() {
            if sym.st_value == 0 || !(sym.is_function() || sym.st_type() == goblin::elf::sym::STT_OBJECT) {
                continue;
            }
            if let Some(name) = strtab.get_at(sym.st_name) {
                if !name.is_empty() {
                    symbols.push((sym.st_value, sym.st_size, demangle(name)));
                }
            }
        }
    };
    add(&elf.syms, &elf.strtab);
    add(&elf.dynsyms, &elf.dynstrtab);
    symbols.sort();
    symbols.dedup_by_key(|s| s.0);
    Some(Image { path: path.clone(), base, lo: base + first, hi: base + end, symbols })
}

/// Readable form of a C++ or Rust symbol name; C names come back unchanged.
fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(cpp) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = cpp.demangle_with_options(&cpp_demangle::DemangleOptions::default().no_params()) {
                return text;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[no_mangle]
    static DARA_SYMBOLIZER_PROBE: [u64; 4] = [1, 2, 3, 4];

    #[test]
    fn names_a_static_of_this_process() {
        let s = Symbolizer::for_process(std::process::id());
        let base = std::ptr::addr_of!(DARA_SYMBOLIZER_PROBE) as u64;
        assert_eq!(s.name(base).as_deref(), Some("DARA_SYMBOLIZER_PROBE"));
        assert_eq!(s.name(base + 8).as_deref(), Some("DARA_SYMBOLIZER_PROBE+8"));
        assert_eq!(s.name(0x10), None);
    }

    /// nginx maps its shared zones as shared anonymous memory, listed as `/dev/zero (deleted)`:
    /// reading that "file" whole never ended (a replay grew to 24 GB).
    #[test]
    fn skips_shared_anonymous_mappings() {
        const LEN: usize = 1 << 16;
        // SAFETY: a fresh anonymous mapping, no existing memory is touched; unmapped below.
        let zone = unsafe { libc::mmap(std::ptr::null_mut(), LEN, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(zone, libc::MAP_FAILED);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps.contains("/dev/zero (deleted)"), "{maps}");
        let s = Symbolizer::for_process(std::process::id());
        assert!(s.name(std::ptr::addr_of!(DARA_SYMBOLIZER_PROBE) as u64).is_some());
        assert_eq!(s.name(zone as u64), None);
        // SAFETY: `zone` is the LEN-byte mapping made above and nothing refers to it any more.
        unsafe { libc::munmap(zone, LEN) };
    }

    #[test]
    fn demangles_cpp_and_rust_names() {
        assert_eq!(demangle("_ZL2cv"), "cv");
        assert_eq!(demangle("_ZN3app5state7COUNTER17h0123456789abcdefE"), "app::state::COUNTER");
        assert_eq!(demangle("counter_lock"), "counter_lock");
    }
}
