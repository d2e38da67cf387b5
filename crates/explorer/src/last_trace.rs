//! The search's `trace.bin`: the last judged execution's trace. Writing it after every execution
//! (encode, write a temporary file, rename) cost about 6 % of a small program's execution, for a
//! file only the last version of which anybody reads. So while executions go by it is written at
//! most once per [`LastTrace::new`]'s interval (the first one at once, so a long search shows one
//! early), and the one not written yet is kept in memory (as what it is made from: an execution's
//! trace is only made to be written) and written when the search ends,
//! however it ends: [`LastTrace::flush`] from the judge's end, and on drop when the search fails
//! with an error. A trace too large to write is therefore reported when it is written, not
//! necessarily after its execution. Bug and goal traces are not written here: they are written
//! at once.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dara_scheduler::trace::{self, Trace, TraceError};

pub(crate) struct LastTrace<'a> {
    path: PathBuf,
    every: Duration,
    /// How to make the last execution's trace while it is not on disk yet (made only to be
    /// written: most are replaced first, and making one costs a few per cent of a small
    /// program's execution).
    unwritten: Option<Box<dyn FnOnce() -> Trace + 'a>>,
    /// When a trace was last written; `None` before the first.
    written_at: Option<Instant>,
}

impl<'a> LastTrace<'a> {
    /// The trace to be kept at `path`, written at most once per `every` until the end.
    pub(crate) fn new(path: PathBuf, every: Duration) -> LastTrace<'a> {
        LastTrace { path, every, unwritten: None, written_at: None }
    }

    /// The trace `make` makes is now the last execution's; made and written now if none was
    /// written in the interval.
    pub(crate) fn update(&mut self, make: impl FnOnce() -> Trace + 'a) -> Result<(), TraceError> {
        self.unwritten = Some(Box::new(make));
        if self.written_at.is_none_or(|at| at.elapsed() >= self.every) {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the last execution's trace if it is not on disk yet; its path, once one was
    /// written (`None` when no execution was judged).
    pub(crate) fn flush(&mut self) -> Result<Option<&Path>, TraceError> {
        if let Some(make) = self.unwritten.take() {
            trace::write_file(&self.path, &make())?;
            self.written_at = Some(Instant::now());
        }
        Ok(self.written_at.map(|_| self.path.as_path()))
    }
}

/// A search that fails with an error still leaves the last judged execution's trace on disk;
/// the error it fails with is the one the user sees, so a failure to write here is not reported.
impl Drop for LastTrace<'_> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use dara_scheduler::trace::{TraceHeader, WrittenFiles};
    use dara_scheduler::Outcome;

    use super::*;

    fn trace(execution: u64) -> Trace {
        let header = TraceHeader {
            dara_version: "0.1.0".into(),
            command: vec!["./prog".into()],
            cwd: "/".into(),
            env: vec![],
            env_left_out: vec![],
            strategy: "random".into(),
            seed: 1,
            execution,
            random_seed: 2,
            cpus: 2,
            memory: Default::default(),
            library_cache: None,
            max_steps: 100,
            max_vtime_ns: 1_000,
            build_ids: vec![],
            preempt: Default::default(),
            cluster: None,
            setup: None,
            cleanup: None,
            outside: false,
            stdin: false,
            time: Default::default(),
            written: WrittenFiles::default(),
            liveness: None,
            critical_transition: None,
            pids: None,
        };
        Trace { header, steps: vec![], outcome: Outcome::Exited { code: 0, location: None }, coverage: Default::default(), outside: vec![] }
    }

    /// A fresh directory for one test, removed with its contents at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("dara-last-trace-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn on_disk(path: &Path) -> Option<u64> {
        trace::read_file(path).ok().map(|t| t.header.execution)
    }

    #[test]
    fn writes_the_first_at_once_then_at_most_once_an_interval_and_the_last_at_the_end() {
        let dir = Scratch::new("interval");
        let path = dir.0.join("trace.bin");
        let mut last = LastTrace::new(path.clone(), Duration::from_secs(3600));
        assert_eq!(last.flush().unwrap(), None, "nothing judged, nothing written");
        last.update(|| trace(0)).unwrap();
        assert_eq!(on_disk(&path), Some(0), "the first execution's trace is written at once");
        last.update(|| trace(1)).unwrap();
        last.update(|| trace(2)).unwrap();
        assert_eq!(on_disk(&path), Some(0), "within the interval nothing more is written");
        assert_eq!(last.flush().unwrap(), Some(path.as_path()));
        assert_eq!(on_disk(&path), Some(2), "the end writes the last one");

        let mut every_time = LastTrace::new(path.clone(), Duration::ZERO);
        every_time.update(|| trace(3)).unwrap();
        every_time.update(|| trace(4)).unwrap();
        assert_eq!(on_disk(&path), Some(4), "past the interval every update writes");
    }

    #[test]
    fn a_search_that_fails_still_leaves_its_last_trace() {
        let dir = Scratch::new("error");
        let path = dir.0.join("trace.bin");
        let mut last = LastTrace::new(path.clone(), Duration::from_secs(3600));
        last.update(|| trace(0)).unwrap();
        last.update(|| trace(1)).unwrap();
        drop(last);
        assert_eq!(on_disk(&path), Some(1));
    }
}
