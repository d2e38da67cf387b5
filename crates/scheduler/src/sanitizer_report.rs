//! A sanitizer report's identity: its kind and the first frame of the program in its stack
//! (docs/sanitizers.md, docs/triage.md). Thread names (`in thread T2`), addresses, pids, sizes
//! and values are left out, so one double free is one bug whichever thread frees second.
//!
//! Frames come symbolized (`#1 0x5555 in worker /src/df.c:5`: gcc's runtime symbolizes
//! in-process) or as `#1 0x5555  (/path/prog+0x11c9)` (clang's runtime, whose external
//! symbolizer dara turns off); the latter are named by the caller's `resolve(module, offset)`.
//! Frames of the sanitizer runtime (interceptors, `__asan::...`), of libc's start code and of
//! dara's preload are skipped.

/// Markers of the report lines dara recognises, with the kind's prefix kept in the location.
const MARKERS: [&str; 4] = ["ERROR: AddressSanitizer: ", "WARNING: ThreadSanitizer: ", "ERROR: LeakSanitizer: ", "runtime error: "];

/// Names a frame given as (module path, offset in it).
pub type Resolve<'a> = &'a dyn Fn(&str, u64) -> Option<String>;

/// The location of a sanitizer report whose first line is `lines[i]`, if it is one.
pub fn location(lines: &[&str], i: usize, resolve: Resolve) -> Option<String> {
    let line = lines[i];
    let (marker, at) = MARKERS.iter().find_map(|m| line.find(m).map(|at| (*m, at)))?;
    let rest = &line[at + marker.len()..];
    if marker == "runtime error: " {
        // UBSan: "src/x.c:5:3: runtime error: signed integer overflow: 2147483647 + 1 ..."
        let kind = without_values(rest.split(':').next().unwrap_or(rest));
        let place = line[..at].trim_end_matches(": ").rsplit('/').next().unwrap_or("");
        return Some(if place.is_empty() { format!("runtime error: {kind}") } else { format!("runtime error: {kind} at {place}") });
    }
    let cut = [" on ", " in thread ", " (", ":"].iter().filter_map(|s| rest.find(s)).min().unwrap_or(rest.len());
    let kind = without_values(&rest[..cut]);
    let head = format!("{}{kind}", &marker);
    Some(match first_program_frame(&lines[i + 1..], resolve) {
        Some(function) => format!("{head} in {function}"),
        None => head,
    })
}

/// Words that are numbers (sizes, addresses) dropped.
fn without_values(text: &str) -> String {
    let number = |w: &str| w.starts_with("0x") || w.trim_start_matches('-').chars().all(|c| c.is_ascii_digit()) && !w.is_empty();
    text.split_whitespace().filter(|w| !number(w)).collect::<Vec<_>>().join(" ")
}

/// The first frame of the first stack after the report line that is the program's own.
fn first_program_frame(lines: &[&str], resolve: Resolve) -> Option<String> {
    let mut in_stack = false;
    for line in lines {
        match frame(line, resolve) {
            Some(Some(function)) if !is_runtime(&function) => return Some(function),
            Some(_) => in_stack = true,
            // The first stack ended without a program frame.
            None if in_stack => return None,
            None => {}
        }
    }
    None
}

/// `Some(name)` for a stack frame line (`Some(None)` when it cannot be named), `None` otherwise.
fn frame(line: &str, resolve: Resolve) -> Option<Option<String>> {
    let text = line.trim_start();
    let rest = text.strip_prefix('#')?;
    let (number, rest) = rest.split_once(' ')?;
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim_start();
    let (_pc, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    if let Some(named) = rest.strip_prefix("in ") {
        // "worker /src/df.c:5" or "foo(int) (/lib/x.so+0x12)": the location is the last word.
        let function = match named.rsplit_once(' ') {
            Some((f, place)) if place.contains('/') || place.contains(':') || place.starts_with('(') => f,
            _ => named,
        };
        if is_runtime_place(named) {
            return Some(None);
        }
        return Some(Some(strip_offset(function.trim())));
    }
    // "(/path/prog+0x11c9) (BuildId: ...)"
    let inner = rest.trim_start().strip_prefix('(')?;
    let (module, offset) = inner.split(')').next()?.rsplit_once("+0x")?;
    if is_runtime_place(module) {
        return Some(None);
    }
    let offset = u64::from_str_radix(offset, 16).ok()?;
    Some(resolve(module, offset).map(|name| strip_offset(&name)))
}

fn strip_offset(name: &str) -> String {
    name.rsplit_once('+').filter(|(_, off)| off.chars().all(|c| c.is_ascii_digit())).map_or(name, |(f, _)| f).to_string()
}

/// Code of a sanitizer runtime, libc or dara's preload, by its path or source path.
fn is_runtime_place(text: &str) -> bool {
    ["libsanitizer/", "compiler-rt/", "libasan.so", "liblsan.so", "libubsan.so", "libtsan.so", "libclang_rt.", "libdara_preload", "crates/preload/", "libc.so", "libc-start"]
        .iter()
        .any(|p| text.contains(p))
}

/// A function of a sanitizer runtime, libc's start code or dara's preload.
fn is_runtime(function: &str) -> bool {
    function.contains("interceptor_")
        || ["__asan", "__lsan", "__ubsan", "__tsan", "__sanitizer", "__interception", "__libc_start", "_start", "dara_preload::"].iter().any(|p| function.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str, _: u64) -> Option<String> {
        None
    }

    fn loc(report: &str, resolve: Resolve) -> Option<String> {
        let lines: Vec<&str> = report.lines().collect();
        location(&lines, 0, resolve)
    }

    #[test]
    fn a_double_free_is_one_bug_whichever_thread_frees_second() {
        let t1 = "==2==ERROR: AddressSanitizer: attempting double-free on 0x602000000010 in thread T1:\n    #0 0x7ffff78b8 in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52\n    #1 0x5555555551c9 in worker /tmp/df.c:5\n    #2 0x7ffff7f50 in start_thread nptl/pthread_create.c:442\n";
        let t0 = "==2==ERROR: AddressSanitizer: attempting double-free on 0x602000000010 in thread T0:\n    #0 0x7ffff78b8 in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52\n    #1 0x5555555551c9 in worker /tmp/df.c:5\n";
        assert_eq!(loc(t1, &none).as_deref(), Some("ERROR: AddressSanitizer: attempting double-free in worker"));
        assert_eq!(loc(t1, &none), loc(t0, &none));
    }

    #[test]
    fn unsymbolized_frames_are_named_by_the_resolver() {
        let report = "==2==ERROR: LeakSanitizer: detected memory leaks\n\nDirect leak of 40 byte(s) in 1 object(s) allocated from:\n    #0 0x5555555f714e  (/tmp/leak+0xa314e) (BuildId: 38e4)\n    #1 0x555555631eb8  (/tmp/leak+0xddeb8) (BuildId: 38e4)\n    #2 0x7ffff7f50ba9  (/x/libdara_preload.so+0x29ba9) (BuildId: 6ff4)\n";
        let resolve = |module: &str, off: u64| {
            assert_eq!(module, "/tmp/leak");
            Some(if off == 0xa314e { "__interceptor_malloc+14".to_string() } else { "main+24".to_string() })
        };
        assert_eq!(loc(report, &resolve).as_deref(), Some("ERROR: LeakSanitizer: detected memory leaks in main"));
        assert_eq!(loc(report, &none).as_deref(), Some("ERROR: LeakSanitizer: detected memory leaks"));
    }

    #[test]
    fn kinds_keep_no_addresses_and_ubsan_keeps_its_place() {
        let uaf = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x602 at pc 0x4 bp 0x5 sp 0x6\nREAD of size 4 at 0x602 thread T2\n    #0 0x55 in reader /src/uaf.c:20\n";
        assert_eq!(loc(uaf, &none).as_deref(), Some("ERROR: AddressSanitizer: heap-use-after-free in reader"));
        let ub = "src/ovf.c:12:15: runtime error: signed integer overflow: 2147483647 + 1 cannot be represented in type 'int'";
        assert_eq!(loc(ub, &none).as_deref(), Some("runtime error: signed integer overflow at ovf.c:12:15"));
        let shift = "a.c:3:5: runtime error: shift exponent 40 is too large for 32-bit type 'int'";
        assert_eq!(loc(shift, &none).as_deref(), Some("runtime error: shift exponent is too large for 32-bit type 'int' at a.c:3:5"));
        assert_eq!(loc("plain text", &none), None);
    }
}
