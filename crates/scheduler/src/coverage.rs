//! Coverage of one execution as the scheduler reads it from the region when the execution ends:
//! per process, every edge reached, with its call-site address, hit count and the step that first
//! reached it (and so the thread and action that did), plus the process's module map so the
//! call-site addresses can be symbolized later, offline (`dara coverage`). See docs/coverage.md.
//!
//! The module map is read from /proc/<pid>/maps while the process is alive (reading it costs about
//! 40 µs, a fiftieth of a small execution, so it is only done for processes that have or will
//! have coverage; see `Execution::note_modules`). Only executable mappings backed by a file are
//! kept: a handful per process. Libraries loaded with dlopen after the read are not in it.
use serde::{Deserialize, Serialize};

use crate::region::Region;

/// One edge reached in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeHit {
    /// Index in the process's map: guard number (`trace-pc-guard`) or hashed call site
    /// (`trace-pc`).
    pub edge: u32,
    /// Return address of the instrumented call (the byte after the `call`); ASLR is off, so it
    /// repeats across executions.
    pub pc: u64,
    /// Hits in this execution, saturating at 255.
    pub count: u8,
    /// Index of the decision after whose grant the edge was first reached.
    pub first_step: u32,
}

/// One executable, file-backed mapping of a process: `[start, end)` maps `path` from byte
/// `offset` on. An address `pc` in it is at file offset `pc - start + offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    pub path: String,
    pub start: u64,
    pub end: u64,
    pub offset: u64,
}

/// What one process covered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCoverage {
    /// Instrumented edges of the process's `trace-pc-guard` modules (0 for `trace-pc` builds,
    /// whose total is not known at run time).
    pub guards: u32,
    /// Edges reached, by increasing index.
    pub edges: Vec<EdgeHit>,
    /// Executable mappings of the process, by increasing start (empty when the maps could not be
    /// read).
    pub modules: Vec<Module>,
}

impl ProcessCoverage {
    /// Reads process `p`'s area; `None` when the process reached no instrumented edge.
    pub fn read(region: &Region, p: usize) -> Option<ProcessCoverage> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        if p >= dara_abi::MAX_PROCESSES {
            return None;
        }
        let cov = region.coverage(p);
        let edges: Vec<EdgeHit> = cov
            .counts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let count = c.load(Acquire);
                (count != 0).then(|| EdgeHit { edge: i as u32, pc: cov.pcs[i].load(Relaxed), count, first_step: cov.first_step[i].load(Relaxed) })
            })
            .collect();
        let guards = cov.guards.load(Relaxed);
        (!edges.is_empty() || guards != 0).then_some(ProcessCoverage { guards, edges, modules: Vec::new() })
    }

    /// Same guards and edges (counts, call sites, first steps); the module maps are not compared.
    pub fn same_edges(&self, other: &ProcessCoverage) -> bool {
        self.guards == other.guards && self.edges == other.edges
    }
}

/// The executable, file-backed mappings of process `pid` (empty if its maps cannot be read).
pub fn executable_modules(pid: u32) -> Vec<Module> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|maps| parse_maps(&maps)).unwrap_or_default()
}

/// Whether the executable of process `pid` calls a sancov edge receiver (imports or defines
/// `__sanitizer_cov_trace_pc_guard` or `__sanitizer_cov_trace_pc`). Answered from the file's
/// symbol tables once per (path, size, mtime) for the life of the dara process, so a search pays
/// the ELF parse once and every later process start a `readlink` and a `stat`.
pub fn executable_is_instrumented(pid: u32) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Key = (std::path::PathBuf, u64, Option<std::time::SystemTime>);
    static KNOWN: Mutex<Option<HashMap<Key, bool>>> = Mutex::new(None);
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else { return false };
    let Ok(meta) = std::fs::metadata(&exe) else { return false };
    let key = (exe, meta.len(), meta.modified().ok());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    if let Some(&answer) = known.get(&key) {
        return answer;
    }
    let answer = dara_tracer::image::read(&key.0).ok().is_some_and(|bytes| calls_receiver(&bytes));
    known.insert(key, answer);
    answer
}

/// Whether an ELF image names a sancov edge receiver in its symbol tables.
fn calls_receiver(bytes: &[u8]) -> bool {
    const RECEIVERS: [&str; 2] = ["__sanitizer_cov_trace_pc_guard", "__sanitizer_cov_trace_pc"];
    let Ok(elf) = goblin::elf::Elf::parse(bytes) else { return false };
    let named = |syms: &goblin::elf::Symtab<'_>, strtab: &goblin::strtab::Strtab<'_>| syms.iter().any(|s| strtab.get_at(s.st_name).is_some_and(|n| RECEIVERS.contains(&n)));
    named(&elf.dynsyms, &elf.dynstrtab) || named(&elf.syms, &elf.strtab)
}

/// Parses /proc/<pid>/maps text, keeping `r-xp`-style mappings whose path is absolute.
pub fn parse_maps(maps: &str) -> Vec<Module> {
    let mut modules: Vec<Module> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let path = fields.nth(2)?.trim_start();
            if perms.as_bytes().get(2) != Some(&b'x') || !path.starts_with('/') || path.ends_with(" (deleted)") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Module {
                path: path.to_string(),
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
            })
        })
        .collect();
    modules.sort_by_key(|m| m.start);
    modules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_executable_file_mappings_only() {
        let maps = "\
555555554000-555555555000 r--p 00000000 08:01 123 /work/a.out
555555555000-555555556000 r-xp 00001000 08:01 123 /work/a.out
555555559000-55555557a000 rw-p 00000000 00:00 0 [heap]
7ffff7dc3000-7ffff7f58000 r-xp 00028000 08:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0 [vdso]
7ffff7fc5000-7ffff7fc6000 r-xp 00000000 08:01 9 /tmp/with space/lib.so
7ffff7fc6000-7ffff7fc7000 r-xp 00000000 08:01 9 /tmp/gone.so (deleted)
";
        let m = parse_maps(maps);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0], Module { path: "/work/a.out".into(), start: 0x5555_5555_5000, end: 0x5555_5555_6000, offset: 0x1000 });
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[2].path, "/tmp/with space/lib.so");
    }

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
        let pc = keeps_executable_file_mappings_only as fn() as usize as u64;
        assert!(m.iter().any(|m| m.start <= pc && pc < m.end));
    }
}
