//! Outside UDP senders on the ptrace path, as the preload's hooks handle them
//! (crates/preload/src/hooks/outside.rs): a UDP socket the program binds while outside peers
//! are kept apart is split (`listeners.rs`, at `bind`), and dara passes each outside sender's
//! datagrams on from a socket of its own that stands for it. The program must not see those
//! sockets, nor talk past them:
//! * a `recvfrom`/`recvmsg` shows the sender as the outside client dara relays for (the address
//!   rewritten at the call's exit, `listeners.rs`'s `AfterCall::PeerName`);
//! * a `sendto`/`sendmsg` to such a client goes to dara's socket that stands for it: the post
//!   names that socket's port (the scheduler settles the datagram into it), and the granted call
//!   runs with the destination replaced by an address written below the thread's red zone (the
//!   kernel copies it at the call's entry), its argument registers put back at the call's exit.
//!   Before, a static UDP server's answers went straight to the outside client, unrecorded.
//! * a `connect` to such a client (UDP), or to a TCP server outside dara that dara dialled for
//!   the program at this grant (`relayed_flags::DIALED`), goes to dara's socket that stands for
//!   it, the same way.
use dara_abi::peer_address::{self, InetAddress, SOCKADDR_IN6};
use dara_abi::Request;

use super::calls::Action;
use super::listeners::AfterCall;
use super::tracees::CallStop;
use super::{resume_to_exit, Agent};
use crate::ptrace::remote::{self, Registers, Syscall};

/// Bytes of a `struct msghdr`.
const MSGHDR: usize = 56;

/// The INET address of `len` bytes at `addr` in `pid`.
fn address_at(pid: i32, addr: u64, len: u32) -> Option<InetAddress> {
    let mut bytes = [0u8; SOCKADDR_IN6];
    let len = (len as usize).min(SOCKADDR_IN6);
    if addr == 0 || remote::read(pid, addr, &mut bytes[..len]).is_err() {
        return None;
    }
    InetAddress::parse(&bytes[..len])
}

/// Where a `sendto`, `sendmsg` or `connect` call goes, as (address, length).
fn destination(pid: i32, call: &Syscall) -> Option<(u64, u32)> {
    match call.nr {
        libc::SYS_sendto => Some((call.args[4], call.args[5] as u32)),
        libc::SYS_connect => Some((call.args[1], call.args[2] as u32)),
        libc::SYS_sendmsg => {
            let (name, name_len, _, _) = super::net::msghdr(pid, call.args[1]);
            Some((name, name_len))
        }
        _ => None,
    }
}

impl Agent {
    /// dara's address that stands for the outside peer a `sendto`/`sendmsg`/`connect` of `pid`
    /// goes to, if it goes to one (as bytes and their length): a UDP client, or for a connect
    /// an outside TCP server dara dialled.
    fn relayed_destination(&self, pid: i32, call: &Syscall) -> Option<([u8; SOCKADDR_IN6], usize)> {
        let header = self.region.header();
        if header.outside == 0 {
            return None;
        }
        let (addr, len) = destination(pid, call)?;
        let to = address_at(pid, addr, len)?;
        let dialled = (call.nr == libc::SYS_connect).then(|| peer_address::relayed_destination(&to, &header.relayed, false)).flatten();
        dialled.or_else(|| peer_address::relayed_destination(&to, &header.relayed, true))
    }

    /// A send's post names the port of dara's socket that stands for the outside client it goes
    /// to (the scheduler settles the datagram there), not the client's.
    pub(super) fn post_to_relay(&self, pid: i32, call: &Syscall, mut action: Action) -> Action {
        if let Action::Post(Request::NetSend { dest_port, .. }, _) = &mut action {
            if let Some((relay, _)) = self.relayed_destination(pid, call) {
                *dest_port = u16::from_be_bytes([relay[2], relay[3]]);
            }
        }
        action
    }

    /// The grant of a send or connect to an outside peer dara relays for (see the module doc):
    /// its destination replaced for the call, which runs to its exit, where the registers are put
    /// back. True then; false (nothing done) for any other send.
    pub(super) fn send_to_relay(&mut self, tid: i32, regs: &mut Registers) -> bool {
        let tracee = &self.tracees[&tid];
        let (pid, call) = (tracee.pid, regs.syscall());
        if tracee.stop != CallStop::Seccomp {
            return false;
        }
        let Some((relay, size)) = self.relayed_destination(pid, &call) else { return false };
        // Below the red zone: the sockaddr, and under it a copy of a sendmsg's msghdr.
        let sockaddr_at = (regs.regs.rsp - 128 - 64) & !15;
        if remote::write(pid, sockaddr_at, &relay[..size]).is_err() {
            return false;
        }
        if call.nr == libc::SYS_sendto {
            if regs.set_arg(4, sockaddr_at).and_then(|()| regs.set_arg(5, size as u64)).is_err() {
                return false;
            }
        } else if call.nr == libc::SYS_connect {
            if regs.set_arg(1, sockaddr_at).and_then(|()| regs.set_arg(2, size as u64)).is_err() {
                return false;
            }
        } else {
            let mut msghdr = [0u8; MSGHDR];
            if remote::read(pid, call.args[1], &mut msghdr).is_err() {
                return false;
            }
            msghdr[..8].copy_from_slice(&sockaddr_at.to_le_bytes());
            msghdr[8..12].copy_from_slice(&(size as u32).to_le_bytes());
            let msghdr_at = sockaddr_at - 64;
            if remote::write(pid, msghdr_at, &msghdr).is_err() || regs.set_arg(1, msghdr_at).is_err() {
                return false;
            }
        }
        self.tracees.get_mut(&tid).expect("a known tracee").after = Some(AfterCall::PutBack(call.args));
        resume_to_exit(tid);
        true
    }
}
