//! `sendfile`, `sendfile64`, `splice` and `tee` on a socket or pipe: a receive on the input and a
//! send on the output ([`dara_abi::transfer`] decides which end is a stream and how many bytes
//! the call may move; the ptrace agent posts the same requests for the same call). The symbol
//! hooks catch libc's wrappers, the syscall trap ([`crate::trapped`]) raw calls.
//!
//! Once granted, the real call runs with its stream descriptors `O_NONBLOCK` ([`write_now`]):
//! it moves what fits now, which Linux allows these calls to return, and a blocking caller that
//! finds nothing to move posts again (never `EAGAIN`). A sendfile of 4 MiB to a socket whose
//! peer reads slowly was one blocking call that slept in the kernel with the run token.
//! `copy_file_range` is not hooked: Linux refuses anything but regular files, so it never waits.
//!
//! Runs in hooks and in the SIGSYS handler: raw system calls only, no allocation.
use dara_abi::request::{grant_limit, SEND_LEN_MASK};
use dara_abi::transfer::{self, End, Operands, Plan, TransferCall};
use dara_abi::{net_flags, Deadline, NetFlags, Request, NO_DEADLINE};
use libc::{c_int, c_uint, loff_t, off_t, size_t, ssize_t};

use super::{set_errno, sigwait, write_now};
use crate::fd::{is_net, net_kind, NetKind};
use crate::gate::Gated;
use crate::sys;

/// What descriptor `fd` is to a transfer whose operands are `ops`.
fn end(fd: c_int, ops: &Operands) -> End {
    if !is_net(fd) {
        return file_left(fd, ops).map_or(End::Other, |left| End::File { left });
    }
    let flags = write_now::status_flags(fd);
    let nonblocking = flags >= 0 && flags as c_int & libc::O_NONBLOCK != 0;
    match net_kind(fd) {
        NetKind::NotSocket => End::Pipe { nonblocking },
        NetKind::Tcp | NetKind::Socket => End::Socket { nonblocking },
    }
}

/// Transfer `call` with arguments `a` on a gated thread: its raw result (`-errno`), or None when
/// no end is a stream (the caller runs it as it is).
pub fn trapped(gate: &Gated, call: TransferCall, a: [u64; 6]) -> Option<i64> {
    let ops = call.operands(a);
    let plan = transfer::plan(call, a, |fd| end(fd, &ops))?;
    Some(run(gate, call, a, plan))
}

/// Where the input of `ops` is read from: the call's offset, or the file's own position
/// (negative when it has none).
fn input_position(ops: &Operands) -> i64 {
    if ops.input_offset != 0 {
        // SAFETY: the program passed this `loff_t` to the call, which reads it too.
        unsafe { (ops.input_offset as *const loff_t).read_unaligned() }
    } else {
        // SAFETY: plain integers; SEEK_CUR by 0 only reads the position.
        unsafe { sys::syscall(libc::SYS_lseek, &[ops.input as u64, 0, libc::SEEK_CUR as u64]) }
    }
}

/// The bytes regular file `fd`, the input of `ops`, has after the call's position; None for any
/// other descriptor.
fn file_left(fd: c_int, ops: &Operands) -> Option<u64> {
    if fd != ops.input {
        return None;
    }
    // SAFETY: all-zero is a valid stat; fstat fills it.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat writes one stat into the live local.
    if unsafe { sys::syscall(libc::SYS_fstat, &[fd as u64, &mut st as *mut libc::stat as u64]) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let at = input_position(ops);
    (at >= 0).then(|| (st.st_size as u64).saturating_sub(at as u64))
}

/// The first bytes a transfer from a file would send (for the listing), read where the call
/// reads. Zeros for a stream input.
fn head(plan: &Plan, call: TransferCall, a: [u64; 6]) -> [u8; 8] {
    let mut bytes = [0u8; 8];
    if plan.receive.is_some() {
        return bytes;
    }
    let ops = call.operands(a);
    let at = input_position(&ops);
    if at >= 0 {
        // SAFETY: at most 8 bytes into the live local.
        unsafe { sys::syscall(libc::SYS_pread64, &[ops.input as u64, bytes.as_mut_ptr() as u64, 8.min(ops.count), at as u64]) };
    }
    bytes
}

/// A wait of one end ended by a signal: whether the call goes on waiting (`SA_RESTART`).
fn restarts(gate: &Gated, result: i64) -> Option<bool> {
    (result == sigwait::INTERRUPTED).then(|| sigwait::run_handlers(gate, true))
}

fn run(gate: &Gated, call: TransferCall, mut a: [u64; 6], plan: Plan) -> i64 {
    let blocking = plan.blocking();
    let wait_flags = |nonblocking: bool| NetFlags(if nonblocking { net_flags::NONBLOCK } else { sigwait::interruptible() });
    let count_arg = match call {
        TransferCall::Sendfile => 3,
        TransferCall::Tee => 2,
        TransferCall::Splice | TransferCall::CopyFileRange => 4,
    };
    loop {
        let mut most = plan.count;
        if let Some(side) = plan.receive {
            let g = gate.post(Request::NetRecv { fd: side.fd, flags: wait_flags(side.nonblocking), deadline: Deadline::from_ns(NO_DEADLINE), len: plan.count });
            match restarts(gate, g.result) {
                Some(true) => continue,
                Some(false) => return g.result,
                None => {}
            }
            // A TCP receive takes at most what the scheduler saw queued (as `recv` does).
            if let Some(n) = grant_limit(g.result).filter(|_| net_kind(side.fd) == NetKind::Tcp) {
                most = most.min(n);
            }
        }
        if let Some(side) = plan.send {
            let head = head(&plan, call, a);
            let g = gate.post(Request::NetSend { fd: side.fd, len: most.min(SEND_LEN_MASK), flags: wait_flags(side.nonblocking), head, dest_port: 0 });
            match restarts(gate, g.result) {
                Some(true) => continue,
                Some(false) => return g.result,
                None => {}
            }
            // The grant says how much the send may move (see `STREAM_SEND_MOST`).
            if let Some(n) = grant_limit(g.result) {
                most = most.min(n);
            }
        }
        a[count_arg] = most;
        let nr = call.nr();
        let (input, output) = (plan.receive.map(|s| s.fd), plan.send.map(|s| s.fd));
        // SAFETY: the call the program made, with its own arguments (a count at most its own).
        let real = || unsafe { sys::syscall6(nr, a) };
        let r = match (input, output) {
            (Some(i), Some(o)) if i != o => write_now::with_nonblock(i, write_now::status_flags(i), || write_now::with_nonblock(o, write_now::status_flags(o), real)),
            (Some(fd), _) | (None, Some(fd)) => write_now::with_nonblock(fd, write_now::status_flags(fd), real),
            (None, None) => real(),
        };
        if r == -(libc::EAGAIN as i64) && blocking {
            continue; // nothing to move after all: wait again, never leak EAGAIN
        }
        return r;
    }
}

/// The hook's answer: the transfer on a gated thread with a stream end, else the call as it is.
fn hooked(call: TransferCall, a: [u64; 6]) -> ssize_t {
    let r = match Gated::enter().and_then(|gate| trapped(&gate, call, a)) {
        Some(r) => r,
        // SAFETY: the program's own arguments, forwarded unchanged.
        None => unsafe { sys::syscall6(call.nr(), a) },
    };
    if r < 0 {
        set_errno(-r as c_int);
        -1
    } else {
        r as ssize_t
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    hooked(TransferCall::Sendfile, [out_fd as u64, in_fd as u64, offset as u64, count as u64, 0, 0])
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    hooked(TransferCall::Sendfile, [out_fd as u64, in_fd as u64, offset as u64, count as u64, 0, 0])
}

#[no_mangle]
pub unsafe extern "C" fn splice(fd_in: c_int, off_in: *mut loff_t, fd_out: c_int, off_out: *mut loff_t, len: size_t, flags: c_uint) -> ssize_t {
    hooked(TransferCall::Splice, [fd_in as u64, off_in as u64, fd_out as u64, off_out as u64, len as u64, u64::from(flags)])
}

#[no_mangle]
pub unsafe extern "C" fn tee(fd_in: c_int, fd_out: c_int, len: size_t, flags: c_uint) -> ssize_t {
    hooked(TransferCall::Tee, [fd_in as u64, fd_out as u64, len as u64, u64::from(flags), 0, 0])
}
