//! `dara`: tools that read traces. `dara info trace.bin` summarises one (what ran, under which
//! strategy and seed, steps by operation, threads, virtual time, outcome); `--json` for machines.
//! `dara minimize trace.bin` shrinks a failing trace (see `dara_tools::minimize`).
//! `dara coverage trace.bin...` reports the edge coverage stored in traces (see
//! `dara_tools::coverage`).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dara_model::trace::{self, Trace};
use dara_model::ChoiceKind;
use dara_tools::listing::format_vtime;

#[derive(Parser, Debug)]
#[command(name = "dara", version, about = "Inspect dara traces (dara-trace records, dara-replay re-executes).")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Summarise a trace: command, strategy, steps by operation, threads, outcome.
    Info {
        trace: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shrink a failing trace to fewer preemptions and steps that fail the same way.
    Minimize(dara_tools::minimize::MinimizeArgs),
    /// Edge coverage stored in traces, united: covered and uncovered sites by function and line.
    Coverage(dara_tools::coverage::CoverageArgs),
    /// Write a trace's steps for other tools: a ShiViz log (a host per thread, vector clocks from
    /// the happens-before of locks, thread starts and joins, messages) or JSON.
    Export(dara_tools::export::ExportArgs),
    /// Draw a run as one self-contained HTML page: a lane per thread, a row per step, arrows for
    /// locks handed over, thread starts and joins and messages, each step's source line (the
    /// trace is replayed to name them).
    Timeline(dara_tools::timeline::TimelineArgs),
    /// The short story of a bug: its schedule minimized, then each preemption it needs, what
    /// ran meanwhile, and the racing pair, with source lines.
    Explain(dara_tools::explain::ExplainArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    dara_tools::setup::end_quietly_on_closed_pipe();
    match cli.command {
        Command::Info { trace: path, json } => match trace::read_file(&path) {
            Ok(t) => {
                let summary = summarize(&t);
                if json {
                    println!("{}", serde_json::to_string_pretty(&summary).unwrap_or_default());
                } else {
                    print_summary(&summary);
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dara: error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Coverage(args) => match dara_tools::coverage::run(args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("dara: error: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Explain(args) => match dara_tools::explain::run(args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("dara: error: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Timeline(args) => match dara_tools::timeline::run(args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("dara: error: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Export(args) => match dara_tools::export::run(args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("dara: error: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Minimize(args) => match dara_tools::minimize::run(args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("dara: error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

#[derive(serde::Serialize)]
struct Summary<'a> {
    command: &'a [String],
    cwd: &'a str,
    strategy: &'a str,
    seed: u64,
    execution: u64,
    random_seed: u64,
    cpus: u32,
    /// The memory and swap totals `sysinfo` showed.
    memory: dara_model::memory_totals::MemoryTotals,
    steps: usize,
    threads: usize,
    timeouts_fired: usize,
    blocked_steps: usize,
    virtual_time_ns: u64,
    /// `deadline` or `any` (docs/time.md), the step cost and the pause budget.
    timers: &'static str,
    step_ns: u64,
    pauses: u32,
    realtime_epoch_ns: u64,
    ops: BTreeMap<&'static str, usize>,
    outcome: &'a dara_model::Outcome,
    bug: bool,
}

fn summarize(t: &Trace) -> Summary<'_> {
    let mut ops = BTreeMap::new();
    let mut threads = std::collections::BTreeSet::new();
    for s in &t.steps {
        *ops.entry(s.choice.op.name()).or_insert(0) += 1;
        threads.insert(s.choice.thread);
    }
    Summary {
        command: &t.header.command,
        cwd: &t.header.cwd,
        strategy: &t.header.strategy,
        seed: t.header.seed,
        execution: t.header.execution,
        random_seed: t.header.random_seed,
        cpus: t.header.cpus,
        memory: t.header.memory,
        steps: t.steps.len(),
        threads: threads.len(),
        timeouts_fired: t.steps.iter().filter(|s| s.choice.kind == ChoiceKind::Timeout).count(),
        blocked_steps: t.steps.iter().filter(|s| s.result.is_none()).count(),
        virtual_time_ns: t.steps.last().map_or(0, |s| s.now_ns),
        timers: t.header.time.timers.name(),
        step_ns: t.header.time.step_ns,
        pauses: t.header.time.pauses,
        realtime_epoch_ns: t.header.time.realtime_epoch_ns,
        ops,
        outcome: &t.outcome,
        bug: t.outcome.is_bug(),
    }
}

fn print_summary(s: &Summary<'_>) {
    println!("command:      {}", s.command.join(" "));
    println!("directory:    {}", s.cwd);
    println!("strategy:     {} (seed {}, execution {})", s.strategy, s.seed, s.execution);
    let gib = |units: u64| (units as f64) * f64::from(s.memory.mem_unit) / f64::from(1u32 << 30);
    println!("program view: {} CPUs, {:.1} GiB memory, {:.1} GiB swap, random seed {:#x}", s.cpus, gib(s.memory.total_ram), gib(s.memory.total_swap), s.random_seed);
    println!("steps:        {} ({} blocked, {} timeouts fired)", s.steps, s.blocked_steps, s.timeouts_fired);
    println!("threads:      {}", s.threads);
    println!("virtual time: {} (timers at {}, {} ns a step on average, pause budget {})", format_vtime(s.virtual_time_ns), if s.timers == "any" { "any step" } else { "deadlines" }, s.step_ns, s.pauses);
    println!("wall clock:   starts at {}.{:09} s since 1970 (--epoch)", s.realtime_epoch_ns / 1_000_000_000, s.realtime_epoch_ns % 1_000_000_000);
    println!("operations:");
    for (op, n) in &s.ops {
        println!("  {op:<16} {n}");
    }
    println!("outcome:      {}", s.outcome.summary());
}
