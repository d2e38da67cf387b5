//! The time-stamp counter instructions, as a fault handler finds them at a faulting pc: the
//! preload answers them from the virtual clock, and the scheduler's own thread re-enables its
//! counter when one faults there (both run with `PR_SET_TSC, PR_TSC_SIGSEGV`).

/// Which counter instruction sits at a faulting pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterRead {
    /// `rdtsc` (`0f 31`).
    Rdtsc,
    /// `rdtscp` (`0f 01 f9`), which also returns `TSC_AUX` in ecx.
    Rdtscp,
}

impl CounterRead {
    /// The instruction's length in bytes.
    pub const fn len(self) -> usize {
        match self {
            CounterRead::Rdtsc => 2,
            CounterRead::Rdtscp => 3,
        }
    }

    /// The counter instruction at `pc`, if that is one.
    ///
    /// # Safety
    /// `pc` is the address an instruction fetch just faulted at, so its first byte is mapped.
    /// The second is read only after `0f` (an escape byte: the instruction goes on), the third
    /// only after `0f 01`, a two-byte opcode that always has a ModRM byte. (A one-byte
    /// instruction that faults at the last byte of a mapping, a `ret` on a bad stack, must not
    /// make the handler fault on the byte after it.)
    pub unsafe fn at(pc: *const u8) -> Option<CounterRead> {
        // SAFETY: see the function's contract.
        let first = unsafe { *pc };
        if first != 0x0f {
            return None;
        }
        // SAFETY: see the function's contract.
        let second = unsafe { *pc.add(1) };
        match (first, second) {
            (0x0f, 0x31) => Some(CounterRead::Rdtsc),
            // SAFETY: see the function's contract.
            (0x0f, 0x01) => Self::of_bytes([first, second, unsafe { *pc.add(2) }]),
            _ => None,
        }
    }

    /// The counter instruction the three bytes at a faulting pc begin with, if they do (the
    /// ptrace agent reads them from the tracee).
    pub const fn of_bytes(bytes: [u8; 3]) -> Option<CounterRead> {
        match bytes {
            [0x0f, 0x31, _] => Some(CounterRead::Rdtsc),
            [0x0f, 0x01, 0xf9] => Some(CounterRead::Rdtscp),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_both_instructions_and_nothing_else() {
        let code = [0x0f, 0x31, 0x90, 0x0f, 0x01, 0xf9, 0x0f, 0x01, 0xd0, 0x90];
        // SAFETY: every pc is inside `code` with at least two bytes after it.
        unsafe {
            assert_eq!(CounterRead::at(code.as_ptr()), Some(CounterRead::Rdtsc));
            assert_eq!(CounterRead::at(code.as_ptr().add(3)), Some(CounterRead::Rdtscp));
            assert_eq!(CounterRead::at(code.as_ptr().add(6)), None, "xgetbv shares the first two bytes");
            assert_eq!(CounterRead::at(code.as_ptr().add(1)), None);
        }
    }
}
