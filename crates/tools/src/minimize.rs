//! `dara minimize TRACE [-o OUT]`: shrink a failing trace to a schedule with fewer preemptions
//! and steps that fails the same way, write it, and print the sizes before and after. The
//! algorithm is `dara_explorer::minimize`; this is its command line.
//!
//! Exit status: 0 a trace was written (even an unchanged one), 2 error (unreadable trace, a
//! trace that does not reproduce, a result that did not replay), 130 interrupted.
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args;
use dara_explorer::minimize::{self, Attempt, MinimizeError, Size};
use dara_model::trace;

use crate::setup::{self, MachineOptions, STOP};

#[derive(Args, Debug)]
pub struct MinimizeArgs {
    /// The failing trace (a dara-out/bug-NNNN/trace.bin).
    pub trace: PathBuf,
    /// Where to write the minimized trace (default: trace.min.bin next to TRACE).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Most candidate executions to run.
    #[arg(long, default_value_t = 200)]
    pub max_tries: u64,
    /// Do not print each accepted candidate.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub machine: MachineOptions,
}

/// Runs the command; returns the exit status. Errors are printed as one line by the caller.
pub fn run(args: MinimizeArgs) -> anyhow::Result<u8> {
    setup::init_process()?;
    // Library errors already say everything in one line (their sources included).
    let recorded = trace::read_file(&args.trace).map_err(|e| anyhow!("{e}"))?;
    setup::check_left_out_env(&recorded.header, "dara minimize")?;
    let output = args.output.clone().unwrap_or_else(|| default_output(&args.trace));
    let base = setup::base_config(&args.machine, recorded.header.command.clone())?;
    println!("minimizing {} ({} steps, {}): {}", args.trace.display(), recorded.steps.len(), recorded.outcome.summary(), recorded.header.command.join(" "));
    let quiet = args.quiet;
    let mut on_attempt = |a: &Attempt| {
        if a.accepted && !quiet {
            println!("  try {:>3}: {} -> {}", a.number, a.what, size_line(&a.size));
        }
    };
    let result = match minimize::minimize(&recorded, &base, args.max_tries, &STOP, &mut on_attempt) {
        Ok(r) => r,
        Err(MinimizeError::Interrupted) => {
            println!("interrupted: nothing was written");
            return Ok(130);
        }
        Err(e) => return Err(anyhow!("{e}")),
    };
    trace::write_file(&output, &result.trace).map_err(|e| anyhow!("{e}"))?;
    println!("before: {}", size_line(&result.before));
    println!("after:  {}", size_line(&result.after));
    let budget = if result.out_of_tries { " (the --max-tries budget; more may help)" } else { "" };
    println!("tried {} candidate executions{budget}, {} accepted; the result replays to the same outcome", result.tries, result.accepted);
    if result.after == result.before && result.accepted == 0 {
        println!("no smaller failing schedule found: wrote the original schedule unchanged");
    }
    println!("outcome: {}", result.trace.outcome.summary());
    println!("wrote {}", output.display());
    println!("replay: {} {}", crate::invocation::tool_command("dara-replay"), output.display());
    Ok(0)
}

/// "21 steps, 4 context switches, 1 preemption".
pub fn size_line(s: &Size) -> String {
    let count = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!("{}, {}, {}", count(s.steps, "step", "steps"), count(s.switches, "context switch", "context switches"), count(s.preemptions, "preemption", "preemptions"))
}

/// `dir/trace.bin` -> `dir/trace.min.bin`.
fn default_output(trace: &Path) -> PathBuf {
    let stem = trace.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    trace.with_file_name(format!("{stem}.min.bin"))
}
