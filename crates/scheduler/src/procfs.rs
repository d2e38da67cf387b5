//! What /proc says about a target thread: its scheduler state and the syscall it sits in. Used by
//! the watchdog to tell "computing" from "blocked in the kernel outside dara's control".
use std::fs;

/// State letter from /proc/<pid>/task/<tid>/stat (`R`, `S`, `D`, `Z`, ...), None if gone.
pub fn thread_state(pid: u32, tid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.chars().next()
}

/// The syscall a blocked thread is in, as "name(arg0, arg1, arg2)", from
/// /proc/<pid>/task/<tid>/syscall. None if not in a syscall or unreadable.
pub fn blocked_syscall(pid: u32, tid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let mut fields = text.split_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    let args: Vec<&str> = fields.take(3).collect();
    let args: Vec<String> = args.iter().map(|a| shorten_arg(a)).collect();
    Some(format!("{}({})", syscall_name(nr), args.join(", ")))
}

fn shorten_arg(hex: &str) -> String {
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).map(|v| if v < 4096 { v.to_string() } else { format!("{v:#x}") }).unwrap_or_else(|_| hex.to_string())
}

/// Whether the thread still exists.
pub fn thread_exists(pid: u32, tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// Name of an x86_64 syscall number, for diagnostics.
pub fn syscall_name(nr: i64) -> String {
    let name = match nr {
        0 => "read",
        1 => "write",
        2 => "open",
        7 => "poll",
        17 => "pread64",
        19 => "readv",
        23 => "select",
        34 => "pause",
        35 => "nanosleep",
        43 => "accept",
        45 => "recvfrom",
        47 => "recvmsg",
        56 => "clone",
        57 => "fork",
        58 => "vfork",
        59 => "execve",
        61 => "wait4",
        62 => "kill",
        72 => "fcntl",
        73 => "flock",
        101 => "ptrace",
        130 => "rt_sigsuspend",
        202 => "futex",
        232 => "epoll_wait",
        228 => "clock_gettime",
        230 => "clock_nanosleep",
        247 => "waitid",
        257 => "openat",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        318 => "getrandom",
        322 => "execveat",
        435 => "clone3",
        449 => "futex_waitv",
        _ => return format!("syscall {nr}"),
    };
    name.to_string()
}
