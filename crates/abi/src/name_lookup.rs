//! A name lookup the scheduler answers ([`Op::NameLookup`](crate::Op)): the question the preload
//! asks for a program's `getaddrinfo` — pointers to the program's name and service strings and
//! its hints, in a [`LookupQuery`] on the asking thread's stack — or for its `getnameinfo` (the
//! address to name, and its flags), and the [`LookupAnswer`] the
//! scheduler writes back next to it before the grant, a fixed-size record the preload turns into
//! the `addrinfo` list the program frees with `freeaddrinfo`.
//!
//! Both are plain `#[repr(C)]` records of 4-byte fields and byte arrays (no padding), read and
//! written across processes as bytes (`process_vm_readv`/`writev`).

/// Most addresses an answer carries (glibc returns one per address and socket type: a name
/// with two IPv4 and two IPv6 addresses and no socket type in the hints is 12 entries).
pub const ANSWERS_MAX: usize = 32;
/// Bytes of the canonical name kept (with its NUL); a longer one is cut.
pub const CANONICAL_MAX: usize = 256;
/// Bytes of a socket address entry (a `sockaddr_in6`, the largest INET one).
pub const ADDRESS_MAX: usize = 28;

/// The program's question, as the preload hands it over.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LookupQuery {
    /// The program's `node` and `service` strings (0: NULL).
    pub node: u64,
    pub service: u64,
    /// The program's hints (`ai_flags`, `ai_family`, `ai_socktype`, `ai_protocol`);
    /// `has_hints` 0: the program passed no hints.
    pub flags: i32,
    pub family: i32,
    pub socktype: i32,
    pub protocol: i32,
    pub has_hints: u32,
    /// Bytes of `address` used: 0 for a lookup of a name; else a reverse lookup
    /// (`getnameinfo`) of this socket address, `flags` holding the `NI_*` flags.
    pub address_len: u32,
    pub address: [u8; ADDRESS_MAX],
    /// Keeps the record free of padding.
    pub reserved: u32,
}

/// One address of an answer: an `addrinfo`'s family, socket type, protocol and address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupEntry {
    pub family: i32,
    pub socktype: i32,
    pub protocol: i32,
    /// Bytes of `address` used (16 for `sockaddr_in`, 28 for `sockaddr_in6`).
    pub address_len: u32,
    pub address: [u8; ADDRESS_MAX],
}

/// The scheduler's answer: `getaddrinfo`'s status and what its list held (for a reverse lookup:
/// `getnameinfo`'s status and the host's name as `canonical`, no entries).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupAnswer {
    /// `getaddrinfo`'s return value: 0 or an `EAI_*` code (negative in glibc).
    pub status: i32,
    /// `errno` with `EAI_SYSTEM`.
    pub errno: i32,
    /// Entries used.
    pub count: u32,
    /// Bytes of `canonical` used (no NUL); 0: no canonical name (`ai_canonname` NULL).
    pub canonical_len: u32,
    pub canonical: [u8; CANONICAL_MAX],
    pub entries: [LookupEntry; ANSWERS_MAX],
}

impl Default for LookupAnswer {
    fn default() -> LookupAnswer {
        let entry = LookupEntry { family: 0, socktype: 0, protocol: 0, address_len: 0, address: [0; ADDRESS_MAX] };
        LookupAnswer { status: 0, errno: 0, count: 0, canonical_len: 0, canonical: [0; CANONICAL_MAX], entries: [entry; ANSWERS_MAX] }
    }
}

impl LookupAnswer {
    /// The record's bytes, as written into the asking thread's memory.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: LookupAnswer is repr(C) of 4-byte integers and byte arrays with no padding
        // (checked by the size test below), so every byte of it is initialized.
        unsafe { core::slice::from_raw_parts((self as *const LookupAnswer).cast::<u8>(), core::mem::size_of::<LookupAnswer>()) }
    }
}

impl LookupQuery {
    /// The query read back from its bytes (`size_of::<LookupQuery>()` of them); None if short.
    pub fn from_bytes(bytes: &[u8]) -> Option<LookupQuery> {
        if bytes.len() < core::mem::size_of::<LookupQuery>() {
            return None;
        }
        // SAFETY: enough bytes for the record; every bit pattern is a valid LookupQuery (plain
        // integers); read_unaligned copes with any alignment of the buffer.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<LookupQuery>()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_have_no_padding() {
        assert_eq!(core::mem::size_of::<LookupQuery>(), 8 + 8 + 7 * 4 + ADDRESS_MAX);
        assert_eq!(core::mem::size_of::<LookupEntry>(), 4 * 4 + ADDRESS_MAX);
        assert_eq!(core::mem::size_of::<LookupAnswer>(), 4 * 4 + CANONICAL_MAX + ANSWERS_MAX * core::mem::size_of::<LookupEntry>());
    }

    #[test]
    fn a_query_reads_back_from_its_bytes() {
        let query = LookupQuery { node: 0x1000, service: 0, flags: 0x20, family: 10, socktype: 1, protocol: 6, has_hints: 1, address_len: 16, address: [7; ADDRESS_MAX], reserved: 0 };
        // SAFETY: a plain repr(C) record of integers without padding.
        let bytes = unsafe { core::slice::from_raw_parts((&query as *const LookupQuery).cast::<u8>(), core::mem::size_of::<LookupQuery>()) };
        assert_eq!(LookupQuery::from_bytes(bytes), Some(query));
        assert_eq!(LookupQuery::from_bytes(&bytes[1..]), None);
    }
}
