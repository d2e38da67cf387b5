//! `--preempt-on atomics` under the ptrace agent: the atomic instructions of a statically linked
//! or Go program, found as for the preload (`crate::atomic_plan`), become probes
//! ([`super::probes`]): an `int3` over each, a copy that runs out of line, and at the stop the
//! operand's address from the registers, offered as a memory-level scheduling point.
//!
//! Which functions: a static program carries its C library, whose synchronization dara models
//! through its lock probes and the futex calls; a Go program carries the runtime and the standard
//! library, whose atomics (the scheduler, the allocator, `sync`) run on every operation and are
//! not the program's own. So with a symbol table, only the program's functions are looked at: for
//! Go, `main.*` and packages of a module path (`example.com/x.F`: a first path element with a
//! dot, which no standard package has); for C, functions whose names do not start with `__` or
//! `_IO_` and are not the C library's locking, allocation or thread functions. A program without a
//! symbol table is swept whole (its C library's atomics included).
use std::collections::BTreeMap;

use dara_abi::atomic_sites::AtomicSite;

/// Whether the function `name` of a Go program (`go`) or of another is the program's own (see
/// the module doc).
pub fn program_function(name: &str, go: bool) -> bool {
    if go {
        return go_package(name).is_some_and(|(package, _)| package == "main" || package.split('/').next().is_some_and(|first| first.contains('.')));
    }
    const LIBC_PREFIXES: [&str; 8] = ["__", "_IO_", "_dl_", "pthread_", "sem_", "_pthread", "malloc", "__libc"];
    const LIBC_NAMES: [&str; 6] = ["free", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc"];
    !LIBC_PREFIXES.iter().any(|p| name.starts_with(p)) && !LIBC_NAMES.contains(&name)
}

/// The program's own atomic instructions in the ELF file `exe` (a Go program if it has a
/// `.gopclntab`), as the agent traps them.
pub fn program_sites(exe: &[u8]) -> Result<Vec<AtomicSite>, crate::atomic_plan::PlanError> {
    let go = goblin::elf::Elf::parse(exe).is_ok_and(|elf| elf.section_headers.iter().any(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(".gopclntab")));
    crate::atomic_plan::sites(exe, |name| program_function(name, go)).map(|(sites, _)| sites)
}

/// The package path of a Go function name (`net/http.(*Server).Serve` -> `net/http`), if the
/// name looks like one: a path, a dot, an identifier.
fn go_package(name: &str) -> Option<(&str, &str)> {
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let dot = last_slash + name[last_slash..].find('.')?;
    let (package, rest) = (&name[..dot], &name[dot + 1..]);
    let go_like = !package.is_empty() && !rest.is_empty() && package.chars().all(|c| c.is_ascii_alphanumeric() || "/._-~".contains(c));
    go_like.then_some((package, rest))
}

/// The trapped atomic instructions of one program image, by address in the process.
#[derive(Clone, Debug, Default)]
pub struct AtomicProbes {
    sites: BTreeMap<u64, AtomicSite>,
    bias: u64,
}

impl AtomicProbes {
    pub fn new(bias: u64) -> AtomicProbes {
        AtomicProbes { sites: BTreeMap::new(), bias }
    }

    pub fn insert(&mut self, site: AtomicSite) {
        self.sites.insert(site.address.wrapping_add(self.bias), site);
    }

    /// The access of the atomic instruction at `addr`, given the stopped thread's registers: its
    /// operand's address and size.
    pub fn access_at(&self, addr: u64, regs: &libc::user_regs_struct) -> Option<(u64, u64)> {
        let site = self.sites.get(&addr)?;
        let operand = site.operand(&ucontext_order(regs), self.bias)?;
        Some((operand, u64::from(site.size)))
    }
}

/// `regs` in the order of `ucontext_t`'s general registers (`REG_R8` = 0 ... `REG_RIP` = 16),
/// which plans name registers by.
fn ucontext_order(regs: &libc::user_regs_struct) -> [i64; 17] {
    let mut out = [0i64; 17];
    for (index, value) in [
        (libc::REG_R8, regs.r8),
        (libc::REG_R9, regs.r9),
        (libc::REG_R10, regs.r10),
        (libc::REG_R11, regs.r11),
        (libc::REG_R12, regs.r12),
        (libc::REG_R13, regs.r13),
        (libc::REG_R14, regs.r14),
        (libc::REG_R15, regs.r15),
        (libc::REG_RDI, regs.rdi),
        (libc::REG_RSI, regs.rsi),
        (libc::REG_RBP, regs.rbp),
        (libc::REG_RBX, regs.rbx),
        (libc::REG_RDX, regs.rdx),
        (libc::REG_RAX, regs.rax),
        (libc::REG_RCX, regs.rcx),
        (libc::REG_RSP, regs.rsp),
        (libc::REG_RIP, regs.rip),
    ] {
        out[index as usize] = value as i64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_s_own_functions_only() {
        for own in ["main.claim", "main.main.func1", "github.com/x/y.(*Queue).Pop", "example.com/q.Push"] {
            assert!(program_function(own, true), "{own}");
        }
        for theirs in ["runtime.lock2", "sync.(*Mutex).Lock", "sync/atomic.AddInt64", "internal/runtime/atomic.Xadd", "net/http.(*Server).Serve", "_rt0_amd64"] {
            assert!(!program_function(theirs, true), "{theirs}");
        }
        for own in ["claim", "worker.constprop.0", "main.cold", "_ZN5Queue3popEv", "_start_worker"] {
            assert!(program_function(own, false), "{own}");
        }
        for theirs in ["__lll_lock_wait", "pthread_mutex_lock", "malloc", "free", "_IO_flockfile", "__libc_malloc", "sem_post"] {
            assert!(!program_function(theirs, false), "{theirs}");
        }
    }

    #[test]
    fn operands_come_from_the_stopped_thread_s_registers() {
        // SAFETY: all-zero registers are a valid user_regs_struct.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        regs.rdi = 0x1000;
        regs.rsi = 2;
        let mut probes = AtomicProbes::new(0x5555_0000_0000);
        let site = AtomicSite { address: 0x1200, disp: 8, copy: 0, base: libc::REG_RDI as u8, index: libc::REG_RSI as u8, scale: 8, size: 4, len: 4, first_byte: 0xf0, reserved: [0; 6] };
        probes.insert(site);
        assert_eq!(probes.access_at(0x5555_0000_1200, &regs), Some((0x1000 + 16 + 8, 4)));
        assert_eq!(probes.access_at(0x1200, &regs), None, "keyed by the address in the process");
    }
}
