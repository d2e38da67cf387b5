//! The program's stdin when dara feeds it: a pipe dara writes what it reads on its own stdin
//! (recording, recorded as it goes) or what the recording says (replay).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::{set_nonblocking, wait_readable, Relay, RelayError, Side, CHUNK, INBOUND_BUFFER};
use crate::netprobe;
use crate::outside::{OutsideEvent, OutsideWhat};

/// The pipe that is the program's stdin: dara writes what it reads on its own stdin (recording)
/// or what the recording says (replay).
pub(super) struct StdinPipe {
    /// dara's end; None once the program was told the input ended.
    pub(super) write: Option<OwnedFd>,
    /// The program's end, until it is launched.
    pub(super) read: Option<OwnedFd>,
    /// Read from dara's stdin, not yet in the pipe (the program has not read enough).
    pub(super) pending: Vec<u8>,
    /// dara's stdin ended.
    pub(super) eof: bool,
}

impl StdinPipe {
    pub(super) fn new() -> Result<StdinPipe, RelayError> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(RelayError::Broken(format!("pipe2: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: descriptors pipe2 just returned, owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        set_nonblocking(&write)?;
        Ok(StdinPipe { write: Some(write), read: Some(read), pending: Vec::new(), eof: false })
    }
}

impl<S: Side> Relay<S> {
    /// Recording: passes what arrived on dara's stdin into the program's stdin pipe (as much as
    /// the pipe takes), and its end once everything is in.
    pub(super) fn pump_stdin(&mut self, step: u64) -> Result<(), RelayError> {
        let Some(s) = &mut self.stdin else { return Ok(()) };
        if !s.eof && s.pending.len() < INBOUND_BUFFER && stdin_readable(0) {
            let mut buf = vec![0u8; CHUNK];
            // SAFETY: reads into a live buffer; poll said it will not block.
            let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                n if n > 0 => s.pending.extend_from_slice(&buf[..n as usize]),
                _ => s.eof = true,
            }
        }
        let Some(write) = &s.write else { return Ok(()) };
        if !s.pending.is_empty() {
            // SAFETY: writes from a live buffer to our non-blocking pipe end.
            let n = unsafe { libc::write(write.as_raw_fd(), s.pending.as_ptr().cast(), s.pending.len()) };
            if n > 0 {
                let data: Vec<u8> = s.pending.drain(..n as usize).collect();
                self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::Stdin(data) });
                self.changed = true;
            }
        }
        if s.eof && s.pending.is_empty() {
            s.write = None;
            self.events.push(OutsideEvent { step, stream: 0, what: OutsideWhat::StdinClosed });
            self.changed = true;
        }
        Ok(())
    }
}

/// Whether `fd` has something to read (or its end) now.
pub(super) fn stdin_readable(fd: i32) -> bool {
    wait_readable(&[fd], Duration::ZERO) == Some(0)
}

/// Writes all of `bytes` to a non-blocking pipe the program reads, waiting (bounded) while it is
/// full: in a replay the program's reads free the room they freed in the recording.
pub(super) fn write_all_bounded(fd: &OwnedFd, bytes: &[u8]) -> Result<(), RelayError> {
    let started = Instant::now();
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writes from a live buffer.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n > 0 {
            done += n as usize;
        } else if started.elapsed() > netprobe::SETTLE_LIMIT {
            return Err(RelayError::Broken("the program's stdin pipe did not take the recorded input".into()));
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}
