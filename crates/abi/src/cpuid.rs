//! `cpuid` as dara answers it: the CPU's own answer with the hardware random-number instructions
//! (RDRAND, RDSEED) left out, so a program that would mix their numbers into its state takes
//! dara's seeded streams instead, and without the asking CPU's own APIC ids, so the answer is the
//! same on every CPU of the machine (which CPU an execution runs on is dara's choice, not the
//! program's input). Both interception paths make `cpuid` fault (`arch_prctl(ARCH_SET_CPUID, 0)`)
//! and answer it with [`CpuidAnswer::for_program`]: the preload in its SIGSEGV handler (from
//! answers it keeps by [`key`]), the ptrace agent at the tracee's SIGSEGV stop
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
/// Leaf 1, ebx bits 31-24: the asking CPU's initial APIC id.
const LEAF1_EBX_APIC_ID: u32 = 0xff << 24;
/// Leaves whose edx is the asking CPU's x2APIC id (extended topology, v1 and v2).
const X2APIC_LEAVES: [u32; 2] = [0xb, 0x1f];
/// AMD's leaf whose eax is the asking CPU's extended APIC id.
const AMD_EXTENDED_APIC_LEAF: u32 = 0x8000_001e;

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
    /// left out and the APIC ids of the CPU that asked set to 0.
    pub fn for_program(mut self, leaf: u32, subleaf: u32) -> CpuidAnswer {
        match (leaf, subleaf) {
            (1, _) => {
                self.ecx &= !LEAF1_ECX_RDRAND;
                self.ebx &= !LEAF1_EBX_APIC_ID;
            }
            (7, 0) => self.ebx &= !LEAF7_EBX_RDSEED,
            (leaf, _) if X2APIC_LEAVES.contains(&leaf) => self.edx = 0,
            (AMD_EXTENDED_APIC_LEAF, _) => self.eax = 0,
            _ => {}
        }
        self
    }
}

/// Whether `leaf`'s answer depends on the sub-leaf (ecx). Programs leave ecx unset when they ask
/// the others (libgcc's `__cpuid`), so an answer kept for those must not be looked up by it.
/// Leaves not known here count as depending on it.
pub fn subleaf_matters(leaf: u32) -> bool {
    !matches!(leaf, 0..=3 | 5 | 6 | 0xa | 0x15 | 0x16 | 0x19 | 0x8000_0000..=0x8000_001c | 0x8000_001e | 0x8000_001f)
}

/// What an answer is kept under: (leaf, sub-leaf), the sub-leaf 0 where it does not matter.
pub fn key(leaf: u32, subleaf: u32) -> (u32, u32) {
    (leaf, if subleaf_matters(leaf) { subleaf } else { 0 })
}

/// How many sub-leaves of `leaf` a process that learns the common answers ahead asks (the fork
/// server, for every copy it makes): those the C runtime's start-up asks (glibc, libgcc's
/// `__cpu_indicator_init`), and the first few of the other enumerated leaves.
pub fn subleaves_to_learn(leaf: u32) -> u32 {
    match leaf {
        _ if !subleaf_matters(leaf) => 1,
        4 | 0x8000_001d => 6,
        0xd => 20,
        0xb | 0x1f => 4,
        7 | 0x10 | 0x12 | 0x14 | 0x17 | 0x18 => 3,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_random_bits_and_the_apic_ids_are_hidden() {
        let all = CpuidAnswer { eax: u32::MAX, ebx: u32::MAX, ecx: u32::MAX, edx: u32::MAX };
        assert_eq!(all.for_program(1, 0), CpuidAnswer { ecx: !LEAF1_ECX_RDRAND, ebx: 0x00ff_ffff, ..all });
        assert_eq!(all.for_program(7, 0), CpuidAnswer { ebx: !LEAF7_EBX_RDSEED, ..all });
        assert_eq!(all.for_program(7, 1), all, "sub-leaf 1 of leaf 7 has no RDSEED bit");
        assert_eq!(all.for_program(0xb, 1), CpuidAnswer { edx: 0, ..all });
        assert_eq!(all.for_program(0x1f, 0), CpuidAnswer { edx: 0, ..all });
        assert_eq!(all.for_program(0x8000_001e, 0), CpuidAnswer { eax: 0, ..all });
        assert_eq!(all.for_program(0, 0), all);
        assert_eq!(all.for_program(0x8000_0001, 0), all);
    }

    #[test]
    fn answers_are_kept_by_sub_leaf_only_where_it_matters() {
        assert_eq!(key(1, 0xdead), (1, 0), "libgcc asks leaf 1 with whatever ecx held");
        assert_eq!(key(0x8000_0001, 7), (0x8000_0001, 0));
        assert_eq!(key(7, 1), (7, 1));
        assert_eq!(key(0xd, 5), (0xd, 5));
        assert_eq!(key(0x4000_0000, 3), (0x4000_0000, 3), "unknown leaves keep their sub-leaf");
        assert_eq!(subleaves_to_learn(1), 1);
        assert!(subleaves_to_learn(0xd) > 2 && subleaves_to_learn(7) >= 2);
    }
}
