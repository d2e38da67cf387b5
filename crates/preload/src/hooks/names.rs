//! Name lookups (`getaddrinfo`) answered by the scheduler (see `Op::NameLookup`). glibc's
//! resolver behind the real function asks name servers through libc-internal socket calls that
//! no hook sees, so a traced thread asks dara instead: in a recording dara asks the machine's
//! resolver and records the answer, a replay gives the recorded one, a closed world (a search)
//! answers from the hosts file. The list is built here as glibc builds it, so the program frees
//! it with glibc's own `freeaddrinfo`: each node one `malloc` block holding the `addrinfo` and
//! its address right behind it, the canonical name a block of its own on the first node.
use core::mem::size_of;

use dara_abi::name_lookup::{LookupAnswer, LookupQuery};
use dara_abi::request::{Addr, Request};
use libc::{addrinfo, c_char, c_int};

use super::set_errno;
use crate::gate::Gated;
use crate::real;

#[no_mangle]
pub unsafe extern "C" fn getaddrinfo(node: *const c_char, service: *const c_char, hints: *const addrinfo, res: *mut *mut addrinfo) -> c_int {
    let Some(gate) = Gated::enter() else {
        // SAFETY: the program's own arguments, forwarded unchanged.
        return unsafe { real::getaddrinfo(node, service, hints, res) };
    };
    let mut query = LookupQuery { node: node as u64, service: service as u64, ..LookupQuery::default() };
    // SAFETY: `hints` is null or the program's valid addrinfo (getaddrinfo's contract).
    if let Some(hints) = unsafe { hints.as_ref() } {
        query.flags = hints.ai_flags;
        query.family = hints.ai_family;
        query.socktype = hints.ai_socktype;
        query.protocol = hints.ai_protocol;
        query.has_hints = 1;
    }
    let answer = ask(&gate, &query);
    if answer.status != 0 {
        if answer.status == libc::EAI_SYSTEM {
            set_errno(answer.errno);
        }
        return answer.status;
    }
    // glibc's nodes carry the hints' flags, its defaults without hints.
    let flags = if query.has_hints != 0 { query.flags } else { libc::AI_V4MAPPED | libc::AI_ADDRCONFIG };
    // SAFETY: `res` is the program's out-parameter (getaddrinfo's contract).
    match unsafe { build_list(&answer, flags) } {
        Some(list) => {
            // SAFETY: as above.
            unsafe { *res = list };
            0
        }
        None => libc::EAI_MEMORY,
    }
}

/// `getnameinfo`: the host's name is asked of the scheduler unless the program wants a number
/// (the service, from the services file, is glibc's as before).
#[no_mangle]
pub unsafe extern "C" fn getnameinfo(addr: *const libc::sockaddr, addrlen: libc::socklen_t, host: *mut c_char, hostlen: libc::socklen_t, serv: *mut c_char, servlen: libc::socklen_t, flags: c_int) -> c_int {
    let asks_name = !host.is_null() && hostlen > 0 && flags & libc::NI_NUMERICHOST == 0 && !addr.is_null();
    let gate = match Gated::enter() {
        Some(gate) if asks_name => gate,
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => return unsafe { real::getnameinfo(addr, addrlen, host, hostlen, serv, servlen, flags) },
    };
    let mut query = LookupQuery { flags, has_hints: 1, ..LookupQuery::default() };
    let len = (addrlen as usize).min(query.address.len());
    // SAFETY: the program's socket address of `addrlen` bytes (getnameinfo's contract).
    unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, query.address.as_mut_ptr(), len) };
    query.address_len = len as u32;
    let answer = ask(&gate, &query);
    if answer.status != 0 {
        if answer.status == libc::EAI_SYSTEM {
            set_errno(answer.errno);
        }
        return answer.status;
    }
    let name = &answer.canonical[..(answer.canonical_len as usize).min(answer.canonical.len())];
    if name.len() >= hostlen as usize {
        return libc::EAI_OVERFLOW;
    }
    // SAFETY: `host` holds `hostlen` bytes (the contract), more than the name and its NUL.
    unsafe {
        core::ptr::copy_nonoverlapping(name.as_ptr(), host as *mut u8, name.len());
        *host.add(name.len()) = 0;
    }
    if serv.is_null() || servlen == 0 {
        return 0;
    }
    // SAFETY: as above; only the service is asked for.
    unsafe { real::getnameinfo(addr, addrlen, core::ptr::null_mut(), 0, serv, servlen, flags) }
}

/// Posts `query` and returns the scheduler's answer.
pub(super) fn ask(gate: &Gated, query: &LookupQuery) -> LookupAnswer {
    let mut answer = LookupAnswer::default();
    gate.post(Request::NameLookup { query: Addr(query as *const LookupQuery as u64), answer: Addr(&mut answer as *mut LookupAnswer as u64) });
    // SAFETY: the scheduler wrote the answer into this very record (process_vm_writev) before
    // the grant; read it afresh rather than let the compiler assume it still holds the default.
    unsafe { core::ptr::read_volatile(&answer) }
}

/// The answer's entries as a list glibc's `freeaddrinfo` frees; None (nothing left allocated)
/// if memory ran out or the answer holds no entry.
///
/// # Safety
/// Calls libc's allocator; no other precondition.
unsafe fn build_list(answer: &LookupAnswer, flags: c_int) -> Option<*mut addrinfo> {
    let count = (answer.count as usize).min(answer.entries.len());
    let mut head: *mut addrinfo = core::ptr::null_mut();
    for entry in answer.entries[..count].iter().rev() {
        let address_len = (entry.address_len as usize).min(entry.address.len());
        // SAFETY: malloc of a positive size; checked for null below.
        let node = unsafe { libc::malloc(size_of::<addrinfo>() + address_len) } as *mut addrinfo;
        if node.is_null() {
            // SAFETY: `head` is a list built here of glibc-shaped nodes.
            unsafe { free_list(head) };
            return None;
        }
        // SAFETY: `node` holds an addrinfo and `address_len` bytes behind it.
        unsafe {
            let address = node.add(1) as *mut u8;
            core::ptr::copy_nonoverlapping(entry.address.as_ptr(), address, address_len);
            node.write(addrinfo {
                ai_flags: flags,
                ai_family: entry.family,
                ai_socktype: entry.socktype,
                ai_protocol: entry.protocol,
                ai_addrlen: address_len as libc::socklen_t,
                ai_addr: address as *mut libc::sockaddr,
                ai_canonname: core::ptr::null_mut(),
                ai_next: head,
            });
        }
        head = node;
    }
    if head.is_null() {
        return None;
    }
    let canonical_len = (answer.canonical_len as usize).min(answer.canonical.len() - 1);
    if canonical_len > 0 {
        // SAFETY: malloc of a positive size; checked for null below.
        let name = unsafe { libc::malloc(canonical_len + 1) } as *mut u8;
        if name.is_null() {
            // SAFETY: `head` is a list built here.
            unsafe { free_list(head) };
            return None;
        }
        // SAFETY: `name` holds canonical_len + 1 bytes; `head` is the first node built here.
        unsafe {
            core::ptr::copy_nonoverlapping(answer.canonical.as_ptr(), name, canonical_len);
            *name.add(canonical_len) = 0;
            (*head).ai_canonname = name as *mut c_char;
        }
    }
    Some(head)
}

/// Frees a list [`build_list`] made (its nodes carry no canonical name yet).
///
/// # Safety
/// `head` is null or a list of nodes from [`build_list`].
unsafe fn free_list(mut head: *mut addrinfo) {
    while !head.is_null() {
        // SAFETY: each node is one malloc block (see the function contract).
        unsafe {
            let next = (*head).ai_next;
            libc::free(head as *mut libc::c_void);
            head = next;
        }
    }
}
