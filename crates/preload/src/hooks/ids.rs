//! Changes of the process's user and group ids (`setuid` and its kin, `setgroups`,
//! `initgroups`, which calls glibc's own `setgroups` inside libc, past any hook): glibc makes
//! every thread of the process change, by signalling each with SIGSETXID. dara's timer threads
//! end first and start again after ([`super::posix_timers::with_timer_threads_stopped`]); the
//! call itself is glibc's.
use libc::{c_char, c_int, gid_t, size_t, uid_t};

use super::posix_timers::with_timer_threads_stopped;
use crate::real;

macro_rules! id_change {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                // SAFETY: the program's own arguments, forwarded unchanged.
                with_timer_threads_stopped(|| unsafe { real::$name($($arg),*) })
            }
        )*
    };
}

id_change! {
    fn setuid(uid: uid_t);
    fn setgid(gid: gid_t);
    fn seteuid(uid: uid_t);
    fn setegid(gid: gid_t);
    fn setreuid(ruid: uid_t, euid: uid_t);
    fn setregid(rgid: gid_t, egid: gid_t);
    fn setresuid(ruid: uid_t, euid: uid_t, suid: uid_t);
    fn setresgid(rgid: gid_t, egid: gid_t, sgid: gid_t);
    fn setgroups(size: size_t, list: *const gid_t);
    fn initgroups(user: *const c_char, group: gid_t);
}
