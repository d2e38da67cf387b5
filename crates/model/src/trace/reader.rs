//! Reading `trace.bin`. The input is hostile: a truncated download, a flipped bit, someone else's
//! file, a future version. Every read is bounds-checked through [`Cursor`], every length is
//! checked against its limit and against the bytes that remain before anything is allocated, and
//! every failure becomes a [`TraceError`] naming the byte offset and the field. Nothing here
//! panics.
//!
//! The coverage section is checked as strictly: process ids and edge indexes strictly increase
//! and stay below their ABI limits, counts are not zero, modules end after they start, paths are
//! UTF-8 of at most MAX_MODULE_PATH bytes; so a decoded trace re-encodes to the same bytes.
//!
//! Order of checks: magic (`NotATrace`), version (`Version`), then the checksum over all but the
//! last eight bytes when the file is long enough to have one. The content is decoded either way,
//! because decoding is what tells a truncated file (reported precisely: which field of which step
//! ran out) from a damaged one. A structural problem found in a file whose checksum does not
//! match is reported as damage *and* says the checksum failed, since the real corruption may lie
//! before the point where decoding noticed it.
use std::path::Path;

use dara_abi::Op;

use super::varint::{get_u64, unzigzag, VarintError};
use super::{
    fnv1a64, Step, Trace, TraceError, TraceHeader, FIXED_BYTES, FORMAT_VERSION, KIND_FAULT, KIND_INTERRUPT, KIND_RUN, KIND_TIMEOUT, MAGIC,
    MAX_HEADER_BYTES, MAX_MODULES, MAX_TRACE_BYTES, MAX_MODULE_PATH, MAX_OUTCOME_BYTES, MIN_EDGE_BYTES, MIN_MODULE_BYTES,
    MIN_STEP_BYTES, RESULT_BLOCKED, RESULT_GRANTED,
};
use crate::choice::ProcessId;
use crate::coverage::{EdgeHit, Module, ProcessCoverage};
use std::collections::BTreeMap;
use crate::choice::{Choice, ChoiceKind};
use crate::outcome::Outcome;
use crate::outside::{OutsideEvent, OutsideWhat};
use super::{MAX_OUTSIDE_BYTES, MIN_OUTSIDE_BYTES, OUTSIDE_CLOSE, OUTSIDE_CONNECT, OUTSIDE_DATA, OUTSIDE_OUTPUT, OUTSIDE_OUTPUT_CLOSED, OUTSIDE_SIGNAL, OUTSIDE_STDIN, OUTSIDE_STDIN_CLOSED, OUTSIDE_PEER, OUTSIDE_DATAGRAM, OUTSIDE_DATAGRAM_OUTPUT, OUTSIDE_RESET, OUTSIDE_CLOCK, OUTSIDE_DIAL, OUTSIDE_NAME_LOOKUP, OUTSIDE_SIGNAL_ENDING_WAIT};

/// Reads and decodes the trace at `path`: a regular file or a pipe (`<(...)`), of at most
/// [`MAX_TRACE_BYTES`]. A device (`/dev/zero`, which never ends) or a directory is refused
/// before anything is read.
pub fn read_file(path: &Path) -> Result<Trace, TraceError> {
    let shown = path.display().to_string();
    let bytes = read_bounded(path).map_err(|cause| TraceError::Io { path: shown.clone(), action: "read", cause })?;
    decode(&bytes, &shown)
}

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::FileTypeExt;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !(meta.is_file() || meta.file_type().is_fifo()) {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file or a pipe"));
    }
    let too_large = || Error::new(ErrorKind::InvalidInput, format!("larger than the {} MiB a trace may be", MAX_TRACE_BYTES >> 20));
    if meta.len() > MAX_TRACE_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_TRACE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Decodes a whole trace file. `path_for_errors` is only used in error messages.
pub fn decode(bytes: &[u8], path_for_errors: &str) -> Result<Trace, TraceError> {
    let mut c = Cursor::new(bytes, path_for_errors);

    let magic_seen = &bytes[..bytes.len().min(MAGIC.len())];
    if magic_seen != &MAGIC[..magic_seen.len()] {
        return Err(TraceError::NotATrace {
            path: path_for_errors.to_string(),
        });
    }
    c.take(MAGIC.len(), "magic")?;
    let found = c.u32("format version")?;
    if found != FORMAT_VERSION {
        return Err(TraceError::Version {
            path: path_for_errors.to_string(),
            found,
            expected: FORMAT_VERSION,
        });
    }

    let sealed = bytes.len() >= FIXED_BYTES && {
        let (covered, stored) = bytes.split_at(bytes.len() - 8);
        stored.try_into().map(u64::from_le_bytes).ok() == Some(fnv1a64(covered))
    };
    let trace = match decode_content(&mut c) {
        Ok(trace) => trace,
        Err(TraceError::Damaged { path, offset, what }) if !sealed => {
            return Err(TraceError::Damaged {
                path,
                offset,
                what: format!("{what} (the file's checksum does not match either: it was modified or corrupted)"),
            })
        }
        Err(e) => return Err(e),
    };

    let checksum_at = c.pos;
    let stored = c.u64("checksum")?;
    let computed = fnv1a64(&bytes[..checksum_at]);
    if stored != computed {
        return Err(c.damaged(
            checksum_at,
            format!("checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): the file was modified or corrupted"),
        ));
    }
    let trailing = c.remaining();
    if trailing != 0 {
        return Err(c.damaged(c.pos, format!("{trailing} unexpected bytes after the checksum")));
    }
    Ok(trace)
}

/// Everything between the version and the checksum: header, steps, outcome, coverage.
fn decode_content(c: &mut Cursor<'_>) -> Result<Trace, TraceError> {
    let header_at = c.pos;
    let header_json = c.blob("header", MAX_HEADER_BYTES)?;
    let header: TraceHeader = serde_json::from_slice(header_json)
        .map_err(|e| c.damaged(header_at + 4, format!("the header is not valid JSON: {e}")))?;

    let steps = decode_steps(c)?;

    let outcome_at = c.pos;
    let outcome_json = c.blob("outcome", MAX_OUTCOME_BYTES)?;
    let outcome: Outcome = serde_json::from_slice(outcome_json)
        .map_err(|e| c.damaged(outcome_at + 4, format!("the outcome is not valid JSON: {e}")))?;
    let coverage = decode_coverage(c)?;
    let outside = decode_outside(c)?;
    Ok(Trace { header, steps, outcome, coverage, outside })
}

/// The outside section. A stream names a connection that exists: an event of stream `s` follows
/// a `Connect` of stream `s`, and connections are numbered in order.
fn decode_outside(c: &mut Cursor<'_>) -> Result<Vec<OutsideEvent>, TraceError> {
    let count = c.varint("outside: event count")?;
    // As for steps: the bytes left bound the allocation; each event consumes bytes or fails.
    let mut events = Vec::with_capacity(count.min((c.remaining() / MIN_OUTSIDE_BYTES) as u64) as usize);
    let mut step = 0u64;
    for i in 0..count {
        let field = |f: &str| format!("outside: event {i} {f}");
        step = step.saturating_add(c.varint(&field("step"))?);
        let kind_at = c.pos;
        let kind = c.u8(&field("kind"))?;
        let stream = c.varint_u32(&field("stream"))?;
        let bytes = |c: &mut Cursor<'_>| -> Result<Vec<u8>, TraceError> {
            let len = c.counted(&field("length"), MAX_OUTSIDE_BYTES)?;
            Ok(c.take(len, &field("bytes"))?.to_vec())
        };
        // An index (listener or socket), then the client's address.
        let index_and_peer = |c: &mut Cursor<'_>, name: &str| -> Result<(u32, Option<std::net::SocketAddr>), TraceError> {
            let index = c.varint_u32(&field(name))?;
            let at = c.pos;
            let peer = crate::outside::address_from_bytes(&bytes(c)?).map_err(|()| c.damaged(at, field("has a malformed peer address")))?;
            Ok((index, peer))
        };
        let what = match kind {
            OUTSIDE_CONNECT => {
                let (listener, peer) = index_and_peer(c, "listener")?;
                OutsideWhat::Connect { listener, peer }
            }
            OUTSIDE_DATA => OutsideWhat::Data(bytes(c)?),
            OUTSIDE_CLOSE => OutsideWhat::Close,
            OUTSIDE_OUTPUT => OutsideWhat::Output(bytes(c)?),
            OUTSIDE_OUTPUT_CLOSED => OutsideWhat::OutputClosed,
            OUTSIDE_SIGNAL => OutsideWhat::Signal(c.varint_u32(&field("signal"))? as i32),
            OUTSIDE_SIGNAL_ENDING_WAIT => OutsideWhat::SignalEndingWait(c.varint_u32(&field("signal"))? as i32),
            OUTSIDE_STDIN => OutsideWhat::Stdin(bytes(c)?),
            OUTSIDE_STDIN_CLOSED => OutsideWhat::StdinClosed,
            OUTSIDE_PEER => {
                let (socket, peer) = index_and_peer(c, "socket")?;
                OutsideWhat::Peer { socket, peer }
            }
            OUTSIDE_DATAGRAM => OutsideWhat::Datagram(bytes(c)?),
            OUTSIDE_DATAGRAM_OUTPUT => OutsideWhat::DatagramOutput(bytes(c)?),
            OUTSIDE_RESET => OutsideWhat::Reset,
            OUTSIDE_CLOCK => OutsideWhat::Clock(c.varint(&field("clock"))?),
            OUTSIDE_DIAL => {
                let refused = c.varint(&field("refused"))? != 0;
                let at = c.pos;
                match crate::outside::address_from_bytes(&bytes(c)?) {
                    Ok(Some(server)) => OutsideWhat::Dial { server, refused },
                    _ => return Err(c.damaged(at, field("has a malformed server address"))),
                }
            }
            OUTSIDE_NAME_LOOKUP => {
                let at = c.pos;
                let blob = bytes(c)?;
                let split = blob.get(..4).map(|n| u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize + 4);
                let parts = split.and_then(|s| Some((blob.get(4..s)?, blob.get(s..)?)));
                let read = parts.and_then(|(q, a)| Some((crate::name_lookup::NameQuery::from_bytes(q)?, crate::name_lookup::NameAnswer::from_bytes(a)?)));
                match read {
                    Some((query, answer)) => OutsideWhat::NameLookup { query, answer },
                    None => return Err(c.damaged(at, field("has a malformed name lookup"))),
                }
            }
            k => return Err(c.damaged(kind_at, field(&format!("has unknown kind {k}")))),
        };
        events.push(OutsideEvent { step, stream, what });
    }
    Ok(events)
}

/// The coverage section. Counts are checked against their ABI limits and, before anything is
/// reserved, against the bytes left (each record has a minimum size).
fn decode_coverage(c: &mut Cursor<'_>) -> Result<BTreeMap<ProcessId, ProcessCoverage>, TraceError> {
    let mut coverage = BTreeMap::new();
    let count = c.counted("coverage: process count", dara_abi::MAX_PROCESSES)?;
    let mut last_process: Option<u32> = None;
    for i in 0..count {
        let at = c.pos;
        let process = c.varint_u32(&format!("coverage: process {i} id"))?;
        if process as usize >= dara_abi::MAX_PROCESSES || last_process.is_some_and(|l| process <= l) {
            return Err(c.damaged(at, format!("coverage: process id {process} is out of order or over the limit of {}", dara_abi::MAX_PROCESSES)));
        }
        last_process = Some(process);
        let guards = c.varint_u32(&format!("coverage: process {process} guards"))?;
        let modules = decode_modules(c, process)?;
        let edges = decode_edges(c, process)?;
        coverage.insert(process, ProcessCoverage { guards, edges, modules });
    }
    Ok(coverage)
}

fn decode_modules(c: &mut Cursor<'_>, process: u32) -> Result<Vec<Module>, TraceError> {
    let count = c.counted(&format!("coverage: process {process} module count"), MAX_MODULES)?;
    let mut modules = Vec::with_capacity(count.min(c.remaining() / MIN_MODULE_BYTES));
    for i in 0..count {
        let field = |f: &str| format!("coverage: process {process} module {i} {f}");
        let at = c.pos;
        let len = c.counted(&field("path length"), MAX_MODULE_PATH)?;
        let path = std::str::from_utf8(c.take(len, &field("path"))?).map_err(|_| c.damaged(at, field("path is not UTF-8")))?.to_string();
        let start_at = c.pos;
        let start = c.varint(&field("start"))?;
        let end = c.varint(&field("end"))?;
        let offset = c.varint(&field("file offset"))?;
        if end <= start {
            return Err(c.damaged(start_at, field(&format!("ends at {end:#x}, not after its start {start:#x}"))));
        }
        modules.push(Module { path, start, end, offset });
    }
    Ok(modules)
}

fn decode_edges(c: &mut Cursor<'_>, process: u32) -> Result<Vec<EdgeHit>, TraceError> {
    let count = c.counted(&format!("coverage: process {process} edge count"), dara_abi::COV_MAP_SIZE)?;
    let mut edges = Vec::with_capacity(count.min(c.remaining() / MIN_EDGE_BYTES));
    let mut last: Option<u32> = None;
    for i in 0..count {
        let field = |f: &str| format!("coverage: process {process} edge {i} {f}");
        let at = c.pos;
        let edge = c.varint_u32(&field("index"))?;
        if edge as usize >= dara_abi::COV_MAP_SIZE || last.is_some_and(|l| edge <= l) {
            return Err(c.damaged(at, field(&format!("index {edge} is out of order or over the limit of {}", dara_abi::COV_MAP_SIZE))));
        }
        last = Some(edge);
        let pc = c.varint(&field("pc"))?;
        let count_at = c.pos;
        let count = c.u8(&field("count"))?;
        if count == 0 {
            return Err(c.damaged(count_at, field("count is 0 (only reached edges are stored)")));
        }
        let first_step = c.varint_u32(&field("first step"))?;
        edges.push(EdgeHit { edge, pc, count, first_step });
    }
    Ok(edges)
}

fn decode_steps(c: &mut Cursor<'_>) -> Result<Vec<Step>, TraceError> {
    let count = c.u64("step count")?;
    // Never trust `count` for an allocation: each step takes at least MIN_STEP_BYTES, so the
    // bytes that are left bound how many can really follow. The loop itself is bounded the same
    // way, since every iteration consumes bytes or fails.
    let room = (c.remaining() / MIN_STEP_BYTES) as u64;
    let mut steps = Vec::with_capacity(count.min(room) as usize);
    let mut now = 0u64;
    for index in 0..count {
        c.step = Some((index, count));
        let thread = c.varint_u32("thread")?;
        let kind_at = c.pos;
        let kind = match c.u8("choice kind")? {
            KIND_RUN => ChoiceKind::Run,
            KIND_TIMEOUT => ChoiceKind::Timeout,
            KIND_FAULT => ChoiceKind::Fault,
            KIND_INTERRUPT => ChoiceKind::Interrupt,
            k => return Err(c.damaged(kind_at, format!("unknown choice kind {k}"))),
        };
        let alt = c.varint_u32("alternative")?;
        let op_at = c.pos;
        let code = c.varint_u32("op")?;
        let op = Op::from_u32(code).ok_or_else(|| c.damaged(op_at, format!("unknown op code {code}")))?;
        let obj = c.varint("object")?;
        let tag_at = c.pos;
        let result = match c.u8("result tag")? {
            RESULT_BLOCKED => None,
            RESULT_GRANTED => Some(unzigzag(c.varint("result")?)),
            t => return Err(c.damaged(tag_at, format!("unknown result tag {t}"))),
        };
        let delta_at = c.pos;
        let delta = c.varint("time delta")?;
        now = now.checked_add(delta).ok_or_else(|| {
            c.damaged(
                delta_at,
                format!("virtual time {now} + {delta} wraps past u64::MAX, i.e. decreases"),
            )
        })?;
        steps.push(Step {
            choice: Choice {
                thread,
                kind,
                alt,
                op,
                obj,
            },
            result,
            now_ns: now,
        });
    }
    c.step = None;
    Ok(steps)
}

/// A bounds-checked position in the input, plus what to say when something is wrong there.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a str,
    /// (index, count) of the step being decoded, for messages.
    step: Option<(u64, u64)>,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], path: &'a str) -> Cursor<'a> {
        Cursor {
            bytes,
            pos: 0,
            path,
            step: None,
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn field(&self, field: &str) -> String {
        match self.step {
            Some((i, n)) => format!("step {i} of {n}: {field}"),
            None => field.to_string(),
        }
    }

    fn truncated(&self, at: usize, field: &str) -> TraceError {
        TraceError::Truncated {
            path: self.path.to_string(),
            offset: at as u64,
            what: format!(
                "reading {}; the file ends at byte {}",
                self.field(field),
                self.bytes.len()
            ),
        }
    }

    fn damaged(&self, at: usize, what: String) -> TraceError {
        let what = match self.step {
            Some((i, n)) => format!("step {i} of {n}: {what}"),
            None => what,
        };
        TraceError::Damaged {
            path: self.path.to_string(),
            offset: at as u64,
            what,
        }
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], TraceError> {
        if self.remaining() < n {
            return Err(self.truncated(self.pos, field));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], TraceError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn u8(&mut self, field: &str) -> Result<u8, TraceError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u32(&mut self, field: &str) -> Result<u32, TraceError> {
        self.array(field).map(u32::from_le_bytes)
    }

    fn u64(&mut self, field: &str) -> Result<u64, TraceError> {
        self.array(field).map(u64::from_le_bytes)
    }

    fn varint(&mut self, field: &str) -> Result<u64, TraceError> {
        let at = self.pos;
        match get_u64(&self.bytes[at..]) {
            Ok((v, len)) => {
                self.pos += len;
                Ok(v)
            }
            Err(VarintError::Truncated) => Err(self.truncated(at, field)),
            Err(VarintError::Overflow) => Err(self.damaged(at, format!("{field}: varint longer than 64 bits"))),
            Err(VarintError::NonCanonical) => {
                Err(self.damaged(at, format!("{field}: varint has an overlong (non-canonical) encoding")))
            }
        }
    }

    fn varint_u32(&mut self, field: &str) -> Result<u32, TraceError> {
        let at = self.pos;
        let v = self.varint(field)?;
        u32::try_from(v).map_err(|_| self.damaged(at, format!("{field} {v} does not fit in 32 bits")))
    }

    /// A varint count or length of at most `limit`.
    fn counted(&mut self, field: &str, limit: usize) -> Result<usize, TraceError> {
        let at = self.pos;
        let v = self.varint(field)?;
        match usize::try_from(v) {
            Ok(n) if n <= limit => Ok(n),
            _ => Err(self.damaged(at, format!("{field} {v} exceeds the limit of {limit}"))),
        }
    }

    /// A u32 length (at most `limit`) followed by that many bytes.
    fn blob(&mut self, what: &str, limit: u32) -> Result<&'a [u8], TraceError> {
        let at = self.pos;
        let len = self.u32(&format!("{what} length"))?;
        if len > limit {
            return Err(self.damaged(at, format!("{what} length {len} exceeds the limit of {limit} bytes")));
        }
        self.take(len as usize, &format!("{what} JSON ({len} bytes)"))
    }
}
