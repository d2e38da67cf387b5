//! The fork server, on dara's side: the search's program started once, parked in the preload's
//! constructor, and asked for a copy of itself per execution instead of a fork + exec + dynamic
//! loading (protocol and what the copy looks like: `dara_abi::fork_server`).
//!
//! Only a command the preload enters can serve: a dynamically linked program (or a script whose
//! interpreter is one) that is neither a Go program nor set-user/group-ID nor given file
//! capabilities (the dynamic loader ignores LD_PRELOAD then). The copy is indistinguishable from a launched program, so anything
//! that goes wrong with the server (it cannot start, it died) only costs speed: the tree falls
//! back to a plain launch, and says so once.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use dara_abi::fork_server::{ForkReply, ForkRequest, Greeting, MAGIC, MAX_INSTALLS};

use crate::binary::{self, BinaryKind};
use crate::launch::{command_for, set_up_child, LaunchSpec};

/// How long dara waits for the server's greeting: its dynamic loading, done once. Generous, for
/// a loaded machine; past it dara launches every execution plainly.
const GREETING_LIMIT: Duration = Duration::from_secs(30);

/// A running fork server for one command.
pub struct ForkServer {
    /// The command it runs (the root command of every execution it serves), in this environment
    /// and directory.
    command: Vec<String>,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    cwd: Option<std::path::PathBuf>,
    pid: u32,
    /// dara's end of the socket; requests and replies alternate under the lock.
    socket: Mutex<OwnedFd>,
    /// Set once a request failed: later executions launch plainly.
    broken: AtomicBool,
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer").field("command", &self.command).field("pid", &self.pid).finish()
    }
}

/// The descriptors and settings of one child.
pub struct ForkChild<'a> {
    /// The execution's PID and mount namespaces, if it has them.
    pub pid_ns: Option<RawFd>,
    pub mount_ns: Option<RawFd>,
    /// (dara's descriptor, the number it takes in the child).
    pub installs: &'a [(RawFd, i32)],
    pub cpu: Option<usize>,
}

/// Why a command cannot be served, for a note; None when it can.
pub fn unsuitable(command: &[String]) -> Option<String> {
    let Some(program) = command.first() else { return Some("no command".into()) };
    let Some(path) = binary::resolve(program) else { return Some(format!("{program} not found")) };
    let (runs, kind) = match binary::classify(&path) {
        Ok(BinaryKind::Script { interpreter }) => {
            let kind = binary::classify(&interpreter);
            (interpreter, kind)
        }
        kind => (path.clone(), kind),
    };
    let why = match kind {
        Ok(BinaryKind::Dynamic) if binary::is_go(&runs) => Some("is a Go program (dara's ptrace agent runs it)"),
        Ok(BinaryKind::Dynamic) => None,
        Ok(BinaryKind::Static) => Some("is statically linked (dara's ptrace agent runs it)"),
        _ => Some("is not a program dara's preload enters"),
    };
    if let Some(why) = why {
        return Some(format!("{} {why}", runs.display()));
    }
    let secure = [&path, &runs].into_iter().find(|p| secure_exec(p));
    secure.map(|p| format!("{} is set-user/group-ID or has file capabilities (the dynamic loader ignores LD_PRELOAD)", p.display()))
}

/// Whether running `path` is a secure exec, in which the dynamic loader ignores LD_PRELOAD: a
/// set-user/group-ID file or one with file capabilities. Such a server would never greet dara and
/// would run the program meanwhile.
fn secure_exec(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let set_id = path.metadata().is_ok_and(|m| m.permissions().mode() & (libc::S_ISUID | libc::S_ISGID) != 0);
    let Ok(name) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return true };
    // SAFETY: getxattr with a null buffer and size 0 only asks for the attribute's size.
    let capabilities = unsafe { libc::getxattr(name.as_ptr(), c"security.capability".as_ptr(), std::ptr::null_mut(), 0) } >= 0;
    set_id || capabilities
}

impl ForkServer {
    /// Starts `spec.command` as a fork server and waits for its greeting. Call from a thread that
    /// lives as long as the server is used: the server and every child it makes die when that
    /// thread's process ends (`PR_SET_PDEATHSIG` follows the parent thread).
    pub fn start(spec: &LaunchSpec) -> std::io::Result<ForkServer> {
        if let Some(why) = unsuitable(&spec.command) {
            return Err(std::io::Error::other(why));
        }
        let (program, args) = spec.command.split_first().ok_or_else(|| std::io::Error::other("no command"))?;
        let (ours, theirs) = seqpacket_pair()?;
        let mut cmd = command_for(spec, program, args);
        let installs = [(theirs.as_raw_fd(), dara_abi::SHM_FD)];
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls (`set_up_child`); it allocates nothing.
        unsafe { cmd.pre_exec(move || set_up_child(0, &installs)) };
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        let pid = cmd.spawn()?.id();
        drop(theirs);
        let server = ForkServer { command: spec.command.clone(), env: spec.env.clone(), cwd: spec.cwd.clone(), pid, socket: Mutex::new(ours), broken: AtomicBool::new(false) };
        let greeting: Greeting = server.read_reply(Some(GREETING_LIMIT))?;
        if greeting.pid < 0 {
            return Err(std::io::Error::from_raw_os_error(-greeting.pid));
        }
        Ok(server)
    }

    /// Whether this server runs `command` as `spec` would launch it (same environment and
    /// directory: what the dynamic loader saw is frozen in the server).
    pub fn serves(&self, spec: &LaunchSpec, command: &[String]) -> bool {
        self.command == command && self.env == spec.env && self.cwd == spec.cwd && !self.broken.load(Ordering::Relaxed)
    }

    /// A child for an execution: dara's own child, its pid as dara sees it, and its holder if it
    /// has one. The caller puts the child in its process group (`setpgid(pid, pid)`) before
    /// reaping by group, and keeps the holder until the child is gone. After an error the server
    /// serves no more ([`ForkServer::serves`] is false).
    pub fn fork(&self, child: &ForkChild<'_>) -> std::io::Result<ServedCopy> {
        let result = self.request(child);
        if result.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        result
    }

    fn request(&self, child: &ForkChild<'_>) -> std::io::Result<ServedCopy> {
        if child.installs.len() > MAX_INSTALLS {
            return Err(std::io::Error::other("too many descriptors for the fork server"));
        }
        let mut request = ForkRequest { magic: MAGIC, pid_ns: u32::from(child.pid_ns.is_some()), mount_ns: u32::from(child.mount_ns.is_some()), installs: child.installs.len() as u32, targets: [-1; MAX_INSTALLS], cpu: child.cpu.map_or(-1, |c| c as i32) };
        let fds: Vec<RawFd> = child.pid_ns.into_iter().chain(child.mount_ns).chain(child.installs.iter().map(|&(fd, _)| fd)).collect();
        for (target, &(_, number)) in request.targets.iter_mut().zip(child.installs) {
            *target = number;
        }
        let socket = self.socket.lock().map_err(|_| std::io::Error::other("fork server lock poisoned"))?;
        // SAFETY: ForkRequest is repr(C) plain integers; the slice covers exactly its bytes.
        let bytes = unsafe { std::slice::from_raw_parts((&request as *const ForkRequest).cast::<u8>(), std::mem::size_of::<ForkRequest>()) };
        let iov = [std::io::IoSlice::new(bytes)];
        let rights = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
        nix::sys::socket::sendmsg::<()>(socket.as_raw_fd(), &iov, &rights, nix::sys::socket::MsgFlags::MSG_NOSIGNAL, None).map_err(std::io::Error::from)?;
        let reply: ForkReply = read_reply_from(&socket, None)?;
        drop(socket);
        let holder = (reply.holder > 0).then(|| Holder::of(reply.holder as u32));
        match reply.pid {
            pid if pid > 0 => Ok(ServedCopy { pid: pid as u32, holder }),
            errno => Err(std::io::Error::from_raw_os_error(-errno)), // a holder is reaped as it drops
        }
    }

    fn read_reply(&self, limit: Option<Duration>) -> std::io::Result<ForkReply> {
        let socket = self.socket.lock().map_err(|_| std::io::Error::other("fork server lock poisoned"))?;
        read_reply_from(&socket, limit)
    }
}

/// Reads one reply, waiting at most `limit` (None: as long as it takes; the server answers at
/// once or has died, which ends the read).
fn read_reply_from(socket: &OwnedFd, limit: Option<Duration>) -> std::io::Result<ForkReply> {
    if let Some(limit) = limit {
        let mut pfd = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll reads and writes the one live pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, limit.as_millis().min(i32::MAX as u128) as i32) };
        if ready <= 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the fork server did not answer"));
        }
    }
    let mut reply = ForkReply { magic: 0, pid: 0, holder: 0, reserved: 0 };
    // SAFETY: read writes at most size_of::<ForkReply>() bytes into the live reply, which any
    // bytes make valid.
    let n = unsafe { libc::read(socket.as_raw_fd(), (&mut reply as *mut ForkReply).cast(), std::mem::size_of::<ForkReply>()) };
    if n != std::mem::size_of::<ForkReply>() as isize || reply.magic != MAGIC {
        return Err(std::io::Error::other("the fork server ended"));
    }
    Ok(reply)
}

/// A copy made for an execution.
#[derive(Debug)]
pub struct ServedCopy {
    pub pid: u32,
    pub holder: Option<Holder>,
}

/// A copy's holder: the process that shares the copy's memory and takes it down once the copy
/// has exited (`preload/src/copy_holder.rs`), off the executions' CPU. dara's child without an
/// exit signal; reaped when this value drops, which waits (bounded) for the holder's end: drop it
/// once the copy is gone, away from the executions' CPU.
#[derive(Debug)]
pub struct Holder {
    pid: u32,
    pidfd: Option<OwnedFd>,
}

/// How long dropping a [`Holder`] waits for it to end by itself before killing it.
const HOLDER_LIMIT: Duration = Duration::from_secs(10);

impl Holder {
    fn of(pid: u32) -> Holder {
        Holder { pid, pidfd: crate::procfs::pidfd_open(pid) }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd.as_ref().filter(|fd| !crate::procfs::pidfd_exited_within(fd, HOLDER_LIMIT)) {
            crate::procfs::pidfd_kill(pidfd);
        }
        // SAFETY: the holder is dara's unreaped child (its pid names it); __WALL for a child
        // without an exit signal.
        unsafe { libc::waitpid(self.pid as i32, std::ptr::null_mut(), libc::__WALL) };
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        // SAFETY: the server is dara's unreaped child, so its pid names it; kill and a blocking
        // waitpid of it touch nothing else.
        unsafe {
            libc::kill(self.pid as i32, libc::SIGKILL);
            libc::waitpid(self.pid as i32, std::ptr::null_mut(), libc::__WALL);
        }
    }
}

fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into the live array.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_dynamic_program_or_a_script_of_one_can_serve() {
        assert_eq!(unsuitable(&command(&["sh", "-c", "true"])), None);
        let dir = std::env::temp_dir().join(format!("dara-fork-server-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
        assert_eq!(unsuitable(&command(&[script.to_str().unwrap()])), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_cannot_serve_says_why() {
        let missing = unsuitable(&command(&["/no/such/program-dara"])).unwrap();
        assert!(missing.contains("not found"), "{missing}");
        assert!(unsuitable(&[]).is_some());
    }
}
