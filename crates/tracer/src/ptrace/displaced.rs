//! Out-of-line execution of a probed function's first instruction, so a granted probe costs no
//! second stop.
//!
//! A probe's `int3` replaces the first byte of the function's first instruction. Once the probe's
//! point is granted, that instruction must run before the function goes on. Putting the byte
//! back, single-stepping the instruction and writing the `int3` again (the fallback) costs a
//! second ptrace stop and four `ptrace` calls. Instead, at the exec, each probed instruction is
//! copied to a page of its own in the process, re-encoded for its new address (a `rip`-relative
//! operand or branch keeps its target) and followed by a jump back to the instruction after it:
//! a granted thread is simply resumed there. This is what uprobes calls execution out of line.
//!
//! The page lies just below the program image, within the ±2 GiB a `rip`-relative operand can
//! reach. An instruction that cannot be re-encoded there, or a process where the page cannot be
//! mapped, keeps the single step. A signal delivered as the thread resumes sees its pc on the
//! page (one instruction, then the jump): a Go program's handler finds no function there and
//! does not preempt at that point, as at any foreign pc.
use std::collections::BTreeMap;


use super::inject::{self, AtExec};
use crate::out_of_line::relocate;

/// Bytes of page given to each displaced instruction: at most 15 for the instruction, grown by a
/// re-encoding, and 5 or 14 for the jump back.
const SLOT: u64 = 48;
const PAGE: u64 = 0x1000;

/// Where each probed instruction runs out of line: probe address to its copy.
#[derive(Clone, Debug, Default)]
pub struct Displaced {
    copies: BTreeMap<u64, u64>,
}

impl Displaced {
    /// Copies the first instruction of each probed function (`code`: its address and the bytes
    /// there before the probe was written) to a page mapped just below `image_start` in the
    /// process of `at_exec`'s thread. Instructions that cannot be copied are left out (they are
    /// single-stepped); with no page, all are.
    pub fn place(at_exec: &mut AtExec, tid: i32, image_start: u64, code: &[(u64, [u8; 16])]) -> Displaced {
        let mut displaced = Displaced::default();
        let pages = (code.len() as u64 * SLOT).div_ceil(PAGE).max(1);
        let Some(page) = (image_start & !(PAGE - 1)).checked_sub((pages + 1) * PAGE).filter(|&p| p >= 0x10000) else { return displaced };
        let mut bytes = vec![0xcc_u8; (pages * PAGE) as usize];
        let mut copies = BTreeMap::new();
        for (k, (addr, original)) in code.iter().enumerate() {
            let at = page + k as u64 * SLOT;
            if let Some(encoded) = relocate(*addr, original, at).filter(|e| e.len() as u64 <= SLOT) {
                let offset = (at - page) as usize;
                bytes[offset..offset + encoded.len()].copy_from_slice(&encoded);
                copies.insert(*addr, at);
            }
        }
        if copies.is_empty() || at_exec.map_fixed(page, pages * PAGE, libc::PROT_READ | libc::PROT_EXEC).is_err() {
            return displaced;
        }
        // POKETEXT writes through the page's protection, a word at a time.
        for (k, word) in bytes.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            if word != u64::from_le_bytes([0xcc; 8]) && inject::poke(tid, page + 8 * k as u64, word).is_err() {
                return displaced;
            }
        }
        displaced.copies = copies;
        displaced
    }

    /// Where the instruction under the probe at `addr` runs out of line, if it was copied.
    pub fn copy_of(&self, addr: u64) -> Option<u64> {
        self.copies.get(&addr).copied()
    }
}
