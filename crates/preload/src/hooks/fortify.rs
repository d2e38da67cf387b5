//! glibc's fortified entry points (`-D_FORTIFY_SOURCE`, Debian's default build flags) of the calls
//! dara hooks: `__poll_chk`, `__ppoll_chk`, `__read_chk`, `__recv_chk`, `__recvfrom_chk`. A
//! program compiled with fortification calls these instead of `poll`/`read`/`recv`... when the
//! compiler knows the buffer's size but not the count; glibc's versions check the count and call
//! the internal `__poll`/`__read`, past every symbol hook. `poll` and `recv` are not in the
//! syscall trap's list, so a blocking one slept in the kernel with the run token: privoxy's accept
//! loop (`__poll_chk` on its listening sockets, timeout -1) stopped every search as "uncontrolled:
//! ... blocked in the kernel in poll" (fixture `fortify_poll.c`).
//!
//! Each hook makes glibc's check (a count larger than the buffer ends the program as glibc's
//! does, through `__chk_fail`: "buffer overflow detected") and then is the plain hook.
use libc::{c_int, c_void, nfds_t, pollfd, sigset_t, size_t, socklen_t, ssize_t, timespec};

extern "C" {
    /// glibc's "*** buffer overflow detected ***: terminated" (abort).
    fn __chk_fail() -> !;
}

/// glibc's check: `count` items of `item` bytes do not fit the `room` bytes the compiler saw.
fn overflows(count: usize, item: usize, room: size_t) -> bool {
    room / item < count
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int {
    if overflows(n as usize, core::mem::size_of::<pollfd>(), fdslen) {
        // SAFETY: glibc's own failure path; it does not return.
        unsafe { __chk_fail() }
    }
    // SAFETY: the program's own arguments, to the `poll` hook.
    unsafe { super::poll::poll(fds, n, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t, fdslen: size_t) -> c_int {
    if overflows(n as usize, core::mem::size_of::<pollfd>(), fdslen) {
        // SAFETY: as above.
        unsafe { __chk_fail() }
    }
    // SAFETY: the program's own arguments, to the `ppoll` hook.
    unsafe { super::poll::ppoll(fds, n, timeout, mask) }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t) -> ssize_t {
    if overflows(len, 1, buflen) {
        // SAFETY: as above.
        unsafe { __chk_fail() }
    }
    // SAFETY: the program's own arguments, to the `read` hook.
    unsafe { super::net::read(fd, buf, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int) -> ssize_t {
    if overflows(len, 1, buflen) {
        // SAFETY: as above.
        unsafe { __chk_fail() }
    }
    // SAFETY: the program's own arguments, to the `recv` hook.
    unsafe { super::net::recv(fd, buf, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int, addr: *mut libc::sockaddr, alen: *mut socklen_t) -> ssize_t {
    if overflows(len, 1, buflen) {
        // SAFETY: as above.
        unsafe { __chk_fail() }
    }
    // SAFETY: the program's own arguments, to the `recvfrom` hook.
    unsafe { super::net::recvfrom(fd, buf, len, flags, addr, alen) }
}

#[cfg(test)]
mod tests {
    use super::overflows;

    #[test]
    fn the_check_is_glibcs() {
        assert!(!overflows(4, 8, 32));
        assert!(overflows(5, 8, 32));
        assert!(!overflows(0, 8, 0));
        assert!(overflows(1, 1, 0));
        assert!(!overflows(1, 8, 15)); // 15 / 8 = 1 entry fits, as glibc computes it
    }
}
