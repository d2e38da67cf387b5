//! What the CPU itself tells a program, under dara (docs/determinism.md): `cpuid` no longer
//! advertises RDRAND or RDSEED, so a pool that would mix the CPU's random numbers in takes dara's
//! seeded streams alone and the same seed gives the same run (rdrand_pool.c, also linked
//! statically, under the ptrace agent); and CPU time,
//! which is virtual and does not move while a thread computes, ends a loop that waits for it to
//! grow as "uncontrolled", naming CPU time, not as a hang of the program (cpu_calibrate.c).
//! Both came from gpg's key generation (real_programs.rs).
mod common;

use std::path::Path;
use std::time::Duration;

use common::real::replays_identically;
use common::*;

/// The program's own lines of a search's output (dara's lines name executions or traces).
fn program_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| !l.starts_with("execution ") && !l.contains("trace") && !l.contains("no bug found")).collect()
}

/// Two 5-execution searches of seed 1 end clean with the same output and the same decisions,
/// and the last execution replays (`--verify`); returns the output.
fn searches_alike(test: &str, program: &Path, args: &[&str]) -> String {
    let mut outputs = Vec::new();
    let mut traces = Vec::new();
    for i in 1..=2 {
        let out = out_dir(&format!("{test}-{i}"));
        let run = search_args(&out, program, args);
        assert_eq!(run.code, 0, "{test}: a false bug\n{}", run.text());
        assert!(run.stderr.contains("no bug found in 5 executions"), "{}", run.text());
        outputs.push(program_lines(&run.stdout).join("\n"));
        traces.push(out.join("trace.bin"));
    }
    assert_eq!(outputs[0], outputs[1], "{test}: the same seed printed other values");
    let (a, b) = (dara_scheduler::trace::read_file(&traces[0]).unwrap(), dara_scheduler::trace::read_file(&traces[1]).unwrap());
    assert!(dara_scheduler::trace::decision_bytes(&a) == dara_scheduler::trace::decision_bytes(&b), "{test}: the same seed made other decisions");
    replays_identically(&traces[1]);
    outputs.remove(0)
}

/// On a CPU that cannot fault on `cpuid`, dara does not pretend: every execution sees RDRAND
/// (the fixture prints "rdrand: visible"), the pool draws the CPU's numbers, and the replay of
/// the last execution diverges (its count of progress steps is the CPU's random number) with a
/// line that names the CPU as the reason, beside the one about files.
fn rdrand_stays_visible_and_the_diverging_replay_says_why(test: &str, program: &Path) {
    let out = out_dir(test);
    let run = search_args(&out, program, &[]);
    assert_eq!(run.code, 0, "{test}: a false bug\n{}", run.text());
    assert_eq!(run.stdout.matches("rdrand: visible").count(), 5, "{}", run.text());
    let verify = dara_replay(&["-q", "--verify", out.join("trace.bin").to_str().unwrap()], Duration::from_secs(120));
    assert_ne!(verify.code, 0, "the CPU's own random numbers replayed alike: {}", verify.text());
    assert!(verify.text().contains("this CPU cannot fault on cpuid"), "{}", verify.text());
    assert_no_survivors(program);
}

/// A 5-execution search of `program args` (seed 1, the fixture epoch).
fn search_args(out: &Path, program: &Path, args: &[&str]) -> Run {
    let mut all = vec!["-q", "-o", out.to_str().unwrap(), "--strategy", "random", "--seed", "1", "--runs", "5", "--epoch", SEARCH_EPOCH, "--"];
    all.push(program.to_str().unwrap());
    all.extend_from_slice(args);
    dara_trace(&all, Duration::from_secs(300))
}

/// Natively the fixture sees RDRAND (on this machine's CPU) and draws other candidates every run;
/// under dara `cpuid` hides it, every execution prints "rdrand: hidden", and the same seed gives
/// the same candidates, decisions and replay. Before dara trapped `cpuid`, the count of progress
/// steps (a semaphore pair each) changed from run to run and replays diverged, as gpg's did.
#[test]
fn cpuid_hides_rdrand_so_an_entropy_pool_repeats_with_the_seed() {
    let program = private_copy(&fixture("rdrand_pool"), "rdrand_pool");
    if cpu_has("rdrand") {
        let native = std::process::Command::new(&program).output().unwrap();
        assert!(String::from_utf8_lossy(&native.stdout).contains("rdrand: visible"), "natively the fixture sees RDRAND");
    }
    if rdrand_cannot_be_hidden() {
        return rdrand_stays_visible_and_the_diverging_replay_says_why("rdrand_pool", &program);
    }
    let output = searches_alike("rdrand_pool", &program, &[]);
    assert_eq!(output.matches("rdrand: hidden").count(), 5, "{output}");
    assert_eq!(output.matches("candidates: ").count(), 5, "{output}");
    assert_no_survivors(&program);
}

/// The same pool linked statically runs under the ptrace agent (docs/ptrace.md), which makes
/// `cpuid` fault at the process's exec and answers it at the SIGSEGV stop as the preload does.
/// Before, the agent let `cpuid` run: the static build printed "rdrand: visible" and drew other
/// candidates in every execution of one seed.
#[test]
fn cpuid_hides_rdrand_under_the_ptrace_agent_too() {
    let program = private_copy(&fixture_with("rdrand_pool", &["-static"]), "rdrand_pool_static");
    if rdrand_cannot_be_hidden() {
        return rdrand_stays_visible_and_the_diverging_replay_says_why("rdrand_pool_static", &program);
    }
    let output = searches_alike("rdrand_pool_static", &program, &[]);
    assert_eq!(output.matches("rdrand: hidden").count(), 5, "{output}");
    assert_eq!(output.matches("candidates: ").count(), 5, "{output}");
    assert_no_survivors(&program);
}

/// A SIGSEGV handler installed with `signal` in a program compiled with `-std=c11` (glibc's
/// `signal` is then `__sysv_signal`, which the preload did not hook) replaced dara's, so the
/// first trapped `cpuid` ran the program's handler (exit 3): every zstd run crashed so. Now the
/// handler is kept beside dara's, `cpuid` and `rdtsc` are answered, and the same seed gives the
/// same run.
#[test]
fn a_sigsegv_handler_set_through_sysv_signal_leaves_cpuid_answered() {
    let program = private_copy(&fixture_with("sysv_signal_segv", &["-std=c11"]), "sysv_signal_segv");
    let output = searches_alike("sysv_signal_segv", &program, &[]);
    assert_eq!(output.matches("cpuid and rdtsc answered").count(), 5, "{output}");
    assert_no_survivors(&program);
}

/// A loop that doubles its work until it has taken 100 ms of CPU time never ends under dara
/// (CPU time is virtual): dara stops it after --busy-limit as uncontrolled and names CPU time
/// (before: "BUG: hang"). The twin, with its count given, searches clean and replays.
#[test]
fn a_cpu_time_calibration_stops_as_uncontrolled_naming_cpu_time() {
    let program = private_copy(&fixture("cpu_calibrate"), "cpu_calibrate");
    let out = out_dir("cpu_calibrate");
    let run = dara_trace(&["-q", "--busy-limit", "1", "-o", out.to_str().unwrap(), "--", program.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(run.code, 2, "dara's limit, not the program's bug\n{}", run.text());
    assert!(run.text().contains("uncontrolled: thread 0 waits for its CPU time to grow"), "{}", run.text());
    assert!(!run.text().contains("BUG"), "{}", run.text());
    let output = searches_alike("cpu_calibrate_fixed", &program, &["fixed"]);
    assert_eq!(output.matches("count 65536 (given)").count(), 5, "{output}");
    assert_no_survivors(&program);
}
