//! The older lookups, `gethostbyname`, `gethostbyname2` and their `_r` forms, answered like
//! `getaddrinfo` (see `names.rs`): one `NameLookup` step for the name and family, with a
//! canonical name asked for, turned into a `hostent`. What glibc's resolver would give and this
//! does not: the aliases of a hosts-file entry (the list is empty), and the order of addresses
//! is `getaddrinfo`'s (RFC 3484) rather than the name service's.
use core::cell::UnsafeCell;
use core::mem::{align_of, size_of};

use dara_abi::name_lookup::{LookupAnswer, LookupQuery};
use libc::{c_char, c_int, hostent, size_t};

use super::names::ask;
use crate::gate::Gated;
use crate::real;

extern "C" {
    /// glibc's per-thread `h_errno`.
    fn __h_errno_location() -> *mut c_int;
}

/// `<netdb.h>`'s `h_errno` values.
const HOST_NOT_FOUND: c_int = 1;
const TRY_AGAIN: c_int = 2;
const NO_RECOVERY: c_int = 3;
const NO_DATA: c_int = 4;

#[no_mangle]
pub unsafe extern "C" fn gethostbyname(name: *const c_char) -> *mut hostent {
    // SAFETY: the program's own argument, forwarded.
    unsafe { gethostbyname2(name, libc::AF_INET) }
}

#[no_mangle]
pub unsafe extern "C" fn gethostbyname2(name: *const c_char, family: c_int) -> *mut hostent {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::gethostbyname2(name, family) };
    };
    // glibc's answer also lives in storage of its own, overwritten by the next call.
    let storage = &STATIC_HOST;
    let mut result = core::ptr::null_mut();
    let mut error = 0;
    // SAFETY: the process-wide storage, not reentrant (as glibc's is not: a program that calls
    // gethostbyname from two threads at once races on glibc's storage too).
    unsafe { lookup_into(&gate, name, family, storage.host.get(), storage.buffer.get() as *mut c_char, HOST_BUFFER, &mut result, &mut error) };
    // SAFETY: glibc's h_errno of this thread.
    unsafe { *__h_errno_location() = error };
    result
}

#[no_mangle]
pub unsafe extern "C" fn gethostbyname_r(name: *const c_char, ret: *mut hostent, buf: *mut c_char, buflen: size_t, result: *mut *mut hostent, h_errnop: *mut c_int) -> c_int {
    // SAFETY: the program's own arguments, forwarded.
    unsafe { gethostbyname2_r(name, libc::AF_INET, ret, buf, buflen, result, h_errnop) }
}

#[no_mangle]
pub unsafe extern "C" fn gethostbyname2_r(
    name: *const c_char,
    family: c_int,
    ret: *mut hostent,
    buf: *mut c_char,
    buflen: size_t,
    result: *mut *mut hostent,
    h_errnop: *mut c_int,
) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::gethostbyname2_r(name, family, ret, buf, buflen, result, h_errnop) };
    };
    // SAFETY: the program's storage and out-parameters (gethostbyname_r's contract).
    unsafe { lookup_into(&gate, name, family, ret, buf, buflen, &mut *result, &mut *h_errnop) }
}

/// Room for `gethostbyname`'s own answer: the name and up to 32 addresses with their pointers.
const HOST_BUFFER: usize = 2048;

/// `gethostbyname`'s storage (one per process, as glibc's).
struct HostStorage {
    host: UnsafeCell<hostent>,
    buffer: UnsafeCell<[u64; HOST_BUFFER / 8]>,
}

// SAFETY: written only by gethostbyname(2), which programs may not call from two threads at
// once (its result is process-wide storage in glibc as here).
unsafe impl Sync for HostStorage {}

static STATIC_HOST: HostStorage = HostStorage {
    host: UnsafeCell::new(hostent { h_name: core::ptr::null_mut(), h_aliases: core::ptr::null_mut(), h_addrtype: 0, h_length: 0, h_addr_list: core::ptr::null_mut() }),
    buffer: UnsafeCell::new([0; HOST_BUFFER / 8]),
};

/// Looks `name` up for `family` and fills `ret` and `buf` as `gethostbyname2_r` does: 0 with
/// `*result` set, 0 with `*result` null and `*h_errno` saying why, `EAGAIN` for a temporary
/// failure, `ERANGE` when `buf` is too small.
///
/// # Safety
/// `name` is a C string; `ret` and `buflen` bytes at `buf` are writable.
#[allow(clippy::too_many_arguments)]
unsafe fn lookup_into(gate: &Gated, name: *const c_char, family: c_int, ret: *mut hostent, buf: *mut c_char, buflen: size_t, result: &mut *mut hostent, h_errno: &mut c_int) -> c_int {
    *result = core::ptr::null_mut();
    let (length, offset) = match family {
        libc::AF_INET => (4, 4),
        libc::AF_INET6 => (16, 8),
        _ => {
            *h_errno = NO_RECOVERY;
            return libc::EAFNOSUPPORT;
        }
    };
    let query = LookupQuery { node: name as u64, flags: libc::AI_CANONNAME, family, socktype: libc::SOCK_STREAM, has_hints: 1, ..LookupQuery::default() };
    let answer = ask(gate, &query);
    match answer.status {
        0 => {}
        libc::EAI_AGAIN => {
            *h_errno = TRY_AGAIN;
            return libc::EAGAIN;
        }
        libc::EAI_NONAME => {
            *h_errno = HOST_NOT_FOUND;
            return 0;
        }
        libc::EAI_NODATA | EAI_ADDRFAMILY => {
            *h_errno = NO_DATA;
            return 0;
        }
        _ => {
            *h_errno = NO_RECOVERY;
            return 0;
        }
    }
    // SAFETY: the caller's storage (see the contract).
    match unsafe { lay_out(&answer, name, family, length, offset, ret, buf as *mut u8, buflen) } {
        Ok(()) => {
            *result = ret;
            0
        }
        Err(NoHost::NoAddress) => {
            *h_errno = NO_DATA;
            0
        }
        Err(NoHost::TooSmall) => {
            *h_errno = NETDB_INTERNAL;
            libc::ERANGE
        }
    }
}

/// Why an answer could not become a `hostent`.
enum NoHost {
    /// None of its addresses is of the family asked for.
    NoAddress,
    /// The caller's buffer is too small.
    TooSmall,
}

/// glibc's "no address of the family asked for" (`<netdb.h>`, not in the libc crate).
const EAI_ADDRFAMILY: c_int = -9;

/// `h_errno` for "see errno".
const NETDB_INTERNAL: c_int = -1;

/// Writes the answer into `ret` and `buf`: the address pointers (null-ended), an empty alias
/// list, the addresses, the name (the canonical one, else the one asked for).
///
/// # Safety
/// As for [`lookup_into`].
#[allow(clippy::too_many_arguments)]
unsafe fn lay_out(answer: &LookupAnswer, name: *const c_char, family: c_int, length: usize, offset: usize, ret: *mut hostent, buf: *mut u8, buflen: size_t) -> Result<(), NoHost> {
    let count = (answer.count as usize).min(answer.entries.len());
    let mut addresses = [[0u8; 16]; dara_abi::name_lookup::ANSWERS_MAX];
    let mut found = 0;
    for entry in &answer.entries[..count] {
        let bytes = &entry.address[offset..offset + length];
        if entry.family == family && entry.address_len as usize >= offset + length && !addresses[..found].iter().any(|a| &a[..length] == bytes) {
            addresses[found][..length].copy_from_slice(bytes);
            found += 1;
        }
    }
    if found == 0 {
        return Err(NoHost::NoAddress);
    }
    let canonical = &answer.canonical[..(answer.canonical_len as usize).min(answer.canonical.len())];
    // SAFETY: `name` is a C string (the contract).
    let asked = unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes();
    let shown = if canonical.is_empty() { asked } else { canonical };
    // Pointers first, aligned; then the addresses and the name.
    let start = buf.align_offset(align_of::<*mut c_char>());
    let pointers = start + (found + 1 + 1) * size_of::<*mut c_char>();
    let names_at = pointers + found * length;
    if names_at + shown.len() + 1 > buflen {
        return Err(NoHost::TooSmall);
    }
    // SAFETY: every write below is inside `buflen` bytes at `buf` (checked above), pointers at
    // an aligned offset.
    unsafe {
        let address_list = buf.add(start) as *mut *mut c_char;
        for (i, address) in addresses[..found].iter().enumerate() {
            let at = buf.add(pointers + i * length);
            core::ptr::copy_nonoverlapping(address.as_ptr(), at, length);
            *address_list.add(i) = at as *mut c_char;
        }
        *address_list.add(found) = core::ptr::null_mut();
        let aliases = address_list.add(found + 1);
        *aliases = core::ptr::null_mut();
        let name_at = buf.add(names_at);
        core::ptr::copy_nonoverlapping(shown.as_ptr(), name_at, shown.len());
        *name_at.add(shown.len()) = 0;
        ret.write(hostent { h_name: name_at as *mut c_char, h_aliases: aliases, h_addrtype: family, h_length: length as c_int, h_addr_list: address_list });
    }
    Ok(())
}
