//! A target process's descriptor table as /proc shows it: the inode behind a descriptor, its
//! flags and fdinfo, whether it holds a socket, also after its main thread ended.
//!
//! A process whose main thread ends with `pthread_exit` while other threads run on keeps its
//! descriptor table, but `/proc/<pid>/fd` and `fdinfo` go through the main thread, which let go
//! of it as it exited: the entries vanish while the threads still use them. Every lookup here
//! falls back to a live thread's view (`/proc/<pid>/task/<tid>/...`) when the main thread is a
//! zombie, so what dara sees does not depend on how far that exit had got.
use std::fs;

/// The tid of a live thread of `pid` when its main thread has ended (a zombie while others run
/// on); `None` while the main thread lives or when no other thread is left.
pub fn leaderless_thread_id(pid: u32) -> Option<u32> {
    if super::thread_state(pid, pid) != Some('Z') {
        return None;
    }
    super::thread_ids(pid).into_iter().find(|&tid| tid != pid)
}

/// The /proc directory of a live task of `pid`, whose `fd`, `fdinfo`, `cwd` and `root` are the
/// process's: `/proc/<pid>`, or a live thread's `/proc/<pid>/task/<tid>` once the main thread
/// has ended (its own lists are empty then, its `cwd` and `root` unreadable).
pub fn live_task_dir(pid: u32) -> String {
    match leaderless_thread_id(pid) {
        Some(tid) => format!("/proc/{pid}/task/{tid}"),
        None => format!("/proc/{pid}"),
    }
}

/// `read` of `/proc/<pid>/<entry>` (an entry of the descriptor table: `fd/N`, `fdinfo/N`), or of a
/// live thread's same entry when that fails because the main thread has ended.
fn table_entry<T>(pid: u32, entry: &str, read: impl Fn(&str) -> Option<T>) -> Option<T> {
    read(&format!("/proc/{pid}/{entry}")).or_else(|| read(&format!("/proc/{pid}/task/{}/{entry}", leaderless_thread_id(pid)?)))
}

/// The text of descriptor `fd`'s fdinfo (`pos:`, `flags:`, an epoll set's `tfd:` lines, ...).
pub fn descriptor_info(pid: u32, fd: i32) -> Option<String> {
    table_entry(pid, &format!("fdinfo/{fd}"), |path| fs::read_to_string(path).ok())
}

/// The file status and descriptor flags of descriptor `fd` of `pid` (`flags:` in its fdinfo,
/// octal: `O_NONBLOCK`, `O_CLOEXEC`, ...); None if it is gone.
pub fn descriptor_flags(pid: i32, fd: i32) -> Option<i32> {
    let info = descriptor_info(pid as u32, fd)?;
    info.lines().find_map(|l| l.strip_prefix("flags:")).and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
}

/// Descriptor `fd` of `pid` as a /proc path (a link that opens or stats the file itself) and what
/// the link reads (`socket:[N]`, `pipe:[N]`, a path); None if it has no such descriptor.
pub fn descriptor_link(pid: u32, fd: u64) -> Option<(String, std::path::PathBuf)> {
    table_entry(pid, &format!("fd/{fd}"), |path| Some((path.to_string(), fs::read_link(path).ok()?)))
}

/// Inode of the pipe or socket behind descriptor `fd` of process `pid` (`pipe:[N]`), if any.
pub fn fd_inode(pid: u32, fd: u64) -> Option<u64> {
    let (_, link) = descriptor_link(pid, fd)?;
    let link = link.to_str()?;
    let inside = link.strip_prefix("pipe:[").or_else(|| link.strip_prefix("socket:["))?;
    inside.strip_suffix(']')?.parse().ok()
}

/// Whether process `pid` holds a descriptor of the socket with inode `inode`.
pub fn holds_socket(pid: u32, inode: u64) -> bool {
    let wanted = format!("socket:[{inode}]");
    let dir = fs::read_dir(format!("{}/fd", live_task_dir(pid)));
    dir.is_ok_and(|dir| dir.flatten().any(|e| fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_whose_main_thread_lives_shows_its_own_descriptors() {
        let me = std::process::id();
        assert_eq!(leaderless_thread_id(me), None);
        let info = descriptor_info(me, 0).or_else(|| descriptor_info(me, 1)).expect("stdin or stdout has an fdinfo");
        assert!(info.contains("flags:"), "{info}");
    }
}
