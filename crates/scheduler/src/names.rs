//! Name lookups the scheduler answers for the program (`Op::NameLookup`, docs/outside.md "Name
//! lookups"): the question read out of the asking thread, the machine's resolver asked from
//! dara's own process, and whether a question needs anything beyond the machine itself (a
//! closed world answers only what the hosts file names: anything else would come from a name
//! server outside dara).
use std::ffi::{CStr, CString};

use dara_abi::name_lookup::LookupQuery;
use dara_model::name_lookup::{Hints, NameAnswer, NameEntry, NameQuery};

use crate::procfs;

/// The question at `query` in process `pid` (a [`LookupQuery`] and the strings it points to);
/// None if its memory cannot be read.
pub fn read_question(pid: u32, query: u64) -> Option<NameQuery> {
    let mut bytes = [0u8; std::mem::size_of::<LookupQuery>()];
    if procfs::read_memory(pid, query, &mut bytes).ok()? != bytes.len() {
        return None;
    }
    let raw = LookupQuery::from_bytes(&bytes)?;
    let text = |addr: u64| if addr == 0 { Some(None) } else { procfs::c_string_of(pid, addr).map(Some) };
    let hints = (raw.has_hints != 0).then_some(Hints { flags: raw.flags, family: raw.family, socktype: raw.socktype, protocol: raw.protocol });
    let address = (raw.address_len > 0).then(|| raw.address[..(raw.address_len as usize).min(raw.address.len())].to_vec());
    Some(NameQuery { node: text(raw.node)?, service: text(raw.service)?, hints, address })
}

/// Asks the machine's resolver (glibc's `getaddrinfo`, or `getnameinfo` for an address, in
/// dara's process, with the program's question) and returns its answer as a trace keeps it.
pub fn resolve(query: &NameQuery) -> NameAnswer {
    if let Some(address) = &query.address {
        return name_of(address, query.hints.map_or(0, |h| h.flags));
    }
    let unanswerable = |status| NameAnswer { status, ..NameAnswer::default() };
    let Ok(node) = query.node.as_deref().map(CString::new).transpose() else { return unanswerable(libc::EAI_NONAME) };
    let Ok(service) = query.service.as_deref().map(CString::new).transpose() else { return unanswerable(libc::EAI_SERVICE) };
    // SAFETY: an all-zero addrinfo is a valid "no hints" value; the fields are set below.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    if let Some(h) = query.hints {
        (hints.ai_flags, hints.ai_family, hints.ai_socktype, hints.ai_protocol) = (h.flags, h.family, h.socktype, h.protocol);
    }
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    let as_ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    let hints_ptr = if query.hints.is_some() { &hints as *const libc::addrinfo } else { std::ptr::null() };
    // SAFETY: NUL-terminated strings or null, a valid hints record or null, an out-pointer.
    let status = unsafe { libc::getaddrinfo(as_ptr(&node), as_ptr(&service), hints_ptr, &mut list) };
    if status != 0 {
        return NameAnswer { status, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0), ..NameAnswer::default() };
    }
    let mut answer = NameAnswer::default();
    let mut at = list;
    // SAFETY: `list` is getaddrinfo's list, walked to its end and freed once below.
    while let Some(entry) = unsafe { at.as_ref() } {
        if answer.canonical.is_none() && !entry.ai_canonname.is_null() {
            // SAFETY: glibc's canonical name is a NUL-terminated string.
            answer.canonical = Some(unsafe { CStr::from_ptr(entry.ai_canonname) }.to_string_lossy().into_owned());
        }
        // SAFETY: ai_addr holds ai_addrlen bytes.
        let address = unsafe { std::slice::from_raw_parts(entry.ai_addr as *const u8, entry.ai_addrlen as usize) }.to_vec();
        answer.entries.push(NameEntry { family: entry.ai_family, socktype: entry.ai_socktype, protocol: entry.ai_protocol, address });
        at = entry.ai_next;
    }
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(list) };
    answer
}

/// `getnameinfo`'s host name for the socket address `address` with the `NI_*` `flags`.
fn name_of(address: &[u8], flags: i32) -> NameAnswer {
    let mut storage = [0u8; std::mem::size_of::<libc::sockaddr_storage>()];
    let len = address.len().min(storage.len());
    storage[..len].copy_from_slice(&address[..len]);
    let mut host = [0 as libc::c_char; libc::NI_MAXHOST as usize];
    // SAFETY: a socket address of `len` bytes, a host buffer of its size, no service asked for.
    let status = unsafe { libc::getnameinfo(storage.as_ptr().cast(), len as libc::socklen_t, host.as_mut_ptr(), host.len() as libc::socklen_t, std::ptr::null_mut(), 0, flags) };
    if status != 0 {
        return NameAnswer { status, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0), ..NameAnswer::default() };
    }
    // SAFETY: getnameinfo wrote a NUL-terminated name into `host`.
    let name = unsafe { CStr::from_ptr(host.as_ptr()) }.to_string_lossy().into_owned();
    NameAnswer { canonical: Some(name), ..NameAnswer::default() }
}

/// Whether the machine answers `query` by itself: no name (a service or a passive address), a
/// numeric address, `localhost` and the machine's own name (which systemd's `myhostname` answers
/// where the hosts file does not), or a name the hosts file lists. Anything else goes to a name
/// server.
pub fn answered_locally(query: &NameQuery) -> bool {
    if let Some(address) = &query.address {
        return address_answered_locally(address, query.hints.map_or(0, |h| h.flags));
    }
    let Some(node) = query.node.as_deref() else { return true };
    // A numeric IPv6 address may carry a zone (`fe80::1%eth0`).
    let bare = node.split('%').next().unwrap_or(node);
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = node.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") || nix::unistd::gethostname().is_ok_and(|own| own.to_string_lossy().eq_ignore_ascii_case(&name)) {
        return true;
    }
    std::fs::read_to_string("/etc/hosts").is_ok_and(|hosts| hosts_file_names(&hosts, node))
}

/// Whether the machine names `address` by itself: asked for a number (`NI_NUMERICHOST`), a
/// loopback address, or one the hosts file lists.
fn address_answered_locally(address: &[u8], flags: i32) -> bool {
    if flags & libc::NI_NUMERICHOST != 0 {
        return true;
    }
    let Some(ip) = dara_model::name_lookup::address_of(address).map(|a| a.ip()) else { return true };
    ip.is_loopback() || std::fs::read_to_string("/etc/hosts").is_ok_and(|hosts| hosts_file_lists(&hosts, ip))
}

/// Whether the hosts file text `hosts` has a line for the address `ip`.
fn hosts_file_lists(hosts: &str, ip: std::net::IpAddr) -> bool {
    hosts.lines().filter_map(|line| line.split('#').next()?.split_whitespace().next()).any(|first| first.parse::<std::net::IpAddr>() == Ok(ip))
}

/// Whether the hosts file text `hosts` gives an address for `name` (case does not matter).
fn hosts_file_names(hosts: &str, name: &str) -> bool {
    let name = name.trim_end_matches('.');
    hosts.lines().map(|line| line.split('#').next().unwrap_or("")).any(|line| line.split_whitespace().skip(1).any(|alias| alias.eq_ignore_ascii_case(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_file_names_its_aliases_and_not_its_addresses_or_comments() {
        let hosts = "127.0.0.1\tlocalhost\n::1 localhost ip6-localhost # ip6-loopback\n# 10.0.0.1 db\n10.0.0.2 cache.internal cache\n";
        assert!(hosts_file_names(hosts, "localhost"));
        assert!(hosts_file_names(hosts, "LocalHost."));
        assert!(hosts_file_names(hosts, "cache"));
        assert!(!hosts_file_names(hosts, "ip6-loopback"), "a comment");
        assert!(!hosts_file_names(hosts, "db"), "a commented-out line");
        assert!(!hosts_file_names(hosts, "127.0.0.1"), "an address is no alias");
        assert!(hosts_file_lists(hosts, "10.0.0.2".parse().unwrap()));
        assert!(!hosts_file_lists(hosts, "10.0.0.1".parse().unwrap()), "a commented-out line");
    }

    #[test]
    fn numeric_addresses_and_no_name_need_no_name_server() {
        for node in [None, Some("127.0.0.1"), Some("::1"), Some("fe80::1%lo")] {
            assert!(answered_locally(&NameQuery { node: node.map(String::from), service: Some("80".into()), hints: None, address: None }), "{node:?}");
        }
        assert!(!answered_locally(&NameQuery { node: Some("no-such-host.invalid".into()), service: None, hints: None, address: None }));
    }

    #[test]
    fn the_resolver_answers_a_numeric_address_with_its_port() {
        let hints = Some(Hints { flags: libc::AI_NUMERICHOST, family: libc::AF_INET, socktype: libc::SOCK_STREAM, protocol: 0 });
        let answer = resolve(&NameQuery { node: Some("127.0.0.1".into()), service: Some("8080".into()), hints, address: None });
        assert_eq!(answer.status, 0);
        assert_eq!(answer.entries.len(), 1);
        assert_eq!(answer.entries[0].address[2..8], [0x1f, 0x90, 127, 0, 0, 1]);
        let failed = resolve(&NameQuery { node: Some("not an address".into()), service: None, hints, address: None });
        assert_eq!(failed.status, libc::EAI_NONAME);
    }
}
