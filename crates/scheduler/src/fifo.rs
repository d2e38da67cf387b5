//! Who holds a FIFO open: the probe behind a blocking FIFO `open` (`Op::FifoOpen`).
//!
//! Linux makes a blocking `open(fifo, O_RDONLY)` wait until some process opens the FIFO for
//! writing, and `open(fifo, O_WRONLY)` until one opens it for reading. A waiting reader already
//! counts as a reader (the kernel counts it before it sleeps), and the preload keeps that true:
//! it opens the reader's end non-blocking before it posts. A waiting writer cannot hold an end
//! (a non-blocking write open fails with `ENXIO` when nobody reads), so it holds nothing until
//! its grant.
//!
//! Why dara does not ask the kernel by opening the FIFO itself: a write open and close of its
//! own would count as a writer having come and gone, and a program's non-blocking reader that
//! polls would then see `POLLHUP` the real run never shows. Instead the driver reads who has
//! the FIFO open from `/proc/<pid>/fd` and `/proc/<pid>/fdinfo` of every traced process: a
//! descriptor that names the FIFO's (device, inode) with access mode `O_RDONLY` or `O_RDWR`
//! is a reader, `O_WRONLY` or `O_RDWR` a writer. Looked at only while such an open waits, with
//! every thread parked, so the answer is the same in every run of a schedule. A writer that
//! opened and closed again between two looks still wakes a reader, as the kernel's counted
//! opens do: the driver also polls the reader's own end, which shows `POLLHUP` once a writer came
//! and went since it opened (and `POLLIN` when that writer left data). A process outside
//! dara that holds the FIFO is not seen (the wait goes on; see docs/processes.md).
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// The FIFO a waiting open names, and which side it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FifoWait {
    pub device: u64,
    pub inode: u64,
    /// The open is a reader's: it waits for a writer (else a writer's, waiting for a reader).
    pub reader: bool,
}

impl FifoWait {
    /// Whether one of `pids` holds the FIFO open for the direction this open waits for.
    pub fn partner_present(&self, pids: impl IntoIterator<Item = u32>) -> bool {
        pids.into_iter().any(|pid| self.held_by(pid))
    }

    fn held_by(&self, pid: u32) -> bool {
        let Ok(entries) = fs::read_dir(format!("{}/fd", dara_tracer::procfs::live_task_dir(pid))) else { return false };
        entries.flatten().any(|entry| {
            // Sockets, pipes and anonymous inodes read as "type:[...]": never a FIFO on a file system.
            let named_file = fs::read_link(entry.path()).is_ok_and(|l| l.as_os_str().as_encoded_bytes().first() == Some(&b'/'));
            named_file
                && fs::metadata(entry.path()).is_ok_and(|m| m.file_type().is_fifo() && m.dev() == self.device && m.ino() == self.inode)
                && access_mode(pid, &entry.file_name().to_string_lossy()).is_some_and(|mode| self.partner_mode(mode))
        })
    }

    /// Whether a descriptor with this access mode is the partner this open waits for.
    fn partner_mode(&self, mode: i32) -> bool {
        match mode {
            libc::O_RDWR => true,
            libc::O_WRONLY => self.reader,
            libc::O_RDONLY => !self.reader,
            _ => false,
        }
    }
}

/// The access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`) of descriptor `fd` of `pid`, from the octal
/// `flags:` line of its fdinfo.
fn access_mode(pid: u32, fd: &str) -> Option<i32> {
    let info = dara_tracer::procfs::descriptor_info(pid, fd.parse().ok()?)?;
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?.trim();
    i32::from_str_radix(flags, 8).ok().map(|f| f & libc::O_ACCMODE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::{FromRawFd, OwnedFd};

    fn open(path: &CString, flags: i32) -> OwnedFd {
        // SAFETY: a NUL-terminated path; the result is checked before it is owned.
        let fd = unsafe { libc::open(path.as_ptr(), flags) };
        assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
        // SAFETY: a descriptor open just returned, owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    #[test]
    fn a_reader_and_a_writer_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("dara-fifo-unit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let m = fs::metadata(&path).unwrap();
        let me = std::process::id();
        let wants_writer = FifoWait { device: m.dev(), inode: m.ino(), reader: true };
        let wants_reader = FifoWait { reader: false, ..wants_writer };
        assert!(!wants_writer.partner_present([me]) && !wants_reader.partner_present([me]));
        let reader = open(&c, libc::O_RDONLY | libc::O_NONBLOCK);
        assert!(wants_reader.partner_present([me]), "a reader is seen");
        assert!(!wants_writer.partner_present([me]), "a reader is no writer");
        let writer = open(&c, libc::O_WRONLY | libc::O_NONBLOCK);
        assert!(wants_writer.partner_present([me]), "a writer is seen");
        drop((reader, writer));
        assert!(!wants_writer.partner_present([me]) && !wants_reader.partner_present([me]));
        let both = open(&c, libc::O_RDWR);
        assert!(wants_writer.partner_present([me]) && wants_reader.partner_present([me]), "O_RDWR is both");
        drop(both);
        fs::remove_dir_all(&dir).unwrap();
    }
}
