//! What the dynamic loader's cache (`/etc/ld.so.cache`) was when a trace was recorded. With ASLR
//! off, where every shared library of a program is mapped follows from what the loader mapped
//! before it, the cache first: installing or removing a package rewrites the cache, a cache that
//! grows past a page boundary moves every library by a page, and a replay made after that sees
//! other addresses from its first step (`DIVERGED at step 1: ... futex-wake 0x7ffff7ea2a4c>; the
//! run offered <... futex-wake 0x7ffff7ea1a4c>`). The trace keeps the cache's size and a digest,
//! so that a replay that diverges can say this is why.
use serde::{Deserialize, Serialize};

/// The loader's cache file.
pub const PATH: &str = "/etc/ld.so.cache";

/// The cache's size and content digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryCache {
    pub bytes: u64,
    pub digest: u64,
}

impl LibraryCache {
    /// The machine's cache now; None when there is none (a system without one, a container).
    pub fn now() -> Option<LibraryCache> {
        std::fs::read(PATH).ok().map(|b| LibraryCache::of(&b))
    }

    pub fn of(content: &[u8]) -> LibraryCache {
        LibraryCache { bytes: content.len() as u64, digest: crate::trace::fnv1a64(content) }
    }
}

/// One line for a replay that diverged, when the cache the trace recorded is not the machine's
/// now; None when they are the same (or either is unknown).
pub fn divergence_note(recorded: Option<LibraryCache>, now: Option<LibraryCache>) -> Option<String> {
    let (then, now) = (recorded?, now?);
    if then == now {
        return None;
    }
    let size = if then.bytes == now.bytes { format!("{} bytes both times, other content", now.bytes) } else { format!("{} bytes then, {} now", then.bytes, now.bytes) };
    Some(format!(
        "note: the replay may also differ because the dynamic loader's cache ({PATH}) changed since the recording ({size}: a package was installed or removed), which can move every shared library of the program to other addresses; record again on this machine as it is now"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speaks_only_of_a_cache_that_changed() {
        let then = LibraryCache::of(b"glibc-ld.so.cache1.1 a");
        assert_eq!(divergence_note(Some(then), Some(then)), None);
        assert_eq!(divergence_note(None, Some(then)), None, "a trace that recorded none");
        let grown = divergence_note(Some(then), Some(LibraryCache::of(b"glibc-ld.so.cache1.1 ab"))).expect("a grown cache");
        assert!(grown.contains("22 bytes then, 23 now") && grown.contains("/etc/ld.so.cache") && !grown.contains('\n'), "{grown}");
        let same_size = divergence_note(Some(then), Some(LibraryCache::of(b"glibc-ld.so.cache1.1 b"))).expect("other content");
        assert!(same_size.contains("other content"), "{same_size}");
    }
}
