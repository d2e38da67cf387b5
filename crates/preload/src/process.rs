//! Processes: `fork`, `execve` and waiting for children, so that a traced program may start
//! others (a test script, a launcher, a shell) and every process stays under dara's control.
//!
//! * **fork** (the `fork`/`vfork` symbol hooks): post `ProcessFork`; after the grant claim the
//!   child's slot (STARTING, so the scheduler waits for it) and process entry, then fork. The
//!   child adopts that slot, posts `ProcessStart(FORK)` and waits for its grant before returning
//!   into the program. glibc's fork issues `clone` from its own code; the filter traps it and the
//!   SIGSYS handler, seeing the thread inside the preload, runs it for real (a child resumes in a
//!   copy of the handler's frame and returns through `sigreturn` like its parent).
//! * **execve** (trapped `execve`/`execveat`): post `ProcessExec`; claim the slot the new image's
//!   main thread will use and record it in the process entry (`exec_slot`); make the region's
//!   descriptor survive the exec; make sure the new environment still loads the preload and
//!   names the region; exec. The new image's constructor finds its process by pid
//!   ([`exec_claim`]) and posts `ProcessStart(EXEC)`: same logical process, new main thread. A
//!   program the preload cannot control (statically linked, or Go: [`exec_image`]) goes to
//!   dara's ptrace agent instead (`agent_exec`).
//! * **wait** (trapped `wait4`/`waitid`): post `ProcessWait`; the model grants it once a
//!   matching child has exited (or at once for `WNOHANG`) and names the child to collect, which
//!   the thread then reaps for real without blocking. A caught signal ends a blocking wait
//!   (`Interrupt`): EINTR, or the call made again when every handler asked for `SA_RESTART`.
//!
//! Everything here may run in the SIGSYS handler: raw syscalls only, no allocation (the exec
//! environment is built in pages mapped for the purpose), no locks.
use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;

use dara_abi::handoff;
use dara_abi::{Header, ProcessTarget, Request, Slot, StartKind, Unsupported};
use libc::{c_char, c_long, pid_t};

use crate::gate::{self, Gated};
use crate::exec_image::{self, ExecImage};
use crate::{entropy, real, region, sys};

/// The new image of an exec'ing process: its logical process and the slot claimed for its main
/// thread, if `pid` is a traced process in the middle of an `execve`.
pub fn exec_claim(header: &Header, pid: u32) -> Option<(u32, u32)> {
    let known = header.next_process.load(Ordering::Acquire).min(dara_abi::MAX_PROCESSES as u32);
    (0..known).find_map(|p| {
        let entry = &header.processes[p as usize];
        if entry.pid.load(Ordering::Acquire) != pid {
            return None;
        }
        match entry.exec_slot.swap(0, Ordering::AcqRel) {
            0 => None,
            slot => Some((p, slot - 1)),
        }
    })
}

/// Makes the current thread the gated main thread of `process` on slot `index`.
pub fn become_main_thread(slot: &Slot, index: u32, process: u32, stack_top: usize) {
    let (pid, tid) = sys::host_ids();
    slot.pid.store(pid, Ordering::Relaxed);
    slot.tid.store(tid, Ordering::Relaxed);
    slot.process.store(process, Ordering::Relaxed);
    // SAFETY: pthread_self has no preconditions.
    slot.handle.store(unsafe { real::pthread_self() } as u64, Ordering::Relaxed);
    handoff::resume(slot);
    crate::solo::become_sole_thread();
    gate::adopt(index, stack_top);
}

/// `fork`/`vfork` of a gated thread. Returns what fork returns (errno set on failure).
pub fn fork(gate: &Gated) -> pid_t {
    // SAFETY: fork has no preconditions.
    fork_by(gate, || unsafe { real::fork() })
}

/// A trapped fork-like system call (a `clone` without a new stack, `CLONE_VM` or
/// `CLONE_THREAD`, or `fork`/`vfork`) of a gated thread: what glibc's own `fork` makes when libc
/// calls it internally, past the `fork` symbol (`daemon`, `forkpty`), and a raw `fork()`. The
/// child is made by the same system call, a `vfork` as a `fork` (a vfork child would run on, and
/// scribble over, this signal handler's frame); it comes back from the trap as glibc's child
/// would. Returns the call's result (`-errno` on failure).
pub fn trapped_fork(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    let (nr, a) = if nr == libc::SYS_vfork { (libc::SYS_fork, [0; 6]) } else { (nr, a) };
    i64::from(fork_by(gate, || crate::trap::passthrough(nr, a) as pid_t))
}

/// Whether trapped `clone` arguments `a` make a process as `fork` does: no new stack (the child
/// goes on from the trap on a copy of this one), no shared memory or thread group.
pub fn clone_forks(a: &[u64; 6]) -> bool {
    let sharing = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_VFORK | libc::CLONE_SETTLS) as u64;
    a[1] == 0 && a[0] & sharing == 0
}

/// The fork of a gated thread whose child `make_child` makes (glibc's fork, or the trapped
/// system call): posted, the child given a slot of its own and started at its start barrier.
fn fork_by(gate: &Gated, make_child: impl FnOnce() -> pid_t) -> pid_t {
    gate.post(Request::ProcessFork);
    let Some(header) = region::header() else {
        // Not traced after all: the fork alone.
        return make_child();
    };
    let parent = region::process();
    let child_process = header.next_process.fetch_add(1, Ordering::AcqRel);
    let child_index = handoff::next_free(&header.next_slot);
    let Some(slot) = region::slot(child_index) else {
        real::set_errno(libc::EAGAIN);
        return -1;
    };
    slot.process.store(child_process, Ordering::Relaxed);
    handoff::claim(slot);
    let stack_top = gate::stack_top();
    // The child continues below.
    let pid = make_child();
    match pid {
        0 => {
            region::set_process(child_process);
            if let Some(entry) = header.processes.get(child_process as usize) {
                entry.pid.store(sys::getpid(), Ordering::Release);
            }
            become_main_thread(slot, child_index, child_process, stack_top);
            gate::post_on(slot, Request::ProcessStart { parent: Some(parent), kind: StartKind::Fork });
            if let Some(entry) = header.processes.get(child_process as usize) {
                entropy::seed_process(entry.random_seed.load(Ordering::Acquire));
            }
            0
        }
        pid if pid < 0 => {
            handoff::finish(slot);
            gate::wake_scheduler();
            pid
        }
        pid => {
            // The child records its pid too, but the parent may name it (waitpid) first.
            if let Some(entry) = header.processes.get(child_process as usize) {
                entry.pid.store(pid as u32, Ordering::Release);
            }
            pid
        }
    }
}

/// A trapped `execve` (`nr` = SYS_execve: path a0, argv a1, envp a2) or `execveat` (dirfd a0,
/// path a1, argv a2, envp a3, flags a4). Returns only on failure, with `-errno`.
pub fn exec(gate: &Gated, nr: c_long, mut a: [u64; 6]) -> i64 {
    let (path_arg, env_arg) = if nr == libc::SYS_execve { (0, 2) } else { (1, 3) };
    // SAFETY: the program passed a NUL-terminated path to execve (or a bad pointer, which the
    // probe treats as "not an ELF we can read" and the kernel then refuses).
    let image = if nr == libc::SYS_execve { unsafe { exec_image::classify(a[path_arg] as *const c_char) } } else { ExecImage::Preload };
    if image.via_agent() {
        // A Go program linked with libc would load the preload: it goes without (the agent
        // alone controls it). A static program goes without too: the dynamically linked
        // programs it execs run through the agent as well, and must not load the preload from
        // the environment they inherit. Kept mapped until the exec, which discards it.
        let scratch = Scratch::map();
        // SAFETY: the program's envp is null or a null-terminated array of C strings.
        if let Some(envp) = scratch.as_ref().and_then(|s| unsafe { s.environment(a[env_arg] as *const *const c_char, Preload::Without) }) {
            a[env_arg] = envp as u64;
        }
        return crate::agent_exec::exec(gate, nr, a, a[path_arg]);
    }
    gate.post(Request::ProcessExec { via_agent: false });
    if region::header().is_none() {
        return passthrough(nr, a);
    }
    let Some(claim) = crate::exec_slot::ExecSlot::claim() else { return -(libc::EAGAIN as i64) };

    let scratch = Scratch::map();
    // SAFETY: the program's envp is null or a null-terminated array of C strings.
    if let Some(envp) = scratch.as_ref().and_then(|s| unsafe { s.environment(a[env_arg] as *const *const c_char, Preload::With) }) {
        a[env_arg] = envp as u64;
    }
    set_region_cloexec(false);
    let rc = crate::tsc::around_exec(|| passthrough(nr, a));
    // Still here: the exec failed. Undo, and the thread goes on with the error.
    set_region_cloexec(true);
    drop(scratch);
    claim.release();
    rc
}

/// A trapped `wait4` (pid a0, status a1, options a2, rusage a3) or `waitid` (idtype a0, id a1,
/// infop a2, options a3, rusage a4).
pub fn wait(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    let Some(call) = dara_abi::wait_call::WaitCall::of(nr == libc::SYS_waitid, a) else {
        return unsupported(gate, nr, a);
    };
    // Decisions name processes by logical id, never by pid.
    let target = match call.pid {
        Some(pid) => logical_process(pid).map_or(ProcessTarget::Untraced, ProcessTarget::Process),
        None => ProcessTarget::Any,
    };
    let grant = gate.post(Request::ProcessWait { target, options: call.options });
    match grant.result {
        collect if collect > 0 => {
            let Some(child) = region::header().and_then(|h| h.processes.get(collect as usize - 1)).map(|e| e.pid.load(Ordering::Acquire)) else {
                return -(libc::ECHILD as i64);
            };
            // Collect exactly the child the model chose; it has exited, so this never blocks.
            passthrough(nr, call.collect(a, child))
        }
        0 => {
            if let Some((info, size)) = call.info_to_clear(a) {
                // SAFETY: the program gave waitid a siginfo_t to fill; POSIX says si_pid is 0
                // when WNOHANG found nothing, so clear it all.
                unsafe { core::ptr::write_bytes(info as *mut u8, 0, size) };
            }
            0
        }
        // A caught signal ended the wait (never while a matching child has exited: the kernel
        // collects that child first). The handler runs as the SIGSYS handler returns; wait4 and
        // waitid are made again when every handler asked for SA_RESTART, as in Linux.
        crate::interrupt::INTERRUPTED if crate::interrupt::handlers_restart() => crate::trap::RESTART,
        err => err,
    }
}

/// Waits (bounded, about two seconds) until process `pid` has died: its /proc/<pid>/stat says
/// zombie, or it is gone. When this process is its parent, until the child can be collected
/// (`waitid` with `WNOWAIT` sees it), which is when the kernel has queued our SIGCHLD: a
/// multithreaded process's main thread shows as a zombie while its other threads are still on
/// their way out, and the parent's SIGCHLD comes only after the last of them. Returning at the
/// zombie let the SIGCHLD arrive some time after `kill` returned (bash's `kill -TERM $a $b` ran
/// its SIGCHLD handler before the second kill in one run and after it in another).
pub fn wait_until_dead(pid: u32) {
    let mut path = [0u8; 32];
    let prefix = b"/proc/";
    path[..prefix.len()].copy_from_slice(prefix);
    let end = prefix.len() + sys::decimal(pid, &mut path[prefix.len()..]);
    path[end..end + 5].copy_from_slice(b"/stat");
    let pause = libc::timespec { tv_sec: 0, tv_nsec: 50_000 };
    let me = sys::getpid();
    for _ in 0..40_000 {
        // SAFETY: a NUL-terminated path in a local buffer (zero-filled past its end).
        let fd = unsafe { sys::syscall(libc::SYS_open, &[path.as_ptr() as u64, (libc::O_RDONLY | libc::O_CLOEXEC) as u64]) };
        if fd < 0 {
            return; // gone
        }
        let mut buf = [0u8; 256];
        // SAFETY: reading into a local buffer of its size.
        let got = unsafe { sys::syscall(libc::SYS_read, &[fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64]) };
        sys::close(fd as i32);
        if got > 0 {
            let text = &buf[..got as usize];
            if let Some(close) = text.iter().rposition(|&b| b == b')') {
                let zombie = text.get(close + 2) == Some(&b'Z');
                // "S ppid ...": the parent's pid follows the state.
                let parent = text.get(close + 4..).map(leading_decimal);
                if zombie && (parent != Some(me) || collectable(pid)) {
                    return;
                }
            }
        }
        // SAFETY: nanosleep through the syscall page with a live timespec (never trapped: the
        // page's address is the filter's exception).
        unsafe { sys::syscall(libc::SYS_nanosleep, &[&pause as *const libc::timespec as u64, 0]) };
    }
}

/// Whether our child `pid` has exited for good (every thread) and can be collected, or cannot be
/// waited for at all (auto-reaped: SIGCHLD ignored). Collects nothing (`WNOWAIT`).
fn collectable(pid: u32) -> bool {
    let mut info = [0u64; 16]; // a siginfo_t (128 bytes)
    let options = (libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) as u64;
    // SAFETY: waitid writes at most one siginfo_t into the live, zeroed 128-byte buffer.
    let rc = unsafe { sys::syscall(libc::SYS_waitid, &[libc::P_PID as u64, u64::from(pid), info.as_mut_ptr() as u64, options, 0]) };
    // si_pid sits at byte 16 of a siginfo_t: nonzero once the child is ready.
    rc < 0 || info[2] as u32 != 0
}

/// The decimal number at the start of `text` (0 when none).
fn leading_decimal(text: &[u8]) -> u32 {
    text.iter().take_while(|b| b.is_ascii_digit()).fold(0u32, |n, &b| n.wrapping_mul(10).wrapping_add(u32::from(b - b'0')))
}

/// The logical process whose kernel pid is `pid`, if it is traced.
pub fn logical_process(pid: u32) -> Option<u32> {
    let header = region::header()?;
    let known = header.next_process.load(Ordering::Acquire).min(dara_abi::MAX_PROCESSES as u32);
    (0..known).find(|&p| header.processes[p as usize].pid.load(Ordering::Acquire) == pid)
}

/// Ends the run at a call dara cannot model (the scheduler says which and why).
pub(crate) fn unsupported(gate: &Gated, nr: c_long, a: [u64; 6]) -> i64 {
    gate.post(Request::Unsupported(Unsupported::Syscall { nr: nr as u64, args: [a[0], a[1], a[2]] }));
    // The scheduler never grants this; if it ever does, refuse the call.
    -(libc::ENOSYS as i64)
}

fn passthrough(nr: c_long, a: [u64; 6]) -> i64 {
    // SAFETY: the syscall the program made, with its own (or dara-completed) arguments.
    unsafe { sys::syscall6(nr, a) }
}

/// Close-on-exec on or off for dara's descriptors (the region's and dara's /proc).
fn set_region_cloexec(on: bool) {
    let flags = if on { libc::FD_CLOEXEC } else { 0 } as u64;
    for fd in [dara_abi::SHM_FD, dara_abi::HOST_PROC_FD] {
        // SAFETY: F_SETFD on a descriptor this process holds (EBADF if dara passed none).
        unsafe { sys::syscall(libc::SYS_fcntl, &[fd as u64, libc::F_SETFD as u64, flags]) };
    }
}

/// The environment entries dara needs in every image: copied from this process's own
/// environment at start-up (the program may change `environ` later).
struct SavedEnv {
    /// `LD_PRELOAD=<path of libdara_preload.so>` (just dara's library).
    preload: [u8; ENTRY_MAX],
    shm: [u8; ENTRY_MAX],
    active: [u8; ENTRY_MAX],
}

const ENTRY_MAX: usize = 4096;

struct SavedCell(UnsafeCell<SavedEnv>);
// SAFETY: written once by the constructor before any other thread exists, read-only afterwards.
unsafe impl Sync for SavedCell {}

static SAVED: SavedCell = SavedCell(UnsafeCell::new(SavedEnv { preload: [0; ENTRY_MAX], shm: [0; ENTRY_MAX], active: [0; ENTRY_MAX] }));

/// Copies dara's environment entries from `envp` (constructor only, single-threaded).
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings, and no other thread runs.
pub unsafe fn remember_environment(envp: *const *const c_char) {
    // SAFETY: called once from the constructor, before any other thread runs; nothing reads
    // SAVED concurrently.
    let saved = unsafe { &mut *SAVED.0.get() };
    // SAFETY: glibc passes the process's initial environment, a null-terminated array.
    for entry in unsafe { env_entries(envp) } {
        let (target, keep): (&mut [u8; ENTRY_MAX], usize) = if let Some(value) = entry.strip_prefix(b"LD_PRELOAD=") {
            let first = value.iter().position(|&b| b == b':' || b == b' ').unwrap_or(value.len());
            (&mut saved.preload, b"LD_PRELOAD=".len() + first)
        } else if entry.starts_with(b"DARA_SHM=") {
            (&mut saved.shm, entry.len())
        } else if entry.starts_with(b"DARA_ACTIVE=") {
            (&mut saved.active, entry.len())
        } else {
            continue;
        };
        let n = keep.min(ENTRY_MAX - 1);
        target[..n].copy_from_slice(&entry[..n]);
        target[n] = 0;
    }
}

/// The path of dara's region (`DARA_SHM`'s value, NUL-terminated) as the process started with
/// it, or `None` when the process is not under dara.
pub fn region_path() -> Option<&'static [u8]> {
    // SAFETY: read-only after the constructor's `remember_environment`.
    let saved = unsafe { &*SAVED.0.get() };
    let end = saved.shm.iter().position(|&b| b == 0)?;
    let path = saved.shm.get(b"DARA_SHM=".len()..=end)?;
    (path.len() > 1).then_some(path)
}

/// The entries of a null-terminated environment array, without their NULs.
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings that outlive the use.
unsafe fn env_entries<'a>(envp: *const *const c_char) -> impl Iterator<Item = &'a [u8]> {
    let mut i = 0;
    core::iter::from_fn(move || {
        if envp.is_null() {
            return None;
        }
        // SAFETY: within the array up to and including its null terminator.
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            return None;
        }
        i += 1;
        // SAFETY: each entry is a NUL-terminated string.
        Some(unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes())
    })
}

/// The bytes of a saved entry before its NUL.
fn until_nul(entry: &[u8; ENTRY_MAX]) -> &[u8] {
    &entry[..entry.iter().position(|&b| b == 0).unwrap_or(0)]
}

/// Whether an exec's new image loads dara's preload.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Preload {
    With,
    /// A program dara's ptrace agent runs (see [`exec_image`]).
    Without,
}

/// Pages mapped for building an exec's environment (unmapped when dropped; a successful exec
/// discards them with the old image).
struct Scratch {
    base: *mut u8,
}

const SCRATCH_BYTES: usize = 1 << 20;

impl Scratch {
    fn map() -> Option<Scratch> {
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        // SAFETY: a fresh anonymous mapping.
        let addr = unsafe { sys::syscall(libc::SYS_mmap, &[0, SCRATCH_BYTES as u64, prot, flags, u64::MAX, 0]) };
        (!(-4095..0).contains(&addr)).then_some(Scratch { base: addr as *mut u8 })
    }

    /// `envp` with dara's entries guaranteed: `LD_PRELOAD` starts with dara's library (the
    /// program's own preloads follow it), or for [`Preload::Without`] names only the program's
    /// own preloads (no entry if none); `DARA_SHM` and `DARA_ACTIVE` as dara set them. `None`
    /// if it does not fit (the exec then goes ahead with the program's own environment).
    ///
    /// # Safety
    /// `envp` is null or a null-terminated array of NUL-terminated strings.
    unsafe fn environment(&self, envp: *const *const c_char, with: Preload) -> Option<*const *const c_char> {
        // SAFETY: read-only after the constructor.
        let saved = unsafe { &*SAVED.0.get() };
        let (preload, shm, active) = (until_nul(&saved.preload), until_nul(&saved.shm), until_nul(&saved.active));
        if preload.is_empty() || shm.is_empty() {
            return None;
        }
        let pointers = self.base as *mut *const c_char;
        let max_pointers = SCRATCH_BYTES / 2 / core::mem::size_of::<usize>();
        // Strings go in the second half.
        let mut text = SCRATCH_BYTES / 2;
        let mut n = 0;
        let push_ptr = |p: *const c_char, n: &mut usize| -> Option<()> {
            if *n + 1 >= max_pointers {
                return None;
            }
            // SAFETY: `*n + 1 < max_pointers`, inside the first half of the scratch pages.
            unsafe { *pointers.add(*n) = p };
            *n += 1;
            Some(())
        };
        let mut push_text = |parts: &[&[u8]]| -> Option<*const c_char> {
            let len: usize = parts.iter().map(|p| p.len()).sum::<usize>() + 1;
            if text + len > SCRATCH_BYTES {
                return None;
            }
            // SAFETY: `[text, text + len)` lies inside the scratch pages.
            let start = unsafe { self.base.add(text) };
            let mut at = start;
            for part in parts {
                // SAFETY: as above; the parts are readable slices.
                unsafe {
                    core::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                    at = at.add(part.len());
                }
            }
            // SAFETY: the NUL fits (counted in `len`).
            unsafe { *at = 0 };
            text += len;
            Some(start as *const c_char)
        };
        let (mut seen_preload, mut seen_shm, mut seen_active) = (false, false, false);
        // SAFETY: the caller's contract on `envp`.
        for entry in unsafe { env_entries(envp) } {
            let p = entry.as_ptr() as *const c_char;
            if let Some(value) = entry.strip_prefix(b"LD_PRELOAD=") {
                seen_preload = true;
                let lib = &preload[b"LD_PRELOAD=".len()..];
                let first = value.iter().position(|&b| b == b':' || b == b' ').unwrap_or(value.len());
                if with == Preload::Without {
                    let others = if &value[..first] == lib { value.get(first + 1..).unwrap_or_default() } else { value };
                    if !others.is_empty() {
                        push_ptr(push_text(&[b"LD_PRELOAD=", others])?, &mut n)?;
                    }
                } else if &value[..first] == lib {
                    push_ptr(p, &mut n)?;
                } else if value.is_empty() {
                    push_ptr(push_text(&[preload])?, &mut n)?;
                } else {
                    push_ptr(push_text(&[preload, b":", value])?, &mut n)?;
                }
            } else if entry.starts_with(b"DARA_SHM=") {
                seen_shm = true;
                push_ptr(push_text(&[shm])?, &mut n)?;
            } else if entry.starts_with(b"DARA_ACTIVE=") {
                seen_active = true;
                push_ptr(push_text(&[active])?, &mut n)?;
            } else {
                push_ptr(p, &mut n)?;
            }
        }
        let seen_preload = seen_preload || with == Preload::Without;
        for (seen, entry) in [(seen_preload, preload), (seen_shm, shm), (seen_active, active)] {
            if !seen && !entry.is_empty() {
                push_ptr(push_text(&[entry])?, &mut n)?;
            }
        }
        // SAFETY: `push_ptr` kept `n + 1 < max_pointers`.
        unsafe { *pointers.add(n) = core::ptr::null() };
        Some(pointers as *const *const c_char)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the pages `map` created.
        unsafe { sys::syscall(libc::SYS_munmap, &[self.base as u64, SCRATCH_BYTES as u64]) };
    }
}
