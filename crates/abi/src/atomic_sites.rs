//! The plan file of `--preempt-on atomics`: which instructions of a prebuilt program's own code
//! are atomic operations, where their operand is, and the code that runs each of them out of line.
//!
//! dara (the scheduler side, which has a disassembler) writes one plan per executable file, named
//! by the file's identity ([`PlanName`]), into the directory named by
//! [`Header::atomic_plans`](crate::Header); the preload of a process running that file reads it
//! after its start grant, before `main`, and writes `hlt` over the first byte of every site. In
//! user mode `hlt` faults (SIGSEGV, `SI_KERNEL`), the preload's fault handler finds the site,
//! computes the operand's address from the registers, makes the access a memory-level scheduling
//! point, and resumes the thread at the site's copy ([`AtomicSite::copy`]): the instruction,
//! re-encoded for its new address, then a jump back after the original.
//!
//! Layout (little-endian, `#[repr(C)]`, read in place from a read-only mapping): one
//! [`PlanHeader`], then `sites` [`AtomicSite`]s sorted by address, then `code_len` bytes of copies.
//! Addresses are the ELF file's own virtual addresses; the preload adds the load bias.
use core::mem::size_of;

/// `b"DARAATOM"` read as a little-endian integer.
pub const PLAN_MAGIC: u64 = u64::from_le_bytes(*b"DARAATOM");
/// Bumped whenever the layout or meaning of a plan changes.
pub const PLAN_VERSION: u32 = 1;

/// The byte written over each site: `hlt`, privileged, so it faults in user mode.
pub const TRAP_BYTE: u8 = 0xf4;

/// [`AtomicSite::base`] / [`AtomicSite::index`]: no register.
pub const NO_REGISTER: u8 = 0xff;
/// [`AtomicSite::base`]: the operand is `rip`-relative; [`AtomicSite::disp`] is its address.
pub const RIP_RELATIVE: u8 = 0xfe;

/// The start of a plan.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanHeader {
    pub magic: u64,
    pub version: u32,
    /// Number of [`AtomicSite`]s after the header.
    pub sites: u32,
    /// Where the copies go: their first byte's virtual address (below the image, within the
    /// ±2 GiB a `rip`-relative operand or a `jmp rel32` reaches).
    pub code_address: u64,
    /// Bytes of copies after the sites (a multiple of the page size).
    pub code_len: u64,
    /// Instructions found but not trapped (their copy could not be encoded): for the summary.
    pub skipped: u32,
    /// 1 when the file is position-independent (the preload adds the load bias), 0 when it runs
    /// at its link addresses.
    pub position_independent: u32,
}

/// One trapped instruction.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicSite {
    /// Virtual address of the instruction.
    pub address: u64,
    /// The memory operand: `base + index * scale + disp`, each register a `REG_*` index of
    /// `ucontext_t`'s general registers ([`NO_REGISTER`] if absent); with [`RIP_RELATIVE`] as
    /// base, `disp` is the operand's virtual address.
    pub disp: i64,
    /// Offset of this instruction's copy from [`PlanHeader::code_address`].
    pub copy: u32,
    pub base: u8,
    pub index: u8,
    pub scale: u8,
    /// Bytes the instruction accesses.
    pub size: u8,
    /// Length of the original instruction.
    pub len: u8,
    /// The byte the trap replaced.
    pub first_byte: u8,
    pub reserved: [u8; 6],
}

const _: () = assert!(size_of::<PlanHeader>() == 40);
const _: () = assert!(size_of::<AtomicSite>() == 32);

impl PlanHeader {
    /// The header at the start of `bytes` (any alignment: copied out), if it is one of this
    /// version's.
    pub fn read(bytes: &[u8]) -> Result<PlanHeader, PlanError> {
        if bytes.len() < size_of::<PlanHeader>() {
            return Err(PlanError::Short);
        }
        // SAFETY: at least a header's worth of bytes (checked), read unaligned; every bit pattern
        // is a valid PlanHeader.
        let header = unsafe { core::ptr::read_unaligned(bytes.as_ptr() as *const PlanHeader) };
        if header.magic != PLAN_MAGIC {
            return Err(PlanError::Magic);
        }
        if header.version != PLAN_VERSION {
            return Err(PlanError::Version);
        }
        Ok(header)
    }
}

impl AtomicSite {
    /// The operand's address, given the thread's general registers and the load bias.
    pub fn operand(&self, registers: &[i64], bias: u64) -> Option<u64> {
        let read = |r: u8| registers.get(r as usize).map(|&v| v as u64);
        if self.base == RIP_RELATIVE {
            return Some(bias.wrapping_add(self.disp as u64));
        }
        let base = if self.base == NO_REGISTER { 0 } else { read(self.base)? };
        let index = if self.index == NO_REGISTER { 0 } else { read(self.index)?.wrapping_mul(self.scale as u64) };
        Some(base.wrapping_add(index).wrapping_add(self.disp as u64))
    }
}

/// A parsed plan, borrowed from the bytes of its file.
#[derive(Clone, Copy, Debug)]
pub struct Plan<'a> {
    pub header: &'a PlanHeader,
    pub sites: &'a [AtomicSite],
    pub code: &'a [u8],
}

/// Why a plan's bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    Short,
    Magic,
    Version,
    Misaligned,
}

impl<'a> Plan<'a> {
    /// Reads a plan in place. `bytes` must be 8-byte aligned (a mapping is).
    pub fn parse(bytes: &'a [u8]) -> Result<Plan<'a>, PlanError> {
        if !(bytes.as_ptr() as usize).is_multiple_of(8) {
            return Err(PlanError::Misaligned);
        }
        PlanHeader::read(bytes)?;
        // SAFETY: aligned, long enough and checked by `read`; every bit pattern is a valid
        // PlanHeader.
        let header = unsafe { &*(bytes.as_ptr() as *const PlanHeader) };
        let sites_end = size_of::<PlanHeader>() + header.sites as usize * size_of::<AtomicSite>();
        let code_end = sites_end.checked_add(header.code_len as usize).ok_or(PlanError::Short)?;
        if bytes.len() < code_end {
            return Err(PlanError::Short);
        }
        // SAFETY: in bounds (checked), 8-byte aligned (the header is 40 bytes from an aligned
        // start), and every bit pattern is a valid AtomicSite.
        let sites = unsafe { core::slice::from_raw_parts(bytes.as_ptr().add(size_of::<PlanHeader>()) as *const AtomicSite, header.sites as usize) };
        Ok(Plan { header, sites, code: &bytes[sites_end..code_end] })
    }

    /// The site at virtual address `address`, if one is (sites are sorted).
    pub fn site_at(&self, address: u64) -> Option<&'a AtomicSite> {
        self.sites.binary_search_by_key(&address, |s| s.address).ok().map(|i| &self.sites[i])
    }
}

/// The file name of an executable's plan: its identity (device, inode, size, modification time),
/// so a rebuilt program gets a new plan, in hex: `DEV-INO-SIZE-MTIME.plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PlanName {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: u64,
}

/// Bytes of a [`PlanName`] with its terminating NUL.
pub const PLAN_NAME_LEN: usize = 4 * 16 + 3 + 5 + 1;

impl PlanName {
    /// The name, NUL-terminated, in a fixed buffer (no allocation: the preload calls this).
    pub fn render(&self) -> [u8; PLAN_NAME_LEN] {
        let mut out = [0u8; PLAN_NAME_LEN];
        let mut at = 0;
        for (k, value) in [self.dev, self.ino, self.size, self.mtime_ns].into_iter().enumerate() {
            if k > 0 {
                out[at] = b'-';
                at += 1;
            }
            for shift in (0..16).rev() {
                out[at] = b"0123456789abcdef"[((value >> (shift * 4)) & 0xf) as usize];
                at += 1;
            }
        }
        out[at..at + 5].copy_from_slice(b".plan");
        out
    }
}

/// Longest directory path [`Header::atomic_plans`](crate::Header) holds, with its NUL.
pub const PLANS_DIR_MAX: usize = 192;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_fixed_width_hex() {
        let name = PlanName { dev: 0x803, ino: 42, size: 1, mtime_ns: u64::MAX }.render();
        let text = core::str::from_utf8(&name[..PLAN_NAME_LEN - 1]).unwrap();
        assert_eq!(text, "0000000000000803-000000000000002a-0000000000000001-ffffffffffffffff.plan");
        assert_eq!(name[PLAN_NAME_LEN - 1], 0);
    }

    #[test]
    fn operands_from_registers() {
        let mut regs = [0i64; 23];
        regs[13] = 0x1000; // rax
        regs[14] = 3; // rcx
        let site = AtomicSite { address: 0, disp: 8, copy: 0, base: 13, index: 14, scale: 4, size: 4, len: 4, first_byte: 0xf0, reserved: [0; 6] };
        assert_eq!(site.operand(&regs, 0), Some(0x1000 + 12 + 8));
        let rip = AtomicSite { base: RIP_RELATIVE, index: NO_REGISTER, disp: 0x4010, ..site };
        assert_eq!(rip.operand(&regs, 0x5555_0000_0000), Some(0x5555_0000_4010));
        let bad = AtomicSite { base: 40, ..site };
        assert_eq!(bad.operand(&regs, 0), None);
    }

    #[test]
    fn damaged_plans_are_refused() {
        let mut words = [0u64; 16];
        assert_eq!(Plan::parse(bytes_of(&words)).err(), Some(PlanError::Magic));
        words[0] = PLAN_MAGIC;
        words[1] = PLAN_VERSION as u64 | (100u64 << 32); // 100 sites, absent
        assert_eq!(Plan::parse(bytes_of(&words)).err(), Some(PlanError::Short));
        words[1] = PLAN_VERSION as u64 | (1u64 << 32);
        let plan = Plan::parse(bytes_of(&words)).unwrap();
        assert_eq!(plan.sites.len(), 1);
        assert!(plan.site_at(0).is_some() && plan.site_at(1).is_none());
    }

    fn bytes_of(words: &[u64]) -> &[u8] {
        // SAFETY: any u64 array is readable as bytes.
        unsafe { core::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8) }
    }
}
