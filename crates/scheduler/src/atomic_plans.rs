//! Where `--preempt-on atomics` keeps its plans, and making sure the program a process runs has
//! one before the process may go past its start barrier.
//!
//! A plan ([`dara_abi::atomic_sites`]) depends only on the executable file, so plans are cached
//! across executions and searches in a per-user directory (`$XDG_CACHE_HOME/dara/atomic-plans`,
//! else `~/.cache/dara/atomic-plans`, else `/tmp/dara-UID/atomic-plans`), created mode 0700: a
//! plan holds code the preload runs, so nobody else may write there. A plan is named by its
//! file's identity (device, inode, size, modification time), written under a temporary name and
//! renamed, so parallel executions never read half a plan. Plans older than a week are removed
//! when a dara process first uses the directory.
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use dara_abi::atomic_sites::{PlanHeader, PlanName, PLANS_DIR_MAX, PLAN_NAME_LEN};
use dara_tracer::atomic_plan;
pub use dara_tracer::atomic_plan::PlanSummary;

/// How long an unused plan is kept.
const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// The plan directory, created (mode 0700, owned by this user) if needed: the first of the
/// cache directories that can be (a read-only or too long home falls through to /tmp).
pub fn directory() -> io::Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")));
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let candidates = cache.map(|c| c.join("dara")).into_iter().chain([std::env::temp_dir().join(format!("dara-{uid}"))]);
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no cache directory");
    for base in candidates {
        match usable(&base.join("atomic-plans"), uid) {
            Ok(dir) => {
                prune_once(&dir);
                return Ok(dir);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `dir`, created if needed, if it is short enough for the region header, this user's, and
/// writable by nobody else.
fn usable(dir: &Path, uid: u32) -> io::Result<PathBuf> {
    if dir.as_os_str().len() >= PLANS_DIR_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("the plan directory {} is longer than {} bytes: set XDG_CACHE_HOME to a shorter path", dir.display(), PLANS_DIR_MAX - 1)));
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = fs::metadata(dir)?;
    if meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} belongs to another user or others may write to it; dara will not run code from it", dir.display())));
    }
    Ok(dir.to_path_buf())
}

/// Removes plans not modified for [`KEEP`], once per dara process.
fn prune_once(dir: &Path) {
    static PRUNED: std::sync::Once = std::sync::Once::new();
    PRUNED.call_once(|| {
        let Ok(entries) = fs::read_dir(dir) else { return };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).unwrap_or_default() > KEEP);
            if old {
                let _ = fs::remove_file(entry.path());
            }
        }
    });
}

/// The plan name of the file `exe` (followed through links: `/proc/PID/exe`), as the preload
/// computes it from `stat("/proc/self/exe")`.
pub fn name_of(exe: &Path) -> io::Result<PlanName> {
    let meta = fs::metadata(exe)?;
    Ok(PlanName { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime_ns: (meta.mtime() as u64).wrapping_mul(1_000_000_000).wrapping_add(meta.mtime_nsec() as u64) })
}

/// Makes sure `dir` holds the plan of the program process `pid` runs; what the plan holds, or a
/// sentence saying why there is none. A program the ptrace agent runs needs no plan (the agent
/// finds its own sites at the exec): what it traps is counted the same way.
pub fn ensure(dir: &Path, pid: u32) -> Result<PlanSummary, String> {
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let program = fs::read_link(&exe).map(|p| p.display().to_string()).unwrap_or_else(|_| format!("process {pid}'s program"));
    let name = name_of(&exe).map_err(|e| format!("cannot look at {program}: {e}"))?;
    let rendered = name.render();
    let path = dir.join(std::str::from_utf8(&rendered[..PLAN_NAME_LEN - 1]).expect("hex"));
    if let Some(summary) = summary_of(&path) {
        return Ok(summary);
    }
    if dara_tracer::binary::needs_agent(&exe) {
        return agent_summary(&exe, &program, name);
    }
    let bytes = dara_tracer::image::read(&exe).map_err(|e| format!("cannot read {program}: {e}"))?;
    let (plan, summary) = atomic_plan::plan(&bytes).map_err(|e| format!("cannot trap the atomic instructions of {program}: {e}"))?;
    let temporary = dir.join(format!(".{}.{}", std::process::id(), path.file_name().and_then(|n| n.to_str()).unwrap_or("plan")));
    let written = fs::File::create(&temporary).and_then(|mut f| f.write_all(&plan)).and_then(|()| fs::rename(&temporary, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(format!("cannot write the atomic-instruction plan of {program} into {}: {e}", dir.display()));
    }
    Ok(summary)
}

/// What the agent traps in the program at `exe` (named `program`, identified by `name`): counted
/// once per file and dara process, not at every process start of every execution.
fn agent_summary(exe: &Path, program: &str, name: PlanName) -> Result<PlanSummary, String> {
    static COUNTED: std::sync::Mutex<BTreeMap<PlanName, PlanSummary>> = std::sync::Mutex::new(BTreeMap::new());
    if let Some(&summary) = COUNTED.lock().unwrap_or_else(|e| e.into_inner()).get(&name) {
        return Ok(summary);
    }
    let bytes = dara_tracer::image::read(exe).map_err(|e| format!("cannot read {program}: {e}"))?;
    let sites = dara_tracer::ptrace::atomics::program_sites(&bytes).map_err(|e| format!("cannot trap the atomic instructions of {program}: {e}"))?;
    let summary = PlanSummary { sites: sites.len(), skipped: 0 };
    COUNTED.lock().unwrap_or_else(|e| e.into_inner()).insert(name, summary);
    Ok(summary)
}

/// What the plan at `path` holds, if it is a plan of this version.
fn summary_of(path: &Path) -> Option<PlanSummary> {
    let mut bytes = [0u8; std::mem::size_of::<PlanHeader>()];
    fs::File::open(path).ok()?.read_exact(&mut bytes).ok()?;
    let header = PlanHeader::read(&bytes).ok()?;
    Some(PlanSummary { sites: header.sites as usize, skipped: header.skipped as usize })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_written_once_and_read_back() {
        let dir = std::env::temp_dir().join(format!("dara-plans-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let first = ensure(&dir, std::process::id()).unwrap();
        assert!(first.sites > 0, "{first:?}");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        assert_eq!(ensure(&dir, std::process::id()).unwrap(), first, "the cached plan says the same");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unusable_cache_falls_through_to_the_next() {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        assert!(usable(Path::new("/proc/no-such-cache/dara/atomic-plans"), uid).is_err(), "not creatable");
        let long = PathBuf::from("/tmp").join("x".repeat(PLANS_DIR_MAX));
        assert!(usable(&long, uid).is_err(), "too long for the header");
    }

    #[test]
    fn the_name_is_the_file_s_identity() {
        let me = std::env::current_exe().unwrap();
        let name = name_of(&me).unwrap();
        assert_eq!(name, name_of(Path::new("/proc/self/exe")).unwrap());
        assert_eq!(name.size, fs::metadata(&me).unwrap().len());
    }
}
