//! Where a failing program says it failed: the location part of a bug's identity (DESIGN 2.5,
//! "deduplicated by outcome + location"). Two sources:
//!
//! * the faulting instruction of a SIGSEGV/SIGBUS/SIGFPE/SIGILL, reported by the preload's fault
//!   handler and named by the symbolizer (`fault_location`);
//! * the last recognisable failure message on the target's stderr (`stderr_location`): glibc
//!   `assert`, Rust panics, C++ `std::terminate`, sanitizer reports.
//!
//! Locations leave out what changes from run to run (pids, thread names, addresses), so equal
//! bugs get equal signatures.

/// `in function+offset` (or the raw pc) of a fault, e.g. "in consume+12 (address 0x0)".
pub fn fault_location(function: Option<String>, pc: u64, addr: u64, signal: i32) -> String {
    let place = format!("in {}", function.unwrap_or_else(|| format!("{pc:#x}")));
    match signal {
        libc::SIGSEGV | libc::SIGBUS => format!("{place} (address {addr:#x})"),
        _ => place,
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
    crate::sanitizer_report::location(lines, i, resolve)
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
    fn faults_name_the_function() {
        assert_eq!(fault_location(Some("consume+12".into()), 0x401000, 0, libc::SIGSEGV), "in consume+12 (address 0x0)");
        assert_eq!(fault_location(None, 0x401000, 0, libc::SIGFPE), "in 0x401000");
    }
}
