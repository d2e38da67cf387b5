//! Writing `trace.bin`: [`encode`] builds the bytes, [`write_file`] puts them on disk atomically
//! (a temp file in the same directory, then rename), so a reader never sees half a trace under
//! the final name. No fsync: a search writes a trace per execution, and two syncs per execution
//! cost more than the execution itself; surviving a power cut is not what a trace is for.
//! [`decision_bytes`] is the step section and the outside section, the canonical form two runs
//! are compared by.
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::varint::{put_u64, zigzag};
use super::{
    fnv1a64, ProcessCoverage, ProcessId, Step, Trace, TraceError, FORMAT_VERSION, KIND_FAULT, KIND_INTERRUPT, KIND_RUN, KIND_TIMEOUT, MAGIC, MAX_HEADER_BYTES,
    MAX_OUTCOME_BYTES, RESULT_BLOCKED, RESULT_GRANTED,
};
use super::{MAX_OUTSIDE_BYTES, OUTSIDE_CLOSE, OUTSIDE_CONNECT, OUTSIDE_DATA, OUTSIDE_OUTPUT, OUTSIDE_OUTPUT_CLOSED, OUTSIDE_SIGNAL, OUTSIDE_STDIN, OUTSIDE_STDIN_CLOSED, OUTSIDE_PEER, OUTSIDE_DATAGRAM, OUTSIDE_DATAGRAM_OUTPUT, OUTSIDE_RESET, OUTSIDE_CLOCK, OUTSIDE_DIAL, OUTSIDE_NAME_LOOKUP, OUTSIDE_SIGNAL_ENDING_WAIT};
use crate::choice::ChoiceKind;
use crate::outside::{OutsideEvent, OutsideWhat};

/// The whole file. A header or outcome over its limit ([`MAX_HEADER_BYTES`],
/// [`MAX_OUTCOME_BYTES`]) is still encoded, and readers will reject it; [`write_file`] refuses to
/// write such a trace instead.
pub fn encode(trace: &Trace) -> Vec<u8> {
    Encoded::new(trace).bytes
}

/// The canonical encoding of the step list and the outside events (exactly as in the file): two
/// executions made the same decisions, observed the same results and times, and exchanged the
/// same bytes with outside peers iff their decision bytes are equal.
pub fn decision_bytes(trace: &Trace) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + trace.steps.len() * 12);
    put_steps(&mut out, &trace.steps);
    put_outside(&mut out, &trace.outside);
    out
}

/// Encodes `trace` and writes it to `path` atomically: the bytes go to a temp file next to `path`,
/// and the temp file is renamed over `path`. On error nothing is left behind.
pub fn write_file(path: &Path, trace: &Trace) -> Result<(), TraceError> {
    let shown = path.display().to_string();
    let encoded = Encoded::new(trace);
    for (what, size, limit) in [
        ("header", encoded.header_len as u64, u64::from(MAX_HEADER_BYTES)),
        ("outcome", encoded.outcome_len as u64, u64::from(MAX_OUTCOME_BYTES)),
        ("file", encoded.bytes.len() as u64, super::MAX_TRACE_BYTES),
    ] {
        if size > limit {
            return Err(TraceError::TooLarge {
                path: shown,
                what: what.to_string(),
                size,
                limit,
            });
        }
    }

    let io = |cause: std::io::Error| TraceError::Io {
        path: shown.clone(),
        action: "write",
        cause,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path names no file",
        ))
    })?;
    let tmp = temp_path(dir, &name.to_string_lossy());

    let written = write_new(&tmp, &encoded.bytes).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
}

/// A name in `dir` no other writer uses at the same time: pid plus a per-process counter.
fn temp_path(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // A trace holds the program's environment, command line and outside inputs: its owner's only.
    let mut f = OpenOptions::new().write(true).create_new(true).mode(PRIVATE_MODE).open(path)?;
    f.write_all(bytes)
}

/// Permissions of every file dara writes about a run (traces, bug summaries).
pub const PRIVATE_MODE: u32 = 0o600;

/// Writes `bytes` to `path` readable and writable by its owner only, whatever the umask, even
/// when the file was there before.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(PRIVATE_MODE).open(path)?;
    f.set_permissions(fs::Permissions::from_mode(PRIVATE_MODE))?;
    f.write_all(bytes)
}

/// The file bytes plus the JSON sizes the limits apply to.
struct Encoded {
    bytes: Vec<u8>,
    header_len: usize,
    outcome_len: usize,
}

impl Encoded {
    fn new(trace: &Trace) -> Encoded {
        // Both types hold only strings, integers, vectors and unit/struct enum variants, which
        // serde_json always serializes.
        let header = serde_json::to_vec(&trace.header).expect("TraceHeader always serializes to JSON");
        let outcome = serde_json::to_vec(&trace.outcome).expect("Outcome always serializes to JSON");

        let mut out = Vec::with_capacity(64 + header.len() + outcome.len() + trace.steps.len() * 12);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        put_blob(&mut out, &header);
        put_steps(&mut out, &trace.steps);
        put_blob(&mut out, &outcome);
        put_coverage(&mut out, &trace.coverage);
        put_outside(&mut out, &trace.outside);
        let checksum = fnv1a64(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        Encoded {
            bytes: out,
            header_len: header.len(),
            outcome_len: outcome.len(),
        }
    }
}

/// u32 length + bytes. A blob over 4 GiB gets a saturated length, which no reader accepts (the
/// limits are far below); `write_file` has refused it before that matters.
fn put_blob(out: &mut Vec<u8>, blob: &[u8]) {
    let len = u32::try_from(blob.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(blob);
}

/// The coverage section: per process its id, guards, module map and edges (see
/// docs/trace-format.md). Module paths are clipped to MAX_MODULE_PATH bytes (at a character
/// boundary) so the reader's limit always holds.
fn put_coverage(out: &mut Vec<u8>, coverage: &std::collections::BTreeMap<ProcessId, ProcessCoverage>) {
    put_u64(out, coverage.len() as u64);
    for (&process, cov) in coverage {
        put_u64(out, process.into());
        put_u64(out, cov.guards.into());
        let modules = &cov.modules[..cov.modules.len().min(super::MAX_MODULES)];
        put_u64(out, modules.len() as u64);
        for m in modules {
            let mut end = m.path.len().min(super::MAX_MODULE_PATH);
            while !m.path.is_char_boundary(end) {
                end -= 1;
            }
            put_u64(out, end as u64);
            out.extend_from_slice(&m.path.as_bytes()[..end]);
            put_u64(out, m.start);
            put_u64(out, m.end);
            put_u64(out, m.offset);
        }
        put_u64(out, cov.edges.len() as u64);
        for e in &cov.edges {
            put_u64(out, e.edge.into());
            put_u64(out, e.pc);
            out.push(e.count);
            put_u64(out, e.first_step.into());
        }
    }
}

/// The outside section: per event the step (as a delta from the previous event's), its kind,
/// stream and payload (see docs/trace-format.md). A payload over MAX_OUTSIDE_BYTES is clipped.
fn put_outside(out: &mut Vec<u8>, events: &[OutsideEvent]) {
    put_u64(out, events.len() as u64);
    let mut prev = 0u64;
    for e in events {
        put_u64(out, e.step.saturating_sub(prev));
        prev = prev.max(e.step);
        let payload;
        let (kind, arg, bytes): (u8, Option<u64>, Option<&[u8]>) = match &e.what {
            OutsideWhat::Connect { listener, peer: addr } => {
                payload = crate::outside::address_bytes(*addr);
                (OUTSIDE_CONNECT, Some((*listener).into()), Some(&payload))
            }
            OutsideWhat::Data(b) => (OUTSIDE_DATA, None, Some(b)),
            OutsideWhat::Close => (OUTSIDE_CLOSE, None, None),
            OutsideWhat::Output(b) => (OUTSIDE_OUTPUT, None, Some(b)),
            OutsideWhat::OutputClosed => (OUTSIDE_OUTPUT_CLOSED, None, None),
            OutsideWhat::Signal(s) => (OUTSIDE_SIGNAL, Some(*s as u64), None),
            OutsideWhat::SignalEndingWait(s) => (OUTSIDE_SIGNAL_ENDING_WAIT, Some(*s as u64), None),
            OutsideWhat::Stdin(b) => (OUTSIDE_STDIN, None, Some(b)),
            OutsideWhat::StdinClosed => (OUTSIDE_STDIN_CLOSED, None, None),
            OutsideWhat::Peer { socket, peer: addr } => {
                payload = crate::outside::address_bytes(*addr);
                (OUTSIDE_PEER, Some((*socket).into()), Some(&payload))
            }
            OutsideWhat::Datagram(b) => (OUTSIDE_DATAGRAM, None, Some(b)),
            OutsideWhat::DatagramOutput(b) => (OUTSIDE_DATAGRAM_OUTPUT, None, Some(b)),
            OutsideWhat::Reset => (OUTSIDE_RESET, None, None),
            OutsideWhat::Clock(ns) => (OUTSIDE_CLOCK, Some(*ns), None),
            OutsideWhat::Dial { server, refused } => {
                payload = crate::outside::address_bytes(Some(*server));
                (OUTSIDE_DIAL, Some(u64::from(*refused)), Some(&payload))
            }
            OutsideWhat::NameLookup { query, answer } => {
                // The question's length, the question, the answer.
                let question = query.to_bytes();
                payload = [(question.len() as u32).to_le_bytes().to_vec(), question, answer.to_bytes()].concat();
                (OUTSIDE_NAME_LOOKUP, None, Some(&payload))
            }
        };
        out.push(kind);
        put_u64(out, e.stream.into());
        if let Some(arg) = arg {
            put_u64(out, arg);
        }
        if let Some(bytes) = bytes {
            let bytes = &bytes[..bytes.len().min(MAX_OUTSIDE_BYTES)];
            put_u64(out, bytes.len() as u64);
            out.extend_from_slice(bytes);
        }
    }
}

fn put_steps(out: &mut Vec<u8>, steps: &[Step]) {
    out.extend_from_slice(&(steps.len() as u64).to_le_bytes());
    let mut prev_now = 0u64;
    for step in steps {
        let c = &step.choice;
        put_u64(out, c.thread.into());
        out.push(match c.kind {
            ChoiceKind::Run => KIND_RUN,
            ChoiceKind::Timeout => KIND_TIMEOUT,
            ChoiceKind::Fault => KIND_FAULT,
            ChoiceKind::Interrupt => KIND_INTERRUPT,
        });
        put_u64(out, c.alt.into());
        put_u64(out, c.op as u32 as u64);
        put_u64(out, c.obj);
        match step.result {
            None => out.push(RESULT_BLOCKED),
            Some(r) => {
                out.push(RESULT_GRANTED);
                put_u64(out, zigzag(r));
            }
        }
        // The virtual clock never runs backwards; a trace that says otherwise is a scheduler bug.
        debug_assert!(
            step.now_ns >= prev_now,
            "virtual time went backwards: {} -> {}",
            prev_now,
            step.now_ns
        );
        put_u64(out, step.now_ns.saturating_sub(prev_now));
        prev_now = prev_now.max(step.now_ns);
    }
}
