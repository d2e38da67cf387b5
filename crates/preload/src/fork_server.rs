//! The fork server, inside the program (protocol: `dara_abi::fork_server`).
//!
//! When dara starts the program with a socket where the region's memfd belongs
//! ([`dara_abi::SHM_FD`]), the constructor does not connect: it greets dara and then serves
//! requests, each a clone of this process parked in its constructor. The clone is made to look
//! exactly like a program dara had just exec'd, up to the point where the constructor maps the
//! region, which it then does as usual:
//! - it is dara's child, not the server's (`CLONE_PARENT`), so dara reaps it and sees its exit
//!   status, and it is born in the execution's PID namespace (the server `setns`es first) as
//!   pid 2;
//! - glibc's own view of the thread is a fresh process's: the kernel writes the child's tid into
//!   the thread descriptor (`CLONE_CHILD_SETTID` at the address the dynamic loader registered
//!   with `set_tid_address`, read back with `PR_GET_TID_ADDRESS`) and clears it at exit
//!   (`CLONE_CHILD_CLEARTID`), and the robust-futex list the kernel dropped is registered again
//!   (what glibc's `fork` does in a child);
//! - the same descriptors under the same numbers (stdin, stdout, stderr, the region, dara's
//!   /proc, the SDK pipe), the execution's mounts, its own process group, dara's death signal
//!   and its CPU (the server moves there first: the child is born on it).
//!
//! Runs in the constructor before any of the program's code, single-threaded: raw system calls
//! only, no allocation, small stack frames (the stack's size is part of what the program could
//! see).
use core::mem::size_of;

use dara_abi::fork_server::{ForkReply, ForkRequest, Greeting, MAGIC, MAX_FDS, MAX_INSTALLS};
use dara_abi::SHM_FD;

use crate::sys;

/// `prctl` option that reads the thread's `clear_child_tid` address (Linux 3.5, with
/// `CONFIG_CHECKPOINT_RESTORE`).
const PR_GET_TID_ADDRESS: u64 = 40;

/// What every child inherits from the server's thread that the kernel does not copy.
struct ThreadState {
    /// glibc's `tid` field of the thread descriptor, where the kernel writes a child's tid.
    tid_address: u64,
    /// The robust-futex list head glibc registered, and its length.
    robust_head: u64,
    robust_len: u64,
}

/// Serves as dara's fork server if dara started this process as one; returns only in a child
/// made for an execution, set up like a launched program (or at once, when not asked).
/// `intercept`: sets up the process's interception (the syscall trap and the rest), once, before
/// serving.
pub fn serve_if_asked(intercept: fn()) {
    if !socket_at_region_fd() {
        return;
    }
    let state = match thread_state() {
        Ok(state) => state,
        Err(errno) => {
            send(&Greeting { magic: MAGIC, pid: -errno, holder: 0, reserved: 0 });
            sys::exit_group(0);
        }
    };
    // Every copy answers the C runtime's start-up `cpuid`s from what the server learnt here.
    crate::cpuid::learn_common_answers();
    // Looked up before the trap: `dlvsym` is libc's.
    let fill_libgcc_cpu_model = crate::cpuid::libgcc_cpu_model_filler();
    // Also with libc: the pages every copy gets page-table entries for before it runs, and the
    // rseq registration a copy made with a holder puts back.
    crate::prefault::note();
    crate::copy_holder::learn_rseq();
    // The syscall trap, the fault handlers and the vDSO patch, set up once here rather than in
    // every copy (the kernel compiles the filter at each install: about 40 µs a copy; the rest
    // about as much): copies inherit them and the flags that say so, and skip their own. From
    // here on the server makes raw system calls only, which the filter lets through, and reads
    // no clock. What fails here, each copy sets up itself and reports as a launched program would.
    intercept();
    // With `cpuid` faulting into the handler just installed, as it would in a copy.
    if let Some(fill) = fill_libgcc_cpu_model {
        fill();
    }
    send(&Greeting { magic: MAGIC, pid: sys::getpid() as i32, holder: 0, reserved: 0 });
    let mut placement = Placement::new();
    loop {
        let mut request = ForkRequest { magic: 0, pid_ns: 0, mount_ns: 0, installs: 0, targets: [-1; MAX_INSTALLS], cpu: -1 };
        let mut fds = [-1i32; MAX_FDS];
        let Some(count) = receive(&mut request, &mut fds) else {
            // dara closed its end (the search is over) or sent something else: nothing to serve.
            sys::exit_group(0);
        };
        let received = &fds[..count];
        // The child is born where it runs: moving a running process to another CPU waits for
        // that CPU's migration thread (a millisecond on a loaded machine); moving the server,
        // asleep between requests, is one system call, and none while requests keep their CPU.
        placement.move_to(request.cpu);
        match make_copy(&request, received, &state) {
            Made::Copy(reply) => {
                // On the CPU the copy was born on, before anything of the execution runs (dara
                // moves the copy to the execution's CPU once it has the reply).
                crate::prefault::fill();
                if let Some(reply) = reply {
                    send(&reply);
                }
                become_launched(&request, received, &state);
                return;
            }
            Made::Server(Some(reply)) => send(&reply),
            Made::Server(None) => {}
        }
        for &fd in received {
            sys::close(fd);
        }
    }
}

/// Whether the region's descriptor number holds a socket: dara's request to serve.
fn socket_at_region_fd() -> bool {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat writes into the live local.
    let rc = unsafe { sys::syscall(libc::SYS_fstat, &[SHM_FD as u64, &mut st as *mut libc::stat as u64]) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

fn thread_state() -> Result<ThreadState, i32> {
    let mut tid_address = 0u64;
    // SAFETY: the kernel writes one pointer into the live local.
    let rc = unsafe { sys::syscall(libc::SYS_prctl, &[PR_GET_TID_ADDRESS, &mut tid_address as *mut u64 as u64]) };
    if rc < 0 || tid_address == 0 {
        return Err(if rc < 0 { -rc as i32 } else { libc::ENOSYS });
    }
    let (mut robust_head, mut robust_len) = (0u64, 0u64);
    // SAFETY: the kernel writes a pointer and a length into the live locals.
    let rc = unsafe { sys::syscall(libc::SYS_get_robust_list, &[0, &mut robust_head as *mut u64 as u64, &mut robust_len as *mut u64 as u64]) };
    if rc < 0 {
        return Err(-rc as i32);
    }
    Ok(ThreadState { tid_address, robust_head, robust_len })
}

/// Receives one request and its descriptors (close-on-exec until installed); how many
/// descriptors came, or None at end of file or on anything malformed.
fn receive(request: &mut ForkRequest, fds: &mut [i32; MAX_FDS]) -> Option<usize> {
    // A control buffer for MAX_FDS descriptors: a 16-byte cmsghdr and 4 bytes each, 8-aligned.
    let mut control = [0u64; 2 + MAX_FDS.div_ceil(2)];
    let mut iov = libc::iovec { iov_base: (request as *mut ForkRequest).cast(), iov_len: size_of::<ForkRequest>() };
    // SAFETY: an all-zero msghdr is valid; the pointers set below are live for the call.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 2 + MAX_FDS.div_ceil(2)]>();
    let n = loop {
        // SAFETY: recvmsg writes at most the iovec's and the control buffer's lengths into live
        // locals.
        let n = unsafe { sys::syscall(libc::SYS_recvmsg, &[SHM_FD as u64, &mut msg as *mut libc::msghdr as u64, libc::MSG_CMSG_CLOEXEC as u64]) };
        if n != -(libc::EINTR as i64) {
            break n;
        }
    };
    if n != size_of::<ForkRequest>() as i64 || request.magic != MAGIC || msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return None;
    }
    let mut count = 0;
    if msg.msg_controllen >= 16 {
        // The one SCM_RIGHTS message dara sends: cmsg_len, level, type, then the descriptors.
        let len = control[0] as usize;
        let (level, kind) = (control[1] as u32 as i32, (control[1] >> 32) as u32 as i32);
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS && (16..=msg.msg_controllen).contains(&len) {
            count = ((len - 16) / 4).min(MAX_FDS);
            // SAFETY: the descriptors follow the 16-byte header inside `control`, which holds
            // room for MAX_FDS of them.
            let data = unsafe { core::slice::from_raw_parts((control.as_ptr() as *const u8).add(16) as *const i32, count) };
            fds[..count].copy_from_slice(data);
        }
    }
    let expected = request.pid_ns as usize + request.mount_ns as usize + request.installs as usize;
    if request.installs as usize > MAX_INSTALLS || count != expected {
        for &fd in &fds[..count] {
            sys::close(fd);
        }
        return None;
    }
    Some(count)
}

/// What making a copy gave, in the process it returns in.
enum Made {
    /// In the copy; with the reply it sends dara itself when its holder made it.
    Copy(Option<ForkReply>),
    /// In the server, with the reply it sends (None: the copy answers).
    Server(Option<ForkReply>),
}

/// The copy's flags: dara's child, glibc's tid field written at its birth and cleared at its end
/// (at the address the dynamic loader registered for this thread), SIGCHLD at its exit.
const COPY_FLAGS: i32 = libc::CLONE_PARENT | libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD;

/// Makes the copy for a request, in the request's PID namespace: through a holder
/// ([`crate::copy_holder`]) when the server learnt what that needs, else with a fork.
fn make_copy(request: &ForkRequest, fds: &[i32], state: &ThreadState) -> Made {
    let reply = |pid: i64, holder: i64| ForkReply { magic: MAGIC, pid: pid as i32, holder: holder as i32, reserved: 0 };
    if !crate::copy_holder::usable() {
        return match enter_pid_ns(request, fds).and_then(|()| clone(COPY_FLAGS as u64, state.tid_address)) {
            Ok(0) => Made::Copy(None),
            Ok(pid) => Made::Server(Some(reply(pid, 0))),
            Err(errno) => Made::Server(Some(reply(-(errno as i64), 0))),
        };
    }
    // The holder: dara's child too, in the server's own PID namespace (the program never sees
    // it), without an exit signal (dara waits for it with __WALL).
    match clone(libc::CLONE_PARENT as u64, 0) {
        Ok(0) => {}
        Ok(_) => return Made::Server(None),
        Err(errno) => return Made::Server(Some(reply(-(errno as i64), 0))),
    }
    let holder = sys::getpid() as i64;
    // SAFETY: prctl with integer arguments.
    unsafe { sys::syscall(libc::SYS_prctl, &[libc::PR_SET_PDEATHSIG as u64, libc::SIGKILL as u64]) };
    match enter_pid_ns(request, fds).and_then(|()| crate::copy_holder::clone_copy(COPY_FLAGS as u64, state.tid_address)) {
        Ok(pid) => Made::Copy(Some(reply(pid as i64, holder))),
        Err(errno) => {
            send(&reply(-(errno as i64), holder));
            sys::exit_group(0);
        }
    }
}

/// Makes this thread's next children be born in the request's PID namespace, if it names one.
fn enter_pid_ns(request: &ForkRequest, fds: &[i32]) -> Result<(), i32> {
    if request.pid_ns == 0 {
        return Ok(());
    }
    // SAFETY: setns on a descriptor dara sent; it only changes where this thread's next child is
    // born.
    let rc = unsafe { sys::syscall(libc::SYS_setns, &[fds[0] as u64, libc::CLONE_NEWPID as u64]) };
    if rc < 0 {
        return Err(-rc as i32);
    }
    Ok(())
}

/// A fork (`clone` without `CLONE_VM` and with no new stack: the child continues here on a copy
/// of this single-threaded process); 0 in the child, its pid as the caller sees it in the caller.
fn clone(flags: u64, child_tid: u64) -> Result<i64, i32> {
    // SAFETY: as above; `child_tid` is glibc's own tid field when the flags use it.
    let pid = unsafe { sys::syscall(libc::SYS_clone, &[flags, 0, 0, child_tid, 0]) };
    if pid < 0 {
        return Err(-pid as i32);
    }
    Ok(pid)
}

/// In the child: what a launched program has before its constructor maps the region.
fn become_launched(request: &ForkRequest, fds: &[i32], state: &ThreadState) {
    // SAFETY: each call below takes integers or pointers to live locals, in a process with one
    // thread that runs none of the program's code yet.
    unsafe {
        sys::syscall(libc::SYS_set_robust_list, &[state.robust_head, state.robust_len]);
        let mut next = request.pid_ns as usize;
        if request.mount_ns != 0 {
            // setns moves the working directory to the namespace's root: keep it, by its path
            // where it has one (a descriptor from before keeps the old namespace's mount, and
            // getcwd answers "(unreachable)/dir": dara_tracer's `pidns::enter_mounts`).
            let mut path = [0u8; libc::PATH_MAX as usize];
            let named = sys::syscall(libc::SYS_getcwd, &[path.as_mut_ptr() as u64, path.len() as u64]) > 0 && path[0] == b'/';
            let cwd = sys::syscall(libc::SYS_openat, &[libc::AT_FDCWD as u64, c".".as_ptr() as u64, (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64]);
            let joined = sys::syscall(libc::SYS_setns, &[fds[next] as u64, libc::CLONE_NEWNS as u64]);
            let by_name = named && sys::syscall(libc::SYS_chdir, &[path.as_ptr() as u64]) == 0;
            if cwd >= 0 {
                if !by_name {
                    sys::syscall(libc::SYS_fchdir, &[cwd as u64]);
                }
                sys::close(cwd as i32);
            }
            if joined < 0 {
                sys::die(b"dara: the fork server's child could not join the execution's mount namespace\n", 125);
            }
            next += 1;
        }
        sys::syscall(libc::SYS_setpgid, &[0, 0]);
        sys::syscall(libc::SYS_prctl, &[libc::PR_SET_PDEATHSIG as u64, libc::SIGKILL as u64]);
        let installs = &fds[next..];
        for (&fd, &target) in installs.iter().zip(&request.targets) {
            // dup2 leaves the new number without close-on-exec, as a launched program has it.
            sys::syscall(libc::SYS_dup2, &[fd as u64, target as u64]);
        }
        for &fd in fds {
            if !request.targets[..installs.len()].contains(&fd) {
                sys::close(fd);
            }
        }
        if !request.targets[..installs.len()].contains(&SHM_FD) {
            sys::close(SHM_FD);
        }
    }
}

/// A CPU affinity mask as the kernel takes it (1024 CPUs).
type CpuMask = [u64; 16];

/// Where the server runs: its children inherit it. The mask it was started with is kept for
/// requests that name no CPU.
struct Placement {
    started_with: CpuMask,
    /// The CPU it is pinned to now (-1: the mask it was started with).
    current: i32,
}

impl Placement {
    fn new() -> Placement {
        let mut started_with = [u64::MAX; 16];
        // SAFETY: the kernel writes at most the mask's size into the live local.
        unsafe { sys::syscall(libc::SYS_sched_getaffinity, &[0, size_of::<CpuMask>() as u64, started_with.as_mut_ptr() as u64]) };
        Placement { started_with, current: -1 }
    }

    /// Pins the server to `cpu` (-1: back to its own mask), unless it is there already.
    fn move_to(&mut self, cpu: i32) {
        if cpu == self.current {
            return;
        }
        let mut mask = [0u64; 16];
        match usize::try_from(cpu) {
            Ok(cpu) if cpu / 64 < mask.len() => mask[cpu / 64] = 1 << (cpu % 64),
            _ => mask = self.started_with,
        }
        // SAFETY: the kernel reads the live mask.
        if unsafe { sys::syscall(libc::SYS_sched_setaffinity, &[0, size_of::<CpuMask>() as u64, mask.as_ptr() as u64]) } == 0 {
            self.current = cpu;
        }
    }
}

/// Sends a reply (or the greeting) on the socket; dara reads it or is gone.
fn send(reply: &ForkReply) {
    // SAFETY: write reads `size_of::<ForkReply>()` bytes of the live reply.
    unsafe { sys::syscall(libc::SYS_write, &[SHM_FD as u64, reply as *const ForkReply as u64, size_of::<ForkReply>() as u64]) };
}
