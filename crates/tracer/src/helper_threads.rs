//! dara's per-execution helper threads (each execution's reaper and output thread), kept for the
//! next execution when their job ends rather than started and ended with every execution.
//!
//! A thread's start and end cost about 60 µs of CPU between them (the clone, a stack mapped and a
//! guard page set, the stack unmapped at its end), twice an execution: in a search of small
//! programs, several per cent of the time. A job runs on an idle thread of its kind if there is
//! one, on a new one otherwise; when it returns, the thread waits for the next job of that kind.
//! Kinds are never mixed, so what a job sets on its thread (the output thread's scheduling
//! policy) is what the next job of its kind finds; nor are threads pinned to a CPU and threads
//! that were never pinned (a job that asks for no CPU runs where dara may). A job that asks for a
//! CPU gets its idle thread moved there before it is woken (moving a sleeping thread is one
//! system call; a thread woken where it last ran and moving itself would first run there, on the
//! CPU the last execution used, and wait for that CPU's migration thread).
//! Idle threads wait for as long as dara runs (a few per job running at once, so two or three in
//! a one-job search).
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// A job running on a helper thread.
pub struct Running {
    done: Receiver<()>,
    tid: Arc<AtomicU32>,
}

impl Running {
    /// The kernel tid of the thread running the job (None until a new thread has started).
    pub fn tid(&self) -> Option<u32> {
        known_tid(&self.tid)
    }

    /// Returns once the job has returned.
    pub fn wait(&self) {
        // An error is the thread gone (the job panicked): nothing more to wait for.
        let _ = self.done.recv();
    }
}

/// An idle thread: where to send its next job.
struct Worker {
    kind: &'static str,
    /// It was pinned to a CPU.
    pinned: bool,
    jobs: Sender<(Job, Sender<()>)>,
    tid: Arc<AtomicU32>,
}

static IDLE: Mutex<Vec<Worker>> = Mutex::new(Vec::new());

/// Runs `job` on an idle thread named `kind`, or on a new one, on `cpu` if given.
pub fn run(kind: &'static str, cpu: Option<usize>, job: impl FnOnce() + Send + 'static) -> std::io::Result<Running> {
    let (done_tx, done) = channel();
    let mut job: Job = Box::new(job);
    while let Some(worker) = take_idle(kind, cpu.is_some()) {
        if let (Some(cpu), Some(tid)) = (cpu, known_tid(&worker.tid)) {
            crate::placement::pin(tid as libc::pid_t, cpu);
        }
        match worker.jobs.send((job, done_tx.clone())) {
            Ok(()) => return Ok(Running { done, tid: worker.tid }),
            // The thread is gone (an earlier job panicked): the job comes back.
            Err(std::sync::mpsc::SendError((returned, _))) => job = returned,
        }
    }
    let worker = start(kind, cpu)?;
    worker.jobs.send((job, done_tx)).map_err(|_| std::io::Error::other("a new helper thread ended at once"))?;
    Ok(Running { done, tid: worker.tid })
}

/// A thread's kernel tid, once it has started and published it.
fn known_tid(tid: &AtomicU32) -> Option<u32> {
    Some(tid.load(Ordering::Relaxed)).filter(|&t| t != 0)
}

fn take_idle(kind: &'static str, pinned: bool) -> Option<Worker> {
    let mut idle = IDLE.lock().ok()?;
    let at = idle.iter().position(|w| w.kind == kind && w.pinned == pinned)?;
    Some(idle.swap_remove(at))
}

fn start(kind: &'static str, cpu: Option<usize>) -> std::io::Result<Worker> {
    let (jobs, queue) = channel::<(Job, Sender<()>)>();
    let tid = Arc::new(AtomicU32::new(0));
    let pinned = cpu.is_some();
    let worker = Worker { kind, pinned, jobs: jobs.clone(), tid: Arc::clone(&tid) };
    std::thread::Builder::new().name(kind.into()).spawn(move || {
        if let Some(cpu) = cpu {
            crate::placement::pin(0, cpu);
        }
        // SAFETY: gettid takes no arguments and cannot fail.
        tid.store(unsafe { libc::gettid() } as u32, Ordering::Relaxed);
        for (job, done) in queue {
            job();
            // Idle again before saying so: the next job may come as soon as this one is seen done.
            if let Ok(mut idle) = IDLE.lock() {
                idle.push(Worker { kind, pinned, jobs: jobs.clone(), tid: Arc::clone(&tid) });
            }
            let _ = done.send(());
        }
    })?;
    Ok(worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_whose_job_ended_runs_the_next_job_of_its_kind() {
        let first = run("dara-test-kind", None, || {}).unwrap();
        first.wait();
        let tid = first.tid().unwrap();
        let (said, heard) = channel();
        // SAFETY: gettid takes no arguments and cannot fail.
        let second = run("dara-test-kind", None, move || said.send(unsafe { libc::gettid() } as u32).unwrap()).unwrap();
        second.wait();
        assert_eq!(heard.recv().unwrap(), tid);
        assert_eq!(second.tid(), Some(tid));
        let other = run("dara-test-other-kind", None, || {}).unwrap();
        other.wait();
        assert_ne!(other.tid(), Some(tid), "kinds never share a thread");
        let pinned = run("dara-test-kind", Some(0), || {}).unwrap();
        pinned.wait();
        assert_ne!(pinned.tid(), Some(tid), "a pinned job never gets a thread that was never pinned");
    }

    #[test]
    fn jobs_running_at_once_get_threads_of_their_own() {
        let (release, released) = channel::<()>();
        let released = Arc::new(Mutex::new(released));
        let held = Arc::clone(&released);
        let first = run("dara-test-busy", None, move || {
            let _ = held.lock().unwrap().recv();
        })
        .unwrap();
        let second = run("dara-test-busy", None, || {}).unwrap();
        second.wait();
        release.send(()).unwrap();
        first.wait();
        assert_ne!(first.tid(), second.tid());
    }
}
