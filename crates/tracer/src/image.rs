//! Reading an ELF file named by a process's maps, a trace or a command line, within bounds.
//!
//! Paths in `/proc/<pid>/maps` are not all files one can read whole: a shared anonymous
//! mapping shows as `/dev/zero (deleted)` (nginx maps its shared zones so), a memfd as
//! `/memfd:name`, a device as itself. `std::fs::read("/dev/zero")` never ends: a replay of nginx
//! that symbolized its addresses grew to 24 GB reading it. Every whole-file read of a binary goes
//! through [`read`], which takes only regular files of a sane size, and checks the size of the
//! file it opened (not of the path looked at before).
use std::io::Read;
use std::path::Path;

/// Largest ELF file dara reads whole (symbols, build ids, coverage sites). Real executables and
/// libraries are far smaller; debug builds with full DWARF of large programs stay under it.
pub const MAX_IMAGE_BYTES: u64 = 1 << 30;

/// The bytes of the regular file at `path`; an error for a device, a directory, a pipe or a
/// file over [`MAX_IMAGE_BYTES`], which are never read.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("larger than {} MiB", MAX_IMAGE_BYTES >> 20)));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grows while it is read stops at the bound all the same.
    file.take(MAX_IMAGE_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_and_directories() {
        assert!(read(Path::new("/dev/zero")).is_err());
        assert!(read(Path::new("/")).is_err());
    }

    #[test]
    fn reads_a_regular_file() {
        let sh = crate::binary::resolve("sh").expect("sh on PATH");
        let bytes = read(&sh).unwrap();
        assert_eq!(bytes.get(..4), Some(&b"\x7fELF"[..]));
    }
}
