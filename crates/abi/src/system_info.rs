//! `sysinfo(2)` as dara shows it: the machine's uptime, load, memory and process count, the same
//! in every execution of a schedule and in the replay of a recording. The host's answer changes
//! from run to run (uptime, load, free memory, the number of threads on the machine), so a
//! program that reads it would see its recording and its replay differ.
//!
//! What the program reads:
//! * `uptime`: `CLOCK_BOOTTIME` at the moment of the call ([`crate::MONOTONIC_BASE_NS`] `+ v`) in
//!   whole seconds, rounded up as the kernel rounds it: the same clock `clock_gettime` shows.
//! * `loads`: 0, an idle machine.
//! * `totalram`, `totalswap`, `mem_unit`: [`crate::Header::memory`], a snapshot of the host's that
//!   `dara-trace` takes once when it starts (every execution of a search sees the same) and
//!   keeps in the trace (its replay sees the recorded one).
//! * `freeram`: half of `totalram` ([`free_ram`]); `freeswap`: all of `totalswap`; `sharedram`,
//!   `bufferram`, `totalhigh`, `freehigh`: 0.
//! * `procs`: [`PROCS_SHOWN`], whatever runs on the machine.
//!
//! glibc's `get_phys_pages`, `get_avphys_pages` and `sysconf(_SC_PHYS_PAGES)` /
//! `sysconf(_SC_AVPHYS_PAGES)` are computed from `sysinfo`, so they follow.
//!
//! Shared by the preload (its `sysinfo` hook and SIGSYS handler); nothing here allocates.
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const NS_PER_SEC: u64 = 1_000_000_000;

/// The number of processes (the kernel counts threads) `sysinfo` shows: a fixed value, since the
/// host's count changes from run to run and the program's own would make the value depend on
/// the interleaving.
pub const PROCS_SHOWN: u16 = 100;

/// The memory totals of [`crate::Header::memory`], written by the scheduler before the launch.
#[repr(C)]
pub struct MemoryWords {
    /// Main memory, in units of `mem_unit` bytes.
    pub total_ram: AtomicU64,
    /// Swap space, in units of `mem_unit` bytes.
    pub total_swap: AtomicU64,
    /// The unit of the two totals, in bytes (the kernel says 1 on x86_64; 0: not written, read
    /// as 1).
    pub mem_unit: AtomicU32,
    _reserved: u32,
}

/// The totals as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryTotals {
    pub total_ram: u64,
    pub total_swap: u64,
    pub mem_unit: u32,
}

impl MemoryWords {
    pub fn store(&self, totals: MemoryTotals) {
        self.total_ram.store(totals.total_ram, Ordering::Relaxed);
        self.total_swap.store(totals.total_swap, Ordering::Relaxed);
        self.mem_unit.store(totals.mem_unit, Ordering::Release);
    }

    pub fn load(&self) -> MemoryTotals {
        let mem_unit = self.mem_unit.load(Ordering::Acquire).max(1);
        MemoryTotals { total_ram: self.total_ram.load(Ordering::Relaxed), total_swap: self.total_swap.load(Ordering::Relaxed), mem_unit }
    }
}

/// The kernel's `struct sysinfo` on x86_64 (`<linux/sysinfo.h>`), as `sysinfo(2)` fills it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysInfo {
    /// Seconds since boot.
    pub uptime: i64,
    /// 1, 5 and 15 minute load averages, scaled by 2^16.
    pub loads: [u64; 3],
    pub totalram: u64,
    pub freeram: u64,
    pub sharedram: u64,
    pub bufferram: u64,
    pub totalswap: u64,
    pub freeswap: u64,
    pub procs: u16,
    pub pad: u16,
    pub totalhigh: u64,
    pub freehigh: u64,
    pub mem_unit: u32,
}

const _: () = assert!(core::mem::size_of::<SysInfo>() == 112, "the kernel's struct sysinfo on x86_64");
const _: () = assert!(core::mem::offset_of!(SysInfo, procs) == 80);
const _: () = assert!(core::mem::offset_of!(SysInfo, mem_unit) == 104);

/// The free memory shown for `total_ram`: half of it.
pub fn free_ram(total_ram: u64) -> u64 {
    total_ram / 2
}

/// `sysinfo` when `CLOCK_BOOTTIME` reads `boottime_ns`, with memory `totals` (see the module
/// doc).
pub fn shown(totals: MemoryTotals, boottime_ns: u64) -> SysInfo {
    SysInfo {
        uptime: boottime_ns.div_ceil(NS_PER_SEC) as i64,
        totalram: totals.total_ram,
        freeram: free_ram(totals.total_ram),
        totalswap: totals.total_swap,
        freeswap: totals.total_swap,
        procs: PROCS_SHOWN,
        mem_unit: totals.mem_unit,
        ..SysInfo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_is_boot_time_rounded_up_and_memory_the_snapshot() {
        let totals = MemoryTotals { total_ram: 8 << 30, total_swap: 1 << 30, mem_unit: 1 };
        let boot = crate::clock::ClockBase::Monotonic.read_at(0, 0);
        let at_start = shown(totals, boot);
        assert_eq!(at_start.uptime, (crate::MONOTONIC_BASE_NS / NS_PER_SEC) as i64);
        assert_eq!(shown(totals, boot + 1).uptime, at_start.uptime + 1, "a nanosecond into the next second counts it, as the kernel does");
        assert_eq!(shown(totals, boot + 5 * NS_PER_SEC).uptime, at_start.uptime + 5);
        assert_eq!((at_start.totalram, at_start.freeram, at_start.freeswap), (8 << 30, 4 << 30, 1 << 30));
        assert_eq!((at_start.loads, at_start.procs, at_start.mem_unit), ([0; 3], PROCS_SHOWN, 1));
    }
}
