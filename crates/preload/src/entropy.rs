//! The process's application randomness: two deterministic streams seeded from the process
//! table entry the scheduler fills before granting `ProcessStart`.
//!
//! * the *entropy* stream answers `getrandom`, `getentropy`, reads of `/dev/urandom` and
//!   `/dev/random`, and `AT_RANDOM`;
//! * the *prng* stream answers `rand`/`random`; `srand`/`srandom` reseed it from the process seed
//!   and the given value, so `srand(42)` yields the same sequence every time within one dara seed
//!   and never disturbs the entropy stream.
//!
//! Draws are not scheduling points: only one thread of the whole system runs at a time, so the
//! order of draws is already fixed by the schedule. Word `i` of a stream is
//! `splitmix64(seed ^ i)`. Nothing here allocates or locks (used from the SIGSYS handler).
use core::sync::atomic::{AtomicU64, Ordering};

use dara_abi::splitmix64;

use crate::sys;

struct Stream {
    seed: AtomicU64,
    counter: AtomicU64,
}

impl Stream {
    const fn new() -> Stream {
        Stream {
            seed: AtomicU64::new(0),
            counter: AtomicU64::new(0),
        }
    }

    fn reseed(&self, seed: u64) {
        self.seed.store(seed, Ordering::Relaxed);
        self.counter.store(0, Ordering::Relaxed);
    }

    fn next_u64(&self) -> u64 {
        let i = self.counter.fetch_add(1, Ordering::Relaxed);
        splitmix64(self.seed.load(Ordering::Relaxed) ^ i)
    }

    fn fill(&self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

static ENTROPY: Stream = Stream::new();
static PRNG: Stream = Stream::new();
static PROCESS_SEED: AtomicU64 = AtomicU64::new(0);

/// Domain separators so the two streams never coincide.
const PRNG_DOMAIN: u64 = 0x7072_6e67_5f72_616e; // "prng_ran"
const SRAND_DOMAIN: u64 = 0x7372_616e_645f_7365; // "srand_se"
const RAND_R_DOMAIN: u64 = 0x7261_6e64_5f72_5f5f; // "rand_r__"

/// Size of the file served for `/dev/urandom` and `/dev/random`.
pub const URANDOM_FILE_BYTES: usize = 256 * 1024;

/// Seeds both streams from the process's seed (after the `ProcessStart` grant).
pub fn seed_process(seed: u64) {
    PROCESS_SEED.store(seed, Ordering::Relaxed);
    ENTROPY.reseed(splitmix64(seed));
    PRNG.reseed(splitmix64(seed ^ PRNG_DOMAIN));
}

/// Fills `buf` from the entropy stream.
pub fn fill(buf: &mut [u8]) {
    ENTROPY.fill(buf);
}

/// `srand`/`srandom`.
pub fn srand(value: u32) {
    let seed = PROCESS_SEED.load(Ordering::Relaxed);
    PRNG.reseed(splitmix64(seed ^ splitmix64(SRAND_DOMAIN ^ value as u64)));
}

/// `rand`/`random`: a value in `0..=RAND_MAX` (2^31 - 1).
pub fn rand() -> i32 {
    (PRNG.next_u64() >> 33) as i32
}

/// `rand_r`: a pure function of `*state` and the process seed, as `rand_r` must be.
pub fn rand_r(state: &mut u32) -> i32 {
    let word = splitmix64(PROCESS_SEED.load(Ordering::Relaxed) ^ RAND_R_DOMAIN ^ *state as u64);
    *state = word as u32;
    (word >> 33) as i32
}

/// Overwrites the 16 `AT_RANDOM` bytes the kernel put on the initial stack.
pub fn overwrite_at_random() {
    // SAFETY: getauxval has no preconditions.
    let addr = unsafe { libc::getauxval(libc::AT_RANDOM) } as *mut u8;
    if addr.is_null() {
        return;
    }
    // SAFETY: the kernel places 16 writable bytes at AT_RANDOM on the initial stack, which lives
    // as long as the process; no other thread exists or reads them concurrently.
    let bytes = unsafe { core::slice::from_raw_parts_mut(addr, 16) };
    fill(bytes);
}

/// Creates the file served for an open of `/dev/urandom` or `/dev/random`: a memfd holding
/// [`URANDOM_FILE_BYTES`] of the entropy stream, positioned at 0. Returns the fd or `-errno`.
pub fn urandom_file(cloexec: bool) -> i64 {
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 } as u64;
    // SAFETY: the name is a NUL-terminated static string.
    let fd = unsafe {
        sys::syscall(
            libc::SYS_memfd_create,
            &[c"dara-urandom".as_ptr() as u64, flags],
        )
    };
    if fd < 0 {
        return fd;
    }
    // SAFETY: resizing the memfd just created.
    let rc = unsafe { sys::syscall(libc::SYS_ftruncate, &[fd as u64, URANDOM_FILE_BYTES as u64]) };
    if rc < 0 {
        sys::close(fd as i32);
        return rc;
    }
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    // SAFETY: a fresh shared mapping of the memfd; no existing memory is affected.
    let addr = unsafe {
        sys::syscall(
            libc::SYS_mmap,
            &[
                0,
                URANDOM_FILE_BYTES as u64,
                prot,
                libc::MAP_SHARED as u64,
                fd as u64,
                0,
            ],
        )
    };
    if (-4095..0).contains(&addr) {
        sys::close(fd as i32);
        return addr;
    }
    // SAFETY: the mapping is URANDOM_FILE_BYTES long and private to this function until unmapped.
    let bytes = unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, URANDOM_FILE_BYTES) };
    fill(bytes);
    // SAFETY: unmapping exactly the mapping made above; `bytes` is not used afterwards.
    unsafe { sys::syscall(libc::SYS_munmap, &[addr as u64, URANDOM_FILE_BYTES as u64]) };
    fd
}

/// Whether a NUL-terminated path names one of the kernel's random devices.
///
/// # Safety
/// `path` must be null or point to a readable NUL-terminated string.
pub unsafe fn is_random_device(path: *const u8) -> bool {
    if path.is_null() {
        return false;
    }
    [&b"/dev/urandom\0"[..], &b"/dev/random\0"[..]]
        .iter()
        .any(|want| {
            want.iter().enumerate().all(|(i, &b)| {
                // SAFETY: the caller guarantees a readable NUL-terminated string; we stop at the
                // first mismatch, so we never read past its NUL (every `want` ends in NUL).
                unsafe { *path.add(i) == b }
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_device_paths() {
        // SAFETY: static NUL-terminated strings.
        unsafe {
            assert!(is_random_device(c"/dev/urandom".as_ptr().cast()));
            assert!(is_random_device(c"/dev/random".as_ptr().cast()));
            assert!(!is_random_device(c"/dev/randomx".as_ptr().cast()));
            assert!(!is_random_device(c"/dev/u".as_ptr().cast()));
            assert!(!is_random_device(core::ptr::null()));
        }
    }
}
