//! Answers about a file that cost a read of the whole file (is it static, Go, instrumented),
//! kept per version of the file for the life of the dara process: a search starts the same
//! program thousands of times and should read it once. A version is the file's
//! [`FileIdentity`] (device, inode, size, modification time), taken before and after the answer
//! is computed, so a file replaced meanwhile is not remembered under the old version.
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// Which file a path names, and which version of it: device, inode, size and modification
/// time of the file a symbolic link (such as `/proc/<pid>/exe`) leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileIdentity {
    /// The identity of the file at `path` (one `stat`); None if it cannot be looked at.
    pub fn of(path: &Path) -> Option<FileIdentity> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileIdentity { dev: m.dev(), ino: m.ino(), size: m.size(), mtime: (m.mtime(), m.mtime_nsec()) })
    }
}

/// One kind of answer, per file version; meant to be a `static`.
pub struct FileMemo<T> {
    known: Mutex<Option<HashMap<FileIdentity, T>>>,
}

impl<T: Copy> FileMemo<T> {
    pub const fn new() -> FileMemo<T> {
        FileMemo { known: Mutex::new(None) }
    }

    /// The answer for the file at `path`: remembered, or `compute(path)` (then remembered when
    /// the file did not change while it was computed). A path that cannot be looked at is
    /// computed every time.
    pub fn get(&self, path: &Path, compute: impl FnOnce(&Path) -> T) -> T {
        let Some(before) = FileIdentity::of(path) else { return compute(path) };
        if let Some(&answer) = self.lock().get_or_insert_with(HashMap::new).get(&before) {
            return answer;
        }
        let answer = compute(path);
        if FileIdentity::of(path) == Some(before) {
            self.lock().get_or_insert_with(HashMap::new).insert(before, answer);
        }
        answer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<FileIdentity, T>>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Copy> Default for FileMemo<T> {
    fn default() -> FileMemo<T> {
        FileMemo::new()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn computes_once_per_version_of_a_file() {
        let dir = std::env::temp_dir().join(format!("dara-file-memo-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, "one").unwrap();
        let memo = FileMemo::new();
        let computed = Cell::new(0);
        let ask = || {
            memo.get(&file, |p| {
                computed.set(computed.get() + 1);
                std::fs::read(p).unwrap().len()
            })
        };
        assert_eq!((ask(), ask(), computed.get()), (3, 3, 1), "asked twice, computed once");
        // Rewritten in place: the same inode, another size and a later time.
        std::fs::write(&file, "three").unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
        assert_eq!((ask(), computed.get()), (5, 2), "a new version is computed again");
        assert_eq!(memo.get(&dir.join("missing"), |_| 7), 7, "a path that cannot be looked at is computed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
