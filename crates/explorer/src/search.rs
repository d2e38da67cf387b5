//! The search loop: run executions one after another under a strategy, judge each outcome, save
//! every distinct bug once (trace + human summary), and stop at the first bug unless asked to keep
//! going. Also stops, saying why, when dara could not control the program.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use dara_abi::splitmix64;
use dara_scheduler::execution::{self, ExecutionConfig, ExecutionError, ExecutionReport};
use dara_scheduler::trace::{self, Trace, TraceError, TraceHeader};
use dara_scheduler::Outcome;

use crate::strategy::{self, Strategy, StrategyError};

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

/// How a search ended.
#[derive(Debug)]
pub enum SearchEnd {
    /// All requested executions ran (or it stopped at the first bug).
    Completed,
    /// The user interrupted dara.
    Interrupted,
    /// An execution ran into something dara cannot control; the search stopped.
    Uncontrolled(Outcome),
}

#[derive(Debug)]
pub struct SearchSummary {
    pub executions: u64,
    pub bugs: Vec<SavedBug>,
    pub end: SearchEnd,
    /// Where the last execution's trace was written.
    pub last_trace: Option<PathBuf>,
}

/// Reported after each execution, for progress output.
pub struct Progress<'a> {
    pub execution: u64,
    pub report: &'a ExecutionReport,
    pub new_bug: Option<&'a SavedBug>,
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
}

/// Seed of the application's random streams in execution `k` of a search with `seed`: depends on
/// nothing else, so an execution can be re-run on its own.
pub fn execution_random_seed(seed: u64, k: u64) -> u64 {
    splitmix64(seed ^ splitmix64(k ^ 0xDA7A_0000_0000_0000))
}

pub fn search(cfg: &SearchConfig, stop: &AtomicBool, mut progress: impl FnMut(Progress<'_>)) -> Result<SearchSummary, SearchError> {
    let mut strategy: Box<dyn Strategy + Send> = strategy::parse(&cfg.strategy, cfg.seed)?;
    std::fs::create_dir_all(&cfg.out_dir).map_err(|source| SearchError::Output { path: cfg.out_dir.clone(), source })?;
    let mut bugs: Vec<SavedBug> = Vec::new();
    let mut summary = SearchSummary { executions: 0, bugs: Vec::new(), end: SearchEnd::Completed, last_trace: None };
    for k in 0..cfg.runs {
        let mut exec = cfg.execution.clone();
        exec.random_seed = execution_random_seed(cfg.seed, k);
        strategy.begin_execution(k);
        let report = execution::run(&exec, &mut *strategy, stop)?;
        strategy.end_execution(report.steps.len() as u64);
        summary.executions = k + 1;

        let trace = Trace { header: header_for(cfg, &exec, k, strategy.describe()), steps: report.steps.clone(), outcome: report.outcome.clone() };
        let last = cfg.out_dir.join("trace.bin");
        trace::write_file(&last, &trace)?;
        summary.last_trace = Some(last);

        let mut new_bug = None;
        if report.outcome.is_bug() && !bugs.iter().any(|b| b.outcome.signature() == report.outcome.signature()) {
            let saved = save_bug(&cfg.out_dir, bugs.len() + 1, k, &trace)?;
            bugs.push(saved);
            new_bug = bugs.last();
        }
        progress(Progress { execution: k, report: &report, new_bug });
        match &report.outcome {
            Outcome::Interrupted => {
                summary.end = SearchEnd::Interrupted;
                break;
            }
            Outcome::Uncontrolled { .. } => {
                summary.end = SearchEnd::Uncontrolled(report.outcome.clone());
                break;
            }
            outcome if outcome.is_bug() && !cfg.keep_going => break,
            _ => {}
        }
    }
    summary.bugs = bugs;
    Ok(summary)
}

fn header_for(cfg: &SearchConfig, exec: &ExecutionConfig, k: u64, strategy: String) -> TraceHeader {
    TraceHeader {
        dara_version: env!("CARGO_PKG_VERSION").to_string(),
        command: exec.command.clone(),
        cwd: exec.cwd.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        env: exec.env.clone(),
        strategy,
        seed: cfg.seed,
        execution: k,
        random_seed: exec.random_seed,
        cpus: exec.cpus,
        max_steps: exec.max_steps,
        max_vtime_ns: exec.max_vtime_ns,
        build_ids: cfg.build_ids.clone(),
    }
}

fn save_bug(out: &Path, number: usize, execution: u64, trace: &Trace) -> Result<SavedBug, SearchError> {
    let dir = out.join(format!("bug-{number:04}"));
    std::fs::create_dir_all(&dir).map_err(|source| SearchError::Output { path: dir.clone(), source })?;
    let trace_path = dir.join("trace.bin");
    trace::write_file(&trace_path, trace)?;
    let summary = format!(
        "{}\n\ncommand:    {}\nstrategy:   {} (seed {}, execution {})\nsteps:      {}\nreplay:     dara-replay {}\n",
        trace.outcome.summary(),
        trace.header.command.join(" "),
        trace.header.strategy,
        trace.header.seed,
        execution,
        trace.steps.len(),
        trace_path.display()
    );
    let summary_path = dir.join("summary.txt");
    std::fs::write(&summary_path, summary).map_err(|source| SearchError::Output { path: summary_path, source })?;
    Ok(SavedBug { dir, trace: trace_path, execution, outcome: trace.outcome.clone(), steps: trace.steps.len() })
}
