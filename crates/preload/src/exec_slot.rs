//! The slot an exec'ing thread claims for the main thread of the image it execs into, shared by
//! the preload's own exec ([`crate::process::exec`]) and an exec through dara's ptrace agent
//! ([`crate::agent_exec`]), and the signal mask it hands the new image.
use core::sync::atomic::Ordering;

use dara_abi::handoff;
use dara_abi::{ProcessEntry, Slot};

use crate::{gate, region, sys};

/// The slot an exec'ing thread claims for the main thread of the image it execs into.
pub struct ExecSlot {
    entry: &'static ProcessEntry,
    slot: &'static Slot,
    /// The slot's index.
    pub index: u32,
}

impl ExecSlot {
    /// Claims a slot for the new image of the current process and names it in the process's
    /// entry (the new image's constructor, or dara's agent, finds it there). Leaves in the slot's
    /// `program_mask` the signal mask the new image starts with: the program's own at its
    /// `execve`, as the kernel keeps it across an exec. The thread's mask now is not that one: it
    /// runs dara's SIGSYS handler (SIGSYS blocked) after a post that blocked the signals the
    /// program catches while it was parked, and an image exec'd from there would keep both, a
    /// shell's SIGINT and SIGCHLD blocked in every program it execs. The real mask cannot be set
    /// before the exec instead: a caught signal that arrived while the thread was parked would
    /// then run its handler inside dara's. `None` without a region or a free slot.
    pub fn claim() -> Option<ExecSlot> {
        let header = region::header()?;
        let process = region::process();
        let entry = header.processes.get(process as usize)?;
        let index = handoff::next_free(&header.next_slot);
        let slot = region::slot(index)?;
        slot.process.store(process, Ordering::Relaxed);
        slot.pid.store(sys::host_ids().0, Ordering::Relaxed);
        let program_mask = gate::program_mask().unwrap_or_else(sys::signal_mask) & !crate::sigmask::NEVER_BLOCKED;
        slot.program_mask.store(program_mask, Ordering::Relaxed);
        handoff::claim(slot);
        entry.exec_slot.store(index + 1, Ordering::Release);
        Some(ExecSlot { entry, slot, index })
    }

    /// The exec failed: the slot is free again, and the scheduler told.
    pub fn release(self) {
        self.entry.exec_slot.store(0, Ordering::Release);
        handoff::finish(self.slot);
        gate::wake_scheduler();
    }
}

/// The signal mask a new image's main thread starts with (see [`ExecSlot::claim`]): its slot's
/// `program_mask` before the thread's first post. Read it before posting; set it (with
/// [`sys::set_signal_mask`]) once the thread may run the program.
pub fn exec_start_mask(slot: &Slot) -> u64 {
    slot.program_mask.load(Ordering::Relaxed)
}
