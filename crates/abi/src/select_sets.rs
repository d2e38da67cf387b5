//! How `select`'s three descriptor sets map to `poll` events, for the preload's `select` hook and
//! the ptrace agent's `select`/`pselect6` alike (both post a select as a poll of its entries):
//! which events each set asks for, and which `revents` set its bit again (the kernel's
//! `POLLIN_SET`, `POLLOUT_SET` and `POLLEX_SET`). Poll bits are named here because this crate
//! has no libc.

const POLLIN: i16 = 0x1;
const POLLPRI: i16 = 0x2;
const POLLOUT: i16 = 0x4;
const POLLERR: i16 = 0x8;
const POLLHUP: i16 = 0x10;

/// For the read, write and except sets, in that order: (events asked, revents that mark the bit).
pub const SETS: [(i16, i16); 3] = [(POLLIN, POLLIN | POLLHUP | POLLERR), (POLLOUT, POLLOUT | POLLERR), (POLLPRI, POLLPRI)];
