//! `dara-replay`: re-execute a recorded trace exactly and show its interleaving.
//!
//! Exit status: 1 the replayed run shows the bug again, 0 it ran clean, 3 it diverged from the
//! trace (the step, expected vs. seen, is printed), 2 usage or tool error.
//!
//! Coverage: a trace of an instrumented program stores the edges its run reached; the replay's
//! are compared with them and the result printed. Under `--verify` a difference (from the
//! recording or between the replays) is a divergence, exit 3: the same decisions must drive the
//! program through the same code. Without `--verify` it is only reported, since a run that
//! ended on a wall-clock limit (a hang) may legitimately have spun a different number of times.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use dara_explorer::reproduce::{coverage_difference, first_difference, reproduce, reproduce_observed};
use dara_scheduler::execution::ExecutionReport;
use dara_model::trace::{self, Trace};
use dara_model::Outcome;
use dara_tools::listing;
use dara_tools::results::{JsonStdout, OutcomeEntry, ReplayDocument};
use dara_tools::memory_bound::{self, BoundedAllocator, DEFAULT_MAX_MEMORY_MIB};
use dara_tools::setup::{self, MachineOptions, STOP};

/// Every allocation is counted against `--max-memory` (docs/trace-format.md, "Bounds on reading").
#[global_allocator]
static ALLOCATOR: BoundedAllocator = BoundedAllocator;

/// Re-execute a dara trace deterministically and print the interleaving that led to its outcome.
#[derive(Parser, Debug)]
#[command(name = "dara-replay", version, after_help = "Exit status: 1 bug reproduced, 0 ran clean, 3 diverged from the trace, 2 usage or tool error.")]
struct Cli {
    /// The trace to replay (a dara-out/bug-NNNN/trace.bin).
    trace: PathBuf,
    /// Replay twice more and compare every step and the outcome.
    #[arg(long)]
    verify: bool,
    /// Do not print the interleaving.
    #[arg(short, long)]
    quiet: bool,
    /// Do not run the setup (and cleanup) commands the trace recorded (`dara-trace --setup`)
    /// around each execution.
    #[arg(long)]
    no_setup: bool,
    /// Most memory (MiB) dara-replay itself may hold; past it the replay stops with exit 2.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_memory: u64,
    /// Run the trace's program under this schedule instead of the trace's decisions: steps in the
    /// listing's own format (`t2 mutex-lock alice`), one a line; forced steps may be left out,
    /// and after the last line the run goes on without preemption (docs/schedules.md). Reports
    /// the outcome, or the first line that could not be followed and what the program offered
    /// (exit 3).
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// With --schedule: save the run as a trace (a deterministic test of the written schedule).
    #[arg(long, value_name = "TRACE", requires = "schedule")]
    save: Option<PathBuf>,
    /// Print the result as one JSON document on stdout (docs/results.md); the interleaving, dara's
    /// other lines and the program's output then go to stderr. The exit status is the same.
    #[arg(long)]
    json: bool,
    /// Stop the replay before step STEP (as the listing numbers it), every thread parked, and serve
    /// the process of that step's thread to gdb through a gdbserver on a loopback port (printed);
    /// the replay goes on when gdb detaches. Needs gdbserver; programs run through the preload.
    #[arg(long, value_name = "STEP", conflicts_with_all = ["verify", "schedule", "json"])]
    gdb: Option<u64>,
    #[command(flatten)]
    machine: MachineOptions,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = match cli.json.then(JsonStdout::take).transpose() {
        Ok(json) => json,
        Err(e) => {
            eprintln!("dara-replay: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let mut document = ReplayDocument::new(&cli.trace);
    let code = match run(cli, &mut document) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("dara-replay: error: {e:#}");
            document.error = Some(format!("{e:#}"));
            2
        }
    };
    document.exit_code = code;
    document.verdict = match code {
        0 => "clean",
        1 => "reproduced",
        DIVERGED => "diverged",
        130 => "interrupted",
        _ => "error",
    };
    if let Some(json) = json {
        if let Err(e) = json.write(&document) {
            eprintln!("dara-replay: error: {e:#}");
            return ExitCode::from(2);
        }
    }
    ExitCode::from(code)
}

/// Replays the trace and prints what happened for people; `document` collects it for machines.
fn run(cli: Cli, document: &mut ReplayDocument) -> anyhow::Result<u8> {
    memory_bound::set_max_memory_mib("dara-replay", cli.max_memory);
    setup::init_process()?;
    let mut recorded = trace::read_file(&cli.trace)?;
    document.command = recorded.header.command.clone();
    document.recorded_steps = recorded.steps.len();
    document.recorded_outcome = Some(OutcomeEntry::of(&recorded.outcome));
    document.critical_transition = recorded.header.critical_transition.clone();
    let recorded_setup = recorded.header.setup.clone();
    let setup_note = recorded_setup.as_ref().map(|setup| format!("setup: {setup}{}", if cli.no_setup { " (skipped: --no-setup)" } else { "" }));
    if cli.no_setup {
        recorded.header.setup = None;
        recorded.header.cleanup = None;
    }
    setup::check_left_out_env(&recorded.header, "dara-replay")?;
    let mut base = setup::base_config(&cli.machine, recorded.header.command.clone())?;
    base.symbolize = true;
    if let Some(file) = &cli.schedule {
        return follow_written_schedule(&cli, file, &recorded, &base, document);
    }
    let mut pause_problem = None;
    if let Some(step) = cli.gdb {
        anyhow::ensure!(step < recorded.steps.len() as u64, "--gdb {step}: the trace has {} steps (0 to {})", recorded.steps.len(), recorded.steps.len().saturating_sub(1));
        dara_tools::gdb::check_gdbserver()?;
        let (pause, problem) = dara_tools::gdb::pause_before(step);
        base.pause_before = Some(pause);
        pause_problem = Some(problem);
    }
    println!("replaying {} ({} steps): {}", cli.trace.display(), recorded.steps.len(), recorded.header.command.join(" "));
    if let Some(note) = &setup_note {
        println!("{note}");
    }
    let (report, preempted) = reproduce_observed(&recorded, &base, &STOP).context("replay failed to run")?;
    if let Some(why) = pause_problem.and_then(|p| p.lock().unwrap_or_else(|e| e.into_inner()).take()) {
        anyhow::bail!("--gdb: {why}");
    }
    document.replayed_steps = report.steps.len();
    document.outcome = Some(OutcomeEntry::of(&report.outcome));
    if !cli.quiet {
        let places = listing::places(&report.call_sites);
        let names = listing::Names { symbols: &report.symbols, threads: &report.threads, programs: &report.programs, nodes: &report.nodes, cluster: recorded.header.cluster.as_ref(), outside: &report.outside, places: &places, critical: recorded.header.critical_transition.as_ref() };
        print!("{}", listing::interleaving(&report.steps, &names, &preempted));
    }
    let divergence_notes = || {
        println!("{}", dara_tools::on_disk::divergence_note(&recorded.header.written, recorded_setup.as_deref(), cli.no_setup));
        if let Some(note) = dara_tools::cpu_randomness::divergence_note() {
            println!("{note}");
        }
        if let Some(note) = dara_model::library_cache::divergence_note(recorded.header.library_cache, dara_model::library_cache::LibraryCache::now()) {
            println!("{note}");
        }
    };
    if let Some((code, divergence)) = judge(&recorded, &report) {
        document.divergence = divergence;
        if code == DIVERGED {
            divergence_notes();
        }
        return Ok(code);
    }
    let coverage_same = judge_coverage(&recorded, &report);
    if cli.verify && !coverage_same {
        document.divergence = Some("the replay's coverage differs from the recording's".into());
        return Ok(DIVERGED);
    }
    if cli.verify {
        base.symbolize = false;
        for round in 1..=2 {
            let again = reproduce(&recorded, &base, &STOP).context("verification run failed")?;
            let differs = if let Some((step, what)) = first_difference(&report.steps, &again.steps) {
                Some(format!("differs from the first replay at step {step}: {what}"))
            } else if again.outside != report.outside {
                Some("exchanged different bytes with outside peers than the first replay".to_string())
            } else if again.outcome != report.outcome {
                Some(format!("ended differently: {} vs {}", again.outcome.summary(), report.outcome.summary()))
            } else {
                None
            };
            if let Some(differs) = differs {
                println!("verify: run {round} {differs}");
                divergence_notes();
                document.verified = Some(false);
                document.divergence = Some(format!("verify: run {round} {differs}"));
                return Ok(DIVERGED);
            }
            if let Some(what) = coverage_difference(&report.coverage, &again.coverage) {
                println!("verify: run {round} covered differently from the first replay: {what}");
                document.verified = Some(false);
                document.divergence = Some(format!("verify: run {round} covered differently from the first replay: {what}"));
                return Ok(DIVERGED);
            }
        }
        document.verified = Some(true);
        let coverage = if report.coverage.is_empty() { "" } else { ", same coverage" };
        println!("verify: 2 more executions identical to the first replay ({} steps, same outcome{coverage})", report.steps.len());
    }
    Ok(if report.outcome.is_bug() { 1 } else { 0 })
}

/// `--schedule FILE`: runs the trace's program under a schedule a person wrote and says how far
/// it got.
fn follow_written_schedule(cli: &Cli, file: &std::path::Path, recorded: &Trace, base: &dara_scheduler::execution::ExecutionConfig, document: &mut ReplayDocument) -> anyhow::Result<u8> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read the schedule {}", file.display()))?;
    let lines = dara_explorer::schedule::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if lines.is_empty() {
        anyhow::bail!("{}: no step in it (a step is a line like `t2 mutex-lock alice`, as dara-replay lists them)", file.display());
    }
    if recorded.header.outside {
        anyhow::bail!("{} is a recording with peers outside dara: their inputs are tied to its own steps, so it cannot follow another schedule; take a trace of a search (dara-trace --runs N) instead", cli.trace.display());
    }
    let total = lines.len();
    let (report, preempted, followed) = dara_explorer::reproduce::follow_schedule(recorded, base, lines.clone(), &STOP).context("the scheduled run failed to run")?;
    document.replayed_steps = report.steps.len();
    document.outcome = Some(OutcomeEntry::of(&report.outcome));
    let places = if cli.quiet { Vec::new() } else { listing::places(&report.call_sites) };
    let names = listing::Names { symbols: &report.symbols, threads: &report.threads, programs: &report.programs, nodes: &report.nodes, cluster: recorded.header.cluster.as_ref(), outside: &report.outside, places: &places, critical: recorded.header.critical_transition.as_ref() };
    if !cli.quiet {
        print!("{}", listing::interleaving(&report.steps, &names, &preempted));
    }
    // Objects are checked against the listing's names now that the run has them.
    for (step, line) in report.steps.iter().zip(&followed.lines_at).filter_map(|(s, l)| Some((s, &lines[(*l)?]))) {
        if let Some(object) = &line.object {
            let seen = listing::step_object(&step.choice, &names);
            if !seen.contains(object.as_str()) {
                println!("note: line {} names `{object}`, but the step that followed it was on `{seen}`", line.line);
            }
        }
    }
    if let dara_model::Outcome::Diverged { step, expected, seen } = &report.outcome {
        let line = format!("SCHEDULE NOT FOLLOWED at step {step}: {expected} could not be followed; the program offered: {seen}");
        println!("{line}");
        println!("({} of {total} lines followed before it)", followed.followed);
        document.divergence = Some(line);
        return Ok(DIVERGED);
    }
    let filled = followed.lines_at.iter().filter(|l| l.is_none()).count();
    println!("schedule followed: {} of {total} lines ({} steps, {filled} filled in: forced, or after the last line without preemption)", followed.followed, report.steps.len());
    if followed.followed < total {
        println!("note: the run ended before lines {}..{total} of the schedule", followed.followed + 1);
    }
    println!("outcome: {}", report.outcome.summary());
    if let Some(path) = &cli.save {
        let mut header = recorded.header.clone();
        header.strategy = format!("schedule {}", file.display());
        header.written = report.written_files.clone();
        let trace = Trace { header, steps: report.steps.clone(), outcome: report.outcome.clone(), coverage: report.coverage.clone(), outside: Vec::new() };
        trace::write_file(path, &trace).with_context(|| format!("cannot save the run to {}", path.display()))?;
        println!("saved: {} {}", dara_tools::invocation::tool_command("dara-replay"), path.display());
    }
    Ok(if report.outcome.is_bug() { 1 } else { 0 })
}

/// Exit status of a replay that diverged from its trace (or from the first replay).
const DIVERGED: u8 = 3;

/// Compares the replayed run with the recording; Some(exit code, what differed) when it diverged
/// or was interrupted.
fn judge(recorded: &Trace, report: &ExecutionReport) -> Option<(u8, Option<String>)> {
    let diverged = |line: String| {
        println!("{line}");
        Some((DIVERGED, Some(line)))
    };
    if let Outcome::Diverged { step, expected, seen } = &report.outcome {
        return diverged(format!("DIVERGED at step {step}: the trace expected {expected}; the run offered {seen}"));
    }
    let stopped_there = recorded.outcome == Outcome::Interrupted && report.steps.len() == recorded.steps.len();
    if report.outcome == Outcome::Interrupted && !stopped_there {
        println!("interrupted");
        return Some((130, None));
    }
    if let Some((step, what)) = first_difference(&recorded.steps, &report.steps) {
        // A run that ended early ended for a reason: say it (a closed run's name lookup the hosts
        // file no longer answers, say).
        let ended = if report.steps.len() < recorded.steps.len() && report.outcome != recorded.outcome { format!("; the replay ended with {}", report.outcome.summary()) } else { String::new() };
        return diverged(format!("DIVERGED at step {step}: {what}{ended}"));
    }
    let (recorded_outside, replayed_outside) = (dara_model::outside::in_step_order(&recorded.outside), dara_model::outside::in_step_order(&report.outside));
    if replayed_outside != recorded_outside {
        let at = recorded_outside.iter().zip(&replayed_outside).position(|(a, b)| a != b).unwrap_or(recorded_outside.len().min(replayed_outside.len()));
        return diverged(format!("DIVERGED: outside event {at} differs: the trace has {}, the replay {}", recorded_outside.get(at).map_or("nothing".into(), dara_model::outside::describe_event), replayed_outside.get(at).map_or("nothing".into(), dara_model::outside::describe_event)));
    }
    if stopped_there {
        println!("outcome: the recording was stopped here (Ctrl-C); the replay reproduced it up to that point");
        return None;
    }
    if report.outcome.signature() != recorded.outcome.signature() {
        return diverged(format!("DIVERGED: the trace ended with \"{}\" but the replay ended with \"{}\"", recorded.outcome.summary(), report.outcome.summary()));
    }
    println!("outcome: {} (same as recorded)", report.outcome.summary());
    None
}

/// Compares the replay's coverage with the recording's and says so; false when they differ.
fn judge_coverage(recorded: &Trace, report: &ExecutionReport) -> bool {
    if recorded.coverage.is_empty() && report.coverage.is_empty() {
        return true;
    }
    match coverage_difference(&recorded.coverage, &report.coverage) {
        None => {
            let edges: usize = report.coverage.values().map(|c| c.edges.len()).sum();
            println!("coverage: {edges} edges (same as recorded)");
            true
        }
        Some(what) => {
            println!("coverage differs from the recording: {what}");
            false
        }
    }
}
