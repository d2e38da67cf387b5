//! Reading target memory for the model (a futex word, a statically initialised semaphore) with
//! `procfs::read_memory`, and telling where an address lies in memory processes share (from
//! `/proc/<pid>/maps`). The targets are dara's descendants, so the kernel allows both.
use std::collections::BTreeMap;

use crate::choice::ProcessId;
use crate::model::{MemoryReader, SharedBacking, SharedLocation};

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
        let mut value = [0u8; 4];
        (dara_tracer::procfs::read_memory(pid, addr, &mut value).ok()? == 4).then(|| u32::from_ne_bytes(value))
    }

    fn shared_location(&mut self, process: ProcessId, addr: u64) -> Option<SharedLocation> {
        let pid = *self.pids.get(&process)?;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        maps.lines().find_map(|line| shared_mapping_at(line, addr))
    }
}

/// Where `addr` lies in the mapping of one `/proc/<pid>/maps` line, when that mapping is shared
/// (`s` in its permissions) and file-backed (an inode: a shared anonymous mapping has one too).
/// A line: `start-end perms offset major:minor inode [path]`, numbers in hex but the inode.
fn shared_mapping_at(line: &str, addr: u64) -> Option<SharedLocation> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
    if !(start..end).contains(&addr) || !fields.next()?.ends_with('s') {
        return None;
    }
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let device = u64::from_str_radix(major, 16).ok()? << 32 | u64::from_str_radix(minor, 16).ok()?;
    let inode: u64 = fields.next()?.parse().ok()?;
    (inode != 0).then_some(SharedLocation { backing: SharedBacking { device, inode }, offset: offset + (addr - start) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_mapping_gives_its_file_and_the_offset_in_it() {
        let line = "7ffff7f1b000-7ffff7f1d000 rw-s 00001000 00:1a 4242                       /dev/shm/sem.mp-x1";
        let at = shared_mapping_at(line, 0x7fff_f7f1_c010).unwrap();
        assert_eq!(at.backing, SharedBacking { device: 0x1a, inode: 4242 });
        assert_eq!(at.offset, 0x1000 + 0x1010);
        assert_eq!(shared_mapping_at(line, 0x7fff_f7f1_d000), None, "past the end");
        let private = "7ffff7f1b000-7ffff7f1d000 rw-p 00000000 00:1a 4242 /tmp/x";
        assert_eq!(shared_mapping_at(private, 0x7fff_f7f1_c010), None);
        let anonymous = "7ffff7f1b000-7ffff7f1d000 rw-s 00000000 00:00 0";
        assert_eq!(shared_mapping_at(anonymous, 0x7fff_f7f1_c010), None);
    }
}
