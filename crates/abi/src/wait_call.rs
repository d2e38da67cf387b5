//! `wait4` and `waitid` as dara models them, shared by the preload's trap
//! (crates/preload/src/process.rs) and the ptrace agent: which child a call waits for and with
//! which options ([`WaitCall::of`]), and, once the scheduler chose the child, the same call made
//! to collect exactly that one without blocking ([`WaitCall::collect`]). x86-64 Linux numbers.

use crate::WaitOptions;

const WNOHANG: u64 = 1;
const WEXITED: u64 = 4;
const WNOWAIT: u64 = 0x0100_0000;
const P_ALL: u64 = 0;
const P_PID: u64 = 1;
const P_PGID: u64 = 2;

/// A `wait4`/`waitid` call dara can model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitCall {
    /// `waitid` (else `wait4`).
    pub waitid: bool,
    /// The kernel pid it waits for; None for any child (a process group counts as any).
    pub pid: Option<u32>,
    pub options: WaitOptions,
}

impl WaitCall {
    /// The call with arguments `a`; None for a form dara does not model (a `waitid` by pidfd,
    /// or one for stop/continue events only: traced processes never stop).
    pub fn of(waitid: bool, a: [u64; 6]) -> Option<WaitCall> {
        let (pid, options) = if waitid {
            let pid = match a[0] {
                P_PID => u32::try_from(a[1] as i32).ok().filter(|&p| p > 0),
                P_ALL | P_PGID => None,
                _ => return None,
            };
            if a[3] & WEXITED == 0 {
                return None;
            }
            (pid, a[3])
        } else {
            let pid = a[0] as i32;
            (u32::try_from(pid).ok().filter(|&p| p > 0), a[2])
        };
        Some(WaitCall { waitid, pid, options: WaitOptions { nohang: options & WNOHANG != 0, nowait: options & WNOWAIT != 0 } })
    }

    /// The arguments that collect exactly child `pid`, the one the model chose (it has exited,
    /// so the call never blocks): the call's own, aimed at `pid`, without `WNOHANG`.
    pub fn collect(&self, mut a: [u64; 6], pid: u32) -> [u64; 6] {
        if self.waitid {
            a[0] = P_PID;
            a[1] = u64::from(pid);
            a[3] &= !WNOHANG;
        } else {
            a[0] = u64::from(pid);
            a[2] &= !WNOHANG;
        }
        a
    }

    /// The `siginfo_t` a `waitid` with `WNOHANG` that found nothing must clear (POSIX: its
    /// `si_pid` is 0), as (address, size); None for `wait4` or a null pointer.
    pub fn info_to_clear(&self, a: [u64; 6]) -> Option<(u64, usize)> {
        (self.waitid && a[2] != 0).then_some((a[2], 128))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_names_its_child_and_collects_it_without_wnohang() {
        let w = WaitCall::of(false, [42, 0x1000, WNOHANG, 0, 0, 0]).expect("a wait4");
        assert_eq!((w.pid, w.options.nohang), (Some(42), true));
        assert_eq!(w.collect([u64::MAX, 0x1000, WNOHANG, 0, 0, 0], 42), [42, 0x1000, 0, 0, 0, 0]);
        let any = WaitCall::of(false, [(-1i64) as u64, 0, 0, 0, 0, 0]).expect("wait4(-1)");
        assert_eq!(any.pid, None);
        let id = WaitCall::of(true, [P_ALL, 0, 0x2000, WEXITED | WNOWAIT, 0, 0]).expect("a waitid");
        assert_eq!((id.pid, id.options.nowait, id.info_to_clear([P_ALL, 0, 0x2000, 0, 0, 0])), (None, true, Some((0x2000, 128))));
        assert_eq!(WaitCall::of(true, [P_PID, 7, 0, 2 /* WSTOPPED */, 0, 0]), None);
        assert_eq!(WaitCall::of(true, [3 /* P_PIDFD */, 7, 0, WEXITED, 0, 0]), None);
    }
}
