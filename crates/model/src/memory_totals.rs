//! The memory and swap totals a program sees through `sysinfo` (and glibc's `get_phys_pages`,
//! `sysconf(_SC_PHYS_PAGES)`), a setting of the run like its CPU count: `dara-trace` takes one
//! snapshot of the host's when it starts, every execution of a search shows it, and the trace
//! keeps it for the replay. The rest of what `sysinfo` shows follows from it and from the virtual
//! clock (`dara_abi::system_info`).
use serde::{Deserialize, Serialize};

/// `sysinfo`'s `totalram`, `totalswap` and `mem_unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTotals {
    /// Main memory, in units of `mem_unit` bytes.
    pub total_ram: u64,
    /// Swap space, in units of `mem_unit` bytes.
    pub total_swap: u64,
    /// Bytes per unit (the kernel says 1 on x86_64).
    pub mem_unit: u32,
}

impl Default for MemoryTotals {
    /// 4 GiB of memory and no swap: what a run that took no snapshot shows.
    fn default() -> MemoryTotals {
        MemoryTotals { total_ram: 4 << 30, total_swap: 0, mem_unit: 1 }
    }
}

impl From<MemoryTotals> for dara_abi::system_info::MemoryTotals {
    fn from(m: MemoryTotals) -> Self {
        dara_abi::system_info::MemoryTotals { total_ram: m.total_ram, total_swap: m.total_swap, mem_unit: m.mem_unit }
    }
}
