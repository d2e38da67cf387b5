//! `sendfile`, `splice` and `tee` on a socket or pipe, on the ptrace path: the same `NetRecv`
//! then `NetSend` the preload posts for them (crates/preload/src/hooks/transfer.rs), decided by
//! the same [`dara_abi::transfer::plan`]; what a descriptor is comes from [`net::descriptor`].
//!
//! Once granted, the call must not sleep in the kernel with the run token: a `sendfile` of 4 MiB
//! to a socket whose peer reads slowly (`busybox httpd` serving a big file) blocks until the peer
//! has read nearly all of it. So the agent sets `O_NONBLOCK` on the stream ends (through copies
//! of the descriptors, `pidfd_getfd`: the flag belongs to the open file the copies share), lets
//! the call run to its exit and puts the program's flags back there: the call moved what fit,
//! which Linux allows these calls to return. A blocking caller that found nothing to move after
//! all (`EAGAIN`) makes the call again: it stops at the filter and posts again.
use std::os::fd::{AsRawFd, OwnedFd};

use dara_abi::request::{grant_limit, SEND_LEN_MASK};
use dara_abi::transfer::{self, End, Operands, Plan, TransferCall};
use dara_abi::{Deadline, NetFlags, Request, NO_DEADLINE};

use super::calls::{Action, Then};
use super::net::{self, Descriptor};
use super::tracees::CallStop;
use super::{resume, resume_to_exit, Agent};
use crate::ptrace::remote::{self, Registers, Syscall};

/// Which wait of a transfer was granted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stage {
    /// Its input had data: the send (if any) comes next.
    Received,
    /// Its output had room (or it has no stream output): it runs.
    Sent,
}

/// A transfer on its way: the call, its plan, what it may move (after a receive's grant).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    call: TransferCall,
    plan: Plan,
    most: u64,
    stage: Stage,
}

/// A transfer the agent let run: the program's flags to put back on its stream ends, and the
/// count it asked for (a blocking call made again asks for it again).
#[derive(Clone, Copy, Debug)]
pub struct Running {
    call: TransferCall,
    blocking: bool,
    count: u64,
    restore: [Option<(i32, i32)>; 2],
}

/// The argument that holds a transfer's count.
fn count_arg(call: TransferCall) -> usize {
    match call {
        TransferCall::Sendfile => 3,
        TransferCall::Tee => 2,
        TransferCall::Splice | TransferCall::CopyFileRange => 4,
    }
}

/// What transfer call `call` of process `pid` means; None for a call that is none of them.
pub fn decode(call: Syscall, pid: i32, output_pipes: [u64; dara_abi::OUTPUT_PIPES]) -> Option<Action> {
    let kind = TransferCall::of_syscall(call.nr)?;
    let ops = kind.operands(call.args);
    let end = |fd: i32| match net::descriptor(pid, fd, output_pipes) {
        Descriptor::Socket => End::Socket { nonblocking: net::nonblocking(pid, fd) },
        Descriptor::Pipe => End::Pipe { nonblocking: net::nonblocking(pid, fd) },
        Descriptor::Random | Descriptor::Other | Descriptor::Output if fd == ops.input => file_left(pid, &ops).map_or(End::Other, |left| End::File { left }),
        Descriptor::Random | Descriptor::Other | Descriptor::Output => End::Other,
    };
    let Some(plan) = transfer::plan(kind, call.args, end) else { return Some(Action::Run) };
    let step = Step { call: kind, plan, most: plan.count, stage: Stage::Received };
    Some(match plan.receive {
        Some(side) => Action::Post(Request::NetRecv { fd: side.fd, flags: flags(side.nonblocking), deadline: Deadline::from_ns(NO_DEADLINE), len: plan.count }, Then::Transfer(step)),
        None => {
            let step = Step { stage: Stage::Sent, ..step };
            Action::Post(send(pid, call.args, &step), Then::Transfer(step))
        }
    })
}

fn flags(nonblocking: bool) -> NetFlags {
    NetFlags(if nonblocking { dara_abi::net_flags::NONBLOCK } else { 0 })
}

/// The send of `step`'s output, of the bytes it may move; its head read from a file input.
fn send(pid: i32, args: [u64; 6], step: &Step) -> Request {
    let side = step.plan.send.expect("a transfer with a stream output");
    let head = if step.plan.receive.is_none() { file_head(pid, step.call, args) } else { [0; 8] };
    Request::NetSend { fd: side.fd, len: step.most.min(SEND_LEN_MASK), flags: flags(side.nonblocking), head, dest_port: 0 }
}

/// Where the input of `ops` (`file`, a copy of it) is read from: the call's offset, or the file's
/// own position; negative when it has none.
fn input_position(pid: i32, ops: &Operands, file: &OwnedFd) -> i64 {
    if ops.input_offset != 0 {
        let mut raw = [0u8; 8];
        if remote::read(pid, ops.input_offset, &mut raw).is_err() {
            return -1;
        }
        i64::from_le_bytes(raw)
    } else {
        // SAFETY: plain integers; SEEK_CUR by 0 only reads the shared position.
        unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_CUR) }
    }
}

/// The bytes the input of `ops`, a regular file, has after the call's position; None for any
/// other descriptor (as the preload's `file_left`).
fn file_left(pid: i32, ops: &Operands) -> Option<u64> {
    let file = net::copy_of(pid, ops.input)?;
    let meta = std::fs::File::from(file.try_clone().ok()?).metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let at = input_position(pid, ops, &file);
    (at >= 0).then(|| meta.len().saturating_sub(at as u64))
}

/// The first bytes a transfer from a file input would send (for the listing), as the preload
/// reads them: at the call's offset, or the file's own position.
fn file_head(pid: i32, call: TransferCall, args: [u64; 6]) -> [u8; 8] {
    let ops = call.operands(args);
    let mut bytes = [0u8; 8];
    let Some(file) = net::copy_of(pid, ops.input) else { return bytes };
    let at = input_position(pid, &ops, &file);
    if at >= 0 {
        // SAFETY: at most 8 bytes into the live local.
        unsafe { libc::pread(file.as_raw_fd(), bytes.as_mut_ptr().cast(), 8.min(ops.count) as usize, at) };
    }
    bytes
}

/// Sets `O_NONBLOCK` on descriptor `fd` of `pid` (through a copy); the program's flags if they
/// changed, to put back after the call.
fn set_nonblocking(pid: i32, fd: i32) -> Option<(i32, i32)> {
    let copy: OwnedFd = net::copy_of(pid, fd)?;
    // SAFETY: F_GETFL and F_SETFL take integers.
    let flags = unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 || flags & libc::O_NONBLOCK != 0 {
        return None;
    }
    // SAFETY: as above.
    (unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } == 0).then_some((fd, flags))
}

impl Agent {
    /// A wait of transfer `step` was granted with `result`.
    pub(super) fn transfer_granted(&mut self, tid: i32, mut regs: Registers, mut step: Step, result: i64) {
        let pid = self.tracees[&tid].pid;
        if let (Stage::Sent, Some(n)) = (step.stage, grant_limit(result)) {
            // The grant of the send says how much it may move (see `STREAM_SEND_MOST`).
            step.most = step.most.min(n);
        }
        if step.stage == Stage::Received {
            // A receive on a socket takes at most what the scheduler saw queued.
            let socket = step.plan.receive.is_some_and(|s| net::descriptor(pid, s.fd, [0; dara_abi::OUTPUT_PIPES]) == Descriptor::Socket);
            if let (true, Some(n)) = (socket, grant_limit(result)) {
                step.most = step.most.min(n);
            }
            if step.plan.send.is_some() {
                step.stage = Stage::Sent;
                let request = send(pid, regs.syscall().args, &step);
                self.post(tid, request, Then::Transfer(step));
                return;
            }
        }
        let arg = count_arg(step.call);
        let count = regs.syscall().args[arg];
        if step.most < count && regs.set_arg(arg, step.most).is_err() {
            return;
        }
        let mut restore = [None; 2];
        for (slot, fd) in restore.iter_mut().zip(step.plan.ends()) {
            *slot = set_nonblocking(pid, fd);
        }
        let running = Running { call: step.call, blocking: step.plan.blocking(), count, restore };
        let tracee = self.tracees.get_mut(&tid).expect("granted tracee");
        tracee.after = Some(super::listeners::AfterCall::Transfer(running));
        match tracee.stop {
            CallStop::Seccomp => resume_to_exit(tid),
            CallStop::Trapped { .. } => self.run_call(tid, regs),
        }
    }

    /// A transfer the agent let run came back (its registers `regs`, at the call's end).
    pub(super) fn transfer_returned(&mut self, tid: i32, mut regs: Registers, running: Running) {
        let pid = self.tracees[&tid].pid;
        for (fd, flags) in running.restore.into_iter().flatten() {
            if let Some(copy) = net::copy_of(pid, fd) {
                // SAFETY: F_SETFL takes integers: the program's own flags again.
                unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_SETFL, flags) };
            }
        }
        if regs.result() == -(libc::EAGAIN as i64) && running.blocking {
            // Nothing to move after all: made again as the program made it, it posts again.
            let _ = regs.set_arg(count_arg(running.call), running.count).and_then(|()| regs.restart(running.call.nr()));
        } else {
            let _ = regs.write();
        }
        resume(tid, 0);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    use super::*;

    fn call(nr: i64, args: [u64; 6]) -> Syscall {
        Syscall { nr, args }
    }

    #[test]
    fn a_sendfile_from_a_file_to_a_socket_is_a_send_of_what_the_file_has_left() {
        let pid = std::process::id() as i32;
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let path = std::env::temp_dir().join(format!("dara-transfer-{pid}"));
        std::fs::File::create(&path).and_then(|mut f| f.write_all(b"HTTP/1.1 200 OK\r\n")).expect("a file");
        let file = std::fs::File::open(&path).expect("the file");
        std::fs::remove_file(&path).ok();
        let offset = 5i64;
        let args = [a.as_raw_fd() as u64, file.as_raw_fd() as u64, &offset as *const i64 as u64, u64::MAX >> 1, 0, 0];
        let Some(Action::Post(Request::NetSend { fd, len, head, .. }, Then::Transfer(step))) = decode(call(libc::SYS_sendfile, args), pid, [0; 3]) else { panic!("not a send") };
        assert_eq!((fd, len, &head), (a.as_raw_fd(), 12, b"1.1 200 "));
        assert_eq!(step.stage, Stage::Sent);
        // Between two files it is no stream transfer: it runs as it is.
        let args = [file.as_raw_fd() as u64, file.as_raw_fd() as u64, 0, 10, 0, 0];
        assert_eq!(decode(call(libc::SYS_sendfile, args), pid, [0; 3]), Some(Action::Run));
    }

    #[test]
    fn a_splice_from_a_pipe_receives_first() {
        let pid = std::process::id() as i32;
        let (reader, _writer) = std::io::pipe().expect("pipe");
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let args = [reader.as_raw_fd() as u64, 0, a.as_raw_fd() as u64, 0, 4096, 0];
        let Some(Action::Post(Request::NetRecv { fd, len, .. }, Then::Transfer(step))) = decode(call(libc::SYS_splice, args), pid, [0; 3]) else { panic!("not a receive") };
        assert_eq!((fd, len, step.stage), (reader.as_raw_fd(), 4096, Stage::Received));
    }
}
