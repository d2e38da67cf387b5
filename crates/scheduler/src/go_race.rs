//! A report of Go's race detector (`go build -race`) as a bug location (docs/sanitizers.md):
//!
//! ```text
//! WARNING: DATA RACE
//! Read at 0x0000005da5c0 by goroutine 7:
//!   main.main.func1()
//!       /src/race/main.go:9 +0x32
//!
//! Previous write at 0x0000005da5c0 by main goroutine:
//!   main.main()
//!       /src/race/main.go:10 +0xc8
//! ```
//!
//! The identity is the two accesses, each as its kind and the first frame of the program in its
//! stack (function and file:line), sorted: which of the two goroutines came second depends on the
//! interleaving, so "read in f, previous write in g" and "write in g, previous read in f" are one
//! bug. Addresses, goroutine numbers and pc offsets are left out.

/// `data race: read at main.go:9 in main.main.func1, write at main.go:10 in main.main` for a
/// report whose first line is `lines[i]`.
pub fn location(lines: &[&str], i: usize) -> Option<String> {
    if lines[i].trim_end() != "WARNING: DATA RACE" {
        return None;
    }
    let mut accesses = Vec::new();
    let mut rest = &lines[i + 1..];
    while accesses.len() < 2 {
        let at = rest.iter().position(|l| access_kind(l).is_some())?;
        let kind = access_kind(rest[at])?;
        rest = &rest[at + 1..];
        accesses.push(format!("{kind} at {}", first_program_frame(rest)?));
    }
    accesses.sort();
    Some(format!("data race: {}", accesses.join(", ")))
}

/// "read" or "write" for an access line: `Read at 0x.. by goroutine 7:`, `Previous write at 0x..
/// by main goroutine:` (atomic accesses say so: `Previous atomic write at`).
fn access_kind(line: &str) -> Option<String> {
    let line = line.trim_end();
    if !line.ends_with(':') || !line.contains(" by ") {
        return None;
    }
    let head = line.split(" at 0x").next()?;
    let head = head.strip_prefix("Previous ").unwrap_or(head);
    let kind = head.to_lowercase();
    ["read", "write", "atomic read", "atomic write"].contains(&kind.as_str()).then_some(kind)
}

/// `main.go:9 in main.main.func1`: the first frame of package main in the stack that starts at
/// `lines[0]`, else its first frame outside the runtime, else its first.
fn first_program_frame(lines: &[&str]) -> Option<String> {
    let mut frames = Vec::new();
    for pair in lines.chunks_exact(2) {
        let (function, place) = (pair[0].trim(), pair[1].trim());
        if function.is_empty() || !pair[0].starts_with("  ") || pair[0].starts_with("      ") || !pair[1].starts_with("      ") {
            break;
        }
        let function = function.rsplit_once('(').map_or(function, |(f, _)| f);
        let place = place.split(" +0x").next().unwrap_or(place);
        frames.push((function, place.rsplit('/').next().unwrap_or(place)));
    }
    let outside_runtime = |f: &&(&str, &str)| !f.0.starts_with("runtime.") && !f.0.starts_with("sync/atomic.");
    let own = frames.iter().find(|(f, _)| f.starts_with("main.")).or_else(|| frames.iter().find(outside_runtime)).or(frames.first())?;
    Some(format!("{} in {}", own.1, own.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(report: &str) -> Option<String> {
        let lines: Vec<&str> = report.lines().collect();
        (0..lines.len()).find_map(|i| location(&lines, i))
    }

    const READ_SECOND: &str = "==================\nWARNING: DATA RACE\nRead at 0x0000005da5c0 by goroutine 7:\n  main.main.func1()\n      /tmp/gorace/main.go:9 +0x32\n\nPrevious write at 0x0000005da5c0 by main goroutine:\n  main.main()\n      /tmp/gorace/main.go:10 +0xc8\n\nGoroutine 7 (running) created at:\n  main.main()\n      /tmp/gorace/main.go:9 +0xa4\n==================\n";
    const WRITE_SECOND: &str = "WARNING: DATA RACE\nWrite at 0x0000005da5c8 by main goroutine:\n  main.main()\n      /other/dir/main.go:10 +0xd0\n\nPrevious read at 0x0000005da5c8 by goroutine 12:\n  main.main.func1()\n      /other/dir/main.go:9 +0x40\n\nGoroutine 12 (finished) created at:\n";

    #[test]
    fn both_sites_sorted_whichever_goroutine_came_second() {
        assert_eq!(loc(READ_SECOND).as_deref(), Some("data race: read at main.go:9 in main.main.func1, write at main.go:10 in main.main"));
        assert_eq!(loc(READ_SECOND), loc(WRITE_SECOND));
    }

    #[test]
    fn runtime_frames_are_skipped_and_a_cut_report_is_none() {
        let map = "WARNING: DATA RACE\nWrite at 0x00c000 by goroutine 8:\n  runtime.mapassign_fast64()\n      /usr/lib/go-1.19/src/runtime/map_fast64.go:93 +0x0\n  main.put()\n      dara.test/fixtures/m/main.go:20 +0x44\n\nPrevious atomic write at 0x00c000 by goroutine 9:\n  sync/atomic.AddInt32()\n      /usr/lib/go-1.19/src/runtime/race_amd64.s:281 +0xb\n  main.bump()\n      dara.test/fixtures/m/main.go:30 +0x1\n";
        assert_eq!(loc(map).as_deref(), Some("data race: atomic write at main.go:30 in main.bump, write at main.go:20 in main.put"));
        assert_eq!(loc("WARNING: DATA RACE\nRead at 0x1 by goroutine 3:\n  main.f()\n      a/main.go:1 +0x1\n"), None);
        assert_eq!(loc("WARNING: DATA RACES are bad\n"), None);
    }
}
