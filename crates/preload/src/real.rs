//! The real libc functions behind the hooks, found with `dlsym(RTLD_NEXT, name)`.
//!
//! Each address is resolved once: eagerly by [`resolve_all`] from the constructor, or lazily on
//! first use when another library's constructor calls a hooked function before ours ran. A
//! missing symbol is fatal (one line on stderr, exit 125): calling through a null pointer would
//! crash the target in a far more confusing way.
use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_char, c_int, c_long, c_uint, c_void, clockid_t, cpu_set_t, pid_t, pthread_attr_t,
    pthread_barrier_t, pthread_barrierattr_t, pthread_cond_t, pthread_mutex_t, pthread_once_t,
    pthread_rwlock_t, pthread_t, sem_t, sigset_t, size_t, ssize_t, time_t, timespec, timeval,
    useconds_t,
};

use crate::sys;

pub type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
pub type InitRoutine = extern "C" fn();
pub type MainFn = extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

/// The calling thread's `errno` (libc's).
pub fn errno() -> c_int {
    // SAFETY: __errno_location always returns this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno` (libc's, which the hooks set as the real functions do).
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location always returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

fn resolve(cache: &AtomicUsize, name: &'static [u8]) -> usize {
    let cached = cache.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `name` is a NUL-terminated static string; dlsym has no other preconditions.
    let addr = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    if addr == 0 {
        sys::write_stderr(b"dara: libc has no symbol ");
        sys::write_stderr(&name[..name.len() - 1]);
        sys::die(b"\n", 125);
    }
    cache.store(addr, Ordering::Relaxed);
    addr
}

macro_rules! real_functions {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => {
        mod addr {
            use core::sync::atomic::AtomicUsize;
            $( #[allow(non_upper_case_globals)] pub static $name: AtomicUsize = AtomicUsize::new(0); )*
        }

        /// Resolves every real function now, so hooks never call `dlsym` later.
        pub fn resolve_all() {
            $( resolve(&addr::$name, concat!(stringify!($name), "\0").as_bytes()); )*
        }

        $(
            /// Calls the real libc function of the same name.
            ///
            /// # Safety
            /// Exactly the contract of the libc function.
            #[inline]
            #[allow(non_snake_case)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                let f = resolve(&addr::$name, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: `f` is the address dlsym returned for this very symbol, whose C
                // signature is the one declared here.
                unsafe {
                    let f: unsafe extern "C" fn($($ty),*) -> $ret = core::mem::transmute(f);
                    f($($arg),*)
                }
            }
        )*
    };
}

real_functions! {
    fn pthread_create(t: *mut pthread_t, attr: *const pthread_attr_t, start: StartRoutine, arg: *mut c_void) -> c_int;
    fn pthread_join(t: pthread_t, retval: *mut *mut c_void) -> c_int;
    fn pthread_tryjoin_np(t: pthread_t, retval: *mut *mut c_void) -> c_int;
    fn pthread_detach(t: pthread_t) -> c_int;
    fn thrd_join(t: pthread_t, res: *mut c_int) -> c_int;
    fn pthread_self() -> pthread_t;
    fn exit(status: c_int) -> !;
    fn fork() -> pid_t;
    fn posix_spawn(pid: *mut pid_t, path: *const c_char, actions: *const libc::posix_spawn_file_actions_t, attr: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn posix_spawnp(pid: *mut pid_t, file: *const c_char, actions: *const libc::posix_spawn_file_actions_t, attr: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn system(command: *const c_char) -> c_int;
    fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fn pclose(stream: *mut libc::FILE) -> c_int;
    fn __libc_start_main(main: MainFn, argc: c_int, argv: *mut *mut c_char, init: usize, fini: usize, rtld_fini: usize, stack_end: *mut c_void) -> c_int;
    fn _exit(status: c_int) -> !;
    fn _Exit(status: c_int) -> !;

    fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int;
    fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int;
    fn pthread_mutex_timedlock(m: *mut pthread_mutex_t, abstime: *const timespec) -> c_int;
    fn pthread_mutex_clocklock(m: *mut pthread_mutex_t, clock: clockid_t, abstime: *const timespec) -> c_int;
    fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int;

    fn pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int;
    fn pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int;
    fn pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int;
    fn pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int;
    fn pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, abstime: *const timespec) -> c_int;
    fn pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, abstime: *const timespec) -> c_int;
    fn pthread_rwlock_clockrdlock(l: *mut pthread_rwlock_t, clock: clockid_t, abstime: *const timespec) -> c_int;
    fn pthread_rwlock_clockwrlock(l: *mut pthread_rwlock_t, clock: clockid_t, abstime: *const timespec) -> c_int;
    fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int;

    fn pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int;
    fn pthread_cond_timedwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, abstime: *const timespec) -> c_int;
    fn pthread_cond_clockwait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, clock: clockid_t, abstime: *const timespec) -> c_int;
    fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int;
    fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int;

    fn pthread_barrier_init(b: *mut pthread_barrier_t, attr: *const pthread_barrierattr_t, count: c_uint) -> c_int;
    fn pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int;
    fn pthread_once(o: *mut pthread_once_t, init: InitRoutine) -> c_int;

    fn sem_init(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int;
    fn sem_wait(s: *mut sem_t) -> c_int;
    fn sem_timedwait(s: *mut sem_t, abstime: *const timespec) -> c_int;
    fn sem_clockwait(s: *mut sem_t, clock: clockid_t, abstime: *const timespec) -> c_int;
    fn sem_trywait(s: *mut sem_t) -> c_int;
    fn sem_post(s: *mut sem_t) -> c_int;

    fn sched_yield() -> c_int;
    fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int;
    fn clock_nanosleep(clock: clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec) -> c_int;
    fn usleep(usec: useconds_t) -> c_int;
    fn sleep(secs: c_uint) -> c_uint;
    fn clock_gettime(clock: clockid_t, ts: *mut timespec) -> c_int;
    fn gettimeofday(tv: *mut timeval, tz: *mut c_void) -> c_int;
    fn time(t: *mut time_t) -> time_t;

    fn getrandom(buf: *mut c_void, len: size_t, flags: c_uint) -> ssize_t;
    fn getentropy(buf: *mut c_void, len: size_t) -> c_int;
    fn rand() -> c_int;
    fn random() -> c_long;
    fn rand_r(seed: *mut c_uint) -> c_int;
    fn srand(seed: c_uint) -> ();
    fn srandom(seed: c_uint) -> ();

    fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    fn openat(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    fn openat64(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
    fn __open_2(path: *const c_char, flags: c_int) -> c_int;
    fn __open64_2(path: *const c_char, flags: c_int) -> c_int;
    fn __openat_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn __openat64_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE;
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE;

    fn sysconf(name: c_int) -> c_long;
    fn sched_getcpu() -> c_int;
    fn get_nprocs() -> c_int;
    fn get_nprocs_conf() -> c_int;
    fn sched_getaffinity(pid: pid_t, size: size_t, mask: *mut cpu_set_t) -> c_int;
    fn sched_setaffinity(pid: pid_t, size: size_t, mask: *const cpu_set_t) -> c_int;
    fn pthread_getaffinity_np(t: pthread_t, size: size_t, mask: *mut cpu_set_t) -> c_int;
    fn pthread_setaffinity_np(t: pthread_t, size: size_t, mask: *const cpu_set_t) -> c_int;

    fn sigprocmask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int;
    fn sigsuspend(mask: *const sigset_t) -> c_int;
    fn pause() -> c_int;
    fn sigwaitinfo(set: *const sigset_t, info: *mut libc::siginfo_t) -> c_int;
    fn sigtimedwait(set: *const sigset_t, info: *mut libc::siginfo_t, timeout: *const timespec) -> c_int;
    fn sigwait(set: *const sigset_t, sig: *mut c_int) -> c_int;
    fn signalfd(fd: c_int, mask: *const sigset_t, flags: c_int) -> c_int;
    fn pthread_sigmask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int;
    fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
    fn kill(pid: pid_t, sig: c_int) -> c_int;

    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    fn getaddrinfo(node: *const c_char, service: *const c_char, hints: *const libc::addrinfo, res: *mut *mut libc::addrinfo) -> c_int;
    fn getnameinfo(addr: *const libc::sockaddr, addrlen: libc::socklen_t, host: *mut c_char, hostlen: libc::socklen_t, serv: *mut c_char, servlen: libc::socklen_t, flags: c_int) -> c_int;
    fn gethostbyname2(name: *const c_char, family: c_int) -> *mut libc::hostent;
    fn gethostbyname2_r(name: *const c_char, family: c_int, ret: *mut libc::hostent, buf: *mut c_char, buflen: size_t, result: *mut *mut libc::hostent, h_errnop: *mut c_int) -> c_int;
    fn socketpair(domain: c_int, ty: c_int, protocol: c_int, sv: *mut c_int) -> c_int;
    fn pipe(fds: *mut c_int) -> c_int;
    fn pipe2(fds: *mut c_int, flags: c_int) -> c_int;
    fn eventfd(initval: c_uint, flags: c_int) -> c_int;
    fn timerfd_create(clock: clockid_t, flags: c_int) -> c_int;
    fn timerfd_settime(fd: c_int, flags: c_int, new: *const libc::itimerspec, old: *mut libc::itimerspec) -> c_int;
    fn timerfd_gettime(fd: c_int, current: *mut libc::itimerspec) -> c_int;
    fn setrlimit(resource: c_int, limit: *const libc::rlimit) -> c_int;
    fn getrlimit(resource: c_int, limit: *mut libc::rlimit) -> c_int;
    fn prlimit(pid: pid_t, resource: c_int, new: *const libc::rlimit, old: *mut libc::rlimit) -> c_int;
    fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    fn accept4(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int;
    fn connect(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    fn getsockname(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: libc::socklen_t) -> c_int;
    fn getpeername(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int;
    fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, addr: *mut libc::sockaddr, alen: *mut libc::socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t;
    fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, len: size_t, flags: c_int, addr: *const libc::sockaddr, alen: libc::socklen_t) -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t;
    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(fd: c_int, to: c_int) -> c_int;
    fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int;
    fn flock(fd: c_int, operation: c_int) -> c_int;
    fn lockf(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int;
    fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int;
    fn ppoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *mut timeval) -> c_int;
    fn pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn epoll_wait(ep: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int;
    fn epoll_pwait(ep: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int;
}
