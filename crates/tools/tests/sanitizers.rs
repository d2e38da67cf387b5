//! Programs built with sanitizers, run and searched under dara with default options
//! (docs/sanitizers.md): AddressSanitizer with gcc's shared runtime, clang's static runtime and
//! clang's `-shared-libasan`; LeakSanitizer's exit-time check (its stop-the-world helper); UBSan.
//!
//! Each bug fixture is found by a search with a fixed seed, its location is the report's kind
//! and first program frame (no thread name, address or value), it replays 20/20 and under
//! `--verify`, the same seed gives the same decisions, and nothing is left running. Each twin
//! runs a search without a bug.
mod common;

use std::path::{Path, PathBuf};
use common::*;

const ASAN: &[&str] = &["-fsanitize=address"];
const UBSAN: &[&str] = &["-fsanitize=undefined"];

/// clang's shared ASan runtime is not on the loader's path: the program carries its directory.
fn clang_shared_asan(name: &str) -> PathBuf {
    let out = std::process::Command::new("clang").arg("-print-file-name=libclang_rt.asan-x86_64.so").output().expect("running clang");
    let lib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let rpath = format!("-Wl,-rpath,{}", lib.parent().expect("runtime directory").display());
    fixture_built_by(name, Some("clang"), &["-fsanitize=address", "-shared-libasan", &rpath])
}

/// Searches `program` (pct:3, seed 1) and checks the bug it finds: `shows` in the summary,
/// exact replay, the same decisions from the same seed, no survivors.
fn found_and_replayed(test: &str, program: &Path, runs: u64, shows: &str) {
    let program = private_copy(program, test);
    let out = out_dir(test);
    let run = search_with(&out.join("a"), "pct:3", 1, runs, &program, &["--no-minimize"]);
    assert_eq!(run.code, 1, "{}", run.text());
    assert!(run.stderr.contains(shows), "expected {shows:?}\n{}", run.text());
    // dara's bug lines; the sanitizer's own report (the program's stderr, beside them) names threads.
    let bug_lines: Vec<&str> = run.stderr.lines().filter(|l| l.contains("BUG: ")).collect();
    assert!(!bug_lines.is_empty() && bug_lines.iter().all(|l| !l.contains(" thread T")), "a thread name in the bug's identity\n{}", run.text());
    let bug = out.join("a/bug-0001/trace.bin");
    replays(&bug, shows);
    let again = search_with(&out.join("b"), "pct:3", 1, runs, &program, &["--no-minimize"]);
    assert_eq!(again.code, 1, "{}", again.text());
    same_decisions(&bug, &out.join("b/bug-0001/trace.bin"));
    assert_no_survivors(&program);
}

fn clean(test: &str, program: &Path, runs: u64) {
    let program = private_copy(program, test);
    let run = search_with(&out_dir(test), "pct:3", 1, runs, &program, &[]);
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stderr.contains("no bug found"), "{}", run.text());
    assert_no_survivors(&program);
}

#[test]
fn use_after_free_race_clang_static_runtime() {
    found_and_replayed("uaf_clang", &fixture_built_by("san_uaf_race", Some("clang"), ASAN), 200, "ERROR: AddressSanitizer: heap-use-after-free in reader");
}

#[test]
fn use_after_free_race_gcc_shared_runtime() {
    found_and_replayed("uaf_gcc", &fixture_built_by("san_uaf_race", Some("gcc"), ASAN), 200, "ERROR: AddressSanitizer: heap-use-after-free in reader");
}

#[test]
fn use_after_free_twin_is_clean_with_every_runtime() {
    clean("uaf_ok_clang", &fixture_built_by("san_uaf_race_ok", Some("clang"), ASAN), 60);
    clean("uaf_ok_gcc", &fixture_built_by("san_uaf_race_ok", Some("gcc"), ASAN), 60);
    clean("uaf_ok_clang_shared", &clang_shared_asan("san_uaf_race_ok"), 60);
}

#[test]
fn double_free_is_one_bug_whichever_thread_frees_second() {
    found_and_replayed("double_free", &fixture_built_by("san_double_free", Some("gcc"), ASAN), 100, "ERROR: AddressSanitizer: attempting double-free in release");
}

#[test]
fn leak_found_by_leaksanitizer_at_exit() {
    // clang's static runtime: the frames come unsymbolized and dara names them.
    found_and_replayed("leak_clang", &fixture_built_by("san_leak", Some("clang"), ASAN), 100, "ERROR: LeakSanitizer: detected memory leaks in worker");
    clean("leak_ok_clang", &fixture_built_by("san_leak_ok", Some("clang"), ASAN), 60);
    clean("leak_ok_gcc", &fixture_built_by("san_leak_ok", Some("gcc"), ASAN), 60);
}

#[test]
fn ubsan_signed_overflow() {
    found_and_replayed("overflow", &fixture_built_by("san_overflow", Some("gcc"), UBSAN), 100, "runtime error: signed integer overflow at san_overflow.c:");
    clean("overflow_ok", &fixture_built_by("san_overflow_ok", Some("gcc"), UBSAN), 60);
}
