//! The constructor: connect to dara before any user code runs.
//!
//! Order matters: when dara started the program as its fork server, serve (each execution's
//! process continues from there, `fork_server.rs`); map the region and check its version; claim the process entry and the main
//! thread's slot; install the syscall trap; then post `ProcessStart` and wait for the grant (the
//! start barrier: `main` and every later constructor run only once the scheduler says so). The
//! process's random seed is written by the scheduler before that grant, so the randomness
//! streams and `AT_RANDOM` are set up after it.
use core::sync::atomic::Ordering;

use dara_abi::{Request, StartKind};
use libc::{c_char, c_int};

use crate::gate::Gated;
use crate::region::{self, MapError};
use crate::trap::{self, InstallError};
use crate::{entropy, real, sys};

/// Exit status when the preload cannot connect to dara.
const SETUP_FAILED: i32 = 125;

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn(c_int, *const *const c_char, *const *const c_char) =
    dara_preload_init;

extern "C" fn dara_preload_init(
    _argc: c_int,
    _argv: *const *const c_char,
    envp: *const *const c_char,
) {
    real::resolve_all();
    crate::call_site::init();
    // Read the environment from `envp`, not `getenv`: with `-z initfirst` (build.rs) this runs
    // before libc's own constructor has set `environ`.
    // SAFETY: the environment glibc passes the constructor, before any other thread exists.
    unsafe { crate::process::remember_environment(envp) };
    let Some(path) = crate::process::region_path() else {
        return; // Not under dara: stay inert.
    };
    // A fork server parks here; each execution's process continues from this point.
    crate::fork_server::serve_if_asked(|| {
        let _ = intercept();
    });
    let header = match region::map(path) {
        Ok(header) => header,
        Err(MapError::Version) => {
            sys::die(b"dara: preload/scheduler version mismatch\n", SETUP_FAILED)
        }
        Err(MapError::Open | MapError::Map) => sys::die(
            b"dara: cannot map the shared region named by DARA_SHM\n",
            SETUP_FAILED,
        ),
    };

    let pid = sys::getpid();
    // A new image of a traced process (after execve) keeps its logical process and adopts the
    // slot the exec'ing thread claimed for it; anything else is a new process.
    let (process, index, kind) = match crate::process::exec_claim(header, pid) {
        Some((process, slot)) => (process, slot, StartKind::Exec),
        None => (header.next_process.fetch_add(1, Ordering::AcqRel), dara_abi::handoff::next_free(&header.next_slot), StartKind::Launched),
    };
    let Some(entry) = header.processes.get(process as usize) else {
        sys::die(
            b"dara: too many processes for the shared region\n",
            SETUP_FAILED,
        )
    };
    entry.pid.store(pid, Ordering::Release);
    region::set_process(process);
    crate::coverage::publish_guards();

    let Some(slot) = region::slot(index) else {
        sys::die(
            b"dara: no free thread slot in the shared region\n",
            SETUP_FAILED,
        )
    };
    // An exec'd image starts with the mask its program had at the execve (read before the
    // first post overwrites it); a launched one keeps the one it was started with.
    let start_mask = (kind == StartKind::Exec).then(|| crate::exec_slot::exec_start_mask(slot));
    // glibc passes the initial stack's environment array: it lies above every frame the main
    // thread will ever have (_start's included), so it bounds the main thread's own stack.
    crate::process::become_main_thread(slot, index, process, envp as usize);

    if let Err(message) = intercept() {
        sys::die(message, SETUP_FAILED);
    }

    let Some(gate) = Gated::enter() else {
        sys::die(b"dara: main thread is not gated\n", SETUP_FAILED)
    };
    gate.post(Request::ProcessStart { parent: None, kind });
    // After the start post and inside the preload: dlsym may allocate, and the program's
    // allocator (redis's jemalloc) takes locks that must not reach the model before the thread
    // is known to it.
    crate::stop_world::detect_runtime();
    entropy::seed_process(entry.random_seed.load(Ordering::Acquire));
    entropy::overwrite_at_random();
    // dara wrote this program's plan before granting the start.
    if header.preempt_flags & dara_abi::preempt::ATOMICS != 0 {
        if let Err(e) = crate::atomics::apply(header) {
            sys::die(e.message(), SETUP_FAILED);
        }
    }
    // Last, holding the run token: a signal that reached the old image while it was parked at
    // its exec is pending, and the new image (whose handlers the exec reset) takes its default
    // action now, as the kernel would have delivered it on the way out of the exec.
    if let Some(mask) = start_mask {
        sys::set_signal_mask(mask);
    }
}

/// Sets up what every traced process needs before any of the program's code runs: the syscall
/// trap, the fault handlers (with `rdtsc` and `cpuid` faulting), the vDSO patch. Each is kept by
/// `fork` (per process, or per thread and inherited), so a fork server sets them up once before
/// it serves and its copies skip them (`fork_server.rs`; each cost a copy tens of microseconds:
/// the filter compiled, a handful of `sigaction`s and `prctl`s, the vDSO page copied). What is
/// already in place is not set up again; the error says what could not be.
fn intercept() -> Result<(), &'static [u8]> {
    if !trap::installed() {
        trap::install(crate::trapped::on_sigsys).map_err(|e| -> &'static [u8] {
            match e {
                InstallError::Handler => b"dara: cannot install the SIGSYS handler\n",
                InstallError::NoNewPrivs => b"dara: prctl(PR_SET_NO_NEW_PRIVS) failed\n",
                InstallError::Filter => b"dara: cannot install the seccomp filter\n",
            }
        })?;
    }
    if !crate::fault::installed() {
        crate::fault::install();
    }
    // Before any user code: no thread may be inside the vDSO while it changes.
    if !crate::vdso::patched() {
        let _ = crate::vdso::patch();
    }
    Ok(())
}
