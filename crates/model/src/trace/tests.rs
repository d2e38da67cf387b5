//! Format tests: round trips, and a reader that fails cleanly (never panics) on truncated, random,
//! bit-flipped, crafted and future-version input.
use dara_abi::{splitmix64, Op};

use super::varint::{put_u64, zigzag};
use super::*;
use crate::choice::{Choice, ChoiceKind};
use crate::coverage::{EdgeHit, Module, ProcessCoverage};
use crate::outcome::BlockedThread;

/// Tiny deterministic generator for the tests (splitmix64 stream).
struct TestRng(u64);

impl TestRng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix64(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn header() -> TraceHeader {
    TraceHeader {
        dara_version: "0.1.0".into(),
        command: vec![
            "./server".into(),
            "--port".into(),
            "7000".into(),
            "naïve ünïcode ✓".into(),
        ],
        cwd: "/work/fixtures".into(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into()), ("LANG".into(), "C.UTF-8".into())],
        env_left_out: vec![],
        strategy: "pct:3".into(),
        seed: 0xdead_beef_cafe_f00d,
        execution: 17,
        random_seed: u64::MAX,
        cpus: 2,
        memory: crate::memory_totals::MemoryTotals { total_ram: 16_000_000_000, total_swap: 2_147_479_552, mem_unit: 1 },
        library_cache: Some(crate::library_cache::LibraryCache { bytes: 48_903, digest: 0x1234_5678_9abc_def0 }),
        max_steps: 100_000,
        max_vtime_ns: 3_600_000_000_000,
        build_ids: vec![("/work/fixtures/server".into(), "8e5d1b0c".into())],
        preempt: crate::preempt::Preemption { memory: true, all_accesses: false, edges: 1000, watch: vec![0x80_1234, 0x80_1235], atomics: false, coarse: false },
        cluster: Some(crate::cluster::ClusterSpec {
            nodes: vec![crate::cluster::NodeSpec { name: "kv1".into(), start: vec!["sh".into(), "-c".into(), "./kv 1".into()], restart: vec![] }],
            check: Some(vec!["./check.sh".into()]),
            eventually: None,
            faults: crate::cluster::FaultBudget { crashes: 2, restarts: 1, skew_ms: 250, ..Default::default() },
        }),
        setup: Some("rm -rf /tmp/kv".into()),
        cleanup: None,
        outside: true,
        stdin: true,
        time: crate::time::TimeConfig { timers: crate::time::TimerPolicy::Any, step_ns: 250, pauses: 2, run_for_ns: Some(30_000_000_000), realtime_epoch_ns: 1_790_000_000_123_456_789 },
        written: WrittenFiles { paths: vec!["/work/fixtures/server.pid".into()], more: true },
        liveness: Some(crate::liveness::LivenessConfig { steps: 20_000, salt: 3, from_step: Some(41), follow_strategy: false }),
        critical_transition: Some(crate::liveness::CriticalTransition { step: 40, walks: 10, walk_steps: 20_000, property: "one leader".into() }),
        pids: Some(super::RecordedPids { parent: 41_207, session: 40_001, born: vec![41_310, 41_311, 4_194_303] }),
    }
}

#[test]
fn the_memory_totals_and_the_recorded_session_round_trip() {
    let h = header();
    let read: TraceHeader = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
    assert_eq!(read.memory, h.memory);
    assert_eq!(read.pids.as_ref().map(|p| p.session), Some(40_001));
}

#[test]
fn a_header_without_preemption_settings_reads_as_none() {
    let mut json = serde_json::to_value(header()).unwrap();
    json.as_object_mut().unwrap().remove("preempt");
    let read: TraceHeader = serde_json::from_value(json).unwrap();
    assert_eq!(read.preempt, crate::preempt::Preemption::default());
    assert_eq!(read.command, header().command);
}

fn sample_trace() -> Trace {
    let ops = [
        Op::ThreadStart,
        Op::MutexLock,
        Op::MutexUnlock,
        Op::CondWait,
        Op::CondSignal,
        Op::Sleep,
        Op::Yield,
        Op::FutexWait,
    ];
    let results = [
        None,
        Some(0),
        Some(1),
        Some(-110),
        Some(-11),
        Some(i64::MIN),
        Some(i64::MAX),
    ];
    let mut rng = TestRng(7);
    let mut now = 0u64;
    let steps = (0..60u64)
        .map(|i| {
            now += [0, 1_000, 1, 1 << 40][(i % 4) as usize];
            Step {
                choice: Choice {
                    thread: (i % 5) as u32 * 100,
                    kind: if i % 7 == 3 {
                        ChoiceKind::Timeout
                    } else {
                        ChoiceKind::Run
                    },
                    alt: (i % 3) as u32,
                    op: ops[(i % ops.len() as u64) as usize],
                    obj: if i % 6 == 0 {
                        u64::MAX
                    } else {
                        0x7fff_f7dd_0000 + rng.below(1 << 20)
                    },
                },
                result: results[(i % results.len() as u64) as usize],
                now_ns: now,
            }
        })
        .collect();
    Trace {
        header: header(),
        steps,
        outcome: Outcome::Deadlock {
            threads: vec![BlockedThread {
                thread: 2,
                process: 0,
                op: "mutex-lock".into(),
                addr: 0x4040,
                symbol: Some("counter_lock".into()),
                detail: "waits for mutex 0x4040 held by thread 1".into(),
            }],
        },
        coverage: sample_coverage(),
        outside: sample_outside(),
    }
}

fn sample_outside() -> Vec<crate::outside::OutsideEvent> {
    use crate::outside::{OutsideEvent, OutsideWhat::*};
    vec![
        OutsideEvent { step: 0, stream: 0, what: Signal(2) },
        OutsideEvent { step: 2, stream: 1, what: Signal(15) },
        OutsideEvent { step: 2, stream: 3, what: SignalEndingWait(10) },
        OutsideEvent { step: 3, stream: 0, what: Connect { listener: 1, peer: Some(([192, 0, 2, 7], 40_000).into()) } },
        OutsideEvent { step: 3, stream: 1, what: Connect { listener: 0, peer: None } },
        OutsideEvent { step: 3, stream: 0, what: Data(b"GET /\r\n\r\n".to_vec()) },
        OutsideEvent { step: 9, stream: 0, what: Output(vec![0, 255, 10, 13]) },
        OutsideEvent { step: 9, stream: 0, what: OutputClosed },
        OutsideEvent { step: 40, stream: 0, what: Close },
        OutsideEvent { step: 40, stream: 1, what: Reset },
        OutsideEvent { step: 41, stream: 0, what: Stdin(b"yes\n".to_vec()) },
        OutsideEvent { step: 41, stream: 0, what: StdinClosed },
        OutsideEvent { step: 42, stream: 0, what: Peer { socket: 1, peer: Some(([127, 0, 0, 1], 5353).into()) } },
        OutsideEvent { step: 42, stream: 0, what: Datagram(b"ping".to_vec()) },
        OutsideEvent { step: 45, stream: 0, what: DatagramOutput(b"pong".to_vec()) },
        OutsideEvent { step: 46, stream: 2, what: Dial { server: ([10, 1, 2, 3], 5432).into(), refused: false } },
        OutsideEvent { step: 47, stream: 3, what: Dial { server: (std::net::Ipv6Addr::LOCALHOST, 6379).into(), refused: true } },
        OutsideEvent {
            step: 48,
            stream: 0,
            what: NameLookup {
                query: crate::name_lookup::NameQuery { node: Some("db.example".into()), service: Some("5432".into()), hints: None, address: None },
                answer: crate::name_lookup::NameAnswer { status: 0, errno: 0, canonical: None, entries: vec![crate::name_lookup::NameEntry { family: 2, socktype: 1, protocol: 6, address: vec![2, 0, 21, 56, 10, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0] }] },
            },
        },
    ]
}

/// Two processes: one `trace-pc-guard` process with a module map, one `trace-pc` process (no
/// guards) whose map could not be read.
fn sample_coverage() -> std::collections::BTreeMap<u32, ProcessCoverage> {
    let modules = vec![
        Module { path: "/work/fixtures/server".into(), start: 0x5555_5555_5000, end: 0x5555_5555_6000, offset: 0x1000 },
        Module { path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(), start: 0x7fff_f7dc_3000, end: 0x7fff_f7f5_8000, offset: 0x28000 },
        Module { path: "/tmp/ünïcode lib.so".into(), start: 0x7fff_f7fc_5000, end: 0x7fff_f7fc_6000, offset: 0 },
    ];
    let edges = |n: u32, stride: u32| -> Vec<EdgeHit> {
        (0..n).map(|i| EdgeHit { edge: 1 + i * stride, pc: 0x5555_5555_5100 + u64::from(i) * 13, count: [1, 2, 255][i as usize % 3], first_step: i * 3 }).collect()
    };
    [(0, ProcessCoverage { guards: 40, edges: edges(12, 3), modules }), (3, ProcessCoverage { guards: 0, edges: edges(5, 9000), modules: vec![] })].into_iter().collect()
}

/// Recomputes the trailing checksum of a hand-edited file, so the structural checks are reached.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 8;
    let sum = fnv1a64(&bytes[..n]);
    bytes[n..].copy_from_slice(&sum.to_le_bytes());
}

/// A file built by hand: header JSON, raw step bytes claimed to be `count` steps, outcome JSON.
fn build(count: u64, step_bytes: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(&header()).unwrap();
    let outcome = serde_json::to_vec(&Outcome::Exited { code: 0, location: None }).unwrap();
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&(header.len() as u32).to_le_bytes());
    b.extend_from_slice(&header);
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(step_bytes);
    b.extend_from_slice(&(outcome.len() as u32).to_le_bytes());
    b.extend_from_slice(&outcome);
    b.push(0); // no coverage
    b.push(0); // no outside events
    b.extend_from_slice(&[0; 8]);
    reseal(&mut b);
    b
}

/// Offset of the first step in a file made by `build`.
fn steps_at() -> usize {
    8 + 4 + 4 + serde_json::to_vec(&header()).unwrap().len() + 8
}

/// A valid encoded step: thread 1, run, alt 0, `op`, obj 0x40, granted 0, delta 5.
fn step_bytes(op: u32) -> Vec<u8> {
    let mut s = Vec::new();
    put_u64(&mut s, 1);
    s.push(KIND_RUN);
    put_u64(&mut s, 0);
    put_u64(&mut s, op.into());
    put_u64(&mut s, 0x40);
    s.push(RESULT_GRANTED);
    put_u64(&mut s, zigzag(0));
    put_u64(&mut s, 5);
    s
}

fn damaged_at(r: Result<Trace, TraceError>) -> (u64, String) {
    match r {
        Err(TraceError::Damaged { offset, what, .. }) => (offset, what),
        other => panic!("expected Damaged, got {other:?}"),
    }
}

#[test]
fn round_trip() {
    let t = sample_trace();
    let bytes = encode(&t);
    let back = decode(&bytes, "t.bin").unwrap();
    assert_eq!(back, t);
    // The encoding is canonical: re-encoding what was read gives the same bytes.
    assert_eq!(encode(&back), bytes);
    assert_eq!(decision_bytes(&back), decision_bytes(&t));
}

#[test]
fn round_trip_without_steps() {
    let t = Trace {
        header: header(),
        steps: vec![],
        outcome: Outcome::Interrupted,
        coverage: Default::default(),
        outside: Vec::new(),
    };
    let bytes = encode(&t);
    assert_eq!(
        bytes.len(),
        FIXED_BYTES + serde_json::to_vec(&t.header).unwrap().len() + br#"{"kind":"interrupted"}"#.len()
    );
    assert_eq!(decode(&bytes, "t.bin").unwrap(), t);
}

#[test]
fn decision_bytes_see_every_step_field() {
    let t = sample_trace();
    let base = decision_bytes(&t);
    assert_eq!(&base[..8], &(t.steps.len() as u64).to_le_bytes());
    let mut other = t.clone();
    other.header.seed ^= 1;
    other.outcome = Outcome::Exited { code: 1, location: None };
    other.coverage.clear();
    assert_eq!(decision_bytes(&other), base, "header, outcome and coverage are not decisions");
    let edits: [fn(&mut Step); 5] = [
        |s| s.choice.thread += 1,
        |s| s.choice.alt += 1,
        |s| s.choice.obj ^= 1,
        |s| s.result = None,
        |s| s.now_ns += 1,
    ];
    for edit in edits {
        let mut changed = t.clone();
        let last = changed.steps.len() - 1;
        edit(&mut changed.steps[last]);
        assert_ne!(decision_bytes(&changed), base);
    }
}

#[test]
fn file_round_trip_is_atomic() {
    let dir = std::env::temp_dir().join(format!("dara-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.bin");
    let t = sample_trace();
    write_file(&path, &t).unwrap();
    write_file(&path, &t).unwrap(); // overwrite in place
    assert_eq!(read_file(&path).unwrap(), t);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("trace.bin")],
        "no temp file left behind"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let missing = dir.join("nope.bin");
    assert!(matches!(read_file(&missing), Err(TraceError::Io { .. })));
    assert!(
        matches!(write_file(&missing, &t), Err(TraceError::Io { .. })),
        "directory is gone"
    );
}

#[test]
fn writer_refuses_oversized_header() {
    let mut t = sample_trace();
    t.header.command = vec!["x".repeat(MAX_HEADER_BYTES as usize)];
    let path = std::env::temp_dir().join(format!("dara-trace-big-{}.bin", std::process::id()));
    assert!(matches!(write_file(&path, &t), Err(TraceError::TooLarge { .. })));
    assert!(!path.exists());
    // Readers reject what `encode` produced anyway.
    assert!(matches!(decode(&encode(&t), "big"), Err(TraceError::Damaged { .. })));
}

#[test]
fn truncation_at_every_offset_is_reported_as_truncation() {
    let bytes = encode(&sample_trace());
    for len in 0..bytes.len() {
        match decode(&bytes[..len], "cut.bin") {
            Err(TraceError::Truncated { offset, .. }) => assert!(offset as usize <= len),
            other => panic!("prefix of {len} bytes: expected Truncated, got {other:?}"),
        }
    }
}

#[test]
fn truncation_names_the_step_and_field() {
    let bytes = encode(&sample_trace());
    let cut = steps_at() + 2; // inside step 0, after thread and kind
    let err = decode(&bytes[..cut], "cut.bin").unwrap_err().to_string();
    assert_eq!(
        err,
        format!("cut.bin is truncated at byte {cut} (reading step 0 of 60: alternative; the file ends at byte {cut})")
    );
}

#[test]
fn random_bytes_never_panic() {
    let valid = encode(&sample_trace());
    let mut rng = TestRng(0x5eed);
    for i in 0..2000 {
        let len = rng.below(400) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Two thirds start like a real trace so the parser gets past the magic and version;
        // of those, half keep a valid prefix of a real file to get deep into the steps.
        match i % 3 {
            0 => {}
            1 => b.splice(0..0, valid[..12].iter().copied()).for_each(drop),
            _ => {
                let keep = rng.below(valid.len() as u64) as usize;
                b.splice(0..0, valid[..keep].iter().copied()).for_each(drop);
            }
        }
        assert!(decode(&b, "random").is_err(), "random input #{i} decoded");
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    // FNV-1a changes on every single-byte change, and a flip that moves the framing leaves the
    // checksum or the end of file in the wrong place; so flips are not just "usually" caught.
    let valid = encode(&sample_trace());
    let mut rng = TestRng(0xf11b);
    for _ in 0..2000 {
        let bit = rng.below(valid.len() as u64 * 8) as usize;
        let mut b = valid.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        let r = decode(&b, "flipped");
        assert!(r.is_err(), "flip of bit {bit} went unnoticed");
    }
}

#[test]
fn foreign_and_future_files() {
    const NEXT_VERSION: u32 = FORMAT_VERSION + 1;
    let mut b = encode(&sample_trace());
    b[8..12].copy_from_slice(&NEXT_VERSION.to_le_bytes());
    assert!(matches!(
        decode(&b, "f"),
        Err(TraceError::Version {
            found: NEXT_VERSION,
            expected: FORMAT_VERSION,
            ..
        })
    ));
    assert!(matches!(
        decode(&b[..12], "f"),
        Err(TraceError::Version { found: NEXT_VERSION, .. })
    ));
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 1, expected: FORMAT_VERSION, .. })), "version 1 (no coverage) is refused");
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 2, expected: FORMAT_VERSION, .. })), "version 2 (no faults) is refused");
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 3, expected: FORMAT_VERSION, .. })), "version 3 (no outside section) is refused");
    b[8..12].copy_from_slice(&4u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 4, expected: FORMAT_VERSION, .. })), "version 4 (no outside datagrams) is refused");
    b[8..12].copy_from_slice(&5u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 5, expected: FORMAT_VERSION, .. })), "version 5 (timers fired at any step, no env_left_out) is refused");
    b[8..12].copy_from_slice(&6u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 6, expected: FORMAT_VERSION, .. })), "version 6 (no interrupt choices) is refused");
    b[8..12].copy_from_slice(&12u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 12, expected: FORMAT_VERSION, .. })), "version 12 (signals to a thread all sent before the decision; no memory totals, no recorded session) is refused");
    b[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(decode(&b, "f"), Err(TraceError::Version { found: 0, .. })));

    assert!(matches!(
        decode(b"\x7fELF\x02\x01\x01", "a.out"),
        Err(TraceError::NotATrace { .. })
    ));
    assert!(matches!(
        decode(b"DARATRX\0\x01\0\0\0", "x"),
        Err(TraceError::NotATrace { .. })
    ));
    assert!(matches!(
        decode(b"DARA", "x"),
        Err(TraceError::Truncated { offset: 0, .. })
    ));
    assert!(matches!(decode(b"", "x"), Err(TraceError::Truncated { offset: 0, .. })));
    assert!(matches!(
        decode(b"DARATRC\0\x01\0", "x"),
        Err(TraceError::Truncated { offset: 8, .. })
    ));
    let msg = decode(b"hello", "notes.txt").unwrap_err().to_string();
    assert_eq!(msg, "notes.txt is not a dara trace (bad magic)");
}

#[test]
fn crafted_files_with_valid_checksums_are_checked_field_by_field() {
    let at = steps_at() as u64;
    let good = step_bytes(Op::MutexLock as u32);
    let t = decode(&build(2, &[good.clone(), good.clone()].concat()), "ok").unwrap();
    assert_eq!(t.steps[1].now_ns, 10);
    assert_eq!(t.steps[0].choice.op, Op::MutexLock);

    // Unknown op code: offset points at the op varint of step 1.
    let (off, what) = damaged_at(decode(&build(2, &[good.clone(), step_bytes(9999)].concat()), "x"));
    assert_eq!(off, at + good.len() as u64 + 3);
    assert!(
        what.contains("step 1 of 2") && what.contains("unknown op code 9999"),
        "{what}"
    );

    let mut bad_kind = good.clone();
    bad_kind[1] = 7;
    let (off, what) = damaged_at(decode(&build(1, &bad_kind), "x"));
    assert_eq!((off, what.contains("choice kind 7")), (at + 1, true));

    let mut bad_tag = good.clone();
    bad_tag[5] = 2;
    let (off, what) = damaged_at(decode(&build(1, &bad_tag), "x"));
    assert_eq!((off, what.contains("result tag 2")), (at + 5, true));

    let overflow = [vec![0xff; 10], vec![0x01]].concat();
    let (off, what) = damaged_at(decode(&build(1, &overflow), "x"));
    assert_eq!((off, what.contains("64 bits")), (at, true));

    let too_wide_thread = [vec![0x80, 0x80, 0x80, 0x80, 0x10], good[1..].to_vec()].concat();
    let (_, what) = damaged_at(decode(&build(1, &too_wide_thread), "x"));
    assert!(what.contains("32 bits"), "{what}");

    let overlong = [vec![0x81, 0x00], good[1..].to_vec()].concat();
    let (_, what) = damaged_at(decode(&build(1, &overlong), "x"));
    assert!(what.contains("non-canonical"), "{what}");

    // Time that would wrap around (decrease).
    let mut late = good.clone();
    late.truncate(good.len() - 1);
    put_u64(&mut late, u64::MAX);
    let (off, what) = damaged_at(decode(&build(2, &[late, good.clone()].concat()), "x"));
    assert_eq!(off, at + good.len() as u64 - 1 + 10 + good.len() as u64 - 1);
    assert!(what.contains("decreases"), "{what}");
}

#[test]
fn absurd_lengths_and_counts_fail_without_allocating() {
    // A step count of 2^64-1 with a valid checksum: decoding runs out of bytes (each step needs
    // at least MIN_STEP_BYTES) and never reserves room for the claimed count.
    let r = decode(&build(u64::MAX, &step_bytes(Op::Yield as u32)), "x");
    assert!(
        matches!(r, Err(TraceError::Truncated { .. }) | Err(TraceError::Damaged { .. })),
        "{r:?}"
    );

    let mut b = build(0, &[]);
    b[12..16].copy_from_slice(&(MAX_HEADER_BYTES + 1).to_le_bytes());
    reseal(&mut b);
    let (off, what) = damaged_at(decode(&b, "x"));
    assert_eq!(off, 12);
    assert!(what.contains("exceeds the limit"), "{what}");

    let mut b = build(0, &[]);
    let outcome_len_at = steps_at();
    b[outcome_len_at..outcome_len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    reseal(&mut b);
    let (off, _) = damaged_at(decode(&b, "x"));
    assert_eq!(off as usize, outcome_len_at);
}

#[test]
fn bad_json_trailing_bytes_and_checksum() {
    let mut b = build(0, &[]);
    b[16] = b'['; // first byte of the header JSON
    reseal(&mut b);
    let (off, what) = damaged_at(decode(&b, "x"));
    assert_eq!((off, what.contains("header is not valid JSON")), (16, true));

    let mut b = encode(&sample_trace());
    let end = b.len() as u64;
    b.extend_from_slice(b"junk");
    let (off, what) = damaged_at(decode(&b, "x"));
    assert_eq!((off, what.as_str()), (end, "4 unexpected bytes after the checksum"));

    let mut b = encode(&sample_trace());
    let n = b.len();
    b[n - 1] ^= 0x80;
    let (off, what) = damaged_at(decode(&b, "x"));
    assert_eq!(off as usize, n - 8);
    assert!(what.starts_with("checksum mismatch"), "{what}");

    // Damage found while decoding an unsealed file also says the checksum failed.
    let mut b = build(1, &step_bytes(Op::Yield as u32));
    b[steps_at() + 1] = 9;
    let (_, what) = damaged_at(decode(&b, "x"));
    assert!(
        what.contains("unknown choice kind 9") && what.contains("checksum does not match"),
        "{what}"
    );
}

/// A file whose coverage section is `section` (header and outcome as in `build`, no steps).
fn build_with_coverage(section: &[u8]) -> Vec<u8> {
    let mut b = build(0, &[]);
    let at = b.len() - 10;
    b.splice(at..at + 1, section.iter().copied()).for_each(drop);
    reseal(&mut b);
    b
}

/// Offset of the coverage section in a file made by `build_with_coverage`.
fn coverage_at() -> usize {
    steps_at() + 4 + serde_json::to_vec(&Outcome::Exited { code: 0, location: None }).unwrap().len()
}

fn varints(values: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &v in values {
        put_u64(&mut out, v);
    }
    out
}

#[test]
fn coverage_round_trips_and_stays_out_of_decision_bytes() {
    let t = sample_trace();
    let back = decode(&encode(&t), "t.bin").unwrap();
    assert_eq!(back.coverage, t.coverage);
    assert_eq!(back.coverage[&0].modules[2].path, "/tmp/ünïcode lib.so");
    assert_eq!(back.coverage[&3].edges[4].edge, 1 + 4 * 9000);
    let mut bare = t.clone();
    bare.coverage.clear();
    assert_eq!(decision_bytes(&bare), decision_bytes(&t));
    assert!(encode(&bare).len() < encode(&t).len());
}

#[test]
fn overlong_module_paths_are_clipped_at_a_character_boundary() {
    let mut t = sample_trace();
    let long = format!("/{}", "é".repeat(MAX_MODULE_PATH));
    t.coverage.get_mut(&0).unwrap().modules[0].path = long.clone();
    let back = decode(&encode(&t), "t.bin").unwrap();
    let path = &back.coverage[&0].modules[0].path;
    assert!(path.len() <= MAX_MODULE_PATH && long.starts_with(path.as_str()) && path.len() > MAX_MODULE_PATH - 2, "{}", path.len());
}

#[test]
fn crafted_coverage_sections_are_checked_field_by_field() {
    let at = coverage_at() as u64;
    // One process 0 with no guards, one module "/a" [0x1000, 0x2000) at offset 0, one edge.
    let module = [varints(&[2]), b"/a".to_vec(), varints(&[0x1000, 0x2000, 0])].concat();
    let edge = |index: u64, count: u8| [varints(&[index, 0x1005]), vec![count], varints(&[7])].concat();
    let process = |id: u64, modules: &[u8], edges: &[u8], n_edges: u64| [varints(&[id, 0, 1]), modules.to_vec(), varints(&[n_edges]), edges.to_vec()].concat();
    let ok = [varints(&[1]), process(0, &module, &edge(5, 1), 1)].concat();
    let t = decode(&build_with_coverage(&ok), "ok").unwrap();
    assert_eq!(t.coverage[&0].edges, vec![EdgeHit { edge: 5, pc: 0x1005, count: 1, first_step: 7 }]);
    assert_eq!(t.coverage[&0].modules[0], Module { path: "/a".into(), start: 0x1000, end: 0x2000, offset: 0 });

    let expect = |section: Vec<u8>, needle: &str| {
        let (off, what) = damaged_at(decode(&build_with_coverage(&section), "x"));
        assert!(what.contains(needle), "{what}");
        assert!(off >= at, "offset {off} before the section at {at}");
    };
    let over = dara_abi::MAX_PROCESSES as u64;
    expect([varints(&[over + 1])].concat(), &format!("process count {} exceeds the limit", over + 1));
    expect([varints(&[2]), process(1, &module, &edge(5, 1), 1), process(1, &module, &edge(5, 1), 1)].concat(), "process id 1 is out of order");
    expect([varints(&[1]), process(over, &module, &edge(5, 1), 1)].concat(), &format!("over the limit of {over}"));
    expect([varints(&[1]), process(0, &module, &[edge(5, 1), edge(5, 1)].concat(), 2)].concat(), "index 5 is out of order");
    expect([varints(&[1]), process(0, &module, &edge(1 << 16, 1), 1)].concat(), "over the limit of 65536");
    expect([varints(&[1]), process(0, &module, &edge(5, 0), 1)].concat(), "count is 0");
    expect([varints(&[1]), process(0, &module, &[], 1 << 40)].concat(), "edge count 1099511627776 exceeds");
    let backwards = [varints(&[2]), b"/a".to_vec(), varints(&[0x2000, 0x1000, 0])].concat();
    expect([varints(&[1]), process(0, &backwards, &edge(5, 1), 1)].concat(), "not after its start");
    let bad_utf8 = [varints(&[2]), vec![0xff, 0xfe], varints(&[0x1000, 0x2000, 0])].concat();
    expect([varints(&[1]), process(0, &bad_utf8, &edge(5, 1), 1)].concat(), "path is not UTF-8");
    let huge_path = [varints(&[MAX_MODULE_PATH as u64 + 1])].concat();
    expect([varints(&[1]), process(0, &huge_path, &[], 0)].concat(), "path length 4097 exceeds");
    let many_modules = [varints(&[1, 0, 0, MAX_MODULES as u64 + 1])].concat();
    expect(many_modules, "module count 4097 exceeds");

    // Claimed counts within the limits but beyond the bytes present: truncation, no allocation.
    let short = [varints(&[1, 0, 0, 0, 60_000]), edge(5, 1)].concat();
    let r = decode(&build_with_coverage(&short), "x");
    assert!(matches!(r, Err(TraceError::Truncated { .. }) | Err(TraceError::Damaged { .. })), "{r:?}");
}

#[test]
fn truncation_inside_the_coverage_section_names_the_field() {
    let bytes = encode(&sample_trace());
    let mut bare = sample_trace();
    bare.coverage.clear();
    bare.outside.clear();
    let start = encode(&bare).len() - 10; // where the section begins
    let cut = start + 4; // process count, then process 0: id, guards, module count; the path length is next
    let err = decode(&bytes[..cut], "cut.bin").unwrap_err().to_string();
    assert!(err.contains("coverage: process 0 module 0 path length") && err.contains("truncated"), "{err}");
}

/// A device is refused before it is read: `/dev/zero` never ends.
#[test]
fn read_file_refuses_devices_and_directories() {
    for path in ["/dev/zero", "/"] {
        match read_file(std::path::Path::new(path)) {
            Err(TraceError::Io { cause, .. }) => assert_eq!(cause.kind(), std::io::ErrorKind::InvalidInput, "{path}: {cause}"),
            other => panic!("{path}: {other:?}"),
        }
    }
}
