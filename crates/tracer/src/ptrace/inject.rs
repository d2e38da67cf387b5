//! Making a stopped tracee run system calls of the agent's choosing, its bytes and registers put
//! back as they were afterwards:
//! * at its exec ([`AtExec`]: `mmap` of the page that holds the preload-call stub, see
//!   [`map_stub`], and of the probes' displaced instructions, see [`super::displaced`]), its next
//!   instructions are overwritten with `syscall; int3` and it runs to the `int3`;
//! * at the end of a call of its own ([`syscall_after_call`]), the `syscall` instruction it just made runs again with the agent's
//!   registers, to that call's own exit stop. No byte of the program changes.
use std::io;

use crate::ptrace::remote::Registers;

/// `syscall` then `int3`.
const SYSCALL_INT3: [u8; 3] = [0x0f, 0x05, 0xcc];

/// Calls of the agent's choosing made in a thread stopped at its exec (the event stop comes
/// inside `execve`, whose return value would overwrite the registers set here: the thread is
/// first taken to the end of that call, once, when the session begins). Between calls and after
/// the last, the thread is stopped at the end of its `execve`, its registers as they were there;
/// signals that arrived meanwhile are sent to it again when the session ends.
pub struct AtExec {
    tid: i32,
    deferred: Deferred,
}

impl AtExec {
    /// Takes thread `tid`, stopped at its exec event, to the end of its `execve`.
    pub fn begin(tid: i32) -> io::Result<AtExec> {
        let mut deferred = Deferred::default();
        leave_syscall(tid, &mut deferred)?;
        Ok(AtExec { tid, deferred })
    }

    /// Runs call `nr` with `args` in the thread and returns the call's result.
    pub fn syscall(&mut self, nr: i64, args: [u64; 6]) -> io::Result<i64> {
        let tid = self.tid;
        let saved = Registers::read(tid)?;
        let at = saved.regs.rip;
        let original = peek(tid, at)?;
        let mut patched = original.to_le_bytes();
        patched[..3].copy_from_slice(&SYSCALL_INT3);
        poke(tid, at, u64::from_le_bytes(patched))?;
        let mut regs = Registers::read(tid)?;
        let r = &mut regs.regs;
        (r.rax, r.orig_rax) = (nr as u64, u64::MAX);
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
        regs.write()?;
        let result = run_to_trap(tid, &mut self.deferred).and_then(|()| Registers::read(tid)).map(|r| r.result());
        poke(tid, at, original)?;
        saved.write()?;
        result
    }

    /// Maps `len` bytes of private anonymous memory with `prot` at exactly `addr` (never over
    /// a mapping already there).
    pub fn map_fixed(&mut self, addr: u64, len: u64, prot: i32) -> io::Result<()> {
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
        let mapped = self.syscall(libc::SYS_mmap, [addr, len, prot as u64, flags, u64::MAX, 0])?;
        if mapped as u64 != addr {
            return Err(io::Error::other(format!("{addr:#x} is taken in the new image (mmap answered {mapped:#x})")));
        }
        Ok(())
    }
}

impl Drop for AtExec {
    fn drop(&mut self) {
        std::mem::take(&mut self.deferred).send(self.tid);
    }
}

/// Runs call `nr` with `args` in thread `tid`, stopped at a syscall-exit stop of its own call,
/// and returns the call's result; the thread is left at that stop, its registers as they were.
/// The call runs from the `syscall` instruction the thread just made (two bytes before its
/// instruction pointer), followed to its exit stop (`PTRACE_SYSCALL`: an entry stop, a stop at
/// the agent's filter when the call is one it traces, then the exit stop).
pub fn syscall_after_call(tid: i32, nr: i64, args: [u64; 6]) -> io::Result<i64> {
    let saved = Registers::read(tid)?;
    let at = saved.regs.rip.wrapping_sub(2);
    if peek(tid, at)? as u16 != SYSCALL {
        return Err(io::Error::other(format!("no syscall instruction before {:#x}", saved.regs.rip)));
    }
    let mut regs = Registers::read(tid)?;
    let r = &mut regs.regs;
    (r.rip, r.rax, r.orig_rax) = (at, nr as u64, u64::MAX);
    (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (args[0], args[1], args[2], args[3], args[4], args[5]);
    regs.write()?;
    let mut deferred = Deferred::default();
    let result = follow_to_exit(tid, &mut deferred).and_then(|()| Registers::read(tid)).map(|r| r.result());
    saved.write()?;
    deferred.send(tid);
    result
}

/// `syscall` (0f 05) read as a little-endian word.
const SYSCALL: u16 = 0x050f;

/// Follows `tid`, about to make a call, to that call's exit stop: the second syscall stop
/// (`SIGTRAP | 0x80`), past a stop at the agent's filter in between.
fn follow_to_exit(tid: i32, deferred: &mut Deferred) -> io::Result<()> {
    for _ in 0..2 {
        loop {
            crate::ptrace::agent::resume_to_exit(tid);
            let status = next_stop(tid)?;
            if status >> 8 == libc::SIGTRAP | 0x80 {
                break;
            }
            // A stop at the agent's filter (`PTRACE_EVENT_SECCOMP`): the call goes on.
            deferred.note(status);
        }
    }
    Ok(())
}

/// Signals that stopped a thread while the agent made a call in it: held back (the thread goes
/// on with the agent's call) and sent to it again once its registers are its own.
#[derive(Default)]
struct Deferred(Vec<i32>);

impl Deferred {
    /// Notes the signal of a signal-delivery stop (`status`); other stops carry none.
    fn note(&mut self, status: i32) {
        let signal = libc::WSTOPSIG(status);
        if status >> 16 == 0 && signal != libc::SIGTRAP | 0x80 {
            self.0.push(signal);
        }
    }

    fn send(self, tid: i32) {
        for signal in self.0 {
            // SAFETY: tkill takes two integers; the thread is the agent's tracee.
            unsafe { libc::syscall(libc::SYS_tkill, tid, signal) };
        }
    }
}

/// Maps one page of `syscall; int3` (two if it straddles a page) so that the `syscall`
/// instruction ends at `allowed_ip`, the address the preload's inherited seccomp filter lets
/// calls through from. Returns the address of the `int3` (= `allowed_ip`).
pub fn map_stub(at_exec: &mut AtExec, allowed_ip: u64) -> io::Result<u64> {
    let start = allowed_ip - 2;
    let page = start & !0xfff;
    let len = if (allowed_ip + 1) & !0xfff != page { 0x2000 } else { 0x1000 };
    at_exec.map_fixed(page, len, libc::PROT_READ | libc::PROT_EXEC).map_err(|e| io::Error::other(format!("the stub page: {e}")))?;
    let tid = at_exec.tid;
    let mut word = peek(tid, start)?.to_le_bytes();
    word[..3].copy_from_slice(&SYSCALL_INT3);
    poke(tid, start, u64::from_le_bytes(word))?;
    Ok(allowed_ip)
}

/// Takes stopped thread `tid` to the end of the system call it is stopped in (its syscall-exit
/// stop, `SIGTRAP | 0x80` with `PTRACE_O_TRACESYSGOOD`).
fn leave_syscall(tid: i32, deferred: &mut Deferred) -> io::Result<()> {
    crate::ptrace::agent::resume_to_exit(tid);
    wait_for(tid, libc::SIGTRAP | 0x80, deferred)
}

fn run_to_trap(tid: i32, deferred: &mut Deferred) -> io::Result<()> {
    crate::ptrace::agent::resume(tid, 0);
    wait_for(tid, libc::SIGTRAP, deferred)
}

/// Waits for `tid`'s next stop with `signal` and no event; other stops (a signal on its way, a
/// stop at the agent's filter for a call it traces) go on until the agent's call is done.
fn wait_for(tid: i32, signal: i32, deferred: &mut Deferred) -> io::Result<()> {
    loop {
        let status = next_stop(tid)?;
        if status >> 8 == signal {
            return Ok(());
        }
        deferred.note(status);
        crate::ptrace::agent::resume(tid, 0);
    }
}

/// `tid`'s next stop status (an error if it ended instead).
fn next_stop(tid: i32) -> io::Result<i32> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into the live local.
    let got = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
    if got != tid {
        return Err(io::Error::last_os_error());
    }
    if !libc::WIFSTOPPED(status) {
        return Err(io::Error::other("the thread ended while the agent made a call in it"));
    }
    Ok(status)
}

/// The word at `addr` in stopped thread `tid`'s address space (text included).
pub(crate) fn peek(tid: i32, addr: u64) -> io::Result<u64> {
    // SAFETY: PEEKTEXT reads a word of the tracee; errno tells a -1 word from a failure.
    let word = unsafe {
        *libc::__errno_location() = 0;
        libc::ptrace(libc::PTRACE_PEEKTEXT, tid, addr as usize, 0usize)
    };
    // SAFETY: reads this thread's errno.
    if word == -1 && unsafe { *libc::__errno_location() } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(word as u64)
}

/// Writes the word at `addr` in stopped thread `tid`'s address space (read-only text included).
pub(crate) fn poke(tid: i32, addr: u64, word: u64) -> io::Result<()> {
    // SAFETY: POKETEXT writes one word into the stopped tracee's memory.
    if unsafe { libc::ptrace(libc::PTRACE_POKETEXT, tid, addr as usize, word as usize) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
