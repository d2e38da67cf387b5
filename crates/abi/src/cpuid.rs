//! `cpuid` as dara answers it: the CPU's own answer with the hardware random-number instructions
//! (RDRAND, RDSEED) left out, so a program that would mix their numbers into its state takes
//! dara's seeded streams instead. Both interception paths make `cpuid` fault
//! (`arch_prctl(ARCH_SET_CPUID, 0)`) and answer it with [`CpuidAnswer::hiding_random`]: the
//! preload in its SIGSEGV handler, the ptrace agent at the tracee's SIGSEGV stop
//! (docs/determinism.md, "cpuid and the random-number instructions").

/// `arch_prctl` code that sets CPUID faulting (asm/prctl.h).
pub const ARCH_SET_CPUID: u64 = 0x1012;
/// `ARCH_SET_CPUID`'s argument: 1 runs `cpuid`, 0 makes it fault.
pub const CPUID_RUNS: u64 = 1;
pub const CPUID_FAULTS: u64 = 0;

/// The instruction's bytes.
pub const CPUID: [u8; 2] = [0x0f, 0xa2];

/// Leaf 1, ecx: RDRAND.
const LEAF1_ECX_RDRAND: u32 = 1 << 30;
/// Leaf 7 (sub-leaf 0), ebx: RDSEED.
const LEAF7_EBX_RDSEED: u32 = 1 << 18;

/// One `cpuid` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuidAnswer {
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

impl CpuidAnswer {
    /// The answer the program sees for `leaf`/`subleaf`: the CPU's, with `rdrand` and `rdseed`
    /// left out.
    pub fn hiding_random(mut self, leaf: u32, subleaf: u32) -> CpuidAnswer {
        match (leaf, subleaf) {
            (1, _) => self.ecx &= !LEAF1_ECX_RDRAND,
            (7, 0) => self.ebx &= !LEAF7_EBX_RDSEED,
            _ => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_random_bits_are_hidden() {
        let all = CpuidAnswer { eax: u32::MAX, ebx: u32::MAX, ecx: u32::MAX, edx: u32::MAX };
        assert_eq!(all.hiding_random(1, 0), CpuidAnswer { ecx: !LEAF1_ECX_RDRAND, ..all });
        assert_eq!(all.hiding_random(7, 0), CpuidAnswer { ebx: !LEAF7_EBX_RDSEED, ..all });
        assert_eq!(all.hiding_random(7, 1), all, "sub-leaf 1 of leaf 7 has no RDSEED bit");
        assert_eq!(all.hiding_random(0, 0), all);
        assert_eq!(all.hiding_random(0x8000_0001, 0), all);
    }
}
