//! Go's race detector under dara (docs/sanitizers.md, docs/ptrace.md): a `go build -race`
//! program (dynamically linked with cgo, run by the ptrace agent) whose data race shows only
//! when main reaches its non-blocking `select` before the worker's handoff (fixture `peek`) is
//! found by a fixed-seed search as "data race" with both access sites, replayed 20 times with
//! the same report, found again the same way with the same seed; its `-tags=ok` twin is clean.
mod common;

use common::go;
use common::*;

/// The identity of peek's race: the read in main's default branch and the worker's write
/// (9 of 20 random executions with seed 1 race; main then reads 0 or 42).
const PEEK_RACE: &str = "data race: read at main.go:51 in main.main, write at main.go:33 in main.worker";

#[test]
fn a_go_data_race_is_found_by_its_two_sites_and_replayed() {
    let program = private_copy(&go::go_fixture_with("peek", &["-race"]), "go-race-peek");
    assert!(go::has_interpreter(&program), "a -race build links cgo");
    let out = out_dir("go-race-peek");
    let run = search_with(&out, "random", 1, 20, &program, &["--keep-going"]);
    assert_eq!(run.code, 1, "the race was not found\n{}", run.text());
    assert!(run.stderr.contains(&format!("exited with status 66: {PEEK_RACE}")), "found as something else\n{}", run.text());
    // Whichever goroutine's access came second, every execution that raced is this one bug.
    assert!(run.stderr.contains("1 distinct bug(s)"), "the race's identity changed between executions\n{}", run.text());
    let trace = out.join("bug-0001/trace.bin");
    replays(&trace, PEEK_RACE);
    let again = out_dir("go-race-peek-again");
    assert_eq!(search_with(&again, "random", 1, 20, &program, &["--keep-going"]).code, 1);
    same_decisions(&trace, &again.join("bug-0001/trace.bin"));

    let twin = go::go_fixture_with("peek", &["-race", "-tags=ok"]);
    let clean = out_dir("go-race-peek-ok");
    let run = search(&clean, "random", 1, 20, &twin);
    assert_eq!(run.code, 0, "a false race in the twin\n{}", run.text());
    assert!(!run.stderr.contains("DATA RACE"), "{}", run.text());
    assert_no_survivors(&program);
}
