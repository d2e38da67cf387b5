//! Acting on one target process or thread: pidfds (open, signal, kill, exited, wait status without
//! reaping), signals marked as dara's own, and reaping a stray child. A pidfd never names a
//! recycled pid.
/// A pidfd for `pid` (None if it is already gone).
pub fn pidfd_open(pid: u32) -> Option<std::os::fd::OwnedFd> {
    open_pidfd(pid, 0).ok()
}

/// `pidfd_open` flag for a pidfd of one thread, readable once that thread has exited (Linux 6.9;
/// the value is `O_EXCL`).
const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;

/// A pidfd of thread `tid` alone (`PIDFD_THREAD`, Linux 6.9): readable when that thread exits, and
/// [`pidfd_getfd`] on it reads *that thread's* descriptor table, which outlives a main thread that
/// ended with `pthread_exit`. `ESRCH` if the thread is gone, `EINVAL` on older kernels.
pub fn thread_pidfd_open(tid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    open_pidfd(tid, PIDFD_THREAD)
}

fn open_pidfd(id: u32, flags: libc::c_long) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid or tid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, id as libc::c_long, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Descriptor `fd` of the process (or, for a thread pidfd, the thread) behind `pidfd`, as our own
/// (`pidfd_getfd`: the same open file).
pub fn pidfd_getfd(pidfd: &std::os::fd::OwnedFd, fd: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags; returns a new fd or -1.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd() as libc::c_long, fd as libc::c_long, 0 as libc::c_long) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor pidfd_getfd just returned, owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(copy as i32) })
}

/// The pid of the process behind `pidfd` in each PID namespace it is in, outermost (dara's)
/// first, like [`namespace_pids`](super::namespace_pids) but from `NSpid:` of the pidfd's
/// fdinfo: about 7 µs for a process just started against about 18 for its
/// `/proc/<pid>/status`. None once the process is reaped.
pub fn namespace_pids_of(pidfd: &std::os::fd::OwnedFd) -> Option<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let info = super::read_small(&format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    let line = info.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().map(|n| n.parse().ok()).collect()
}

/// SIGKILLs the process behind a pidfd (never a recycled pid).
pub fn pidfd_kill(fd: &std::os::fd::OwnedFd) {
    pidfd_signal(fd, libc::SIGKILL);
}

/// Sends `sig` to the process behind a pidfd (never a recycled pid).
pub fn pidfd_signal(fd: &std::os::fd::OwnedFd, sig: i32) {
    use std::os::fd::AsRawFd;
    let info = dara_siginfo(sig);
    // SAFETY: pidfd_send_signal with a live pidfd and a siginfo that lives across the call.
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, &info as *const libc::siginfo_t, 0u32) };
}

/// Sends `sig` to thread `tid` of process `pid`, marked as dara's like [`pidfd_signal`].
pub fn thread_signal(pid: u32, tid: u32, sig: i32) {
    let info = dara_siginfo(sig);
    // SAFETY: rt_tgsigqueueinfo takes integers and a siginfo that lives across the call.
    unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid as libc::c_long, tid as libc::c_long, sig as libc::c_long, &info as *const libc::siginfo_t) };
}

/// A siginfo for a signal of dara's own: `SI_QUEUE` (the only kind the kernel lets one process
/// describe to another) with [`dara_abi::DARA_SIGNAL_VALUE`] as its value.
fn dara_siginfo(sig: i32) -> libc::siginfo_t {
    /// siginfo_t's first fields: si_signo, si_errno, si_code, then (for SI_QUEUE) si_pid and
    /// si_uid at 16 and 20 and the value at 24.
    #[repr(C)]
    struct Queued {
        signo: i32,
        errno: i32,
        code: i32,
        _pad: i32,
        pid: i32,
        uid: u32,
        value: u64,
    }
    const _: () = assert!(std::mem::size_of::<Queued>() <= std::mem::size_of::<libc::siginfo_t>());
    // SAFETY: an all-zero siginfo_t is valid plain data.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let queued = Queued { signo: sig, errno: 0, code: libc::SI_QUEUE, _pad: 0, pid: 0, uid: 0, value: dara_abi::DARA_SIGNAL_VALUE };
    // SAFETY: `Queued` is a prefix of siginfo_t's layout and fits in it (checked above).
    unsafe { std::ptr::write(&mut info as *mut libc::siginfo_t as *mut Queued, queued) };
    info
}

/// Reaps `pid` if it is an exited child of dara; true when it is reaped or not dara's to reap.
pub fn reap_if_child(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid writes the status into a local.
    let rc = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG | libc::__WALL) };
    rc != 0
}

/// Whether the process behind `pidfd` has ended (its pidfd is readable), whatever /proc now
/// says about the pid.
pub fn pidfd_exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    pidfd_exited_within(pidfd, std::time::Duration::ZERO)
}

/// Waits at most `limit` for the process behind `pidfd` to end; whether it has.
pub fn pidfd_exited_within(pidfd: &std::os::fd::OwnedFd, limit: std::time::Duration) -> bool {
    let mut p = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(pidfd), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, limit.as_millis().min(i32::MAX as u128) as i32) > 0 && p.revents & libc::POLLIN != 0 }
}

/// The wait status of dara's own child behind `pidfd` once it has ended, without reaping it
/// (`waitid(P_PIDFD, WEXITED | WNOHANG | WNOWAIT)`): None while it runs or once it is reaped.
pub fn child_status(pidfd: &std::os::fd::OwnedFd) -> Option<i32> {
    // SAFETY: an all-zero siginfo is a valid value for waitid to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let id = std::os::fd::AsRawFd::as_raw_fd(pidfd) as libc::id_t;
    // SAFETY: waitid writes only into the local siginfo.
    let rc = unsafe { libc::waitid(libc::P_PIDFD, id, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL) };
    // SAFETY: after a successful waitid the siginfo holds a SIGCHLD record (si_pid 0: none yet).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if rc != 0 || pid == 0 {
        return None;
    }
    Some(wait_encoding(info.si_code, status))
}

/// A child's end as `waitid` reports it (`si_code`, `si_status`), in the `wait(2)` encoding.
pub(crate) fn wait_encoding(si_code: i32, si_status: i32) -> i32 {
    match si_code {
        libc::CLD_EXITED => (si_status & 0xff) << 8,
        _ => si_status & 0x7f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_names_the_namespace_pids_its_status_names() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let fd = pidfd_open(child.id()).expect("pidfd of a live child");
        let pids = namespace_pids_of(&fd);
        assert!(pids.is_some());
        assert_eq!(pids, super::super::namespace_pids(child.id()));
        assert_eq!(pids.unwrap().first(), Some(&child.id()), "dara's own namespace first");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(namespace_pids_of(&fd), None, "reaped");
    }
}
