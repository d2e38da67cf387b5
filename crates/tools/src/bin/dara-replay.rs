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
use dara_scheduler::trace::{self, Trace};
use dara_scheduler::Outcome;
use dara_tools::listing;
use dara_tools::memory_bound::{self, BoundedAllocator, DEFAULT_MAX_MEMORY_MIB};
use dara_tools::setup::{self, MachineOptions, STOP};

/// Every allocation is counted against `--max-memory` (docs/trace-format.md, "Bounds").
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
    /// Most memory (MiB) dara-replay itself may hold; past it the replay stops with exit 2.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_MEMORY_MIB, value_parser = clap::value_parser!(u64).range(1..))]
    max_memory: u64,
    #[command(flatten)]
    machine: MachineOptions,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("dara-replay: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    memory_bound::set_max_memory_mib("dara-replay", cli.max_memory);
    setup::init_process()?;
    let recorded = trace::read_file(&cli.trace)?;
    setup::check_left_out_env(&recorded.header, "dara-replay")?;
    let mut base = setup::base_config(&cli.machine, recorded.header.command.clone())?;
    base.symbolize = true;
    println!("replaying {} ({} steps): {}", cli.trace.display(), recorded.steps.len(), recorded.header.command.join(" "));
    let (report, preempted) = reproduce_observed(&recorded, &base, &STOP).context("replay failed to run")?;
    if !cli.quiet {
        let names = listing::Names { symbols: &report.symbols, threads: &report.threads, programs: &report.programs, nodes: &report.nodes, cluster: recorded.header.cluster.as_ref(), outside: &report.outside };
        print!("{}", listing::interleaving(&report.steps, &names, &preempted));
    }
    if let Some(code) = judge(&recorded, &report) {
        return Ok(code);
    }
    let coverage_same = judge_coverage(&recorded, &report);
    if cli.verify && !coverage_same {
        return Ok(3);
    }
    if cli.verify {
        base.symbolize = false;
        for round in 1..=2 {
            let again = reproduce(&recorded, &base, &STOP).context("verification run failed")?;
            if let Some((step, what)) = first_difference(&report.steps, &again.steps) {
                println!("verify: run {round} differs from the first replay at step {step}: {what}");
                return Ok(3);
            }
            if again.outside != report.outside {
                println!("verify: run {round} exchanged different bytes with outside peers than the first replay");
                return Ok(3);
            }
            if again.outcome != report.outcome {
                println!("verify: run {round} ended differently: {} vs {}", again.outcome.summary(), report.outcome.summary());
                return Ok(3);
            }
            if let Some(what) = coverage_difference(&report.coverage, &again.coverage) {
                println!("verify: run {round} covered differently from the first replay: {what}");
                return Ok(3);
            }
        }
        let coverage = if report.coverage.is_empty() { "" } else { ", same coverage" };
        println!("verify: 2 more executions identical to the first replay ({} steps, same outcome{coverage})", report.steps.len());
    }
    Ok(if report.outcome.is_bug() { 1 } else { 0 })
}

/// Compares the replayed run with the recording; Some(exit code) when it diverged.
fn judge(recorded: &Trace, report: &ExecutionReport) -> Option<u8> {
    if let Outcome::Diverged { step, expected, seen } = &report.outcome {
        println!("DIVERGED at step {step}: the trace expected {expected}; the run offered {seen}");
        return Some(3);
    }
    let stopped_there = recorded.outcome == Outcome::Interrupted && report.steps.len() == recorded.steps.len();
    if report.outcome == Outcome::Interrupted && !stopped_there {
        println!("interrupted");
        return Some(130);
    }
    if let Some((step, what)) = first_difference(&recorded.steps, &report.steps) {
        println!("DIVERGED at step {step}: {what}");
        return Some(3);
    }
    if report.outside != recorded.outside {
        let at = recorded.outside.iter().zip(&report.outside).position(|(a, b)| a != b).unwrap_or(recorded.outside.len().min(report.outside.len()));
        println!("DIVERGED: outside event {at} differs: the trace has {}, the replay {}", recorded.outside.get(at).map_or("nothing".into(), dara_scheduler::outside::describe_event), report.outside.get(at).map_or("nothing".into(), dara_scheduler::outside::describe_event));
        return Some(3);
    }
    if stopped_there {
        println!("outcome: the recording was stopped here (Ctrl-C); the replay reproduced it up to that point");
        return None;
    }
    if report.outcome.signature() != recorded.outcome.signature() {
        println!("DIVERGED: the trace ended with \"{}\" but the replay ended with \"{}\"", recorded.outcome.summary(), report.outcome.summary());
        return Some(3);
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
