//! `timerfd`s on the virtual clock, the mechanism half (the model's `timerfds.rs` keeps the
//! deadlines): which eventfd stands for which timer, answering `timerfd_settime` and
//! `timerfd_gettime`, and writing a fired timer's expirations into its eventfd.
//!
//! The preload makes an eventfd where the program asked for a timerfd (docs/time.md, "timerfd"):
//! reading it returns the expirations since the last read and resets them, a non-blocking read
//! of none fails with EAGAIN, and poll, epoll and select see it readable exactly when it holds
//! some, so the network probe's readiness views need nothing new. When the clock reaches a
//! timer's deadline the driver adds the expirations to the eventfd's counter from outside, with
//! an 8-byte write through its own duplicate of the eventfd (taken with `pidfd_getfd` when the
//! timer is made), before the next decision, and drops the readiness views.
//!
//! A timer is that open file, never a descriptor number: a `dup`, a `fork` or an `exec` that
//! keeps it gives it other numbers or other processes, and a number may be reused once it is
//! closed. Whether a descriptor of the program names it is asked of the kernel with `kcmp`
//! (`KCMP_FILE`), one system call. Each timer also keeps the (pid, descriptor) pairs it was last
//! seen under. It lives while one of them (or, when none does any more, a descriptor of some
//! traced process) still names it; this is checked at each expiry, and after a close, an exec or
//! a process's end, at the next turn. Once nobody holds it, the timer is forgotten and dara's
//! duplicate closed, so the eventfd is released (and leaves the epoll sets it was in) as the
//! program's last close would release a timerfd.
//!
//! These calls are answered at once, without a decision: the thread that makes them holds the
//! token, and what they change follows from the clock.
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

use dara_abi::{Addr, Request, TimerClock, TimerExpiry, MONOTONIC_BASE_NS};

use super::Execution;
use crate::choice::{ProcessId, ThreadId};
use crate::model::{TimerId, TimerValue};
use crate::netprobe::same_file;
use crate::outcome::Outcome;

const NS_PER_SEC: u64 = 1_000_000_000;

/// The eventfds that stand for timers.
#[derive(Default)]
pub(super) struct TimerFdTable {
    timers: BTreeMap<TimerId, TimerFd>,
    /// A descriptor may have been closed (a close, an exec, a process's end) since the holders
    /// were last looked at: look before the next decision.
    pub(super) recheck: bool,
}

struct TimerFd {
    /// dara's duplicate of the eventfd: the timer's identity, and the expirations are written
    /// through it.
    file: OwnedFd,
    clock: TimerClock,
    /// (kernel pid, descriptor) pairs it was last seen under.
    holders: Vec<(u32, i32)>,
}

impl TimerFdTable {
    /// The timer behind descriptor `fd` of `pid`, if it is one; notes the pair as a holder.
    fn resolve(&mut self, pid: u32, fd: i32) -> Option<TimerId> {
        let (&id, timer) = self.timers.iter_mut().find(|(_, t)| same_file(pid, fd, &t.file))?;
        if !timer.holders.contains(&(pid, fd)) {
            timer.holders.push((pid, fd));
        }
        Some(id)
    }
}

impl Execution<'_> {
    /// Answers a `TimerCreate`, `TimerSet` or `TimerGet` of `thread` (in `process`): the result
    /// its grant carries (0 or `-errno`).
    pub(super) fn timer_request(&mut self, thread: ThreadId, process: ProcessId, request: Request) -> Result<i64, Outcome> {
        let pid = self.processes.records.get(&process).map_or(0, |r| r.pid);
        // Timers that came due since the last decision fire first, as they would have for real.
        self.fire_timers(thread)?;
        let result = match request {
            Request::TimerCreate { fd, clock } => {
                match self.network.probe.duplicate(pid, fd).map_err(|e| uncontrolled(thread, e.0))? {
                    Some(file) => {
                        let id = self.model.timer_create(process);
                        self.network.probe.timer_file(file.as_raw_fd(), true);
                        self.timerfds.timers.insert(id, TimerFd { file, clock, holders: vec![(pid, fd)] });
                        0
                    }
                    None => -i64::from(libc::EBADF),
                }
            }
            Request::TimerSet { fd, expiry, interval, old } => {
                let Some(id) = self.timerfds.resolve(pid, fd) else { return Ok(-i64::from(libc::EINVAL)) };
                let clock = self.timerfds.timers[&id].clock;
                let deadline = match expiry {
                    TimerExpiry::Disarmed => None,
                    TimerExpiry::After(ns) => Some(self.model.now().saturating_add(ns)),
                    TimerExpiry::At(reading) => Some(reading.saturating_sub(self.clock_offset(clock))),
                };
                let previous = self.model.timer_set(id, deadline, interval).unwrap_or_default();
                // Setting a timer clears the expirations not read yet, as the kernel does.
                drain(&self.timerfds.timers[&id].file);
                self.network.dirty = true;
                self.fire_timers(thread)?; // an expiry already past fires at once
                write_value(pid, old, previous)
            }
            Request::TimerGet { fd, current } => match self.timerfds.resolve(pid, fd).and_then(|id| self.model.timer_get(id)) {
                Some(value) => write_value(pid, current, value),
                None => -i64::from(libc::EINVAL),
            },
            _ => 0,
        };
        Ok(result)
    }

    /// Fires the timers that are due: their expirations are added to their eventfds, and the
    /// readiness views are taken again. A timer no traced process holds any more is forgotten
    /// (so are all such timers after a close, an exec or a process's end). `thread` is the one
    /// named if an eventfd cannot be written.
    pub(super) fn fire_timers(&mut self, thread: ThreadId) -> Result<(), Outcome> {
        if std::mem::take(&mut self.timerfds.recheck) {
            let ids: Vec<TimerId> = self.timerfds.timers.keys().copied().collect();
            for id in ids {
                if !self.still_held(id) {
                    self.forget_timer(id);
                }
            }
        }
        for (id, count) in self.model.fire_due_timers() {
            if !self.still_held(id) {
                self.forget_timer(id);
                continue;
            }
            let timer = &self.timerfds.timers[&id];
            add(&timer.file, count).map_err(|e| uncontrolled(thread, format!("cannot write a timer's expirations into its eventfd: {e}")))?;
            self.network.dirty = true;
        }
        Ok(())
    }

    /// Whether a traced process still holds timer `id`'s eventfd: one of the descriptors it was
    /// last seen under, or else any descriptor of a live traced process (which become its holders).
    fn still_held(&mut self, id: TimerId) -> bool {
        let live = &self.processes;
        let Some(timer) = self.timerfds.timers.get_mut(&id) else { return false };
        let file = &timer.file;
        timer.holders.retain(|&(pid, fd)| same_file(pid, fd, file));
        if timer.holders.is_empty() {
            timer.holders = live.live_pids().into_iter().filter_map(|pid| holder_in(pid, file)).collect();
        }
        !timer.holders.is_empty()
    }

    /// Forgets timer `id` and closes dara's duplicate of its eventfd.
    fn forget_timer(&mut self, id: TimerId) {
        if let Some(timer) = self.timerfds.timers.remove(&id) {
            // Before the duplicate is closed: the probe names its descriptor number.
            self.network.probe.timer_file(timer.file.as_raw_fd(), false);
        }
        self.model.timer_forget(id);
        self.network.dirty = true; // its eventfd leaves the epoll sets it was in
    }

    /// What `clock` reads at virtual time 0.
    fn clock_offset(&self, clock: TimerClock) -> u64 {
        match clock {
            TimerClock::Realtime => self.cfg.time.realtime_epoch_ns,
            TimerClock::Monotonic => MONOTONIC_BASE_NS,
        }
    }
}

fn uncontrolled(thread: ThreadId, detail: String) -> Outcome {
    Outcome::Uncontrolled { thread, syscall: "timerfd".into(), detail }
}

/// A descriptor of `pid` that names `file` (an eventfd).
fn holder_in(pid: u32, file: &OwnedFd) -> Option<(u32, i32)> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    dir.filter_map(Result::ok)
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:[eventfd]"))
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|&fd| same_file(pid, fd, file))
        .map(|fd| (pid, fd))
}

/// Adds `count` to an eventfd's counter.
fn add(eventfd: &OwnedFd, count: u64) -> std::io::Result<()> {
    let bytes = count.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local buffer to a descriptor we own.
    let n = unsafe { libc::write(eventfd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if n == 8 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Empties an eventfd's counter (a read of a readable eventfd never blocks).
fn drain(eventfd: &OwnedFd) {
    let mut p = libc::pollfd { fd: eventfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd, zero timeout.
    if unsafe { libc::poll(&mut p, 1, 0) } == 1 && p.revents & libc::POLLIN != 0 {
        let mut bytes = [0u8; 8];
        // SAFETY: reads 8 bytes into a live local buffer from a descriptor we own.
        unsafe { libc::read(eventfd.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
    }
}

/// Writes `value` as a `struct itimerspec` at `at` in `pid` (nothing for a null `at`): 0, or
/// `-EFAULT` if the program's memory is not there.
fn write_value(pid: u32, at: Addr, value: TimerValue) -> i64 {
    if at.0 == 0 {
        return 0;
    }
    let spec = libc::itimerspec { it_interval: timespec(value.interval_ns), it_value: timespec(value.remaining_ns) };
    if dara_tracer::procfs::write_plain(pid, at.0, &spec).ok() == Some(std::mem::size_of::<libc::itimerspec>()) {
        0
    } else {
        -i64::from(libc::EFAULT)
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / NS_PER_SEC) as libc::time_t, tv_nsec: (ns % NS_PER_SEC) as libc::c_long }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_is_found_written_and_drained_through_its_descriptors() {
        // SAFETY: eventfd takes plain integers and returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
        assert!(raw >= 0);
        // SAFETY: a descriptor eventfd just returned, owned by nobody else.
        let fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
        let pid = std::process::id();
        assert_eq!(holder_in(pid, &fd), Some((pid, raw)));
        add(&fd, 3).unwrap();
        add(&fd, 2).unwrap();
        let mut bytes = [0u8; 8];
        // SAFETY: reads 8 bytes into a live local buffer.
        assert_eq!(unsafe { libc::read(raw, bytes.as_mut_ptr().cast(), 8) }, 8);
        assert_eq!(u64::from_ne_bytes(bytes), 5, "a read returns the expirations added since the last");
        add(&fd, 1).unwrap();
        drain(&fd);
        drain(&fd); // nothing left: no blocking read
        // SAFETY: as above; the counter is empty, so a non-blocking read fails.
        assert_eq!(unsafe { libc::read(raw, bytes.as_mut_ptr().cast(), 8) }, -1);
    }
}
