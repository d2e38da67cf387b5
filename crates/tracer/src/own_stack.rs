//! A process cloned into dara's own address space (`CLONE_VM`) on a stack of its own, with a few
//! words it shares with dara at the top of that stack: the PID namespace's init
//! ([`crate::pidns`]) and the keeper of a tree without one ([`crate::keeper`]).
//!
//! Such a process makes raw system calls only (a libc wrapper would write the cloning thread's
//! `errno`), allocates nothing and touches nothing of dara's memory but its shared words: a fork
//! would copy dara's page tables instead, and leave dara a copy-on-write fault on each page it
//! writes while the process lives. It starts with every signal blocked, so none of dara's
//! handlers ever runs on its stack.
use std::marker::PhantomData;

/// Bytes of the stack proper (its code calls a handful of system calls in one frame).
const STACK_BYTES: usize = 64 * 1024;

/// The stack and the shared words (a `T` at its top): mapped by dara, unmapped only once the
/// process is reaped (never while it may run on it).
#[derive(Debug)]
pub(crate) struct OwnStack<T> {
    base: *mut libc::c_void,
    _shared: PhantomData<T>,
}

// SAFETY: the mapping is owned by this value alone; any thread may unmap it, and the shared `T`
// is only reached through `&self` (its fields are atomics or plain values written once).
unsafe impl<T> Send for OwnStack<T> {}

impl<T> OwnStack<T> {
    /// Bytes the shared words take at the top, a multiple of 64 (so the stack's top is aligned).
    const SHARED_BYTES: usize = std::mem::size_of::<T>().div_ceil(64) * 64;
    const MAPPED_BYTES: usize = STACK_BYTES + Self::SHARED_BYTES;

    /// A stack with `shared` at its top.
    pub(crate) fn new(shared: T) -> std::io::Result<OwnStack<T>> {
        const { assert!(std::mem::align_of::<T>() <= 64) };
        // SAFETY: a fresh private anonymous mapping; nothing else is affected.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), Self::MAPPED_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let stack: OwnStack<T> = OwnStack { base, _shared: PhantomData };
        // SAFETY: the shared words' place lies inside the fresh mapping, aligned (see `place`).
        unsafe { stack.place().write(shared) };
        Ok(stack)
    }

    /// The shared words (None once the stack is released).
    pub(crate) fn shared(&self) -> Option<&T> {
        // SAFETY: while mapped, the place holds the T `new` wrote; it lives as long as the
        // mapping, which `&self` keeps.
        (!self.base.is_null()).then(|| unsafe { &*self.place() })
    }

    /// Where the shared `T` lives: the last `SHARED_BYTES` of the mapping.
    fn place(&self) -> *mut T {
        // SAFETY: inside the mapping, which is page-aligned; SHARED_BYTES is a multiple of 64.
        unsafe { self.base.cast::<u8>().add(STACK_BYTES).cast() }
    }

    /// Clones a process that runs `entry` on this stack, given a pointer to the shared words,
    /// with `flags` (`CLONE_VM` among them) and every signal blocked; its kernel pid.
    ///
    /// # Safety
    /// `entry` must make raw system calls only and never return (it exits), and the stack must
    /// stay mapped until the process is reaped.
    pub(crate) unsafe fn clone_process(&self, entry: extern "C" fn(*mut libc::c_void) -> libc::c_int, flags: i32) -> std::io::Result<u32> {
        // SAFETY: sigset_t is plain data that sigfillset initializes; pthread_sigmask writes the
        // old mask into a live local.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: the child runs `entry` on this stack in this address space (the caller's
        // contract); the stack's top lies below the shared words, 64-byte aligned.
        let pid = unsafe { libc::clone(entry, self.place().cast(), flags, self.place().cast()) };
        let clone_error = std::io::Error::last_os_error();
        // SAFETY: restoring the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        if pid == -1 {
            return Err(clone_error);
        }
        Ok(pid as u32)
    }

    /// Unmaps the stack. Call only once the process is reaped (or was never cloned).
    pub(crate) fn release(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made in `new`, used by no process any more (the caller's
            // contract); unmapped once.
            unsafe { libc::munmap(self.base, Self::MAPPED_BYTES) };
            self.base = std::ptr::null_mut();
        }
    }
}

/// Kills `pid`, dara's unreaped child cloned on an [`OwnStack`] (so never a recycled pid), and
/// reaps it.
pub(crate) fn kill_and_reap(pid: u32) {
    // SAFETY: plain integers.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
        libc::waitpid(pid as i32, std::ptr::null_mut(), libc::__WALL);
    }
}
