//! A stopped tracee's registers and memory, as the agent reads and writes them: the system call
//! it stopped in (number and arguments), its result, and the program's buffers (a `timespec`
//! to fill, a futex timeout to read, random bytes to write).
use std::io;

/// The registers of a tracee in a ptrace stop.
pub struct Registers {
    tid: i32,
    pub regs: libc::user_regs_struct,
}

/// What [`Registers::syscall`] decodes: the call a seccomp stop is about to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    pub nr: i64,
    pub args: [u64; 6],
}

impl Registers {
    /// Reads the registers of stopped tracee `tid`.
    pub fn read(tid: i32) -> io::Result<Registers> {
        // SAFETY: all-zero is a valid user_regs_struct; PTRACE_GETREGS fills it.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: the kernel writes one user_regs_struct into the live local.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0usize, &mut regs as *mut libc::user_regs_struct) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Registers { tid, regs })
    }

    /// The system call the tracee stopped in (at a seccomp stop the number is in `orig_rax`).
    pub fn syscall(&self) -> Syscall {
        let r = &self.regs;
        Syscall { nr: r.orig_rax as i64, args: [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9] }
    }

    /// Makes the stopped call return `value` without running it (number -1 skips it).
    pub fn skip_with(&mut self, value: i64) -> io::Result<()> {
        self.regs.orig_rax = u64::MAX;
        self.regs.rax = value as u64;
        self.write()
    }

    /// Replaces argument `index` (0-5) of the call about to run.
    pub fn set_arg(&mut self, index: usize, value: u64) -> io::Result<()> {
        let r = &mut self.regs;
        *[&mut r.rdi, &mut r.rsi, &mut r.rdx, &mut r.r10, &mut r.r8, &mut r.r9][index] = value;
        self.write()
    }

    /// Replaces the number of the call about to run (the kernel checks the new call against
    /// the filter again, and lets it through).
    pub fn set_nr(&mut self, nr: i64) -> io::Result<()> {
        self.regs.orig_rax = nr as u64;
        self.write()
    }

    /// At a syscall-exit stop: the call's result.
    pub fn result(&self) -> i64 {
        self.regs.rax as i64
    }

    /// At a syscall-exit stop: makes the tracee make call `nr` again (back onto the two-byte
    /// `syscall` instruction, the number restored, the arguments as they were).
    pub fn restart(&mut self, nr: i64) -> io::Result<()> {
        self.regs.rip -= 2;
        self.regs.rax = nr as u64;
        self.write()
    }

    /// Writes the registers back (after editing `regs`).
    pub fn write(&self) -> io::Result<()> {
        // SAFETY: the kernel reads one user_regs_struct from the live field.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, self.tid, 0usize, &self.regs as *const libc::user_regs_struct) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The signal mask of stopped tracee `tid` (the kernel's 64-signal word).
pub fn signal_mask(tid: i32) -> io::Result<u64> {
    let mut mask: u64 = 0;
    // SAFETY: PTRACE_GETSIGMASK writes `size_of::<u64>()` bytes into the live local.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETSIGMASK, tid, std::mem::size_of::<u64>(), &mut mask as *mut u64) };
    if rc == -1 { Err(io::Error::last_os_error()) } else { Ok(mask) }
}

/// Sets the signal mask of stopped tracee `tid`; it takes effect when the tracee runs.
pub fn set_signal_mask(tid: i32, mask: u64) -> io::Result<()> {
    // SAFETY: PTRACE_SETSIGMASK reads `size_of::<u64>()` bytes from the live local.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SETSIGMASK, tid, std::mem::size_of::<u64>(), &mask as *const u64) };
    if rc == -1 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Reads `buf.len()` bytes at `addr` in process `pid`.
pub fn read(pid: i32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    match crate::procfs::read_memory(pid as u32, addr, buf)? {
        n if n == buf.len() => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EFAULT)),
    }
}

/// Writes `bytes` at `addr` in process `pid`.
pub fn write(pid: i32, addr: u64, bytes: &[u8]) -> io::Result<()> {
    match crate::procfs::write_memory(pid as u32, addr, bytes)? {
        n if n == bytes.len() => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EFAULT)),
    }
}

/// Reads a `timespec` at `addr` as (seconds, nanoseconds); `None` for a null pointer.
pub fn read_timespec(pid: i32, addr: u64) -> io::Result<Option<(i64, i64)>> {
    if addr == 0 {
        return Ok(None);
    }
    let mut buf = [0u8; 16];
    read(pid, addr, &mut buf)?;
    let word = |i: usize| i64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    Ok(Some((word(0), word(8))))
}

/// Writes a `timespec` (or a `timeval`: the same two words) at `addr`.
pub fn write_pair(pid: i32, addr: u64, (first, second): (i64, i64)) -> io::Result<()> {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&first.to_le_bytes());
    buf[8..].copy_from_slice(&second.to_le_bytes());
    write(pid, addr, &buf)
}

/// Reads the NUL-terminated string at `addr` (at most 4096 bytes, as a path can be).
pub fn read_c_string(pid: i32, addr: u64) -> io::Result<String> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < 4096 {
        let at = addr + out.len() as u64;
        // Up to the end of the page, so a string that ends just before an unmapped page reads.
        let n = chunk.len().min((4096 - (at % 4096)) as usize);
        read(pid, at, &mut chunk[..n])?;
        match chunk[..n].iter().position(|&b| b == 0) {
            Some(end) => {
                out.extend_from_slice(&chunk[..end]);
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            None => out.extend_from_slice(&chunk[..n]),
        }
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}
