//! The exported symbols that shadow libc's, grouped by subject.
//!
//! Every hook is a thin `#[no_mangle] extern "C"` shim: if [`Gated::enter`](crate::gate::Gated)
//! succeeds (the process is traced, the thread has a slot, and it is not already inside the
//! preload) it calls one safe function of its module; otherwise it forwards to the real libc
//! function unchanged. The safe functions receive the program's pointers wrapped in [`Obj`],
//! whose constructor carries the one safety obligation: the pointer is what the program passed.
//!
//! For pthread-style functions the op's result *is* the return value (0 or an errno). The real
//! function runs only when the model granted with 0 and the call acquires or releases a real
//! object, so that the real object stays consistent with the model (and never blocks: the model
//! only grants an acquisition of an object that is free).
pub mod cond;
pub mod cookie;
pub mod cpu;
pub mod descriptors;
pub mod fifo;
pub mod hosts;
pub mod file_locks;
pub mod files;
pub mod fortify;
pub mod killpg;
pub mod limits;
pub mod mmsg;
pub mod names;
pub mod net;
pub mod output;
pub mod outside;
pub mod poll;
pub mod popen;
pub mod process;
pub mod random;
pub mod sandbox;
pub mod sem;
pub mod signal;
pub mod signal_entry;
pub mod signalfd;
pub mod sigwait;
pub mod sockopt;
pub mod spawn;
pub mod sync;
pub mod thread;
pub mod time;
pub mod timerfd;
pub mod transfer;
pub mod whole_grant;
pub mod write_now;

/// A pointer the program passed to a hooked libc function, forwarded unchanged to the real one.
pub struct Obj<T>(*mut T);

impl<T> Clone for Obj<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Obj<T> {}

impl<T> Obj<T> {
    /// # Safety
    /// `ptr` must satisfy the hooked function's contract for the duration of the call (for
    /// objects: valid and initialised as libc requires; optional arguments may be null).
    #[inline]
    pub unsafe fn new(ptr: *mut T) -> Obj<T> {
        Obj(ptr)
    }

    /// # Safety
    /// As for [`Obj::new`].
    #[inline]
    pub unsafe fn from_const(ptr: *const T) -> Obj<T> {
        Obj(ptr as *mut T)
    }

    /// The raw pointer, to hand to the real function.
    #[inline]
    pub fn ptr(self) -> *mut T {
        self.0
    }

    /// The address as the scheduler sees it (the object's identity).
    #[inline]
    pub fn addr(self) -> u64 {
        self.0 as u64
    }

    /// The object for reading, `None` if the program passed null.
    #[inline]
    pub fn get<'a>(self) -> Option<&'a T> {
        // SAFETY: by the constructor's contract a non-null pointer is valid for the call.
        unsafe { self.0.as_ref() }
    }

    /// The object for writing, `None` if the program passed null.
    #[inline]
    pub fn get_mut<'a>(self) -> Option<&'a mut T> {
        // SAFETY: by the constructor's contract a non-null pointer is valid (and writable, for
        // out-parameters) for the call.
        unsafe { self.0.as_mut() }
    }
}

pub use crate::real::set_errno;
