//! `dlsym`: a library that looks up `pthread_create` itself gets dara's hook, not libc's, so the
//! thread it starts is traced like any other. jemalloc starts its background thread through
//! `dlsym(RTLD_NEXT, "pthread_create")`, past every symbol hook. redis-server's
//! `jemalloc_bg_thd` then ran outside dara: in parallel with the token holder, on real time, a
//! thread the scheduler never saw, and its wake-ups made one replay of a redis recording diverge.
//!
//! A library that *wraps* `pthread_create` (defines its own and reaches the next one through
//! `dlsym(RTLD_NEXT, ...)`, as the fixture `start_wrapper_block.c` does) is in the chain the hook
//! itself calls down (the preload's real `pthread_create` is that wrapper): it gets libc's answer,
//! or the chain would loop back into the hook.
//!
//! Every other lookup goes on to libc's `dlsym` by a *tail jump*, so libc finds the caller's own
//! return address on the stack: `RTLD_NEXT` keeps meaning "the objects after the caller's". For
//! the same reason the preload resolves its real functions through [`real::libc_dlsym`], never
//! through this hook (it would hand the preload its own `pthread_create`).
use libc::{c_char, c_void};

use crate::real::{self, LIBC_DLSYM};
use crate::region;

/// `dlsym(handle, name)`: dara's `pthread_create` for that name, libc's answer for any other.
///
/// # Safety
/// The contract of libc's `dlsym`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // On entry the return address is the caller's (handed to `replacement` as its third
    // argument); the two pushes and the 8 bytes keep the stack 16-byte aligned for the call, and
    // are undone before the tail jump.
    core::arch::naked_asm!(
        "mov rdx, [rsp]",
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

/// What dara answers instead of libc for `name`, looked up by code returning to `caller` (0:
/// nothing, libc answers). Also makes sure the tail jump has libc's `dlsym` to go to.
extern "C" fn replacement(_handle: *mut c_void, name: *const c_char, caller: usize) -> usize {
    real::libc_dlsym();
    if name.is_null() || region::header().is_none() {
        return 0;
    }
    // SAFETY: the caller passed dlsym a NUL-terminated name.
    let name = unsafe { core::ffi::CStr::from_ptr(name) };
    if name.to_bytes() != b"pthread_create" || wraps_pthread_create(caller) {
        return 0;
    }
    super::thread::pthread_create as *const () as usize
}

/// Whether the object whose code is at `caller` defines a `pthread_create` of its own (a wrapper
/// that looks up the next one), or is the preload itself. Rare (a lookup of `pthread_create`), so
/// it may ask the loader: `dladdr`, then the object's own symbol through a handle of it.
fn wraps_pthread_create(caller: usize) -> bool {
    let Some((base, file)) = object_of(caller) else { return false };
    if Some(base) == object_of(replacement as *const () as usize).map(|(b, _)| b) {
        return true;
    }
    // SAFETY: a NUL-terminated name the loader gave; RTLD_NOLOAD only finds an object loaded
    // already (the main program's name is not one: it is looked up by handle, never by name).
    let handle = unsafe { libc::dlopen(file, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: a live handle and a NUL-terminated name; the object is searched first.
    let found = unsafe { real::libc_dlsym()(handle, c"pthread_create".as_ptr()) } as usize;
    // SAFETY: the handle dlopen returned, released once.
    unsafe { libc::dlclose(handle) };
    found != 0 && object_of(found).map(|(b, _)| b) == Some(base)
}

/// The loaded object holding address `at`: its base address and file name.
fn object_of(at: usize) -> Option<(usize, *const c_char)> {
    // SAFETY: an all-zero Dl_info is a valid out-buffer.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and writes the live local.
    let found = unsafe { libc::dladdr(at as *const c_void, &mut info) } != 0;
    (found && !info.dli_fname.is_null()).then_some((info.dli_fbase as usize, info.dli_fname))
}
