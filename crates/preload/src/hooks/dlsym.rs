//! `dlsym`: a library that looks up `pthread_create` itself gets dara's hook, not libc's, so the
//! thread it starts is traced like any other. jemalloc starts its background thread through
//! `dlsym(RTLD_NEXT, "pthread_create")`, past every symbol hook. redis-server's
//! `jemalloc_bg_thd` then ran outside dara: in parallel with the token holder, on real time, a
//! thread the scheduler never saw, and its wake-ups made one replay of a redis recording diverge.
//!
//! Every other lookup goes on to libc's `dlsym` by a *tail jump*, so libc finds the caller's own
//! return address on the stack: `RTLD_NEXT` keeps meaning "the objects after the caller's". For
//! the same reason the preload resolves its real functions through [`libc_dlsym`], never through
//! this hook (it would hand the preload its own `pthread_create`).
use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_void};

use crate::{region, sys};

/// libc's `dlsym`, the tail jump's target (0 until the first lookup resolves it).
static LIBC_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// `dlsym(handle, name)`: dara's `pthread_create` for that name, libc's answer for any other.
///
/// # Safety
/// The contract of libc's `dlsym`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // On entry the return address is the caller's; the two pushes and the 8 bytes keep the stack
    // 16-byte aligned for the call, and are undone before the tail jump.
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {replacement}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "jmp qword ptr [rip + {libc_dlsym}]",
        replacement = sym replacement,
        libc_dlsym = sym LIBC_DLSYM,
    )
}

/// What dara answers instead of libc for `name` (0: nothing, libc answers). Also makes sure the
/// tail jump has libc's `dlsym` to go to.
extern "C" fn replacement(_handle: *mut c_void, name: *const c_char) -> usize {
    libc_dlsym();
    if name.is_null() || region::header().is_none() {
        return 0;
    }
    // SAFETY: the caller passed dlsym a NUL-terminated name.
    let name = unsafe { core::ffi::CStr::from_ptr(name) };
    if name.to_bytes() == b"pthread_create" {
        return super::thread::pthread_create as *const () as usize;
    }
    0
}

/// libc's own `dlsym` (resolved once with `dlvsym`, which dara does not hook). Calling it from the
/// preload looks up relative to the preload.
pub fn libc_dlsym() -> unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void {
    let mut f = LIBC_DLSYM.load(Ordering::Acquire);
    if f == 0 {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: NUL-terminated static names; dlvsym has no other preconditions.
            f = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) } as usize;
            if f != 0 {
                break;
            }
        }
        if f == 0 {
            sys::die(b"dara: libc has no dlsym\n", 125);
        }
        LIBC_DLSYM.store(f, Ordering::Release);
    }
    // SAFETY: `f` is libc's dlsym, of this C signature.
    unsafe { core::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void>(f) }
}
