//! Reading and writing a target's memory (`process_vm_readv` / `process_vm_writev`), also after
//! its main thread ended. The targets are dara's descendants, so the kernel allows both.
//!
//! Both calls find the address space through the task the pid names; a process whose main
//! thread ended with `pthread_exit` while others run on has none behind its pid (the main thread
//! let go of it as it exited: `ESRCH`), so the call is made again through a live thread.
use std::io;

/// Reads up to `buf.len()` bytes at `addr` in process `pid`: how many it read (fewer when the
/// mapping ends there).
pub fn read_memory(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    through_a_live_thread(pid, |task| {
        // SAFETY: the local iovec covers the live buffer; the remote one is only interpreted by
        // the kernel in the target's address space.
        unsafe { libc::process_vm_readv(task as libc::pid_t, &local, 1, &remote, 1, 0) }
    })
}

/// Writes up to `bytes.len()` bytes at `addr` in process `pid`: how many it wrote.
pub fn write_memory(pid: u32, addr: u64, bytes: &[u8]) -> io::Result<usize> {
    let local = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: bytes.len() };
    through_a_live_thread(pid, |task| {
        // SAFETY: the local iovec covers the live slice, which the kernel only reads.
        unsafe { libc::process_vm_writev(task as libc::pid_t, &local, 1, &remote, 1, 0) }
    })
}

/// Reads values of a plain C type at `addr` into `out` (pollfds, a socket address): how many
/// bytes it read.
///
/// # Safety
/// Every bit pattern must be a valid `T` (a `#[repr(C)]` struct of integers).
pub unsafe fn read_plain<T: Copy>(pid: u32, addr: u64, out: &mut [T]) -> io::Result<usize> {
    // SAFETY: the byte view covers exactly `out`, and the caller vouches that any bytes written
    // into it make valid `T`s.
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out)) };
    read_memory(pid, addr, bytes)
}

/// Writes a value of a plain C type at `addr` (an `itimerspec`): how many bytes it wrote.
pub fn write_plain<T: Copy>(pid: u32, addr: u64, value: &T) -> io::Result<usize> {
    // SAFETY: a read-only byte view of exactly `value`, which lives across the call. (`T: Copy`
    // types here are C structs of integers; padding bytes, if any, are only copied.)
    let bytes = unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>()) };
    write_memory(pid, addr, bytes)
}

/// `call(pid)`, or `call(tid)` of a live thread when `pid`'s main thread has ended.
fn through_a_live_thread(pid: u32, call: impl Fn(u32) -> isize) -> io::Result<usize> {
    let n = call(pid);
    if n >= 0 {
        return Ok(n as usize);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ESRCH) {
        return Err(err);
    }
    let Some(tid) = super::leaderless_thread_id(pid) else { return Err(err) };
    let n = call(tid);
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_a_process_s_memory() {
        let mut word = [7u8; 8];
        let mut got = [0u8; 8];
        let me = std::process::id();
        assert_eq!(read_memory(me, word.as_ptr() as u64, &mut got).unwrap(), 8);
        assert_eq!(got, [7; 8]);
        assert_eq!(write_memory(me, word.as_mut_ptr() as u64, &[1, 2]).unwrap(), 2);
        assert_eq!(std::hint::black_box(word)[..3], [1, 2, 7]);
        assert!(read_memory(me, 0, &mut got).is_err());
    }
}
