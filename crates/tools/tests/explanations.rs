//! Explanations of a bug. `dara timeline`: the page for the demo's bug, loaded in a real headless
//! browser (Debian's chromium, installed by scripts/install-deps.sh), draws a lane per thread, a
//! group per step, the lock handovers as arrows, the bug's last step marked, and each step's call
//! site. `dara explain`: the demo's one preemption, told with its racing pair and source lines.
mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn the_demo_s_bug_drawn_in_a_headless_browser() {
    let out = out_dir("timeline-demo");
    let run = search(&out, "pct:3", 5, 300, &fixture("demo"));
    assert_eq!(run.code, 1, "{}", run.text());
    let trace = out.join("bug-0001/trace.bin");
    let page = out.join("demo.html");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara"));
    cmd.args(["timeline", trace.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    let made = run_with_limit(cmd, Duration::from_secs(120));
    assert_eq!(made.code, 0, "{}", made.text());
    let steps = dara_model::trace::read_file(&trace).unwrap().steps.len();
    assert!(made.stdout.contains(&format!("({steps} steps, 3 threads)")), "{}", made.text());

    let chromium = installed("chromium", "chromium");
    let profile = out.join("chromium-profile");
    let mut browser = Command::new(chromium);
    browser.args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]).arg(format!("--user-data-dir={}", profile.display())).arg("--dump-dom").arg(format!("file://{}", page.display()));
    let dom = run_with_limit(browser, Duration::from_secs(180));
    assert_eq!(dom.code, 0, "{}", dom.text());
    let dom = dom.stdout;
    // The script ran and drew every step, in three lanes.
    assert!(dom.contains(&format!("<body data-drawn=\"{steps}\">")), "the page's script did not draw {steps} steps:\n{dom}");
    assert_eq!(dom.matches("<g class=\"lane\"").count(), 3, "{dom}");
    assert_eq!(dom.matches("<g class=\"step").count(), steps, "{dom}");
    // The bug: the header says it, the last step is marked, the alice lock is handed over.
    assert!(dom.contains("<header id=\"head-bar\" class=\"bug\">") && dom.contains("Assertion `alice.balance &gt;= 0' failed"), "{dom}");
    assert!(dom.contains(&format!("<g class=\"step last\" data-step=\"{}\">", steps - 1)) || dom.contains(&format!("<g class=\"step preempted last\" data-step=\"{}\">", steps - 1)), "{dom}");
    assert!(dom.matches("data-why=\"lock\"").count() >= 2 && dom.matches("data-why=\"start\"").count() == 2 && dom.matches("data-why=\"join\"").count() == 2, "{dom}");
    assert!(dom.contains("transfer</text>") && dom.contains("has_funds</text>"), "call sites drawn under the steps:\n{dom}");
    assert!(dom.contains("pthread_mutex_lock(&amp;from-&gt;lock);") || dom.contains("pthread_mutex_lock(&from->lock);"), "the source line travels with the page:\n{dom}");
    let _ = std::fs::remove_dir_all(&profile);
}

#[test]
fn the_demo_s_bug_explained_by_its_one_preemption_and_racing_pair() {
    let out = out_dir("explain-demo");
    let run = search(&out, "pct:3", 5, 300, &fixture("demo"));
    assert_eq!(run.code, 1, "{}", run.text());
    let trace = out.join("bug-0001/trace.bin");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara"));
    cmd.args(["explain", trace.to_str().unwrap()]);
    let story = run_with_limit(cmd, Duration::from_secs(300));
    assert_eq!(story.code, 1, "{}", story.text());
    let text = &story.stdout;
    assert!(text.starts_with("BUG: process 0 killed by SIGABRT"), "{text}");
    assert!(text.contains("1 preemption(s)"), "the minimal schedule needs one preemption:\n{text}");
    // Found in the source, so the test follows edits of the fixture.
    let source = std::fs::read_to_string(repo_root().join("tests/fixtures/demo.c")).unwrap();
    let line = |code: &str| source.lines().position(|l| l.trim() == code).unwrap_or_else(|| panic!("`{code}` in demo.c")) + 1;
    let (withdraw, unlock) = (line("pthread_mutex_lock(&from->lock);"), line("from->balance -= amount;") + 1);
    assert!(text.contains(&format!("was preempted before t1 mutex-lock alice")) || text.contains(&format!("was preempted before t2 mutex-lock alice")), "{text}");
    assert!(text.contains(&format!("at demo.c:{withdraw} transfer")), "{text}");
    assert!(text.contains("racing pair: ") && text.contains(&format!("mutex-unlock alice")) && text.contains(&format!("demo.c:{unlock} transfer")), "{text}");
}

/// A stripped program whose symbols and lines are in a separate debug file, as Debian ships them
/// (`-dbgsym` packages under /usr/lib/debug/.build-id) or as `objcopy --add-gnu-debuglink` leaves
/// them: the replay's listing finds the file both ways and shows source lines; without it, module
/// offsets. The bug's identity (its outcome line) is the same either way.
#[test]
fn a_stripped_program_s_listing_takes_lines_from_its_separate_debug_file() {
    let out = out_dir("debug-file");
    let program = out.join("library_fault");
    copy_executable(&fixture("library_fault"), &program);
    let tool = |name: &str, args: &[&str]| {
        let status = Command::new(name).args(args).status().unwrap_or_else(|e| panic!("{name} (binutils): {e}"));
        assert!(status.success(), "{name} {args:?}");
    };
    let debug = out.join("library_fault.debug");
    tool("objcopy", &["--only-keep-debug", program.to_str().unwrap(), debug.to_str().unwrap()]);
    tool("strip", &["--strip-all", program.to_str().unwrap()]);
    tool("objcopy", &[&format!("--add-gnu-debuglink={}", debug.display()), program.to_str().unwrap()]);
    let run = search(&out.join("search"), "pct:3", 1, 300, &program);
    assert_eq!(run.code, 1, "{}", run.text());
    let trace = out.join("search/bug-0001/trace.bin");
    let outcome_line = |text: &str| text.lines().find(|l| l.starts_with("outcome:")).unwrap_or_default().to_string();

    // Beside the program, named by its debug link.
    let replay = dara_replay(&[trace.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(replay.stdout.contains("library_fault.c:46 main"), "lines from the debug link's file\n{}", replay.text());
    // The loader's own frame, from Debian's libc6-dbg (/usr/lib/debug/.build-id, installed by
    // scripts/install-deps.sh): a real distribution debug file found by build id.
    assert!(replay.stdout.contains("dl-init.c:"), "the dynamic loader's line from libc6-dbg\n{}", replay.text());
    let identity = outcome_line(&replay.stdout);

    // Under a debug root, named by the build id (how Debian's -dbgsym packages install them).
    let id = dara_tracer::binary::build_id(&program).expect("gcc gives a build id");
    let root = out.join("debug-root");
    let by_id = root.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::rename(&debug, by_id.join(format!("{}.debug", &id[2..]))).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-replay"));
    cmd.arg(&trace).env("DARA_DEBUG_DIRS", &root);
    let replay = run_with_limit(cmd, Duration::from_secs(60));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(replay.stdout.contains("library_fault.c:46 main"), "lines from the build-id file\n{}", replay.text());
    assert_eq!(outcome_line(&replay.stdout), identity, "the identity does not depend on debug files");

    // No debug file anywhere: offsets in the stripped program, the same outcome.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dara-replay"));
    cmd.arg(&trace).env("DARA_DEBUG_DIRS", out.join("nowhere"));
    let replay = run_with_limit(cmd, Duration::from_secs(60));
    assert_eq!(replay.code, 1, "{}", replay.text());
    assert!(!replay.stdout.contains("library_fault.c:46") && replay.stdout.contains("library_fault+0x"), "{}", replay.text());
    assert_eq!(outcome_line(&replay.stdout), identity);
}
