//! Running one instruction somewhere else: an instruction copied to another address, re-encoded
//! there (a `rip`-relative operand or branch keeps its target) and followed by a jump back to the
//! instruction after the original. uprobes calls this execution out of line. Used for the ptrace
//! agent's probes (`ptrace::displaced`) and for the atomic instructions `--preempt-on atomics`
//! traps in a prebuilt program (`atomic_plan`).
use iced_x86::{BlockEncoder, BlockEncoderOptions, Decoder, DecoderOptions, Instruction, InstructionBlock};

/// The longest x86-64 instruction.
pub const MAX_INSTRUCTION: usize = 15;

/// The instruction at the start of `original` (found at `addr`), re-encoded to run at `at` and
/// followed by a jump to the instruction after it at `addr`; None if it cannot run elsewhere.
pub fn relocate(addr: u64, original: &[u8; 16], at: u64) -> Option<Vec<u8>> {
    let mut decoder = Decoder::with_ip(64, &original[..MAX_INSTRUCTION], addr, DecoderOptions::NONE);
    relocate_decoded(&decoder.decode(), at)
}

/// `instruction` (decoded at its own address), re-encoded to run at `at` and followed by a jump to
/// the instruction after the original; None if it cannot run elsewhere.
pub fn relocate_decoded(instruction: &Instruction, at: u64) -> Option<Vec<u8>> {
    if instruction.is_invalid() || !movable(instruction) {
        return None;
    }
    let instruction = *instruction;
    let back = Instruction::with_branch(iced_x86::Code::Jmp_rel32_64, instruction.next_ip()).ok()?;
    let instructions = [instruction, back];
    let block = InstructionBlock::new(&instructions, at);
    BlockEncoder::encode(64, block, BlockEncoderOptions::NONE).ok().map(|r| r.code_buffer)
}

/// Whether an instruction means the same at another address once re-encoded (the encoder fixes
/// `rip`-relative operands and branches, and fails when it cannot reach their targets): not a
/// `syscall` (the kernel would return to the copy, and the seccomp filter judges its address),
/// nor a trap.
fn movable(instruction: &Instruction) -> bool {
    !matches!(instruction.mnemonic(), iced_x86::Mnemonic::Syscall | iced_x86::Mnemonic::Int3 | iced_x86::Mnemonic::Int | iced_x86::Mnemonic::Ud2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_instruction_is_copied_with_a_jump_back() {
        // push rbp at 0x401000, copied to 0x3ff000: push, then jmp 0x401001.
        let mut original = [0x90u8; 16];
        original[0] = 0x55;
        let code = relocate(0x401000, &original, 0x3ff000).unwrap();
        assert_eq!(code[0], 0x55);
        assert_eq!(code[1], 0xe9);
        let rel = i32::from_le_bytes(code[2..6].try_into().unwrap());
        assert_eq!(0x3ff000 + 6 + rel as i64 as u64, 0x401001);
    }

    #[test]
    fn a_rip_relative_operand_keeps_its_target() {
        // mov rax, [rip+0x100] at 0x401000 (7 bytes): reads 0x401107 from anywhere.
        let mut original = [0x90u8; 16];
        original[..7].copy_from_slice(&[0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00]);
        let code = relocate(0x401000, &original, 0x3ff000).unwrap();
        let mut decoder = Decoder::with_ip(64, &code, 0x3ff000, DecoderOptions::NONE);
        let moved = decoder.decode();
        assert_eq!(moved.ip_rel_memory_address(), 0x401107);
    }

    #[test]
    fn a_syscall_is_not_moved() {
        let mut original = [0x90u8; 16];
        original[..2].copy_from_slice(&[0x0f, 0x05]);
        assert!(relocate(0x401000, &original, 0x3ff000).is_none());
    }
}
