//! A bound on the heap a dara tool holds: a global allocator that counts live bytes and, when an
//! allocation would take them past the bound, stops the process with one line and exit 2.
//!
//! Why: a replay is driven by a file and by a program, both of which can make dara misbehave (a
//! replay of nginx once read `/dev/zero` whole and grew to 24 GB before the kernel killed it, and
//! everything else on the machine with it). Lengths and counts read from a trace are checked
//! against the file before anything is allocated (`dara_model::trace::reader`); this is the
//! net under everything else. The check runs inside the allocator, so stopping cannot allocate,
//! lock or unwind: it writes a preformatted line with `write(2)` and calls `_exit(2)`. The
//! traced processes die with dara (`PR_SET_PDEATHSIG`), the shared region is a memfd.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Default bound, in MiB: far above what a replay needs (tens of MB for a recorded server), far
/// below what hurts a shared machine.
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 8192;

/// Exit status when the bound is passed (a tool error, as for every other refusal).
const EXIT_BOUND: i32 = 2;

/// Said when no tool set its own line (the bound was never set, so this is unreachable in
/// practice, but stopping must never need to format).
const FALLBACK_MESSAGE: &[u8] = b"dara: error: dara's own memory passed its bound; the run was stopped\n";

/// The line [`stop`] writes, formatted by [`set_max_memory_mib`] while allocating is still fine.
static MESSAGE: OnceLock<Box<[u8]>> = OnceLock::new();

/// The counting allocator; install with `#[global_allocator] static A: BoundedAllocator = BoundedAllocator;`.
pub struct BoundedAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sets the bound to `mib` MiB (counted from now on against every byte still held); `tool`
/// names the program in the line said when the bound is passed.
pub fn set_max_memory_mib(tool: &str, mib: u64) {
    let line = format!(
        "{tool}: error: dara's own memory would pass --max-memory {mib} (MiB), so it stopped (a damaged trace or a dara bug): \
         raise --max-memory if the run really needs more, else report it with the trace\n"
    );
    let _ = MESSAGE.set(line.into_bytes().into_boxed_slice());
    let bytes = usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// Bytes the process's heap holds now.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Counts `grow` more bytes, or stops the process if that passes the bound.
fn take(grow: usize) {
    let before = LIVE.fetch_add(grow, Ordering::Relaxed);
    if before.saturating_add(grow) > LIMIT.load(Ordering::Relaxed) {
        stop();
    }
}

/// A failed allocation holds nothing: uncounts its `size` bytes.
fn untake_if_null(ptr: *mut u8, size: usize) -> *mut u8 {
    if ptr.is_null() {
        LIVE.fetch_sub(size, Ordering::Relaxed);
    }
    ptr
}

/// Set by the first thread that stops the process: two threads passing the bound at once said
/// the line twice (seen once in a full run of the suite).
static STOPPING: AtomicBool = AtomicBool::new(false);

fn stop() -> ! {
    if STOPPING.swap(true, Ordering::SeqCst) {
        // Another thread says the line and exits the process; wait for that.
        loop {
            // SAFETY: pause(2) neither allocates nor takes locks.
            unsafe { libc::pause() };
        }
    }
    let message: &[u8] = MESSAGE.get().map_or(FALLBACK_MESSAGE, |m| m);
    // SAFETY: write(2) of a buffer that lives as long as the process and _exit(2) neither
    // allocate nor take locks, so they are sound inside the allocator, on any thread, with any
    // lock held.
    unsafe {
        libc::write(libc::STDERR_FILENO, message.as_ptr().cast(), message.len());
        libc::_exit(EXIT_BOUND);
    }
}

// SAFETY: every method forwards to `System` with the caller's own arguments, so `System`'s
// guarantees are ours; the counting only reads and writes two atomics.
unsafe impl GlobalAlloc for BoundedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        take(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        untake_if_null(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        take(layout.size());
        // SAFETY: as for `alloc`.
        untake_if_null(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by this allocator (that is, by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            take(new_size - layout.size());
        }
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if moved.is_null() {
            // The old block stays allocated at its old size.
            if new_size > layout.size() {
                LIVE.fetch_sub(new_size - layout.size(), Ordering::Relaxed);
            }
        } else if new_size < layout.size() {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        moved
    }
}
