//! Where a failing program says it failed: the location part of a bug's identity (DESIGN 2.5,
//! "deduplicated by outcome + location"). Two sources:
//!
//! * the faulting instruction of a SIGSEGV/SIGBUS/SIGFPE/SIGILL, reported by the preload's fault
//!   handler and named by the symbolizer (`fault_location`);
//! * the last recognisable failure message on the target's stderr (`stderr_location`): glibc
//!   `assert`, Rust panics, C++ `std::terminate`, Go panics, Go's race reports, sanitizer reports.
//!
//! Locations leave out what changes from run to run (pids, thread names, addresses), so equal
//! bugs get equal signatures.

/// `in function+offset` (or `module+offset`, or the raw pc) of a fault, e.g. "in consume+12
/// (address 0x0)"; under a library's fault, the program's frame it was called from: "in
/// libc.so.6+0x189ad8 (address 0x0), called from measure (prog.c:6)".
pub fn fault_location(function: Option<String>, pc: u64, addr: u64, signal: i32, caller: Option<crate::crash_frame::ProgramFrame>) -> String {
    let place = format!("in {}", function.unwrap_or_else(|| format!("{pc:#x}")));
    let place = match signal {
        libc::SIGSEGV | libc::SIGBUS => format!("{place} (address {addr:#x})"),
        _ => place,
    };
    match caller {
        Some(frame) => format!("{place}, called from {frame}"),
        None => place,
    }
}

/// The last failure message on `stderr` that dara recognises, normalised.
pub fn stderr_location(stderr: &[u8]) -> Option<String> {
    stderr_location_resolving(stderr, &|_, _| None)
}

/// As [`stderr_location`], naming unsymbolized sanitizer frames `(module+offset)` with `resolve`.
pub fn stderr_location_resolving(stderr: &[u8], resolve: crate::sanitizer_report::Resolve) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len()).rev().find_map(|i| recognise(&lines, i, resolve))
}

fn recognise(lines: &[&str], i: usize, resolve: crate::sanitizer_report::Resolve) -> Option<String> {
    let line = lines[i].trim_end();
    // glibc: "prog: file.c:42: func: Assertion `x == 1' failed."
    if let Some(at) = line.find(": Assertion `") {
        let head = &line[..at];
        // Drop the program name (it may be a path that differs between runs of copies).
        let place = head.split_once(": ").map_or(head, |(_, rest)| rest);
        let what = line[at + 2..].trim_end_matches('.');
        return Some(format!("{place}: {what}"));
    }
    // Rust >= 1.73: "thread 'name' panicked at src/main.rs:10:5:" then the message; newer
    // versions add the thread id: "thread 'name' (1058) panicked at ...".
    if let Some(rest) = line.strip_prefix("thread '").and_then(|r| r.split_once(" panicked at ")).map(|(_, r)| r) {
        let site = rest.trim_end_matches(':');
        let message = lines.get(i + 1).map(|m| m.trim()).filter(|m| !m.is_empty() && !m.starts_with("note:"));
        return Some(match message {
            Some(m) => format!("panicked at {site}: {m}"),
            None => format!("panicked at {site}"),
        });
    }
    // libstdc++: "terminate called after throwing an instance of 'std::runtime_error'"
    if let Some(kind) = line.strip_prefix("terminate called after throwing an instance of ") {
        let what = lines.get(i + 1).and_then(|w| w.trim().strip_prefix("what():")).map(str::trim);
        return Some(match what {
            Some(w) => format!("uncaught {kind}: {w}"),
            None => format!("uncaught {kind}"),
        });
    }
    if let Some(site) = go_failure(lines, i) {
        return Some(site);
    }
    if let Some(race) = crate::go_race::location(lines, i) {
        return Some(race);
    }
    crate::sanitizer_report::location(lines, i, resolve)
}

/// Go's runtime: "panic: MESSAGE" or "fatal error: MESSAGE", then goroutine dumps whose frames
/// are a function line and a tab-indented "file:line +0xOFFSET" line. The identity is the
/// message and the first frame of the program's own code (package `main`, else the first
/// outside the runtime): the goroutine numbers, arguments and offsets change from run to run.
fn go_failure(lines: &[&str], i: usize) -> Option<String> {
    let line = lines[i].trim_end();
    let message = line.strip_prefix("panic: ").or_else(|| line.strip_prefix("fatal error: ")).filter(|_| lines[i + 1..].iter().any(|l| l.starts_with("goroutine ")))?;
    let kind = if line.starts_with("panic: ") { "panic" } else { "fatal error" };
    // A recovered-and-repanicked value adds " [recovered]"; an error value its own text.
    let message = message.trim_end_matches(" [recovered]");
    let frames: Vec<(&str, &str)> = lines[i + 1..]
        .windows(2)
        .filter(|w| !w[0].starts_with('\t') && !w[0].starts_with("goroutine ") && w[1].starts_with('\t'))
        .map(|w| {
            let function = w[0].rsplit_once('(').map_or(w[0], |(f, _)| f).trim();
            let place = w[1].trim().split(" +0x").next().unwrap_or_default();
            (function, place)
        })
        .filter(|(f, _)| !f.is_empty() && !f.starts_with("created by"))
        .collect();
    let own = frames.iter().find(|(f, _)| f.starts_with("main.")).or_else(|| frames.iter().find(|(f, _)| !f.starts_with("runtime.")));
    Some(match own {
        Some((function, place)) => format!("{kind}: {message} in {function} ({})", place.rsplit('/').next().unwrap_or(place)),
        None => format!("{kind}: {message}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_assertion_without_program_name() {
        let err = b"some output\n/tmp/x/lost_update: lost_update.c:48: main: Assertion `counter == 2' failed.\n";
        assert_eq!(stderr_location(err).as_deref(), Some("lost_update.c:48: main: Assertion `counter == 2' failed"));
    }

    #[test]
    fn rust_panic_drops_the_thread_name() {
        let err = b"\nthread '<unnamed>' panicked at src/main.rs:10:5:\nlost an update: 1\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(stderr_location(err).as_deref(), Some("panicked at src/main.rs:10:5: lost an update: 1"));
        let err = b"thread 'main' (1058) panicked at a.rs:3:1:\nnote: run with\n";
        assert_eq!(stderr_location(err).as_deref(), Some("panicked at a.rs:3:1"));
    }

    #[test]
    fn cpp_terminate_and_sanitizers() {
        let err = b"terminate called after throwing an instance of 'std::runtime_error'\n  what():  queue empty\n";
        assert_eq!(stderr_location(err).as_deref(), Some("uncaught 'std::runtime_error': queue empty"));
        let err = b"==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x602 at pc 0x4\n";
        assert_eq!(stderr_location(err).as_deref(), Some("ERROR: AddressSanitizer: heap-use-after-free"));
    }

    #[test]
    fn the_last_message_wins_and_noise_is_ignored() {
        assert_eq!(stderr_location(b"hello\nworld\n"), None);
        assert_eq!(stderr_location(b""), None);
        let err = b"p: a.c:1: f: Assertion `x' failed.\np: b.c:2: g: Assertion `y' failed.\n";
        assert_eq!(stderr_location(err).as_deref(), Some("b.c:2: g: Assertion `y' failed"));
        // Invalid UTF-8 does not stop recognition.
        assert!(stderr_location(b"\xff\xfe\np: a.c:1: f: Assertion `x' failed.\n").is_some());
    }

    #[test]
    fn go_panics_and_fatal_errors_name_the_first_frame_of_the_program() {
        let err = b"panic: send on closed channel\n\ngoroutine 7 [running]:\nmain.producer(0xc000012345, 0x3)\n\tdara.test/fixtures/prodcons/main.go:42 +0x5d\ncreated by main.main\n\tdara.test/fixtures/prodcons/main.go:60 +0x8f\n";
        assert_eq!(stderr_location(err).as_deref(), Some("panic: send on closed channel in main.producer (main.go:42)"));
        let err = b"fatal error: concurrent map writes\n\ngoroutine 21 [running]:\nruntime.throw({0x4a1b2c?, 0x0?})\n\truntime/panic.go:1047 +0x5d fp=0xc0000 sp=0xc0000 pc=0x4331\nruntime.mapassign_fast64(0x0?, 0x0?, 0x1)\n\truntime/map_fast64.go:102 +0x2c5\nmain.main.func1(0x2)\n\tdara.test/fixtures/mapwrites/main.go:44 +0x7b\n";
        assert_eq!(stderr_location(err).as_deref(), Some("fatal error: concurrent map writes in main.main.func1 (main.go:44)"));
        // A line that only looks like one, with no goroutine dump after it, is not Go's.
        assert_eq!(stderr_location(b"panic: not really\n"), None);
    }

    #[test]
    fn faults_name_the_function() {
        assert_eq!(fault_location(Some("consume+12".into()), 0x401000, 0, libc::SIGSEGV, None), "in consume+12 (address 0x0)");
        assert_eq!(fault_location(None, 0x401000, 0, libc::SIGFPE, None), "in 0x401000");
        let caller = crate::crash_frame::ProgramFrame { function: "measure".into(), line: Some("prog.c:6".into()) };
        assert_eq!(fault_location(Some("libc.so.6+0x189ad8".into()), 0x7fff_f7e8_fad8, 0, libc::SIGSEGV, Some(caller)), "in libc.so.6+0x189ad8 (address 0x0), called from measure (prog.c:6)");
    }
}
