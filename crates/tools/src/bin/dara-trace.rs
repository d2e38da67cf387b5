//! `dara-trace`: run a program under dara's scheduler once, or search many schedules for a bug.
//!
//! Exit status: 0 no bug found, 1 a bug was found (saved under <out>/bug-NNNN/), 2 usage or tool
//! error (including a program dara cannot control), 130 interrupted.
//!
//! Its own lines (progress, verdicts, the replay command) go to stderr: stdout is the program's,
//! so `dara-trace -- prog -c > out` writes what `prog -c > out` would.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use dara_explorer::deadline::with_deadline;
use dara_explorer::search::{search, Progress, SavedBug, SearchConfig, SearchEnd, SearchSummary};
use dara_explorer::hint::EmptySearch;
use dara_explorer::visibility::Visibility;
use dara_tools::cluster_config::{self, ClusterOptions};
use dara_tools::minimize::size_line;
use dara_tools::results::{self, BugEntry, EndEntry, JsonStdout, OutcomeEntry, PropertyEntry, SearchDocument};
use dara_tools::setup::{self, MachineOptions, STOP};
use dara_tracer::binary::{self, BinaryKind};

/// Run a program under dara's one-thread-at-a-time scheduler and search its schedules for bugs.
///
/// Without a command, runs the built-in demo: a small bank program with an atomicity bug.
#[derive(Parser, Debug)]
#[command(name = "dara-trace", version, after_help = "Exit status: 0 no bug found, 1 bug found, 2 usage or tool error (or a program dara cannot control), 130 interrupted.")]
struct Cli {
    /// Output directory: trace.bin of the last execution, bug-NNNN/ for each distinct bug,
    /// goal-NNNN/ for the first execution that met each goal (SOMETIMES, REACHABLE).
    #[arg(short, long, default_value = "dara-out")]
    out: PathBuf,
    /// Number of executions to search (stops at the first bug unless --keep-going).
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Search strategy: random, pct, pct:D (D-1 priority change points), pos (partial order
    /// sampling), rf (reads-from feedback, for memory-level points); systematic: dfs,
    /// dfs:preempt=K, dfs:delay=K, dfs:preempt, dfs:delay (iterative bounds), dpor;
    /// coverage-guided: coverage:unique, coverage:frequency, coverage:node-frequency (each
    /// aims executions at the program's unmet SOMETIMES/REACHABLE goals; add :no-goals to stop).
    #[arg(long, default_value = "random")]
    strategy: String,
    /// Seed of the search; the same seed gives the same executions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep searching after the first bug, saving each distinct bug once.
    #[arg(long)]
    keep_going: bool,
    /// Executions to run in parallel, each on its own CPU. The executions (and so the bugs found)
    /// are the same for every value.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Start the program with fork and exec for every execution instead of copying it, parked
    /// before `main`, from a fork server started once per search (the runs are the same either
    /// way; this only makes them slower).
    #[arg(long)]
    no_fork_server: bool,
    /// Execution 0 follows this trace's decisions, then the strategy takes over (when the trace
    /// runs out or the program offers something else). Not for dfs/dpor.
    #[arg(long, value_name = "TRACE")]
    seed_trace: Option<PathBuf>,
    /// Stop starting new executions after this many seconds.
    #[arg(long)]
    time_budget: Option<f64>,
    /// Scheduling decisions after which an execution counts as hung (default 500000 when
    /// searching; a recording runs until the program ends or Ctrl-C).
    #[arg(long)]
    max_steps: Option<u64>,
    /// Virtual seconds after which an execution counts as hung (default 3600 when searching;
    /// a recording runs until the program ends or Ctrl-C).
    #[arg(long)]
    max_vtime: Option<u64>,
    /// A closed world even for a single recording run: no peer outside dara may connect, and a
    /// thread that waits for one is deadlocked (searches, --runs > 1, always are closed).
    #[arg(long)]
    closed: bool,
    /// Record with the host's pids instead of a PID namespace's: the pid file a server writes
    /// names it for outside tools (`kill -HUP $(cat pidfile)`), and one left by a killed run does
    /// not name the program itself. The trace keeps every pid and the replay gives out the same
    /// ones (docs/limits.md, "Privileges and pids"). A recording only.
    #[arg(long)]
    host_pids: bool,
    /// CPU count the program sees (sysconf, get_nprocs, sched_getaffinity); it always runs on CPU 0 (sched_getcpu, getcpu).
    #[arg(long, default_value_t = 4)]
    cpus: u32,
    /// Print only the final result, and the program's own output; given twice (-qq), a search
    /// (--runs > 1) drops the program's output too (replay a bug to see it).
    #[arg(short, long, action = clap::ArgAction::Count)]
    quiet: u8,
    /// Do not look for a smaller failing schedule of each bug found (saved as minimal.bin).
    #[arg(long)]
    no_minimize: bool,
    /// Extra scheduling points for sancov builds: `memory` (loads/stores of memory that several
    /// threads share, one profiling run first), `edges:N` (a yield every N coverage edges), or
    /// both: `memory,edges:N`. See docs/memory-preemption.md.
    #[arg(long, value_name = "SPEC")]
    preempt_on: Option<String>,
    /// A cluster to run: nodes dara starts (and restarts) itself, the workload, a check, setup,
    /// cleanup and fault budgets, in TOML (docs/cluster.md). A command after `--` replaces the
    /// file's workload.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A shell command run under control after the workload exited 0, while the nodes are still
    /// up; a non-zero status is a bug.
    #[arg(long, value_name = "CMD")]
    check: Option<String>,
    /// A liveness property as a shell command (docs/properties.md): once the workload is over
    /// (it exited 0, or --run-for was reached), the command runs under control during a fair
    /// random walk of up to --liveness-steps decisions, again 100 virtual ms after each failure;
    /// never exiting 0 is a liveness violation, and its critical transition is looked for.
    #[arg(long, value_name = "CMD")]
    eventually: Option<String>,
    /// A shell command run (outside dara) before every execution, e.g. to empty a data
    /// directory; its failure stops the search.
    #[arg(long, value_name = "CMD")]
    setup: Option<String>,
    /// A shell command run (outside dara) after every execution.
    #[arg(long, value_name = "CMD")]
    cleanup: Option<String>,
    /// Faults to inject, each kind with a budget per execution: KIND[:N],... with KIND one of
    /// crash, restart, partition, reset, drop, skew, pause-node (these need nodes: --config;
    /// pause-node stops every thread of a node while time passes the others' deadlines) or pause
    /// (a thread stops while virtual time passes others' deadlines: early timeouts; any program),
    /// N defaulting to 1; or `none`.
    #[arg(long, value_name = "LIST")]
    faults: Option<String>,
    /// When timers fire: `deadline` (default: when the virtual clock reaches them; early
    /// timeouts are the pause fault's) or `any` (any pending timer may fire at any step, as on
    /// an arbitrarily slow machine). See docs/time.md.
    #[arg(long, value_name = "POLICY", default_value = "deadline")]
    timers: String,
    /// Virtual nanoseconds one scheduling decision costs.
    #[arg(long, value_name = "NS", default_value_t = dara_model::time::DEFAULT_STEP_NS)]
    step_cost: u64,
    /// What the program's wall clock reads when each execution starts, in seconds since 1970
    /// (default: the real time at which dara-trace starts, the same for every execution; a
    /// replay uses the recorded value). See docs/time.md.
    #[arg(long, value_name = "SECONDS")]
    epoch: Option<u64>,
    /// Stop each execution after this many virtual seconds and judge it as it stands (an endless
    /// server or chaos loop is then not a hang); a cluster run's check runs then and judges it.
    #[arg(long, value_name = "SECONDS")]
    run_for: Option<f64>,
    /// Liveness (docs/properties.md): once the workload is over (--run-for reached, else
    /// --max-steps), an EVENTUALLY property that does not hold then is given this many more
    /// decisions of a fair random walk to hold; never holding is a liveness violation. 0: off.
    #[arg(long, value_name = "N", default_value_t = dara_model::liveness::DEFAULT_WALK_STEPS)]
    liveness_steps: u64,
    /// Random walks tried from each prefix when looking for a liveness violation's critical
    /// transition (0: do not look).
    #[arg(long, value_name = "K", default_value_t = dara_explorer::liveness::DEFAULT_WALKS)]
    liveness_walks: u32,
    /// Most nodes crashed per execution (same as crash:N in --faults).
    #[arg(long, value_name = "N")]
    max_crashes: Option<u32>,
    /// Leave this environment variable's value out of the traces (repeatable; a glob such as
    /// `AWS_*`). The program still sees it; a replay takes it from the replaying environment.
    #[arg(long, value_name = "NAME")]
    env_exclude: Vec<String>,
    /// Print the results as one JSON document on stdout (docs/results.md); dara's own lines and
    /// the program's output then go to stderr. The exit status is the same.
    #[arg(long)]
    json: bool,
    /// Also write the results as a JUnit XML report to FILE, for CI systems.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    #[command(flatten)]
    machine: MachineOptions,
    /// The program and its arguments.
    #[arg(last = true)]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = match cli.json.then(JsonStdout::take).transpose() {
        Ok(json) => json,
        Err(e) => {
            eprintln!("dara-trace: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let junit = cli.junit.clone();
    let (command, strategy, seed, runs) = (cli.command.clone(), cli.strategy.clone(), cli.seed, cli.runs);
    let document = match run(cli) {
        Ok(document) => document,
        Err(e) => {
            eprintln!("dara-trace: error: {e:#}");
            SearchDocument::error(command, strategy, seed, runs, format!("{e:#}"))
        }
    };
    let code = document.exit_code;
    if let Some(path) = &junit {
        if let Err(e) = results::write_junit(path, &document) {
            eprintln!("dara-trace: error: {e:#}");
        }
    }
    if let Some(json) = json {
        if let Err(e) = json.write(&document) {
            eprintln!("dara-trace: error: {e:#}");
            return ExitCode::from(2);
        }
    }
    ExitCode::from(code)
}

/// Runs the search (or recording) and prints its results for people; returns them for machines.
fn run(mut cli: Cli) -> anyhow::Result<SearchDocument> {
    setup::init_process()?;
    let cluster = cluster_config::resolve(&ClusterOptions {
        config: cli.config.as_deref(),
        check: cli.check.as_deref(),
        eventually: cli.eventually.as_deref(),
        setup: cli.setup.as_deref(),
        cleanup: cli.cleanup.as_deref(),
        faults: cli.faults.as_deref(),
        max_crashes: cli.max_crashes,
    })?;
    if cli.command.is_empty() {
        if let Some(workload) = &cluster.workload {
            cli.command = workload.clone();
        } else if cluster.spec.is_some() {
            bail!("no workload: give the command after `--`, or `workload = ...` in the config file");
        }
    }
    let demo = cli.command.is_empty();
    if demo {
        let program = write_demo(&cli.out)?;
        cli.command = vec![program.display().to_string()];
        if cli.runs == 1 {
            cli.runs = 300;
        }
        if cli.strategy == "random" {
            cli.strategy = "pct:3".into();
        }
        if cli.quiet == 0 {
            eprintln!("dara demo: {} — a bank with two tellers and an atomicity bug.", program.display());
            eprintln!("Searching up to {} schedules with {} (seed {})...", cli.runs, cli.strategy, cli.seed);
        }
    }
    let mut build_ids = check_program(&cli.command[0])?;
    if let Some(spec) = &cluster.spec {
        for command in spec.nodes.iter().flat_map(|n| [&n.start, &n.restart]).chain(spec.check.as_ref()).chain(spec.eventually.as_ref()) {
            if let Some(program) = command.first() {
                build_ids.extend(check_program(program)?);
            }
        }
        build_ids.sort();
        build_ids.dedup();
    }
    let mut execution = setup::base_config(&cli.machine, cli.command.clone())?;
    execution.cluster = cluster.spec;
    execution.time = time_config(&cli, cluster.pauses)?;
    execution.setup = cluster.setup;
    execution.cleanup = cluster.cleanup;
    // A single run of a program (not the demo, not a cluster) is a recording: clients outside dara
    // may talk to it, and it runs as long as they do.
    let recording = cli.runs == 1 && !demo && !cli.closed && execution.cluster.is_none() && cli.seed_trace.is_none();
    // -qq searches show no execution's output: hundreds of copies of it say nothing.
    execution.discard_output = cli.quiet >= 2 && cli.runs > 1;
    if recording {
        execution.outside = dara_scheduler::outside::OutsideMode::Live { stdin: dara_scheduler::outside::stdin_has_input(), signals: setup::signal_inbox() };
        if cli.host_pids {
            // The trace notes them and the replay gives them out again.
            execution.pids = dara_scheduler::execution::PidPlan::Host;
        }
    }
    if cli.host_pids && !recording {
        bail!("--host-pids is for a recording (a single run with outside peers): a search's executions each see a PID namespace's pids, the same in every run of a schedule");
    }
    let (default_steps, default_vtime) = if recording { (u64::MAX, u64::MAX / 1_000_000_000) } else { (500_000, 3600) };
    execution.max_steps = cli.max_steps.unwrap_or(default_steps);
    execution.max_vtime_ns = cli.max_vtime.unwrap_or(default_vtime).saturating_mul(1_000_000_000);
    execution.cpus = cli.cpus;
    if execution.cluster.as_ref().is_some_and(|c| c.eventually.is_some()) && cli.liveness_steps == 0 {
        bail!("--eventually needs the liveness walk: give --liveness-steps a number above 0");
    }
    if execution.cluster.as_ref().is_some_and(|c| c.eventually.is_some() && c.check.is_some()) {
        bail!("--eventually and --check both judge the end of the workload: give one of them");
    }
    execution.liveness = (cli.liveness_steps > 0).then_some(dara_model::liveness::LivenessConfig { steps: cli.liveness_steps, salt: 0, from_step: None, follow_strategy: false });
    let mut profiled = None;
    let mut profile_overflowed = false;
    if let Some(spec) = &cli.preempt_on {
        execution.preempt = dara_model::preempt::Preemption::parse(spec).map_err(anyhow::Error::msg)?;
        if execution.preempt.memory_level() && recording {
            bail!("--preempt-on {spec}: memory-level points are for searches, and a single run with outside peers is a recording of one schedule (after a profiling run clients would meet the wrong one): give --runs N to search, or --closed for one closed run");
        }
        if execution.preempt.memory_level() {
            let p = dara_explorer::profile::profile(&mut execution, cli.seed, &STOP)?;
            profiled = Some(p.sources);
            profile_overflowed = p.overflowed;
            if let Some(warning) = &p.warning {
                eprintln!("dara-trace: warning: {warning}");
            }
            if cli.quiet == 0 {
                eprintln!("{}", p.describe());
            }
        }
    }
    // A recording runs one schedule: lock operations and clock reads need no decision.
    execution.preempt.coarse = recording;
    let visibility = Visibility::of(&execution.preempt, profiled);
    let cfg = SearchConfig {
        visibility,
        execution,
        runs: cli.runs,
        strategy: cli.strategy.clone(),
        seed: cli.seed,
        out_dir: cli.out.clone(),
        keep_going: cli.keep_going,
        build_ids,
        jobs: cli.jobs.max(1),
        fork_server: !cli.no_fork_server,
        time_budget: cli.time_budget.map(|s| std::time::Duration::from_secs_f64(s.max(0.0))),
        seed_trace: match &cli.seed_trace {
            Some(path) => Some(seed_decisions(path)?),
            None => None,
        },
        env_exclude: cli.env_exclude.clone(),
        replay_command: dara_tools::invocation::tool_command("dara-replay"),
    };
    let mut progress = ProgressLine::new(cli.quiet > 0, cli.runs, cfg.time_budget);
    // The budget covers the search and the minimization of its bugs.
    let deadline = cfg.time_budget.map(|b| std::time::Instant::now() + b);
    let summary = search(&cfg, &STOP, |p| progress.update(&p));
    progress.clear();
    let summary = summary?;
    let mut document = SearchDocument {
        format: results::FORMAT,
        tool: "dara-trace",
        dara_version: env!("CARGO_PKG_VERSION"),
        command: cli.command.clone(),
        strategy: cfg.strategy.clone(),
        seed: cfg.seed,
        runs: cfg.runs,
        executions: summary.executions,
        recording,
        end: match &summary.end {
            SearchEnd::Completed => EndEntry::Completed,
            SearchEnd::Exhausted(note) => EndEntry::Exhausted { note: note.clone() },
            SearchEnd::NotExhaustive { explored, blind } => EndEntry::NotExhaustive { explored: explored.clone(), reason: blind.to_string() },
            SearchEnd::TimeBudget => EndEntry::TimeBudget,
            SearchEnd::Interrupted => EndEntry::Interrupted,
            SearchEnd::Uncontrolled(outcome) => EndEntry::Uncontrolled { outcome: OutcomeEntry::of(outcome) },
        },
        outcomes: summary.outcome_counts.clone(),
        bugs: Vec::new(),
        last_trace: summary.last_trace.clone(),
        coverage_edges: summary.coverage,
        wall_seconds: summary.wall.as_secs_f64(),
        notes: summary.notes.clone(),
        properties: PropertyEntry::list(&summary.properties, &summary.goals),
        exit_code: 0,
    };
    print_properties(&document.properties, summary.executions, &summary.malformed_property_lines);
    match &summary.end {
        SearchEnd::Uncontrolled(outcome) => {
            eprintln!("dara-trace: stopped: {}", outcome.summary());
            if let Some(t) = &summary.last_trace {
                eprintln!("dara-trace: the run up to that point is in {}", t.display());
            }
            document.exit_code = 2;
            return Ok(document);
        }
        SearchEnd::Interrupted => {
            eprintln!("interrupted after {} executions", summary.executions);
            if let Some(t) = &summary.last_trace {
                eprintln!("the interrupted run is in {}", t.display());
            }
        }
        SearchEnd::Exhausted(note) => eprintln!("search space exhausted: {note}"),
        SearchEnd::NotExhaustive { explored, blind } => eprintln!("search not exhaustive: {} {explored}, but only over the points dara saw: {blind}", cfg.strategy),
        SearchEnd::TimeBudget => eprintln!("time budget spent after {} executions", summary.executions),
        SearchEnd::Completed => {}
    }
    if cli.quiet == 0 && summary.executions > 1 {
        print_table(&summary, &cfg.strategy);
    }
    for note in &summary.notes {
        eprintln!("note: {note}");
    }
    if summary.bugs.is_empty() {
        if !matches!(summary.end, SearchEnd::Interrupted) {
            eprintln!("no bug found in {} executions ({})", summary.executions, cfg.strategy);
            if !recording && matches!(summary.end, SearchEnd::Completed | SearchEnd::TimeBudget) {
                let program = binary::resolve(&cli.command[0]);
                let build = program.as_deref().map(dara_tools::memory_build::memory_instrumentation).unwrap_or_default();
                // Disassembling is worth it only when nothing else will be suggested.
                let look_for_atomics = !build.any() && !cfg.execution.preempt.memory_level();
                let atomic_instructions = program.as_deref().filter(|_| look_for_atomics).map_or(0, dara_tools::memory_build::atomic_instructions);
                let empty = EmptySearch { visibility, build, atomic_instructions, overflowed: profile_overflowed || summary.watch_overflowed };
                if let Some(line) = dara_explorer::hint::hint(&empty) {
                    eprintln!("{line}");
                }
            }
            if let Some(t) = &summary.last_trace {
                eprintln!("trace of the last execution: {}", t.display());
            }
            return Ok(document);
        }
        document.exit_code = 130;
        return Ok(document);
    }
    eprintln!("{} distinct bug(s) in {} executions:", summary.bugs.len(), summary.executions);
    let mut replay = summary.bugs[0].trace.clone();
    // The minimization's candidates are executions of the same command: copied from a fork
    // server too (invisible to the program, like the search's).
    let mut minimize_base = cfg.execution.clone();
    if !cli.no_minimize {
        dara_scheduler::execution::prepare_repeated_runs(&mut minimize_base, !cli.no_fork_server, &[]);
    }
    for (i, bug) in summary.bugs.iter().enumerate() {
        eprintln!("  {}  (execution {}, {} steps) -> {}", bug.outcome.summary(), bug.execution, bug.steps, bug.dir.display());
        if matches!(bug.outcome, dara_model::Outcome::LivenessViolated { .. }) && cli.liveness_walks > 0 && i < MINIMIZE_BUGS {
            dara_tools::liveness::find_critical_transition(bug, &cfg.execution, cli.liveness_walks, &STOP, deadline);
        }
        let minimal = if cli.no_minimize || i >= MINIMIZE_BUGS { None } else { minimize_bug(bug, &minimize_base, deadline) };
        if let (0, Some(minimal)) = (i, &minimal) {
            replay = minimal.clone();
        }
        document.bugs.push(BugEntry::new(&bug.outcome, bug.execution, bug.steps, &bug.dir, &bug.trace, minimal));
    }
    eprintln!("replay: {} {}", dara_tools::invocation::tool_command("dara-replay"), replay.display());
    document.exit_code = 1;
    Ok(document)
}

/// The time settings from `--timers`, `--step-cost`, `--run-for` and the pause budget.
fn time_config(cli: &Cli, pauses: u32) -> anyhow::Result<dara_model::time::TimeConfig> {
    let timers = dara_model::time::TimerPolicy::parse(&cli.timers).map_err(anyhow::Error::msg)?;
    if cli.step_cost == 0 {
        bail!("--step-cost must be at least 1 ns: a program spinning on clock reads must see time pass");
    }
    let run_for_ns = match cli.run_for {
        Some(s) if !(s > 0.0 && s.is_finite()) => bail!("--run-for takes a positive number of virtual seconds"),
        Some(s) => Some((s * 1e9) as u64),
        None => None,
    };
    let realtime_epoch_ns = match cli.epoch {
        Some(s) => s.checked_mul(1_000_000_000).context("--epoch takes seconds since 1970, before the year 2554")?,
        None => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).context("the system clock reads before 1970: give --epoch")?;
            u64::try_from(now.as_nanos()).context("the system clock reads after 2554: give --epoch")?
        }
    };
    Ok(dara_model::time::TimeConfig { timers, step_ns: cli.step_cost, pauses, run_for_ns, realtime_epoch_ns })
}

/// The decisions of a seed trace (`--seed-trace`).
fn seed_decisions(path: &Path) -> anyhow::Result<Vec<dara_model::Choice>> {
    let trace = dara_model::trace::read_file(path).context("cannot use the seed trace")?;
    Ok(trace.steps.iter().map(|s| s.choice).collect())
}

/// Bugs of one search that get a minimization pass, and its budget of candidate executions.
const MINIMIZE_BUGS: usize = 3;
const MINIMIZE_TRIES: u64 = 100;

/// Looks for a smaller schedule that fails the same way; saves it as `minimal.bin` beside the
/// bug's trace when it has fewer preemptions or steps, and returns its path. Failing to minimize
/// is not an error of the search: it is reported on one line and the original trace stands.
fn minimize_bug(bug: &SavedBug, base: &dara_scheduler::execution::ExecutionConfig, deadline: Option<std::time::Instant>) -> Option<PathBuf> {
    if matches!(bug.outcome, dara_model::Outcome::Hang { .. }) {
        // Every candidate would run into the same bound (seconds each); not worth it by default.
        return None;
    }
    if matches!(bug.outcome, dara_model::Outcome::LivenessViolated { .. }) {
        // A shorter schedule would have another walk; the critical transition says where it broke.
        return None;
    }
    if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
        eprintln!("  (not minimized: the time budget is spent)");
        return None;
    }
    let recorded = dara_model::trace::read_file(&bug.trace).ok()?;
    let minimized = with_deadline(&STOP, deadline, |halt| dara_explorer::minimize::minimize(&recorded, base, MINIMIZE_TRIES, halt, &mut |_| {}));
    let result = match minimized {
        Ok(r) => r,
        Err(dara_explorer::minimize::MinimizeError::Interrupted) if !STOP.load(std::sync::atomic::Ordering::Relaxed) => {
            eprintln!("  (not minimized: the time budget ran out)");
            return None;
        }
        Err(e) => {
            eprintln!("  (no smaller schedule for {}: {e})", bug.dir.display());
            return None;
        }
    };
    if !result.after.smaller_than(&result.before) {
        return None;
    }
    let path = bug.dir.join("minimal.bin");
    if let Err(e) = dara_model::trace::write_file(&path, &result.trace) {
        eprintln!("  (could not save the smaller schedule: {e})");
        return None;
    }
    eprintln!(
        "  smallest failing schedule found: {} (was {}) -> {}",
        size_line(&result.after),
        size_line(&result.before),
        path.display()
    );
    let summary = bug.dir.join("summary.txt");
    let note = format!("minimal:    {} {} ({})\n", dara_tools::invocation::tool_command("dara-replay"), path.display(), size_line(&result.after));
    let _ = std::fs::OpenOptions::new().append(true).open(&summary).and_then(|mut f| std::io::Write::write_all(&mut f, note.as_bytes()));
    Some(path)
}

/// Per-execution output: a live line on a terminal, occasional plain lines otherwise, and always a
/// line for each new bug.
struct ProgressLine {
    quiet: bool,
    runs: u64,
    /// `--time-budget`: the search ends at it if the runs do not end it first.
    budget: Option<std::time::Duration>,
    live: bool,
    last_live: std::time::Instant,
    drawn: bool,
}

impl ProgressLine {
    fn new(quiet: bool, runs: u64, budget: Option<std::time::Duration>) -> ProgressLine {
        // SAFETY: isatty only inspects the descriptor.
        let live = unsafe { libc::isatty(2) } == 1 && runs > 1;
        ProgressLine { quiet, runs, budget, live, last_live: std::time::Instant::now(), drawn: false }
    }

    /// "executions 120/500 (40/s, about 10 s left), distinct bugs 0": the rate so far, and the time
    /// the remaining runs take at it (or the time budget's rest, if that ends the search first).
    fn counts(&self, p: &Progress<'_>) -> String {
        let done = p.execution + 1;
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        let rate = done as f64 / secs;
        let by_runs = self.runs.saturating_sub(done) as f64 / rate;
        let left = self.budget.map_or(by_runs, |b| by_runs.min((b.as_secs_f64() - secs).max(0.0)));
        let left = if done < self.runs { format!(", about {} left", duration_words(left)) } else { String::new() };
        format!("executions {done}/{} ({rate:.0}/s{left}), distinct bugs {}{}", self.runs, p.bugs, coverage_note(p.coverage))
    }

    fn update(&mut self, p: &Progress<'_>) {
        if self.quiet {
            return;
        }
        if let Some(g) = p.watch_growth {
            self.clear();
            eprintln!("memory watch set: +{} granule{} after execution {} (now {})", g.added, if g.added == 1 { "" } else { "s" }, g.after, g.watched);
        }
        let done = p.execution + 1;
        if let Some(bug) = p.new_bug {
            self.clear();
            eprintln!("execution {}: {} ({} steps)", p.execution, bug.outcome.summary(), bug.steps);
        } else if self.runs == 1 {
            eprintln!("execution {}: {} ({} steps, {:.1} ms{})", p.execution, p.report.outcome.summary(), p.report.steps.len(), p.report.wall.as_secs_f64() * 1e3, coverage_note(p.coverage));
        } else if self.live {
            if self.last_live.elapsed().as_millis() >= 100 || done == self.runs {
                eprint!("\r\x1b[2K{}", self.counts(p));
                let _ = std::io::Write::flush(&mut std::io::stderr());
                self.last_live = std::time::Instant::now();
                self.drawn = true;
            }
        } else if done % 50 == 0 {
            eprintln!("{}", self.counts(p));
        }
    }

    fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            let _ = std::io::Write::flush(&mut std::io::stderr());
            self.drawn = false;
        }
    }
}

/// "45 s", "12 min", "3.5 h": a rough duration for people.
fn duration_words(secs: f64) -> String {
    match secs {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 90.0 * 60.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

/// The closing table: how many executions, how fast, how they ended.
fn print_table(summary: &SearchSummary, strategy: &str) {
    let secs = summary.wall.as_secs_f64();
    eprintln!("{:<22} {}", "strategy", strategy);
    eprintln!("{:<22} {} in {:.2} s ({:.0}/s)", "executions", summary.executions, secs, summary.executions as f64 / secs.max(1e-9));
    match &summary.launches.no_server {
        Some(why) => eprintln!("{:<22} not used: {why}", "fork server"),
        None if summary.launches.copied > 0 => eprintln!("{:<22} {} of {} executions copied from the program parked before main", "fork server", summary.launches.copied, summary.executions),
        None => {}
    }
    if summary.launches.ahead > 0 {
        eprintln!("{:<22} {} of {} executions' programs started while the execution before ran", "launched ahead", summary.launches.ahead, summary.executions);
    }
    if let Some(made) = summary.launches.namespaces_made.filter(|&made| made > 0) {
        eprintln!("{:<22} {made} PID namespaces made for {} executions (each used again once its execution left nothing behind)", "namespaces", summary.executions);
    }
    for (kind, n) in &summary.outcome_counts {
        eprintln!("{:<22} {n}", format!("  ended {kind}"));
    }
    if summary.coverage > 0 {
        eprintln!("{:<22} {} edges", "coverage", summary.coverage);
    }
    eprintln!("{:<22} {}", "distinct bugs", summary.bugs.len());
}

/// The user properties the program declared or evaluated, one line each, and a word on lines
/// that were not the protocol.
fn print_properties(properties: &[PropertyEntry], executions: u64, malformed: &(u64, Option<String>)) {
    if !properties.is_empty() {
        eprintln!("properties over {executions} execution(s):");
        for p in properties {
            eprintln!("  {}", p.line(executions));
        }
    }
    if let (n @ 1.., Some(first)) = malformed {
        eprintln!("note: {n} line(s) on DARA_SDK_FD were not the property protocol (docs/properties.md); the first: {first:?}");
    }
}

/// ", coverage N edges" for instrumented programs, nothing otherwise.
fn coverage_note(edges: usize) -> String {
    if edges == 0 {
        String::new()
    } else {
        format!(", coverage {edges} edges")
    }
}

/// Refuses programs dara cannot enter; returns build-ids for the trace header.
fn check_program(program: &str) -> anyhow::Result<Vec<(String, String)>> {
    let Some(path) = binary::resolve(program) else {
        bail!("cannot find program {program:?} (not a file, or not on PATH)");
    };
    let kind = binary::classify(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let elf = match kind {
        BinaryKind::Dynamic => path.clone(),
        BinaryKind::Static if dara_tools::setup::find_agent().is_none() => bail!(
            "{} is statically linked: dara runs such programs through its ptrace agent, and dara-agent is not next to dara-trace; build the whole workspace (cargo build --release) or set DARA_AGENT",
            path.display()
        ),
        BinaryKind::Static => path.clone(),
        BinaryKind::Script { interpreter } => interpreter,
        BinaryKind::Other(why) => bail!("{}: {why}", path.display()),
    };
    Ok(binary::build_id(&elf).map(|id| vec![(elf.display().to_string(), id)]).unwrap_or_default())
}

/// Writes the embedded demo program into the output directory.
fn write_demo(out: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    const DEMO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/dara-demo"));
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join("demo");
    std::fs::write(&path, DEMO).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path.canonicalize()?)
}
