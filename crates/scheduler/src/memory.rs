//! Reading target memory for the model (a futex word, a statically initialised semaphore) with
//! process_vm_readv. The targets are dara's descendants, so the kernel allows it.
use std::collections::BTreeMap;

use crate::choice::ProcessId;
use crate::model::MemoryReader;

/// Maps logical processes to kernel pids and reads their memory.
#[derive(Default)]
pub struct TargetMemory {
    pids: BTreeMap<ProcessId, u32>,
}

impl TargetMemory {
    pub fn set_pid(&mut self, process: ProcessId, pid: u32) {
        self.pids.insert(process, pid);
    }
}

impl MemoryReader for TargetMemory {
    fn read_u32(&mut self, process: ProcessId, addr: u64) -> Option<u32> {
        let pid = *self.pids.get(&process)?;
        let mut value = 0u32;
        let local = libc::iovec { iov_base: &mut value as *mut u32 as *mut libc::c_void, iov_len: 4 };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 4 };
        // SAFETY: the local iovec points at our own 4-byte integer; the remote address is only
        // interpreted by the kernel in the target's address space.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        (n == 4).then_some(value)
    }
}
