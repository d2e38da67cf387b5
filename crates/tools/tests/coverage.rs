//! `dara coverage` end to end: sancov builds of the coverage fixtures (clang `trace-pc-guard`,
//! gcc `trace-pc`, rustc's sancov pass) run under the real `dara-trace`, their traces carry the
//! coverage, `dara-replay` reproduces it, and `dara coverage` unites, counts and symbolizes it.
mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use dara_scheduler::trace;
use serde_json::Value;

fn dara(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_dara")).args(args).output().expect("running dara");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        wall: Duration::ZERO,
    }
}

fn lib_flags() -> (String, String) {
    let lib = cov_lib_dir();
    (format!("-L{}", lib.display()), format!("-Wl,-rpath,{}", lib.display()))
}

/// cov_branches built by clang with `trace-pc-guard`.
fn clang_build() -> PathBuf {
    let (l, rpath) = lib_flags();
    fixture_built_by("cov_branches", Some("clang"), &["-fsanitize-coverage=trace-pc-guard", "-fno-sanitize-link-runtime", &l, "-ldara_cov", &rpath])
}

/// cov_branches built by gcc (`cc`) with `trace-pc`.
fn gcc_build() -> PathBuf {
    let (l, rpath) = lib_flags();
    fixture_with("cov_branches", &["-fsanitize-coverage=trace-pc", &l, "-ldara_cov", &rpath])
}

/// One execution of `program` with `--seed seed`; returns its trace.
fn traced(program: &Path, test: &str, seed: u64) -> PathBuf {
    let out = out_dir(&format!("{test}-seed{seed}"));
    let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--seed", &seed.to_string(), "--", program.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    out.join("trace.bin")
}

/// `dara coverage --json` over `traces`, parsed, plus the text report.
fn report(traces: &[&Path]) -> (Value, String) {
    let paths: Vec<&str> = traces.iter().map(|p| p.to_str().unwrap()).collect();
    let json = dara(&[&["coverage", "--json"][..], &paths].concat());
    assert_eq!(json.code, 0, "{}", json.text());
    let text = dara(&[&["coverage"][..], &paths].concat());
    assert_eq!(text.code, 0, "{}", text.text());
    (serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", json.stdout)), text.stdout)
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// The report's entry for `program`.
fn binary<'a>(r: &'a Value, program: &Path) -> &'a Value {
    let name = program.to_str().unwrap();
    r["binaries"].as_array().unwrap().iter().find(|b| b["path"] == name).unwrap_or_else(|| panic!("{name} not in {r}"))
}

/// Covered edges of `program` as addresses.
fn covered_addresses(r: &Value, program: &Path) -> BTreeSet<u64> {
    binary(r, program)["edges"].as_array().unwrap().iter().filter(|e| num(e, "frequency") > 0).map(|e| num(e, "address")).collect()
}

/// The checks every build shares: numbers consistent between text and JSON, covered edges all
/// found by the static scan, a single trace leaves sites uncovered, the union of traces covers
/// more, and the text names the functions with file:line.
fn check_union(program: &Path, traces: &[PathBuf], functions: &[&str], source: &str) {
    let (one, _) = report(&[&traces[0]]);
    let b = binary(&one, program);
    let (covered_one, total) = (num(b, "covered"), num(b, "total"));
    assert!(covered_one > 0, "{one}");
    assert!(covered_one < total, "one run of a random draw leaves handlers uncovered: {one}");
    for e in b["edges"].as_array().unwrap() {
        assert_eq!(e["static_site"], true, "every covered edge is one the static scan found: {e}");
    }

    let all: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    let (union, text) = report(&all);
    let u = binary(&union, program);
    assert_eq!(num(u, "total"), total, "the static sites do not depend on the traces");
    assert!(num(u, "covered") > covered_one, "the union of different draws covers more: {} vs {covered_one}", num(u, "covered"));
    let singles: BTreeSet<u64> = traces.iter().flat_map(|t| covered_addresses(&report(&[t]).0, program)).collect();
    assert_eq!(covered_addresses(&union, program), singles, "the union is the union of the single traces");
    let most = u["edges"].as_array().unwrap().iter().map(|e| num(e, "frequency")).max().unwrap();
    assert_eq!(most, traces.len() as u64, "main's entry is reached in every trace");

    let summary = format!("{} of {} instrumented edges covered ({:.1}%) in {} traces", num(&union, "covered"), num(&union, "total"), union["percent"].as_f64().unwrap(), traces.len());
    assert_eq!(text.lines().next(), Some(summary.as_str()), "{text}");
    assert!(text.contains(&format!("{}: {} of {} edges covered", program.display(), num(u, "covered"), total)), "{text}");
    let uncovered = total - num(u, "covered");
    assert!(text.contains(&format!("uncovered sites ({uncovered}):")), "{text}");
    for f in functions {
        assert!(text.lines().any(|l| l.trim_start().starts_with(&format!("{f} "))), "no row for {f} in\n{text}");
    }
    let line_ref = text.split(&format!("{source}:")).skip(1).filter(|rest| rest.starts_with(|c: char| c.is_ascii_digit())).count();
    assert!(line_ref > 0, "no {source}:<line> in\n{text}");
}

const HANDLERS: [&str; 8] = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"];

#[test]
fn clang_trace_pc_guard_coverage_is_stored_united_and_symbolized() {
    let program = clang_build();
    let traces: Vec<PathBuf> = (1..=6).map(|seed| traced(&program, "cov-clang", seed)).collect();
    check_union(&program, &traces, &HANDLERS, "cov_branches.c");

    // trace-pc-guard numbers every instrumented edge: the static scan finds exactly that many.
    let t = trace::read_file(&traces[0]).unwrap();
    let guards = t.coverage.values().map(|c| c.guards).max().unwrap();
    let (r, _) = report(&[&traces[0]]);
    assert_eq!(num(binary(&r, &program), "total"), u64::from(guards));
    let main_module = &t.coverage[&0].modules;
    assert!(main_module.iter().any(|m| Path::new(&m.path) == program), "{main_module:?}");

    // The same seed twice stores the same coverage (modules included).
    let again = traced(&program, "cov-clang-again", 1);
    assert_eq!(trace::read_file(&again).unwrap().coverage, t.coverage);
}

#[test]
fn gcc_trace_pc_coverage_from_single_runs_and_a_search() {
    let program = gcc_build();
    let traces: Vec<PathBuf> = (1..=6).map(|seed| traced(&program, "cov-gcc", seed)).collect();
    check_union(&program, &traces, &HANDLERS, "cov_branches.c");

    let out = out_dir("cov-gcc-search");
    let run = search(&out, "random", 9, 20, &program);
    assert_eq!(run.code, 0, "{}", run.text());
    let (r, _) = report(&[&out.join("trace.bin")]);
    assert!(num(&r, "covered") > 0 && num(&r, "covered") < num(&r, "total"), "{r}");
}

#[test]
fn a_replay_reproduces_the_recorded_coverage() {
    let program = clang_build();
    let recorded = traced(&program, "cov-replay", 3);
    let edges: usize = trace::read_file(&recorded).unwrap().coverage.values().map(|c| c.edges.len()).sum();
    assert!(edges > 0);
    let run = dara_replay(&["-q", "--verify", recorded.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    assert!(run.stdout.contains(&format!("coverage: {edges} edges (same as recorded)")), "{}", run.text());
    assert!(run.stdout.contains("same outcome, same coverage"), "{}", run.text());

    // A recording whose coverage was tampered with (resealed, so it reads fine) no longer
    // matches the replay: --verify calls that a divergence.
    let mut t = trace::read_file(&recorded).unwrap();
    let first = t.coverage.values_mut().next().unwrap();
    first.edges[0].count = first.edges[0].count.wrapping_add(1).max(1);
    let forged = recorded.with_file_name("forged.bin");
    trace::write_file(&forged, &t).unwrap();
    let run = dara_replay(&["-q", "--verify", forged.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 3, "{}", run.text());
    assert!(run.stdout.contains("coverage differs from the recording"), "{}", run.text());
}

#[test]
fn rust_sancov_build_reports_coverage() {
    let lib = cov_lib_dir();
    let (l, rpath) = (format!("-L{}", lib.display()), format!("-Clink-arg=-Wl,-rpath,{}", lib.display()));
    let flags = ["-Cpasses=sancov-module", "-Cllvm-args=-sanitizer-coverage-level=3", "-Cllvm-args=-sanitizer-coverage-trace-pc-guard", &l, "-ldylib=dara_cov", &rpath];
    let program = fixture_with("cov_rust", &flags);
    let native = Command::new(&program).output().unwrap();
    assert!(native.status.success(), "runs outside dara: {native:?}");

    let traces: Vec<PathBuf> = (1..=6).map(|seed| traced(&program, "cov-rust", seed)).collect();
    let t = trace::read_file(&traces[0]).unwrap();
    assert!(t.coverage.values().any(|c| c.guards > 0 && !c.edges.is_empty()), "{:?}", t.coverage);
    let handlers = ["cov_rust::main", "cov_rust::pick_a", "cov_rust::pick_b", "cov_rust::pick_c", "cov_rust::pick_d"];
    check_union(&program, &traces, &handlers, "cov_rust.rs");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let program = gcc_build();
    let good = traced(&program, "cov-bad", 1);
    let bytes = std::fs::read(&good).unwrap();
    let dir = good.parent().unwrap();
    let cut = dir.join("cut.bin");
    std::fs::write(&cut, &bytes[..bytes.len() - 20]).unwrap();
    let mut flipped = bytes.clone();
    let at = bytes.len() - 30; // inside the coverage section
    flipped[at] ^= 0x10;
    let flipped_path = dir.join("flipped.bin");
    std::fs::write(&flipped_path, &flipped).unwrap();
    for (bad, needle) in [(&cut, "truncated"), (&flipped_path, "damaged"), (&program, "not a dara trace")] {
        let run = dara(&["coverage", good.to_str().unwrap(), bad.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{}", run.text());
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.text());
        assert!(run.stderr.contains(needle) && run.stdout.is_empty(), "{}", run.text());
    }

    // A trace of a program built without coverage: said plainly, exit 2.
    let plain = fixture("cov_branches");
    let out = out_dir("cov-plain");
    let run = dara_trace(&["-q", "-o", out.to_str().unwrap(), "--", plain.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.text());
    let trace = out.join("trace.bin");
    assert!(trace::read_file(&trace).unwrap().coverage.is_empty());
    let run = dara(&["coverage", trace.to_str().unwrap()]);
    assert_eq!(run.code, 2, "{}", run.text());
    assert!(run.stderr.contains("holds coverage") && run.stderr.contains("not built with sanitizer coverage"), "{}", run.text());
}
