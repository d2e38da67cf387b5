//! `posix_spawn`, `posix_spawnp` and `system` as a traced `fork` followed by `execve` in the child.
//!
//! glibc implements them with `clone(CLONE_VM | CLONE_VFORK)` and every signal blocked, so the
//! syscall trap could not follow them (a trapped call with SIGSYS blocked kills the process).
//! Here the child is a normal traced fork child: it applies the spawn attributes (through their
//! public getters) and file actions, then execs, and the new image registers as the same process.
//!
//! Differences from glibc, both allowed by POSIX: a program that cannot be executed makes the
//! child exit with status 127 instead of `posix_spawn` returning the error (the parent cannot
//! wait for the child's exec without blocking while holding the run token); and the scheduling
//! attributes (`POSIX_SPAWN_SETSCHEDULER`, `..._SETSCHEDPARAM`) are ignored, since dara decides
//! who runs.
//!
//! The file actions are read from glibc's own layout of `posix_spawn_file_actions_t`, which has no
//! public getters: `{ int allocated; int used; struct __spawn_action *actions; int pad[16]; }`,
//! each action 32 bytes, `{ int tag; union at offset 8 }` (glibc 2.3x's `spawn_int.h`). An
//! unknown tag makes the child exit 127 rather than guess.
use libc::{c_char, c_int, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t};

use crate::gate::Gated;
use crate::{process, real};

#[repr(C)]
struct FileActions {
    allocated: c_int,
    used: c_int,
    actions: *const SpawnAction,
    pad: [c_int; 16],
}

#[repr(C)]
struct SpawnAction {
    tag: c_int,
    _pad: c_int,
    /// The union at offset 8, as three words: an action's first int is the low half of `u0`.
    u0: u64,
    u1: u64,
    u2: u64,
}

impl SpawnAction {
    fn low(word: u64) -> c_int {
        word as u32 as c_int
    }
    fn high(word: u64) -> c_int {
        (word >> 32) as u32 as c_int
    }
}

const _: () = assert!(core::mem::size_of::<SpawnAction>() == 32);
const _: () = assert!(core::mem::size_of::<FileActions>() == core::mem::size_of::<posix_spawn_file_actions_t>());

const DO_CLOSE: c_int = 0;
const DO_DUP2: c_int = 1;
const DO_OPEN: c_int = 2;
const DO_CHDIR: c_int = 3;
const DO_FCHDIR: c_int = 4;
const DO_CLOSEFROM: c_int = 5;

/// Exit status of a spawned child that could not run the program.
const CANNOT_EXEC: c_int = 127;

/// `posix_spawn` and `posix_spawnp` (which searches PATH): the real one outside dara, else
/// [`spawn`].
macro_rules! spawn_hook {
    ($name:ident, $search:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: *mut pid_t,
            path: *const c_char,
            actions: *const posix_spawn_file_actions_t,
            attr: *const posix_spawnattr_t,
            argv: *const *mut c_char,
            envp: *const *mut c_char,
        ) -> c_int {
            if Gated::enter().is_none() {
                // SAFETY: the program's own arguments, forwarded unchanged.
                return unsafe { real::$name(pid, path, actions, attr, argv, envp) };
            }
            // SAFETY: the program's own arguments.
            unsafe { spawn(pid, path, actions, attr, argv, envp, $search) }
        }
    };
}

spawn_hook!(posix_spawn, false);
spawn_hook!(posix_spawnp, true);

/// `system(command)`: `/bin/sh -c command` in a traced child, waited for (SIGINT and SIGQUIT
/// ignored meanwhile, as POSIX asks).
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    if Gated::enter().is_none() {
        // SAFETY: the program's own argument, forwarded unchanged.
        return unsafe { real::system(command) };
    }
    if command.is_null() {
        return 1; // a shell is available
    }
    let argv: [*const c_char; 4] = [c"sh".as_ptr(), c"-c".as_ptr(), command, core::ptr::null()];
    let mut pid: pid_t = 0;
    // SAFETY: a valid argv; `environ` is the process's environment.
    let rc = unsafe { spawn(&mut pid, c"/bin/sh".as_ptr(), core::ptr::null(), core::ptr::null(), argv.as_ptr() as *const *mut c_char, environ as *const *mut c_char, false) };
    if rc != 0 {
        return -1;
    }
    // SAFETY: zeroed sigactions are valid; SIG_IGN for the two signals while waiting.
    let (mut ignore, mut old_int, mut old_quit): (libc::sigaction, libc::sigaction, libc::sigaction) = unsafe { (core::mem::zeroed(), core::mem::zeroed(), core::mem::zeroed()) };
    ignore.sa_sigaction = libc::SIG_IGN;
    // SAFETY: valid sigaction pointers.
    unsafe {
        real::sigaction(libc::SIGINT, &ignore, &mut old_int);
        real::sigaction(libc::SIGQUIT, &ignore, &mut old_quit);
    }
    let mut status: c_int = 0;
    loop {
        // SAFETY: waiting for the child just spawned (trapped and modelled).
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        // SAFETY: errno of this thread.
        if got >= 0 || unsafe { *libc::__errno_location() } != libc::EINTR {
            break;
        }
    }
    // SAFETY: restoring the dispositions saved above.
    unsafe {
        real::sigaction(libc::SIGINT, &old_int, core::ptr::null_mut());
        real::sigaction(libc::SIGQUIT, &old_quit, core::ptr::null_mut());
    }
    status
}

extern "C" {
    static environ: *const *const c_char;
}

/// The shared body: fork under dara, set the child up, exec.
///
/// # Safety
/// The contract of posix_spawn.
unsafe fn spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const posix_spawn_file_actions_t,
    attr: *const posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    search: bool,
) -> c_int {
    // The gate is released before the child execs, so that its exec goes through the trap as a
    // traced exec.
    let child = match Gated::enter() {
        Some(gate) => process::fork(&gate),
        // SAFETY: fork has no preconditions (not reached: callers checked the gate).
        None => unsafe { real::fork() },
    };
    if child < 0 {
        // SAFETY: errno of this thread, set by the failed fork.
        return unsafe { *libc::__errno_location() };
    }
    if child > 0 {
        if !pid.is_null() {
            // SAFETY: the program's out-parameter.
            unsafe { *pid = child };
        }
        return 0;
    }
    // The child.
    // SAFETY: the program's attributes and actions, applied in this child only.
    let ready = unsafe { apply_attributes(attr) && apply_file_actions(actions) };
    if ready {
        // SAFETY: reading the process's `environ` pointer.
        let env = if envp.is_null() { (unsafe { environ }) as *const *mut c_char } else { envp };
        // SAFETY: the program's path, argv and environment.
        unsafe {
            if search {
                libc::execvpe(path, argv as *const *const c_char, env as *const *const c_char);
            } else {
                libc::execve(path, argv as *const *const c_char, env as *const *const c_char);
            }
        }
    }
    // SAFETY: ending the child without running the parent's atexit handlers.
    unsafe { libc::_exit(CANNOT_EXEC) }
}

/// Applies the attributes through their public getters; false if one cannot be applied.
///
/// # Safety
/// `attr` is null or an initialised `posix_spawnattr_t`.
unsafe fn apply_attributes(attr: *const posix_spawnattr_t) -> bool {
    if attr.is_null() {
        return true;
    }
    let mut flags: libc::c_short = 0;
    // SAFETY: reading an initialised attribute object into locals.
    unsafe {
        libc::posix_spawnattr_getflags(attr, &mut flags);
        let flags = flags as c_int;
        if flags & libc::POSIX_SPAWN_SETSIGMASK != 0 {
            let mut mask: libc::sigset_t = core::mem::zeroed();
            libc::posix_spawnattr_getsigmask(attr, &mut mask);
            libc::sigprocmask(libc::SIG_SETMASK, &mask, core::ptr::null_mut());
        }
        if flags & libc::POSIX_SPAWN_SETSIGDEF != 0 {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::posix_spawnattr_getsigdefault(attr, &mut set);
            for sig in 1..65 {
                if sig != libc::SIGSYS && libc::sigismember(&set, sig) == 1 {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
        }
        if flags & libc::POSIX_SPAWN_SETSID as c_int != 0 && libc::setsid() < 0 {
            return false;
        }
        if flags & libc::POSIX_SPAWN_SETPGROUP != 0 {
            let mut group: pid_t = 0;
            libc::posix_spawnattr_getpgroup(attr, &mut group);
            if libc::setpgid(0, group) != 0 {
                return false;
            }
        }
        if flags & libc::POSIX_SPAWN_RESETIDS != 0 && (libc::setegid(libc::getgid()) != 0 || libc::seteuid(libc::getuid()) != 0) {
            return false;
        }
    }
    true
}

/// Applies the file actions in order; false at the first that fails (or is of an unknown kind).
///
/// # Safety
/// `actions` is null or an initialised `posix_spawn_file_actions_t` of this glibc.
unsafe fn apply_file_actions(actions: *const posix_spawn_file_actions_t) -> bool {
    if actions.is_null() {
        return true;
    }
    // SAFETY: the layout checked at compile time against the public type's size; see the module
    // doc for the fields.
    let fa = unsafe { &*(actions as *const FileActions) };
    if fa.used < 0 || fa.used > fa.allocated || (fa.used > 0 && fa.actions.is_null()) {
        return false;
    }
    for i in 0..fa.used as usize {
        // SAFETY: `i < used <= allocated` entries of the actions array.
        let a = unsafe { &*fa.actions.add(i) };
        // SAFETY: each action's fields as glibc stored them; paths are NUL-terminated strings
        // the program passed to the add functions.
        let ok = unsafe {
            match a.tag {
                DO_CLOSE => libc::close(SpawnAction::low(a.u0)) == 0 || *libc::__errno_location() == libc::EBADF,
                DO_DUP2 => {
                    let (fd, newfd) = (SpawnAction::low(a.u0), SpawnAction::high(a.u0));
                    if fd == newfd {
                        // dup2 onto itself clears close-on-exec, as POSIX asks of spawn.
                        libc::fcntl(fd, libc::F_SETFD, 0) == 0
                    } else {
                        libc::dup2(fd, newfd) == newfd
                    }
                }
                DO_OPEN => {
                    let (want, path) = (SpawnAction::low(a.u0), a.u1 as *const c_char);
                    let (oflag, mode) = (SpawnAction::low(a.u2), SpawnAction::high(a.u2) as libc::mode_t);
                    let fd = libc::open(path, oflag, mode);
                    fd == want || (fd >= 0 && libc::dup2(fd, want) == want && libc::close(fd) == 0)
                }
                DO_CHDIR => libc::chdir(a.u0 as *const c_char) == 0,
                DO_FCHDIR => libc::fchdir(SpawnAction::low(a.u0)) == 0,
                DO_CLOSEFROM => {
                    // Everything from `from` up, except dara's descriptors, which the
                    // exec'd program needs to find dara.
                    crate::fdguard::close_range(SpawnAction::low(a.u0).max(0) as u64, u64::from(libc::c_uint::MAX), 0) == 0
                }
                _ => false,
            }
        };
        if !ok {
            return false;
        }
    }
    true
}
