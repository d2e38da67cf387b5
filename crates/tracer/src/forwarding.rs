//! The thread that copies one execution's output pipes to where they go: the target's stdout and
//! stderr to dara's (or nowhere, the pipes still drained so the target behaves the same), keeping
//! the end of stderr (assertion messages, panics and sanitizer reports locate a bug), and the
//! SDK's pipe line by line to the scheduler's property sink.
//!
//! One thread polls all of them (an execution used to start one thread per pipe: three thread
//! starts and joins per execution). Once every pipe is at end of file it says so
//! ([`Forwarder::wait_drained`]), which is how teardown knows everything the target wrote has been
//! passed on, and ends (joined when the [`Forwarder`] is dropped, which a search does on another
//! thread). Write errors (a closed terminal) are ignored, so the target never blocks on a full
//! pipe.
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use crate::launch::LineSink;

/// How much of the target's stderr a [`Pipe`] with a tail keeps.
pub const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// The longest SDK line dara keeps (property names are cut to fit).
pub const SDK_LINE_MAX: usize = 4096;

/// Where a pipe's bytes go.
pub enum Sink {
    Stdout,
    Stderr,
    Discard,
    /// Each complete line (without its newline), in the order written.
    Lines(LineSink),
}

/// One pipe to copy.
pub struct Pipe {
    pub from: std::fs::File,
    pub to: Sink,
    /// Keeps the last [`STDERR_TAIL_BYTES`] read here.
    pub tail: Option<Arc<Mutex<Vec<u8>>>>,
}

/// The running thread.
pub struct Forwarder {
    thread: crate::helper_threads::Running,
    drained: std::sync::mpsc::Receiver<()>,
}

impl Forwarder {
    /// Lets the thread finish on its own, unwaited for (a teardown that left a process alive:
    /// its pipes may stay open).
    pub fn leave(self) {
        std::mem::forget(self);
    }

    /// Moves the thread to `cpu` (not one that has yet to start: it stays where it starts).
    pub fn move_to(&self, cpu: usize) {
        if let Some(tid) = self.thread.tid() {
            crate::placement::pin(tid as libc::pid_t, cpu);
        }
    }

    /// Returns once every pipe has reached end of file and all it held has been passed on.
    pub fn wait_drained(&self) {
        // An error is the thread gone without saying so: there is nothing more to wait for.
        let _ = self.drained.recv();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.thread.wait();
    }
}

/// Starts the thread, on `cpu` (the tree's) if given; it ends when every pipe has reached end of
/// file.
pub fn start(pipes: Vec<Pipe>, cpu: Option<usize>) -> std::io::Result<Forwarder> {
    let (said, drained) = std::sync::mpsc::channel();
    let thread = crate::helper_threads::run("dara-output", cpu, move || {
        crate::placement::never_preempt();
        copy_all(pipes);
        let _ = said.send(());
    })?;
    Ok(Forwarder { thread, drained })
}

fn copy_all(pipes: Vec<Pipe>) {
    let mut open: Vec<(Pipe, Vec<u8>)> = pipes.into_iter().map(|p| (p, Vec::new())).collect();
    let mut buf = [0u8; 8192];
    while !open.is_empty() {
        let mut polled: Vec<libc::pollfd> = open.iter().map(|(p, _)| libc::pollfd { fd: p.from.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: poll reads and writes the live array of `polled.len()` entries.
        if unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) } < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let mut ended = Vec::new();
        for (i, ((pipe, line), fd)) in open.iter_mut().zip(&polled).enumerate() {
            if fd.revents == 0 {
                continue;
            }
            match pipe.from.read(&mut buf) {
                Ok(0) => ended.push(i),
                Ok(n) => pass_on(pipe, line, &buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => ended.push(i),
            }
        }
        for i in ended.into_iter().rev() {
            let (pipe, line) = open.remove(i);
            if let (Sink::Lines(sink), false) = (&pipe.to, line.is_empty()) {
                (sink.0)(&line);
            }
        }
    }
}

fn pass_on(pipe: &Pipe, line: &mut Vec<u8>, bytes: &[u8]) {
    if let Some(Ok(mut kept)) = pipe.tail.as_ref().map(|t| t.lock()) {
        kept.extend_from_slice(bytes);
        let excess = kept.len().saturating_sub(STDERR_TAIL_BYTES);
        kept.drain(..excess);
    }
    match &pipe.to {
        Sink::Stdout => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes);
            let _ = out.flush();
        }
        Sink::Stderr => {
            let _ = std::io::stderr().lock().write_all(bytes);
        }
        Sink::Discard => {}
        Sink::Lines(sink) => {
            for &b in bytes {
                if b == b'\n' {
                    (sink.0)(line);
                    line.clear();
                } else if line.len() < SDK_LINE_MAX {
                    line.push(b);
                }
            }
        }
    }
}
