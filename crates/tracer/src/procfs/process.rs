//! One target process as /proc shows it: its program, memory (for a diagnostic string), signal
//! dispositions, process group and namespace pids, and whether it has ended.
use std::fs;

/// The file name of the program process `pid` runs (its executable), None if unreadable.
pub fn program_name(pid: u32) -> Option<String> {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some(exe.file_name().map_or_else(|| exe.display().to_string(), |n| n.to_string_lossy().into_owned()))
}

/// A NUL-terminated string at `addr` in process `pid` (at most 4 KiB), for diagnostics.
pub fn c_string_of(pid: u32, addr: u64) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let n = super::read_memory(pid, addr, &mut buf).ok()?;
    let end = buf[..n].iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Whether `sig` sent now would terminate process `pid`: not caught, not ignored, not blocked
/// (`/proc/<pid>/status`), and terminating by default.
pub fn signal_terminates(pid: u32, sig: i32) -> bool {
    if sig == libc::SIGKILL {
        return true;
    }
    if !(1..=64).contains(&sig) || matches!(sig, libc::SIGCHLD | libc::SIGCONT | libc::SIGURG | libc::SIGWINCH | libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
        return false;
    }
    let bit = 1u64 << (sig - 1);
    signal_masks(pid, &["SigCgt:", "SigIgn:", "SigBlk:"]).is_some_and(|masks| masks & bit == 0)
}

/// Whether process `pid` has a handler for `sig` (`/proc/<pid>/status`).
pub fn signal_caught(pid: u32, sig: i32) -> bool {
    (1..=64).contains(&sig) && signal_masks(pid, &["SigCgt:"]).is_some_and(|caught| caught & (1u64 << (sig - 1)) != 0)
}

/// The union of the signal masks named by `keys` in `/proc/<pid>/status` (None if it is gone).
fn signal_masks(pid: u32, keys: &[&str]) -> Option<u64> {
    let status = super::read_small(&format!("/proc/{pid}/status"))?;
    let mask = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
    Some(keys.iter().fold(0, |all, key| all | mask(key)))
}

/// The process group of `pid` as the process itself names it (inside its PID namespace, if it
/// runs in one): the last number of `NSpgid:` in `/proc/<pid>/status`.
pub fn process_group(pid: u32) -> Option<u32> {
    namespace_ids(pid, "NSpgid:")?.last().copied()
}

/// The process's pid in each PID namespace it is in, outermost (dara's) first: `NSpid:` of
/// `/proc/<pid>/status`. One number when the process runs in dara's own namespace.
pub fn namespace_pids(pid: u32) -> Option<Vec<u32>> {
    namespace_ids(pid, "NSpid:")
}

fn namespace_ids(pid: u32, field: &str) -> Option<Vec<u32>> {
    let status = super::read_small(&format!("/proc/{pid}/status"))?;
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    line.split_whitespace().map(|n| n.parse().ok()).collect()
}

/// Whether a process has ended, as /proc tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessEnd {
    Running,
    /// Dead, not yet reaped: its wait status (`exit_code` of `/proc/<pid>/stat`).
    Zombie(i32),
    /// No such process (reaped already, or never was).
    Gone,
}

/// Reads `/proc/<pid>/stat`. A zombie thread-group leader whose other threads still run (its main
/// thread called `pthread_exit`) is a running process, and so is a zombie its tracer (dara's
/// ptrace agent) has not collected yet: its parent hears of its end (SIGCHLD, `wait`) only once
/// the tracer has, and a parent let run before that would see it alive in one execution and gone
/// in another.
pub fn process_end(pid: u32) -> ProcessEnd {
    match zombie_status(pid) {
        ProcessEnd::Zombie(_) if tracer_of(pid).is_some_and(|t| t != 0) => ProcessEnd::Running,
        end => end,
    }
}

/// Whether process `pid` is being taken down by the kernel: its last thread has exited (the
/// leader's `PF_EXITING`, field 9 of `/proc/<pid>/stat`) but it is not a zombie yet, its address
/// space and descriptors still being released. On a loaded CPU that takes a while, and is no
/// hang of the program.
pub fn exiting(pid: u32) -> bool {
    exit_state(&format!("/proc/{pid}/stat")) == Some(ExitState::Exiting)
}

/// Where a task stands in its exit, by its `stat` file (`path`): field 3 (state) and field 9
/// (flags, `PF_EXITING`); None if it is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExitState {
    Running,
    /// `PF_EXITING`, not a zombie yet.
    Exiting,
    Zombie,
}

fn exit_state(path: &str) -> Option<ExitState> {
    const PF_EXITING: u64 = 0x4;
    let stat = super::read_small(path)?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    Some(match (field(3), field(9).and_then(|f| f.parse::<u64>().ok())) {
        (Some("Z"), _) => ExitState::Zombie,
        (_, Some(flags)) if flags & PF_EXITING != 0 => ExitState::Exiting,
        _ => ExitState::Running,
    })
}

/// Whether a signal is taking process `pid` down: one of its threads is exiting (`PF_EXITING`)
/// or a zombie, or has SIGKILL pending — the kernel turns a fatal signal into a group exit by
/// queueing SIGKILL to every thread, each dequeuing it once it runs. False once the process is
/// gone, and for a process a signal was sent to that went on living (caught, blocked, ignored).
pub fn signal_takes_down(pid: u32) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    super::thread_ids(pid).into_iter().any(|tid| {
        let ending = exit_state(&format!("/proc/{pid}/task/{tid}/stat")).is_some_and(|s| s != ExitState::Running);
        ending || super::signals(pid, tid).is_some_and(|s| s.pending & SIGKILL_BIT != 0)
    })
}

/// CPU time process `pid` has used (all its threads, user and system: `utime` + `stime` of
/// `/proc/<pid>/stat`, in clock ticks turned into a duration); None once it is gone.
pub fn process_cpu_time(pid: u32) -> Option<std::time::Duration> {
    let stat = super::read_small(&format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    // Fields 14 and 15 of the line; `fields` starts at field 3.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf takes an integer.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(std::time::Duration::from_micros(ticks * 1_000_000 / per_second))
}

/// The `TracerPid:` of `/proc/<pid>/status` (0: not traced).
fn tracer_of(pid: u32) -> Option<u32> {
    let status = super::read_small(&format!("/proc/{pid}/status"))?;
    status.lines().find_map(|l| l.strip_prefix("TracerPid:"))?.trim().parse().ok()
}

fn zombie_status(pid: u32) -> ProcessEnd {
    let Some(stat) = super::read_small(&format!("/proc/{pid}/stat")) else { return ProcessEnd::Gone };
    let Some(close) = stat.rfind(')') else { return ProcessEnd::Gone };
    // Fields after the command: state is field 3, num_threads 20, exit_code 52 (1-based).
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    if field(3) != Some("Z") || field(20).and_then(|t| t.parse::<u32>().ok()).is_some_and(|t| t > 1) {
        return ProcessEnd::Running;
    }
    ProcessEnd::Zombie(field(52).and_then(|c| c.parse().ok()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_process_or_none_is_not_exiting() {
        assert!(!exiting(std::process::id()));
        assert!(!exiting(u32::MAX));
        // A zombie is past its teardown: dead, not exiting.
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while zombie_status(pid) == ProcessEnd::Running {
            assert!(std::time::Instant::now() < deadline, "`true` never ended");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!exiting(pid));
        let _ = { child }.wait();
    }

    #[test]
    fn a_signal_takes_down_a_process_that_dies_of_it_not_one_that_ignores_it() {
        let wait_until = |what: &str, done: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !done() {
                assert!(std::time::Instant::now() < deadline, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        assert!(!signal_takes_down(std::process::id()));
        assert!(!signal_takes_down(u32::MAX), "a process that is gone");
        // SIGTERM ignored: it lives on.
        let mut ignoring = std::process::Command::new("sh").args(["-c", "trap '' TERM; echo; while :; do sleep 1; done"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let pid = ignoring.id();
        let mut ready = [0u8; 1];
        std::io::Read::read_exact(ignoring.stdout.as_mut().unwrap(), &mut ready).unwrap(); // the trap is set
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!signal_takes_down(pid), "an ignored SIGTERM");
        // SIGKILL: taken down, and still so as a zombie.
        ignoring.kill().unwrap();
        wait_until("the killed child never became a zombie", &|| zombie_status(pid) != ProcessEnd::Running);
        assert!(signal_takes_down(pid), "a killed zombie");
        let _ = ignoring.wait();
        assert!(!signal_takes_down(pid), "reaped");
    }
}
