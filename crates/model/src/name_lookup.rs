//! A program's name lookup (`getaddrinfo`) as a trace records it: the question (name, service,
//! hints) and the resolver's answer, which is an input from outside like a client's bytes — the
//! same name can resolve differently tomorrow, or in another order — so a recording keeps it and
//! a replay gives it back (docs/outside.md, "Name lookups"). Also the bytes both are stored as.
use dara_abi::name_lookup::{LookupAnswer, LookupEntry, ADDRESS_MAX, ANSWERS_MAX, CANONICAL_MAX};

/// What the program asked: `getaddrinfo(node, service, hints)`, or, with an `address`, the
/// host name of that socket address (`getnameinfo`; its `NI_*` flags in `hints.flags`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameQuery {
    pub node: Option<String>,
    pub service: Option<String>,
    pub hints: Option<Hints>,
    pub address: Option<Vec<u8>>,
}

/// `getaddrinfo`'s hints: `ai_flags`, `ai_family`, `ai_socktype`, `ai_protocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    pub flags: i32,
    pub family: i32,
    pub socktype: i32,
    pub protocol: i32,
}

/// What the resolver answered: `getaddrinfo`'s status (0 or an `EAI_*` code), `errno` with
/// `EAI_SYSTEM`, the canonical name if one was asked for, and the list's entries in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameAnswer {
    pub status: i32,
    pub errno: i32,
    pub canonical: Option<String>,
    pub entries: Vec<NameEntry>,
}

/// One `addrinfo` of the list: family, socket type, protocol and the socket address's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameEntry {
    pub family: i32,
    pub socktype: i32,
    pub protocol: i32,
    pub address: Vec<u8>,
}

impl NameQuery {
    /// The question as people read it: `"db.example" port "5432"`.
    pub fn describe(&self) -> String {
        if let Some(address) = &self.address {
            return format!("the name of {}", address_of(address).map_or_else(|| "an address".to_string(), |a| a.ip().to_string()));
        }
        let node = self.node.as_deref().map_or("no name".to_string(), |n| format!("{n:?}"));
        let service = self.service.as_deref().map(|s| format!(" service {s:?}")).unwrap_or_default();
        format!("{node}{service}")
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_text(&mut out, self.node.as_deref());
        put_text(&mut out, self.service.as_deref());
        match self.hints {
            None => out.push(0),
            Some(h) => {
                out.push(1);
                for v in [h.flags, h.family, h.socktype, h.protocol] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        match &self.address {
            None => out.push(0),
            Some(a) => {
                let len = a.len().min(ADDRESS_MAX);
                out.push(1 + len as u8);
                out.extend_from_slice(&a[..len]);
            }
        }
        out
    }

    /// The query [`NameQuery::to_bytes`] wrote; None for bytes that are no query.
    pub fn from_bytes(bytes: &[u8]) -> Option<NameQuery> {
        let mut r = Reader(bytes);
        let node = r.text()?;
        let service = r.text()?;
        let hints = match r.byte()? {
            0 => None,
            1 => Some(Hints { flags: r.int()?, family: r.int()?, socktype: r.int()?, protocol: r.int()? }),
            _ => return None,
        };
        let address = match r.byte()? as usize {
            0 => None,
            n if n - 1 <= ADDRESS_MAX => Some(r.take(n - 1)?.to_vec()),
            _ => return None,
        };
        r.0.is_empty().then_some(NameQuery { node, service, hints, address })
    }
}

impl NameAnswer {
    /// The answer as people read it: its addresses, or the failure.
    pub fn describe(&self) -> String {
        if self.status != 0 {
            return format!("lookup failed (EAI code {})", self.status);
        }
        let mut shown: Vec<String> = Vec::new();
        for entry in &self.entries {
            let address = address_of(&entry.address).map_or_else(|| "?".to_string(), |a| a.ip().to_string());
            if !shown.contains(&address) {
                shown.push(address);
            }
        }
        shown.join(", ")
    }

    /// The answer as the preload reads it (entries past [`ANSWERS_MAX`], address bytes past a
    /// `sockaddr_in6` and a canonical name past [`CANONICAL_MAX`] - 1 bytes are cut).
    pub fn to_record(&self) -> LookupAnswer {
        let mut record = LookupAnswer { status: self.status, errno: self.errno, ..LookupAnswer::default() };
        for (slot, entry) in record.entries.iter_mut().zip(&self.entries) {
            let len = entry.address.len().min(ADDRESS_MAX);
            *slot = LookupEntry { family: entry.family, socktype: entry.socktype, protocol: entry.protocol, address_len: len as u32, address: [0; ADDRESS_MAX] };
            slot.address[..len].copy_from_slice(&entry.address[..len]);
        }
        record.count = self.entries.len().min(ANSWERS_MAX) as u32;
        if let Some(name) = &self.canonical {
            let len = name.len().min(CANONICAL_MAX - 1);
            record.canonical[..len].copy_from_slice(&name.as_bytes()[..len]);
            record.canonical_len = len as u32;
        }
        record
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&self.errno.to_le_bytes());
        put_text(&mut out, self.canonical.as_deref());
        out.extend_from_slice(&(self.entries.len().min(ANSWERS_MAX) as u32).to_le_bytes());
        for e in self.entries.iter().take(ANSWERS_MAX) {
            for v in [e.family, e.socktype, e.protocol] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            let len = e.address.len().min(ADDRESS_MAX);
            out.push(len as u8);
            out.extend_from_slice(&e.address[..len]);
        }
        out
    }

    /// The answer [`NameAnswer::to_bytes`] wrote; None for bytes that are no answer.
    pub fn from_bytes(bytes: &[u8]) -> Option<NameAnswer> {
        let mut r = Reader(bytes);
        let (status, errno) = (r.int()?, r.int()?);
        let canonical = r.text()?;
        let count = r.int()? as u32 as usize;
        if count > ANSWERS_MAX {
            return None;
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let (family, socktype, protocol) = (r.int()?, r.int()?, r.int()?);
            let len = r.byte()? as usize;
            if len > ADDRESS_MAX {
                return None;
            }
            entries.push(NameEntry { family, socktype, protocol, address: r.take(len)?.to_vec() });
        }
        r.0.is_empty().then_some(NameAnswer { status, errno, canonical, entries })
    }
}

/// The IP address and port in a `sockaddr_in`/`sockaddr_in6`'s bytes.
pub fn address_of(bytes: &[u8]) -> Option<std::net::SocketAddr> {
    let inet = dara_abi::peer_address::InetAddress::parse(bytes)?;
    let ip: std::net::IpAddr = if inet.v4 { <[u8; 4]>::try_from(&inet.ip[..4]).ok()?.into() } else { inet.ip.into() };
    Some((ip, inet.port).into())
}

/// Optional text: 0xffff_ffff for none, else its length and bytes.
fn put_text(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        Some(t) => {
            out.extend_from_slice(&(t.len() as u32).to_le_bytes());
            out.extend_from_slice(t.as_bytes());
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn int(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn text(&mut self) -> Option<Option<String>> {
        let len = self.int()? as u32;
        if len == u32::MAX {
            return Some(None);
        }
        Some(Some(String::from_utf8(self.take(len as usize)?.to_vec()).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn localhost() -> NameAnswer {
        let v4 = [2, 0, 0, 80, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0].to_vec();
        let mut v6 = vec![10, 0, 0, 80, 0, 0, 0, 0];
        v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0, 0, 0, 0]);
        NameAnswer {
            status: 0,
            errno: 0,
            canonical: Some("localhost".into()),
            entries: vec![NameEntry { family: 10, socktype: 1, protocol: 6, address: v6 }, NameEntry { family: 2, socktype: 1, protocol: 6, address: v4 }],
        }
    }

    #[test]
    fn queries_and_answers_read_back_from_their_bytes() {
        let query = NameQuery { node: Some("db.example".into()), service: None, hints: Some(Hints { flags: 0x20, family: 0, socktype: 1, protocol: 0 }), address: None };
        assert_eq!(NameQuery::from_bytes(&query.to_bytes()), Some(query.clone()));
        let reverse = NameQuery { node: None, service: None, hints: Some(Hints { flags: 8, ..Hints::default() }), address: Some(localhost().entries[1].address.clone()) };
        assert_eq!(NameQuery::from_bytes(&reverse.to_bytes()), Some(reverse.clone()));
        assert_eq!(reverse.describe(), "the name of 127.0.0.1");
        assert_eq!(NameQuery::from_bytes(&NameQuery::default().to_bytes()), Some(NameQuery::default()));
        let answer = localhost();
        assert_eq!(NameAnswer::from_bytes(&answer.to_bytes()), Some(answer.clone()));
        let failed = NameAnswer { status: -2, ..NameAnswer::default() };
        assert_eq!(NameAnswer::from_bytes(&failed.to_bytes()), Some(failed));
        // Truncated or padded bytes are no answer.
        let bytes = answer.to_bytes();
        assert_eq!(NameAnswer::from_bytes(&bytes[..bytes.len() - 1]), None);
        assert_eq!(NameQuery::from_bytes(&[query.to_bytes(), vec![0]].concat()), None);
    }

    #[test]
    fn an_answer_is_shown_by_its_addresses_and_becomes_the_preload_s_record() {
        let answer = localhost();
        assert_eq!(answer.describe(), "::1, 127.0.0.1");
        let record = answer.to_record();
        assert_eq!((record.count, record.canonical_len), (2, 9));
        assert_eq!(&record.canonical[..9], b"localhost");
        assert_eq!((record.entries[1].family, record.entries[1].address_len), (2, 16));
        assert_eq!(&record.entries[1].address[4..8], &[127, 0, 0, 1]);
    }
}
