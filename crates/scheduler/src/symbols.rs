//! Names for addresses in a target: `counter_lock`, `g_state+8`. Used to make deadlock reports and
//! interleaving listings readable. With ASLR off the names are also stable across runs.
//!
//! Each ELF file mapped by the process is located through /proc/<pid>/maps (its mapping at file
//! offset 0 gives the load base); an address is resolved against the symbol tables of the file
//! whose loaded range (including .bss, which maps anonymously) contains it.
use std::collections::BTreeMap;
use std::path::PathBuf;

struct Image {
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
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 || !fields[5].starts_with('/') {
                continue;
            }
            let (Some(start), Ok(offset)) = (fields[0].split('-').next().and_then(|s| u64::from_str_radix(s, 16).ok()), u64::from_str_radix(fields[2], 16)) else { continue };
            if offset == 0 {
                bases.entry(PathBuf::from(fields[5])).or_insert(start);
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

/// `name+off` for link-time address `vaddr` of the ELF file at `path` (a sanitizer's
/// `(module+offset)` frame), if it lies near a symbol.
pub fn name_in_file(path: &str, vaddr: u64) -> Option<String> {
    let image = load_image(&PathBuf::from(path), None)?;
    Symbolizer { images: vec![image] }.name(vaddr)
}

/// The symbols of the ELF file at `path`, loaded at `base` (the address of its first mapping),
/// or at its link-time addresses for `None`.
fn load_image(path: &PathBuf, base: Option<u64>) -> Option<Image> {
    // Only regular files: a shared anonymous mapping shows as `/dev/zero`, which reads forever
    // (nginx's shared zones made a replay grow to 24 GB).
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
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
    Some(Image { base, lo: base + first, hi: base + end, symbols })
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

    #[test]
    fn demangles_cpp_and_rust_names() {
        assert_eq!(demangle("_ZL2cv"), "cv");
        assert_eq!(demangle("_ZN3app5state7COUNTER17h0123456789abcdefE"), "app::state::COUNTER");
        assert_eq!(demangle("counter_lock"), "counter_lock");
    }
}
