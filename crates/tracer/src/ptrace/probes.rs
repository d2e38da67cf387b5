//! Preemption probes: breakpoints at the entry of the synchronisation functions of a traced
//! program (its own copy of libc's `pthread_mutex_lock`, Go's channel and map operations), so a
//! thread can be preempted there although the function never enters the kernel when
//! uncontended.
//!
//! A probe is an `int3` written over the first byte of the function (`PTRACE_POKETEXT` writes
//! through the text's write protection). A thread that reaches it stops with SIGTRAP; the agent
//! puts its pc back on the function, posts a scheduling point, and once granted, resumes it at
//! a copy of the instruction the probe covers, which jumps back after it ([`super::displaced`]).
//! An instruction that cannot be copied is stepped in place instead: the original byte put back,
//! one single step, the probe armed again. Only one thread of the whole system runs at a time,
//! so no other thread can pass the probe while it is disarmed.
//!
//! Probes are points only, not models: the function then runs for real, and a lock that is
//! held makes its caller wait in a `futex` call that the filter stops. So a probe can never
//! make the model disagree with the program; it only adds places where the schedule may
//! change. Functions are found in the executable's symbol table, and in a Go program's
//! `.gopclntab` as well ([`super::gopclntab`]), which stripped Go programs keep; a stripped C
//! program has neither, and runs with system-call points only (docs/ptrace.md).
use std::collections::BTreeMap;
use std::io;

use super::displaced::Displaced;
use super::inject::AtExec;

/// Functions of a statically linked C library (glibc, musl) that take or release a lock or
/// wake a waiter.
const LIBC_PROBES: [&str; 14] = [
    "pthread_mutex_lock",
    "pthread_mutex_trylock",
    "pthread_mutex_unlock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_unlock",
    "pthread_spin_lock",
    "pthread_spin_unlock",
    "pthread_cond_signal",
    "pthread_cond_broadcast",
    "sem_wait",
    "sem_post",
    "pthread_barrier_wait",
    "pthread_join",
];

/// Go runtime functions behind channel, select and map operations (`sync.Mutex`'s fast path is
/// inlined into its callers: its slow paths are probed instead), and `runtime.Gosched`: a
/// goroutine that waits for another by yielding in a loop (`runtime.GC` waiting for the sweep
/// another thread does) never enters the kernel, and without a point there it would spin while
/// the thread it waits for is parked. Likewise `runtime.freeSomeWbufs`, which the background
/// sweeper calls once a round of its loop: when another thread is still sweeping a span (parked
/// by dara in the middle of it), the sweeper goes round waiting for it to finish, on runtime
/// locks that never enter the kernel, and counts on sysmon preempting it with SIGURG after 10 ms;
/// sysmon cannot run while it holds the token (`tests/fixtures/go/preempt`: 60 s of CPU, then
/// stopped as uncontrolled, in `runtime.bgsweep`).
const GO_PROBES: [&str; 21] = [
    "runtime.Gosched",
    "runtime.freeSomeWbufs",
    "runtime.chansend1",
    "runtime.chanrecv1",
    "runtime.chanrecv2",
    "runtime.selectgo",
    "runtime.closechan",
    "runtime.mapassign",
    "runtime.mapassign_fast32",
    "runtime.mapassign_fast64",
    "runtime.mapassign_faststr",
    "runtime.mapaccess1",
    "runtime.mapaccess2",
    "runtime.mapdelete",
    // Inside a map write (its writing flag set): growth and overflow buckets, where another
    // writer can meet the flag ("concurrent map writes").
    "runtime.hashGrow",
    "runtime.growWork",
    "runtime.(*hmap).newoverflow",
    "sync.(*Mutex).lockSlow",
    "sync.(*Mutex).unlockSlow",
    "sync.(*RWMutex).RLock",
    "sync.(*RWMutex).Lock",
];

/// The probes kept in coarse mode (a recording, `preempt::COARSE`): a recording needs no
/// decision between critical sections (any schedule will do, as long as it is recorded, as the
/// preload's coarse locks say), but a goroutine yielding in a loop for a parked thread must still
/// give the token up. These yield on purpose: their probes post `Yield`, which PCT demotes as it
/// demotes `sched_yield`; every other probe posts `Probe`, a preemption point that is no yield.
const SPIN_PROBES: [&str; 2] = ["runtime.Gosched", "runtime.freeSomeWbufs"];

/// Which functions get probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeSet {
    /// Every synchronisation function (a search: each is a place where the schedule may change).
    All,
    /// Only those that break a spin ([`SPIN_PROBES`]; a recording). Debian's hugo building 30
    /// pages: 65,696 steps, 63,982 of them probes (its map accesses), with all of them.
    Spins,
}

const INT3: u8 = 0xCC;

/// The probes of one process's program image: address to the byte the `int3` replaced.
#[derive(Clone, Debug, Default)]
pub struct Probes {
    armed: BTreeMap<u64, u8>,
    /// Probes of [`SPIN_PROBES`] functions.
    yielding: std::collections::BTreeSet<u64>,
    /// Where each probed instruction runs out of line once its point is granted.
    displaced: Displaced,
    /// `--preempt-on atomics`: the probes that sit on the program's atomic instructions.
    atomics: super::atomics::AtomicProbes,
}

impl Probes {
    /// Finds the probed functions of `set` in `exe` (loaded `bias` bytes above its link
    /// addresses) and arms them in the process of `at_exec`'s thread `tid`, stopped at its exec;
    /// with `atomics`, the program's own atomic instructions too ([`super::atomics`]). Each
    /// probed instruction is copied to run out of line ([`Displaced`]).
    pub fn arm(at_exec: &mut AtExec, tid: i32, exe: &[u8], bias: u64, set: ProbeSet, atomics: bool) -> Probes {
        let mut probes = Probes { atomics: super::atomics::AtomicProbes::new(bias), ..Probes::default() };
        let Ok(elf) = goblin::elf::Elf::parse(exe) else { return probes };
        let mut code = Vec::new();
        let wanted: std::collections::BTreeSet<&str> = match set {
            ProbeSet::All => LIBC_PROBES.iter().chain(GO_PROBES.iter()).copied().collect(),
            ProbeSet::Spins => SPIN_PROBES.iter().copied().collect(),
        };
        let named = |s: &goblin::elf::Sym| elf.strtab.get_at(s.st_name).filter(|n| wanted.contains(n)).map(str::to_owned);
        let from_symbols = elf.syms.iter().filter(|s| s.is_function() && s.st_value != 0).filter_map(|s| Some((named(&s)?, s.st_value)));
        let from_pclntab = go_functions(&elf, exe).into_iter().filter(|(name, _)| wanted.contains(name.as_str()));
        for (name, addr) in from_symbols.chain(from_pclntab) {
            let addr = addr.wrapping_add(bias);
            if probes.armed.contains_key(&addr) {
                continue; // an alias of a probed function, or found in both tables
            }
            let Ok(instruction) = read_code(tid, addr) else { continue };
            if let Ok(original) = poke_byte(tid, addr, INT3) {
                probes.armed.insert(addr, original);
                code.push((addr, instruction));
                if SPIN_PROBES.contains(&name.as_str()) {
                    probes.yielding.insert(addr);
                }
            }
        }
        if atomics {
            for site in super::atomics::program_sites(exe).unwrap_or_default() {
                let addr = site.address.wrapping_add(bias);
                if probes.armed.contains_key(&addr) {
                    continue;
                }
                let Ok(instruction) = read_code(tid, addr) else { continue };
                if let Ok(original) = poke_byte(tid, addr, INT3) {
                    probes.armed.insert(addr, original);
                    code.push((addr, instruction));
                    probes.atomics.insert(site);
                }
            }
        }
        let image_start = elf.program_headers.iter().filter(|ph| ph.p_type == goblin::elf::program_header::PT_LOAD).map(|ph| ph.p_vaddr).min();
        if let Some(start) = image_start.filter(|_| !code.is_empty()) {
            probes.displaced = Displaced::place(at_exec, tid, start.wrapping_add(bias), &code);
        }
        probes
    }

    /// Where the instruction under the probe at `addr` runs out of line, if it can: a granted
    /// thread resumes there instead of stepping the instruction in place.
    pub fn displaced(&self, addr: u64) -> Option<u64> {
        self.displaced.copy_of(addr)
    }

    /// The access of the atomic instruction probed at `addr`, given the stopped thread's
    /// registers (its operand's address and size); None for a function probe.
    pub fn atomic_access(&self, addr: u64, regs: &libc::user_regs_struct) -> Option<(u64, u64)> {
        self.atomics.access_at(addr, regs)
    }

    /// Whether the probe at `addr` is at a function that yields on purpose ([`SPIN_PROBES`]).
    pub fn yields_at(&self, addr: u64) -> bool {
        self.yielding.contains(&addr)
    }

    /// Whether a probe sits at `addr`.
    pub fn at(&self, addr: u64) -> bool {
        self.armed.contains_key(&addr)
    }

    /// Puts the original byte back at `addr` (before the probed instruction is stepped).
    pub fn disarm(&self, tid: i32, addr: u64) -> io::Result<()> {
        match self.armed.get(&addr) {
            Some(&original) => poke_byte(tid, addr, original).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Writes the `int3` at `addr` again.
    pub fn rearm(&self, tid: i32, addr: u64) -> io::Result<()> {
        match self.armed.contains_key(&addr) {
            true => poke_byte(tid, addr, INT3).map(|_| ()),
            false => Ok(()),
        }
    }
}

/// The probed Go functions listed in `elf`'s `.gopclntab` (none if it has none).
fn go_functions(elf: &goblin::elf::Elf, exe: &[u8]) -> std::collections::BTreeMap<String, u64> {
    let section = |name: &str| elf.section_headers.iter().find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name));
    let (Some(table), Some(text)) = (section(".gopclntab"), section(".text")) else { return Default::default() };
    let range = table.file_range().unwrap_or_default();
    exe.get(range).map_or_else(Default::default, |bytes| super::gopclntab::entries(bytes, text.sh_addr, &GO_PROBES))
}

/// The 16 bytes at `addr` in stopped thread `tid`'s address space (an instruction is at most 15).
fn read_code(tid: i32, addr: u64) -> io::Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&crate::ptrace::inject::peek(tid, addr)?.to_le_bytes());
    bytes[8..].copy_from_slice(&crate::ptrace::inject::peek(tid, addr + 8)?.to_le_bytes());
    Ok(bytes)
}

/// Replaces the byte at `addr` in stopped thread `tid`'s address space; returns the old one.
fn poke_byte(tid: i32, addr: u64, byte: u8) -> io::Result<u8> {
    let word = crate::ptrace::inject::peek(tid, addr)?;
    crate::ptrace::inject::poke(tid, addr, (word & !0xff) | u64::from(byte))?;
    Ok(word as u8)
}

/// Resumes stopped thread `tid` for one instruction.
pub fn single_step(tid: i32) {
    // SAFETY: PTRACE_SINGLESTEP takes a pid and a signal number; no memory is passed.
    unsafe { libc::ptrace(libc::PTRACE_SINGLESTEP, tid, 0usize, 0usize) };
}
