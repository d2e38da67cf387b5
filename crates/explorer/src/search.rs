//! The search loop: run executions under a strategy, judge each outcome, save every distinct bug
//! once (trace + human summary) and the first execution that met each goal (`goal-NNNN/`), and
//! stop at the first bug unless asked to keep going. Also stops, saying why, when dara could not
//! control the program, when interrupted, when the time budget is spent, or when a systematic
//! strategy has exhausted its space (a proof only when every interleaving point was visible, see
//! [`crate::visibility`]).
//!
//! Parallel searches (`jobs > 1`) run exactly the executions a sequential one runs: execution 0
//! runs alone and its length is passed to every later one ([`Start::first_steps`]); then workers,
//! each with its own strategy instance and CPU, take execution indices in order, and results are judged in index order. A bug at
//! execution k stops new executions above k; executions below k still finish, so the first bug
//! reported is the same for every `jobs`. With memory points, an execution also waits for its
//! epoch's watch set ([`crate::watch_growth`]), which the judge publishes in index order.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dara_abi::splitmix64;
use dara_scheduler::execution::{self, ExecutionConfig, ExecutionError, ExecutionReport, Launched};
use dara_scheduler::trace::{self, Trace, TraceError, TraceHeader};
use dara_scheduler::Outcome;

use crate::last_trace::LastTrace;
use crate::launch_ahead::LaunchAhead;
use crate::strategy::{self, Feedback, Order, Start, Status, Strategy, StrategyError};
use crate::visibility::{BlindSpot, Visibility};
use crate::watch_growth::{Growing, Growth, WatchSets};

/// A search: the execution template plus how many executions, how chosen.
#[derive(Clone, Debug)]
pub struct SearchConfig {
    pub execution: ExecutionConfig,
    pub runs: u64,
    pub strategy: String,
    pub seed: u64,
    pub out_dir: PathBuf,
    pub keep_going: bool,
    pub build_ids: Vec<(String, String)>,
    /// Executions run in parallel, each pinned to its own CPU.
    pub jobs: usize,
    /// Copy each execution's program from a fork server started once for the search, when the
    /// program can serve (`dara_tracer::fork_server`), rather than fork + exec it.
    pub fork_server: bool,
    /// Wall time the search may take: no execution starts after it, and a running one is
    /// stopped (its trace is kept; the search ends as `TimeBudget`).
    pub time_budget: Option<Duration>,
    /// Decisions execution 0 follows before the strategy takes over (`--seed-trace`).
    pub seed_trace: Option<Vec<dara_scheduler::Choice>>,
    /// Names (globs) of environment variables whose values traces leave out (`--env-exclude`).
    pub env_exclude: Vec<String>,
    /// Whether every interleaving point was a scheduling point: an exhausted systematic search
    /// is [`SearchEnd::Exhausted`] only if so, else [`SearchEnd::NotExhaustive`].
    pub visibility: Visibility,
    /// The command that replays a trace, as the tool's user runs it (`dara-replay`, or its path
    /// when it is on no PATH): written into each bug's summary.
    pub replay_command: String,
}

/// A bug saved to disk.
#[derive(Clone, Debug)]
pub struct SavedBug {
    pub dir: PathBuf,
    pub trace: PathBuf,
    pub execution: u64,
    pub outcome: Outcome,
    pub steps: usize,
}

/// The first execution that met a goal (a `sometimes` that held, a `reachable` reached), saved
/// to disk: how the program got there, for `dara-replay`.
#[derive(Clone, Debug)]
pub struct SavedGoal {
    pub kind: dara_model::property::PropertyKind,
    pub name: String,
    pub dir: PathBuf,
    pub trace: PathBuf,
    pub execution: u64,
}

/// How a search ended.
#[derive(Debug)]
pub enum SearchEnd {
    /// All requested executions ran, or it stopped at the first bug.
    Completed,
    /// A systematic strategy explored its whole (bounded) space and every interleaving point was
    /// visible; the note says what was proved.
    Exhausted(String),
    /// A systematic strategy explored its whole space, but only over the points dara saw: some
    /// interleavings (`blind`) were out of sight, so nothing was proved. `explored` is what the
    /// strategy says it ran.
    NotExhaustive { explored: String, blind: BlindSpot },
    /// The time budget ran out.
    TimeBudget,
    /// The user interrupted dara.
    Interrupted,
    /// An execution ran into something dara cannot control (the program, or someone killing it
    /// from outside); the search stopped.
    Uncontrolled(Outcome),
}

#[derive(Debug)]
pub struct SearchSummary {
    pub executions: u64,
    pub bugs: Vec<SavedBug>,
    pub end: SearchEnd,
    /// Where the last execution's trace was written.
    pub last_trace: Option<PathBuf>,
    /// Outcomes of all judged executions, by `Outcome::signature()` kind prefix.
    pub outcome_counts: BTreeMap<String, u64>,
    /// Distinct (process, edge) pairs reached over all executions (sancov builds only).
    pub coverage: usize,
    pub wall: Duration,
    /// What the strategy wants the user to know (the last [`Status::notes`]), e.g. guidance was off.
    pub notes: Vec<String>,
    /// The user properties the executions evaluated (the SDKs' lines), over the whole search.
    pub properties: dara_model::property::SearchProperties,
    /// The goals met, each with the first execution that met it, in the order met.
    pub goals: Vec<SavedGoal>,
    /// Lines on the SDK's descriptor that were not the protocol, and the first of them.
    pub malformed_property_lines: (u64, Option<String>),
    /// Some shared written memory was left unwatched: the watch set reached its cap, or an
    /// execution's access table filled up.
    pub watch_overflowed: bool,
    /// How the executions were started: copied from a fork server, or why not.
    pub launches: Launches,
}

/// How a search's executions were started ([`SearchConfig::fork_server`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launches {
    /// Executions whose program was copied from the fork server (the others: fork + exec).
    pub copied: u64,
    /// Executions whose program was launched while the execution before it ran.
    pub ahead: u64,
    /// Why there was no fork server although the search asked for one.
    pub no_server: Option<String>,
    /// PID namespaces made for the executions (None: no pool; the others were used again).
    pub namespaces_made: Option<u64>,
}

/// Reported after each execution (in execution order), for progress output.
pub struct Progress<'a> {
    pub execution: u64,
    pub report: &'a ExecutionReport,
    pub new_bug: Option<&'a SavedBug>,
    pub bugs: usize,
    /// Distinct (process, edge) pairs reached so far.
    pub coverage: usize,
    pub elapsed: Duration,
    /// The watch set grew after this execution: later executions watch more memory.
    pub watch_growth: Option<&'a Growth>,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error(transparent)]
    Strategy(#[from] StrategyError),
    #[error(transparent)]
    Execution(#[from] ExecutionError),
    #[error("cannot write to {path}: {source}")]
    Output { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("strategy {0} explores executions one after another and cannot run with --jobs above 1")]
    NotParallel(String),
    #[error("strategy {0} builds its decision tree from the first step and cannot start from a seed trace: use random, pct or coverage:* with --seed-trace")]
    NoSeedTrace(String),
}

/// Seed of the application's random streams in execution `k` of a search with `seed`: depends on
/// nothing else, so an execution can be re-run on its own.
pub fn execution_random_seed(seed: u64, k: u64) -> u64 {
    splitmix64(seed ^ splitmix64(k ^ 0xDA7A_0000_0000_0000))
}

/// Runs the search. `progress` is called once per judged execution, in execution order.
pub fn search(cfg: &SearchConfig, stop: &AtomicBool, progress: impl FnMut(Progress<'_>)) -> Result<SearchSummary, SearchError> {
    let started = Instant::now();
    // Executions see a stop that also fires when the budget runs out, so one long execution
    // cannot carry the search past it.
    crate::deadline::with_deadline(stop, cfg.time_budget.map(|b| started + b), |halt| search_until(cfg, stop, halt, started, progress))
}

/// The search, with `halt` (the user's `stop` or the budget's end) as the executions' stop.
fn search_until(cfg: &SearchConfig, stop: &AtomicBool, halt: &AtomicBool, started: Instant, mut progress: impl FnMut(Progress<'_>)) -> Result<SearchSummary, SearchError> {
    let parsed = strategy::parse(&cfg.strategy, cfg.seed)?;
    let (info, mut strategy) = (parsed.info, parsed.strategy);
    if cfg.jobs > 1 && !info.parallel_safe() {
        return Err(SearchError::NotParallel(info.spec));
    }
    if let Some(seed) = &cfg.seed_trace {
        if !info.accepts_seed_trace() {
            return Err(SearchError::NoSeedTrace(info.spec));
        }
        strategy = Box::new(strategy::Seeded::new(strategy, &info.spec, seed.clone()));
    }
    std::fs::create_dir_all(&cfg.out_dir).map_err(|source| SearchError::Output { path: cfg.out_dir.clone(), source })?;
    let cpus = available_cpus();
    // One execution after another: each launches the next one's program on another CPU as it
    // starts, where dara's other helpers work too.
    let aside = if cfg.jobs <= 1 && cfg.runs > 1 { aside_cpus(&cpus, cfg.execution.pin_cpu) } else { Vec::new() };
    let (served, no_server) = with_fork_server(cfg, &aside);
    let cfg = &served;
    // A systematic strategy's decision tree must not change under it (crate::watch_growth).
    let preempt = &cfg.execution.preempt;
    let growing = match (preempt.memory_level(), info.order) {
        (false, _) => Growing::Never,
        (true, Order::Systematic) => Growing::Rounds,
        (true, _) => Growing::Epochs,
    };
    let epochs = WatchSets::new(preempt.watch.clone(), growing, preempt.watches_every_touched());
    let mut judge = Judge::new(cfg, info.spec, started, stop, &epochs);
    judge.launches.no_server = no_server;
    if cfg.runs == 0 {
        return judge.finish(SearchEnd::Completed);
    }

    let mut ahead = aside.first().and_then(|&cpu| LaunchAhead::start(&cfg.execution, cpu));
    // Execution 0, alone: its length calibrates every later execution (PCT's step estimate).
    let next = ahead.as_mut().and_then(|a| Some((a, epochs.for_execution(1, || true)?)));
    let (first, mut status) = run_execution(cfg, &mut *strategy, Start::at(0), cfg.execution.pin_cpu, &epochs.used_by(0), halt, next, None)?;
    let first_steps = first.steps.len() as u64;
    if let Some(end) = judge.judge(0, first, status.exhausted.is_some() && cfg.runs > 1, &mut progress)? {
        return Ok(judge.finish(end)?.with_notes(status));
    }

    let end = if cfg.jobs <= 1 {
        sequential(cfg, &mut strategy, first_steps, &mut status, &mut judge, halt, ahead.as_mut(), &mut progress)?
    } else {
        parallel(cfg, first_steps, &mut judge, &epochs, halt, &mut progress)?
    };
    Ok(judge.finish(end)?.with_notes(status))
}

/// Executions 1.. one after another; `status` is the strategy's after the last one. A systematic
/// strategy that exhausted its space while the watch set grew starts again, fresh, with the
/// grown set (a new round, `crate::watch_growth`).
#[allow(clippy::too_many_arguments)]
fn sequential(
    cfg: &SearchConfig,
    strategy: &mut Box<dyn Strategy + Send>,
    first_steps: u64,
    status: &mut Status,
    judge: &mut Judge<'_>,
    stop: &AtomicBool,
    mut ahead: Option<&mut LaunchAhead>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<SearchEnd, SearchError> {
    for k in 1..cfg.runs {
        if judge.epochs.round_starts_at(k) {
            *strategy = strategy::parse(&cfg.strategy, cfg.seed)?.strategy;
            *status = Status::default();
        }
        if let Some(proved) = &status.exhausted {
            return Ok(exhausted(cfg.visibility, judge.epochs.unwatched_sharing(), proved));
        }
        if judge.over_budget() {
            return Ok(SearchEnd::TimeBudget);
        }
        // Every execution before k has been judged, so k's set is there.
        let watch = judge.epochs.used_by(k);
        let launched = ahead.as_deref_mut().and_then(LaunchAhead::take);
        // The next execution's set, if already known (epochs publish theirs ahead; a set that
        // grows after this one is judged makes the next execution discard the launch).
        let next = ahead.as_deref_mut().and_then(|a| Some((a, judge.epochs.for_execution(k + 1, || true)?)));
        let (report, after) = run_execution(cfg, &mut **strategy, Start::calibrated(k, first_steps), cfg.execution.pin_cpu, &watch, stop, next, launched)?;
        *status = after;
        // A round may end here only if another execution can follow it.
        let round_over = status.exhausted.is_some() && k + 1 < cfg.runs;
        if let Some(end) = judge.judge(k, report, round_over, progress)? {
            return Ok(end);
        }
    }
    Ok(match &status.exhausted {
        Some(proved) => exhausted(cfg.visibility, judge.epochs.unwatched_sharing(), proved),
        None => SearchEnd::Completed,
    })
}

/// How a search whose strategy explored its whole space ends: a proof only if dara saw every
/// point where threads could interleave, and its executions showed no sharing outside the watch
/// set (`unwatched` granules: systematic searches keep the profile's set).
fn exhausted(visibility: Visibility, unwatched: usize, proved: &str) -> SearchEnd {
    match visibility.blind_spot().or((unwatched > 0).then_some(BlindSpot::UnwatchedSharing)) {
        None => SearchEnd::Exhausted(proved.to_string()),
        Some(blind) => SearchEnd::NotExhaustive { explored: proved.to_string(), blind },
    }
}

fn parallel(
    cfg: &SearchConfig,
    first_steps: u64,
    judge: &mut Judge<'_>,
    epochs: &WatchSets,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<SearchEnd, SearchError> {
    let next = AtomicU64::new(1);
    // Executions at or above `limit` are not started (set at a bug, an uncontrolled run, ...).
    let limit = AtomicU64::new(cfg.runs);
    let out_of_time = AtomicBool::new(false);
    let cpus = available_cpus();
    let base_cpu = cfg.execution.pin_cpu.unwrap_or(0);
    let (tx, rx) = mpsc::channel::<(u64, Result<ExecutionReport, SearchError>)>();
    std::thread::scope(|scope| {
        for worker in 0..cfg.jobs {
            let tx = tx.clone();
            let (next, limit, out_of_time) = (&next, &limit, &out_of_time);
            let cpu = cpus.get((cpus.iter().position(|&c| c == base_cpu).unwrap_or(0) + worker) % cpus.len().max(1)).copied();
            scope.spawn(move || {
                let mut strategy = match strategy::parse(&cfg.strategy, cfg.seed) {
                    Ok(parsed) => parsed.strategy,
                    Err(e) => {
                        let _ = tx.send((u64::MAX, Err(e.into())));
                        return;
                    }
                };
                loop {
                    if stop.load(Ordering::Relaxed) || out_of_time.load(Ordering::Relaxed) {
                        return;
                    }
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    if k >= limit.load(Ordering::SeqCst) {
                        return;
                    }
                    let cancelled = || stop.load(Ordering::Relaxed) || out_of_time.load(Ordering::Relaxed) || k >= limit.load(Ordering::SeqCst);
                    let Some(watch) = epochs.for_execution(k, cancelled) else { return };
                    let result = run_execution(cfg, &mut *strategy, Start::calibrated(k, first_steps), cpu, &watch, stop, None, None).map(|(report, _)| report);
                    let failed = result.is_err();
                    if tx.send((k, result)).is_err() || failed {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut pending: BTreeMap<u64, ExecutionReport> = BTreeMap::new();
        let mut expected = 1u64;
        let mut end = None;
        let mut error = None;
        for (k, result) in rx {
            if judge.over_budget() {
                out_of_time.store(true, Ordering::Relaxed);
                epochs.close();
            }
            match result {
                Ok(report) => {
                    pending.insert(k, report);
                }
                Err(e) => {
                    limit.store(0, Ordering::SeqCst);
                    epochs.close();
                    error.get_or_insert(e);
                    continue;
                }
            }
            while let Some(report) = pending.remove(&expected) {
                if end.is_none() && error.is_none() {
                    match judge.judge(expected, report, false, progress) {
                        Ok(Some(e)) => {
                            limit.fetch_min(expected + 1, Ordering::SeqCst);
                            epochs.close();
                            end = Some(e);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            limit.store(0, Ordering::SeqCst);
                            epochs.close();
                            error = Some(e);
                        }
                    }
                }
                expected += 1;
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        Ok(end.unwrap_or(if out_of_time.load(Ordering::Relaxed) && judge.executions < cfg.runs {
            SearchEnd::TimeBudget
        } else if stop.load(Ordering::Relaxed) {
            if judge.user_stopped() { SearchEnd::Interrupted } else { SearchEnd::TimeBudget }
        } else {
            SearchEnd::Completed
        }))
    })
}

/// Runs the execution `start` begins, watching `watch`, with its program `launched` ahead if it
/// was, and what the strategy says after it. `next`: launch the next execution's program while
/// this one runs, with that watch set.
#[allow(clippy::too_many_arguments)]
fn run_execution(
    cfg: &SearchConfig,
    strategy: &mut (dyn Strategy + Send),
    start: Start,
    cpu: Option<usize>,
    watch: &[u64],
    stop: &AtomicBool,
    next: Option<(&mut LaunchAhead, Arc<Vec<u64>>)>,
    launched: Option<Launched>,
) -> Result<(ExecutionReport, Status), SearchError> {
    let mut exec = execution_config(cfg, start.execution, watch);
    exec.pin_cpu = cpu;
    if let Some((ahead, next_watch)) = next.filter(|_| start.execution + 1 < cfg.runs) {
        ahead.ask(execution_config(cfg, start.execution + 1, &next_watch));
    }
    strategy.begin_execution(start);
    let report = execution::run_launched(&exec, launched, &mut *strategy, stop)?;
    let choices: Vec<dara_scheduler::Choice> = report.steps.iter().map(|s| s.choice).collect();
    let status = strategy.end_execution(&Feedback { choices: &choices, coverage: &report.coverage, properties: &report.properties });
    Ok((report, status))
}

/// The search's settings readied for its executions when it runs more than one
/// ([`execution::prepare_repeated_runs`]), and why there is no fork server if it asked for one.
fn with_fork_server(cfg: &SearchConfig, aside: &[usize]) -> (SearchConfig, Option<String>) {
    let mut served = cfg.clone();
    let no_server = if cfg.runs > 1 { execution::prepare_repeated_runs(&mut served.execution, cfg.fork_server, aside) } else { None };
    (served, no_server)
}

/// The CPUs of `cpus` a search pinned to `pin` leaves to dara's helpers, starting with the next
/// after `pin` (where the next execution's program is launched ahead); none when it is not pinned
/// or there is no other CPU.
fn aside_cpus(cpus: &[usize], pin: Option<usize>) -> Vec<usize> {
    let Some(at) = cpus.iter().position(|&c| Some(c) == pin) else { return Vec::new() };
    cpus[at + 1..].iter().chain(&cpus[..at]).copied().collect()
}

/// CPUs this process may run on.
fn available_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Execution `k`'s settings: the search's, with its application seed and its epoch's watch set.
fn execution_config(cfg: &SearchConfig, k: u64, watch: &[u64]) -> ExecutionConfig {
    let mut exec = cfg.execution.clone();
    exec.random_seed = execution_random_seed(cfg.seed, k);
    exec.preempt.watch = watch.to_vec();
    exec
}

/// How often the search's `trace.bin` is rewritten while executions go by (see [`LastTrace`]).
const LAST_TRACE_EVERY: Duration = Duration::from_secs(1);

/// Judges executions in order: writes traces, saves new bugs, grows the watch set, decides when
/// the search ends.
struct Judge<'a> {
    cfg: &'a SearchConfig,
    epochs: &'a WatchSets,
    /// The user's stop (SIGINT/SIGTERM), to tell an interrupted execution from one the time
    /// budget cut.
    user_stop: &'a AtomicBool,
    strategy: String,
    started: Instant,
    bugs: Vec<SavedBug>,
    executions: u64,
    last_trace: LastTrace<'a>,
    outcome_counts: BTreeMap<String, u64>,
    covered: std::collections::BTreeSet<(u32, u32)>,
    properties: dara_model::property::SearchProperties,
    goals: Vec<SavedGoal>,
    malformed_property_lines: (u64, Option<String>),
    launches: Launches,
}

impl<'a> Judge<'a> {
    fn new(cfg: &'a SearchConfig, strategy: String, started: Instant, user_stop: &'a AtomicBool, epochs: &'a WatchSets) -> Judge<'a> {
        Judge {
            cfg,
            epochs,
            user_stop,
            strategy,
            started,
            bugs: Vec::new(),
            executions: 0,
            last_trace: LastTrace::new(cfg.out_dir.join("trace.bin"), LAST_TRACE_EVERY),
            outcome_counts: BTreeMap::new(),
            covered: Default::default(),
            properties: Default::default(),
            goals: Vec::new(),
            malformed_property_lines: (0, None),
            launches: Launches::default(),
        }
    }

    fn over_budget(&self) -> bool {
        self.cfg.time_budget.is_some_and(|b| self.started.elapsed() >= b)
    }

    fn user_stopped(&self) -> bool {
        self.user_stop.load(Ordering::Relaxed)
    }

    /// Judges execution `k` (`exhausted`: its systematic strategy has explored its whole space,
    /// and the search may go on); Some(end) when the search must stop here.
    fn judge(&mut self, k: u64, report: ExecutionReport, exhausted: bool, progress: &mut dyn FnMut(Progress<'_>)) -> Result<Option<SearchEnd>, SearchError> {
        self.executions = k + 1;
        self.launches.copied += u64::from(report.copied_from_fork_server);
        self.launches.ahead += u64::from(report.launched_ahead);
        let kind = report.outcome.signature().split(':').next().unwrap_or_default().to_string();
        *self.outcome_counts.entry(kind).or_insert(0) += 1;
        for (&process, coverage) in &report.coverage {
            self.covered.extend(coverage.edges.iter().map(|e| (process, e.edge)));
        }
        let goals_met = self.properties.add(k, &report.properties);
        self.malformed_property_lines.0 += report.properties.malformed;
        if self.malformed_property_lines.1.is_none() {
            self.malformed_property_lines.1 = report.properties.first_malformed.clone();
        }
        let watch = self.epochs.used_by(k);
        let growth = self.epochs.judged(k, report.access_profile.as_ref(), exhausted);
        let (cfg, strategy) = (self.cfg, self.strategy.clone());
        let new_bug = report.outcome.is_bug() && !self.bugs.iter().any(|b| b.outcome.signature() == report.outcome.signature());
        // Made now only to be saved now (a goal met, a new bug): most executions' traces are only
        // ever the last one's, written at most once a second (`LastTrace`).
        if new_bug || !goals_met.is_empty() {
            let trace = trace_of(cfg, k, &watch, strategy.clone(), &report);
            for (kind, name) in goals_met {
                let number = self.goals.len() + 1;
                let headline = format!("goal \"{name}\" ({}) first met in execution {k}", kind.word());
                let (dir, trace_path) = save_run(&self.cfg.out_dir.join(format!("goal-{number:04}")), &headline, &self.cfg.replay_command, k, &trace)?;
                self.goals.push(SavedGoal { kind, name, dir, trace: trace_path, execution: k });
            }
            if new_bug {
                let saved = save_bug(&self.cfg.out_dir, &self.cfg.replay_command, self.bugs.len() + 1, k, &trace)?;
                self.bugs.push(saved);
            }
        }
        progress(Progress { execution: k, report: &report, new_bug: if new_bug { self.bugs.last() } else { None }, bugs: self.bugs.len(), coverage: self.covered.len(), elapsed: self.started.elapsed(), watch_growth: growth.as_ref() });
        let end = match &report.outcome {
            Outcome::Interrupted if !self.user_stopped() && self.cfg.time_budget.is_some() => Some(SearchEnd::TimeBudget),
            Outcome::Interrupted => Some(SearchEnd::Interrupted),
            Outcome::Uncontrolled { .. } | Outcome::KilledFromOutside { .. } => Some(SearchEnd::Uncontrolled(report.outcome.clone())),
            outcome if outcome.is_bug() && !self.cfg.keep_going => Some(SearchEnd::Completed),
            _ => None,
        };
        self.last_trace.update(move || trace_of(cfg, k, &watch, strategy, &report))?;
        Ok(end)
    }

    /// The summary of a search that ended as `end`, with the last execution's trace on disk.
    fn finish(mut self, end: SearchEnd) -> Result<SearchSummary, SearchError> {
        let last_trace = self.last_trace.flush()?.map(Path::to_path_buf);
        Ok(SearchSummary {
            executions: self.executions,
            bugs: self.bugs,
            end,
            last_trace,
            outcome_counts: self.outcome_counts,
            coverage: self.covered.len(),
            wall: self.started.elapsed(),
            notes: Vec::new(),
            properties: self.properties,
            goals: self.goals,
            malformed_property_lines: self.malformed_property_lines,
            watch_overflowed: self.epochs.overflowed(),
            launches: Launches { namespaces_made: self.cfg.execution.namespaces.as_ref().map(|pool| pool.made()), ..self.launches },
        })
    }
}

impl SearchSummary {
    fn with_notes(mut self, status: Status) -> SearchSummary {
        self.notes = status.notes;
        self
    }
}

/// Execution `k`'s trace, as saved (`watch`: its epoch's watch set).
fn trace_of(cfg: &SearchConfig, k: u64, watch: &[u64], strategy: String, report: &ExecutionReport) -> Trace {
    let mut header = header_for(cfg, &execution_config(cfg, k, watch), k, strategy);
    header.written = report.written_files.clone();
    header.pids = report.pids.clone();
    Trace { header, steps: report.steps.clone(), outcome: report.outcome.clone(), coverage: report.coverage.clone(), outside: report.outside.clone() }
}

fn header_for(cfg: &SearchConfig, exec: &ExecutionConfig, k: u64, strategy: String) -> TraceHeader {
    let (env, env_left_out) = dara_scheduler::trace::private_env::redact(&exec.env, &cfg.env_exclude);
    TraceHeader {
        dara_version: env!("CARGO_PKG_VERSION").to_string(),
        command: exec.command.clone(),
        cwd: exec.cwd.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        env,
        env_left_out,
        strategy,
        seed: cfg.seed,
        execution: k,
        random_seed: exec.random_seed,
        cpus: exec.cpus,
        memory: exec.memory,
        library_cache: exec.library_cache,
        max_steps: exec.max_steps,
        max_vtime_ns: exec.max_vtime_ns,
        build_ids: cfg.build_ids.clone(),
        preempt: exec.preempt.clone(),
        cluster: exec.cluster.clone(),
        setup: exec.setup.clone(),
        cleanup: exec.cleanup.clone(),
        outside: !exec.outside.is_closed(),
        stdin: exec.outside.stdin(),
        time: exec.time,
        written: Default::default(),
        liveness: exec.liveness,
        critical_transition: None,
        pids: None,
    }
}

fn save_bug(out: &Path, replay_command: &str, number: usize, execution: u64, trace: &Trace) -> Result<SavedBug, SearchError> {
    let (dir, trace_path) = save_run(&out.join(format!("bug-{number:04}")), &trace.outcome.summary(), replay_command, execution, trace)?;
    Ok(SavedBug { dir, trace: trace_path, execution, outcome: trace.outcome.clone(), steps: trace.steps.len() })
}

/// Writes `trace` into `dir` with a `summary.txt` that opens with `headline`; returns the
/// directory and the trace's path.
fn save_run(dir: &Path, headline: &str, replay_command: &str, execution: u64, trace: &Trace) -> Result<(PathBuf, PathBuf), SearchError> {
    std::fs::create_dir_all(dir).map_err(|source| SearchError::Output { path: dir.to_path_buf(), source })?;
    let trace_path = dir.join("trace.bin");
    trace::write_file(&trace_path, trace)?;
    let summary = format!(
        "{}\n\ncommand:    {}\nstrategy:   {} (seed {}, execution {})\nsteps:      {}\nreplay:     {} {}\n",
        headline,
        trace.header.command.join(" "),
        trace.header.strategy,
        trace.header.seed,
        execution,
        trace.steps.len(),
        replay_command,
        trace_path.display()
    );
    let summary_path = dir.join("summary.txt");
    trace::write_private(&summary_path, summary.as_bytes()).map_err(|source| SearchError::Output { path: summary_path, source })?;
    Ok((dir.to_path_buf(), trace_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exhausted_space_is_a_proof_only_when_everything_was_visible() {
        let proved = "explored all 6 schedules";
        assert!(matches!(exhausted(Visibility::Complete, 0, proved), SearchEnd::Exhausted(note) if note == proved));
        let blind = Visibility::Partial(BlindSpot::AtomicsNotInstrumented);
        assert!(matches!(exhausted(blind, 0, proved), SearchEnd::NotExhaustive { explored, blind: BlindSpot::AtomicsNotInstrumented } if explored == proved));
        assert!(matches!(exhausted(Visibility::Unknown, 0, proved), SearchEnd::NotExhaustive { blind: BlindSpot::NoMemoryPoints, .. }));
        assert!(matches!(exhausted(Visibility::Complete, 2, proved), SearchEnd::NotExhaustive { blind: BlindSpot::UnwatchedSharing, .. }), "sharing outside the watch set");
    }

    #[test]
    fn helpers_get_every_cpu_but_the_executions_the_next_one_first() {
        assert_eq!(aside_cpus(&[0, 1, 2, 3], Some(1)), [2, 3, 0]);
        assert_eq!(aside_cpus(&[0, 1], Some(1)), [0]);
        assert_eq!(aside_cpus(&[0, 1], Some(0)), [1]);
        assert!(aside_cpus(&[0], Some(0)).is_empty(), "no other CPU");
        assert!(aside_cpus(&[0, 1], None).is_empty(), "executions not pinned");
        assert!(aside_cpus(&[0, 1], Some(5)).is_empty(), "pinned outside the search's CPUs");
    }
}
