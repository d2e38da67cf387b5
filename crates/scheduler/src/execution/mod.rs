//! One execution, end to end: create the region, launch the command, drive the gated loop
//! ([`driver`]), tear the process tree down on every exit path, and report.
//!
//! Only this module touches both the model and the live processes; the model stays pure and the
//! tracer stays ignorant of scheduling. The execution is a handful of sub-stores, each owning
//! its rules in its own file:
//!
//! | file | what |
//! |---|---|
//! | [`driver`] | `Execution` and the loop: quiet point, bounds, views, decide, apply, grant |
//! | [`quiet`] | waiting until every thread is parked (exits, watchdogs, stop) |
//! | [`handoff`] | the slot protocol: posts seen, active slots, token holder |
//! | [`posts`] | what a post means and what a grant involves |
//! | [`processes`] | the process table: records, thread→process, exiting and dying processes |
//! | [`pids`] | the pids the program sees: a namespace's, the host's (noted), or a recording's again |
//! | [`exits`] | ends of processes and of the run, and how each is judged |
//! | [`observations`] | symbols, programs, fault sites, coverage modules for the report |
//! | [`network`] | the net probe and readiness views |
//! | [`output`] | dara's output pipes, drained before a poll that asks them for room |
//! | [`boundary`] | the world of peers outside dara: recording and replay runs |
//! | [`world`] | the trait of worlds around the program, and the closed one |
//! | [`cluster`] | the cluster world: nodes, workload, check, faults |
//! | [`watchdog`], [`newborn`] | the token holder and threads being born, watched |
//! | [`stall`] | the last bound on a wait for a quiet point in which nothing moves |
//! | [`signals`], [`outside_deaths`] | pending signals; deaths that are not the program's |
//! | [`target`] | what the driver needs from the processes (the tracer's tree, or a fake) |
//! | [`launched`] | the region and the processes made before the execution is driven, maybe ahead |
//! | [`leftovers`] | a thread dropping what ended executions leave (namespaces, regions) |
//! | [`harness`] | setup/cleanup commands, the target's environment, CPU pinning |
//! | [`liveness`] | the liveness walk after the workload, and the property lines it waits for |
mod boundary;
mod cluster;
mod driver;
mod exits;
mod handoff;
mod harness;
mod launched;
mod leftovers;
mod liveness;
mod network;
mod newborn;
mod observations;
mod output;
mod outside_deaths;
mod pace;
mod posts;
mod pids;
mod processes;
mod quiet;
mod signals;
mod stall;
mod target;
#[cfg(test)]
mod tests;
mod pause;
mod timerfds;
mod watchdog;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dara_tracer::LaunchSpec;
pub use harness::outside_command;
pub use launched::{can_launch_ahead, launch_ahead, Launched};
pub use leftovers::Leftovers;
pub use pause::{PauseBefore, PausedStep};
pub use pids::PidPlan;

use crate::choice::{Decide, ProcessId, ThreadId};
use crate::coverage::ProcessCoverage;
use crate::outcome::Outcome;
use crate::outside::{OutsideEvent, OutsideMode, RelayError};
use crate::preempt::{AccessProfile, Preemption};
use crate::time::TimeConfig;
use crate::trace::Step;
use driver::{Execution, Wait};
use harness::{run_harness, target_environment};
/// How to run one execution.
#[derive(Clone, Debug)]
pub struct ExecutionConfig {
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The program's complete environment (recorded in the trace; dara adds its own variables).
    pub env: Vec<(String, String)>,
    /// Path of libdara_preload.so.
    pub preload: PathBuf,
    /// Path of dara-agent, which runs programs the preload cannot enter (statically linked
    /// ones) through ptrace; None: such programs are refused.
    pub agent: Option<PathBuf>,
    /// CPU count the target observes.
    pub cpus: u32,
    /// Memory totals the target observes (`sysinfo`): the host's when dara-trace started.
    pub memory: dara_model::memory_totals::MemoryTotals,
    /// The dynamic loader's cache when the run started (for the trace; see
    /// `dara_model::library_cache`).
    pub library_cache: Option<dara_model::library_cache::LibraryCache>,
    /// CPU the execution (scheduler thread and target) is pinned to.
    pub pin_cpu: Option<usize>,
    /// Seed of the application's random streams.
    pub random_seed: u64,
    pub max_steps: u64,
    pub max_vtime_ns: u64,
    /// The token holder asleep in the kernel for this long without running is "uncontrolled
    /// blocking" (see [`watchdog`]).
    pub watchdog: Duration,
    /// Processes one execution may start (`--max-processes`, at most
    /// [`dara_abi::MAX_PROCESSES`]); one more ends the run as uncontrolled, naming the option.
    pub max_processes: usize,
    /// The token holder using this much CPU time of its own without a scheduling point is a
    /// hang. Also bounds the wait for processes whose threads all finished.
    pub busy_limit: Duration,
    /// Resolve object addresses to symbol names for the interleaving listing.
    pub symbolize: bool,
    /// Drop the program's output (minimization runs many candidates nobody reads).
    pub discard_output: bool,
    /// Optional scheduling points (`--preempt-on`), with the watch set of memory points.
    pub preempt: Preemption,
    /// This is the profiling run of memory-level preemption: record accesses, post none.
    pub profile: bool,
    /// A cluster run: nodes started by dara, a check command, fault budgets. `command` is then
    /// the workload.
    pub cluster: Option<crate::cluster::ClusterSpec>,
    /// Shell commands run outside dara (`sh -c`) before and after every execution.
    pub setup: Option<String>,
    pub cleanup: Option<String>,
    /// Whether peers outside dara may talk to the program: a recording run takes their inputs,
    /// a replay feeds recorded ones back (see [`crate::outside`]).
    pub outside: OutsideMode,
    /// How virtual time behaves: timer policy, step cost, pause budget, run length.
    pub time: TimeConfig,
    /// The recording this replays was stopped (Ctrl-C) after this many steps: end there, as
    /// `Interrupted`, rather than run on.
    pub stop_at_step: Option<u64>,
    /// Stop before this step, every thread parked, and call the hook (`dara-replay --gdb`).
    pub pause_before: Option<PauseBefore>,
    /// The liveness walk after the workload (see [`liveness`]); None: the run ends at its bounds.
    pub liveness: Option<dara_model::liveness::LivenessConfig>,
    /// The program parked before `main`, copied for the execution instead of started with fork +
    /// exec ([`start_fork_server`]); None: fork + exec.
    pub fork_server: Option<Arc<dara_tracer::ForkServer>>,
    /// A search's namespaces, each made while the execution before it ran; None: made at the
    /// execution's start.
    pub namespaces: Option<Arc<dara_tracer::NamespacePool>>,
    /// A search's thread that drops what each execution leaves behind ([`leftovers`]); None:
    /// the execution drops its own.
    pub leftovers: Option<Arc<Leftovers>>,
    /// The pids the program sees: a namespace's (searches), the host's (a recording, which notes
    /// them), or a recording's again (its replay); see [`pids`].
    pub pids: PidPlan,
}

/// What happened in one execution.
#[derive(Debug)]
pub struct ExecutionReport {
    pub steps: Vec<Step>,
    pub outcome: Outcome,
    /// Logical process of each thread seen.
    pub threads: BTreeMap<ThreadId, ProcessId>,
    /// Names of object addresses seen (when `symbolize`).
    pub symbols: BTreeMap<u64, String>,
    /// The program each `ProcessStart` began (its file name), by the posting thread (when
    /// `symbolize`): a process that execs starts again under a new name.
    pub programs: BTreeMap<ThreadId, String>,
    /// In a cluster run, each node process's node name, and `workload`/`check` for those.
    pub nodes: BTreeMap<ProcessId, String>,
    /// Coverage of sancov-instrumented processes. Empty for programs built without coverage.
    pub coverage: BTreeMap<ProcessId, ProcessCoverage>,
    /// What the run's accesses were (`cfg.profile`, and search executions with memory-level
    /// points: there the granules outside the watch set).
    pub access_profile: Option<AccessProfile>,
    /// Inputs from outside peers and the program's outputs to them, by step (recording and
    /// replay runs; empty in a closed world).
    pub outside: Vec<OutsideEvent>,
    /// Files the program opened for writing (absolute paths, first opened first; devices and
    /// `/proc` left out), for a replay that diverges to name; see [`crate::trace::WrittenFiles`].
    pub written_files: crate::trace::WrittenFiles,
    /// A recording's host pids (and a replay's, the recording's again), for the trace; None for
    /// an execution in a namespace of its own.
    pub pids: Option<crate::trace::RecordedPids>,
    /// Where in the program each step's post was made (when `symbolize`; empty otherwise).
    pub call_sites: Vec<Option<crate::symbols::CallSite>>,
    /// The user properties the program evaluated (the SDKs' lines), in this execution.
    pub properties: dara_model::property::ExecutionProperties,
    /// `--preempt-on atomics`: the atomic instructions trapped in each program started.
    pub atomic_sites: BTreeMap<String, dara_tracer::atomic_plan::PlanSummary>,
    /// The program was copied from the fork server rather than started with fork + exec.
    pub copied_from_fork_server: bool,
    /// The program was launched while the execution before this one ran ([`launch_ahead`]).
    pub launched_ahead: bool,
    pub wall: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutionError {
    #[error("cannot create the shared-memory region: {0}")]
    Region(std::io::Error),
    #[error(transparent)]
    Launch(#[from] dara_tracer::LaunchError),
    #[error("the target's processes could not all be killed (a process is stuck in the kernel; left: {0})")]
    Teardown(String),
    #[error("cannot set up the relay to outside peers: {0}")]
    Outside(RelayError),
    #[error("the {which} command `{command}` failed: {detail}")]
    Harness { which: &'static str, command: String, detail: String },
}


/// Runs one execution of `cfg.command` under `decide`. `stop` (set by a signal handler) ends it
/// early with `Outcome::Interrupted`.
pub fn run(cfg: &ExecutionConfig, decide: &mut dyn Decide, stop: &AtomicBool) -> Result<ExecutionReport, ExecutionError> {
    run_launched(cfg, None, decide, stop)
}

/// [`run`], with the program `ahead` launched ahead for it ([`launch_ahead`]) if it was made for
/// this execution (otherwise it is killed, and the program launched now).
pub fn run_launched(cfg: &ExecutionConfig, ahead: Option<Launched>, decide: &mut dyn Decide, stop: &AtomicBool) -> Result<ExecutionReport, ExecutionError> {
    let started = Instant::now();
    if let Some(cpu) = cfg.pin_cpu {
        dara_tracer::placement::pin(0, cpu);
    }
    let ahead = ahead.filter(|l| l.made_for(cfg));
    let launched_ahead = ahead.is_some();
    if let (None, Some(setup)) = (&ahead, &cfg.setup) {
        run_harness("setup", setup, cfg)?;
    }
    let mut world = world::for_config(cfg)?;
    let launched = match ahead {
        Some(mut launched) => {
            launched.tree.settle();
            launched
        }
        None => launched::launch(cfg, world.stdin_for_program(), None)?,
    };
    let Launched { region, tree, properties, known, .. } = launched;
    // After the launch: the launcher's threads start with the counter as it was.
    let _counter_disabled = crate::own_traps::disable_in_this_thread();
    world.launched();
    let sdk_writer = tree.sdk_writer();
    let copied_from_fork_server = tree.root_copied();
    let mut run = Execution::new(cfg, region, Box::new(tree), world);
    run.processes.known_ahead = known;
    run.walk = liveness::Walk::new(cfg.liveness, Arc::clone(&properties), sdk_writer, cfg.random_seed).with_command(cfg.cluster.as_ref().and_then(|c| c.eventually.as_deref()));
    run.processes.launched.push(run.tree.root_pid());
    let mut outcome = run.drive(decide, stop);
    run.walk.close();
    // (A replay that ends where its recording was stopped used what it had to.)
    let stopped_as_recorded = outcome == Outcome::Interrupted && cfg.stop_at_step.is_some();
    let ended = run.end_world(&mut outcome, stopped_as_recorded);
    run.region.header().shutdown.store(1, Ordering::Release);
    run.processes.kill_strays(run.tree.root_pid());
    if !run.tree.kill_all() {
        return Err(ExecutionError::Teardown(run.tree.survivors()));
    }
    if let Some(cleanup) = &cfg.cleanup {
        run_harness("cleanup", cleanup, cfg)?;
    }
    // Every line is in: the tree is gone and the SDK pipe's reader has seen its end.
    let properties = properties.take();
    judge_properties(&mut outcome, &properties);
    if outcome.is_bug() {
        outcome.locate(crate::crash_site::stderr_location_resolving(&run.tree.stderr_tail(), &crate::symbols::name_in_file));
    }
    let mut modules = std::mem::take(&mut run.observed.modules);
    let coverage = run
        .processes
        .records
        .keys()
        .filter_map(|&p| {
            let mut cov = ProcessCoverage::read(&run.region, p as usize)?;
            cov.modules = modules.remove(&p).unwrap_or_default();
            Some((p, cov))
        })
        .collect();
    let access_profile = (cfg.profile || cfg.preempt.memory_level()).then(|| AccessProfile::read(run.region.access_table(), run.region.header().instrumented.load(Ordering::Acquire)));
    let (paths, more) = run.region.written_files();
    let written_files = crate::trace::WrittenFiles { paths, more };
    if let Some(leftovers) = &cfg.leftovers {
        leftovers.drop_later(Box::new((run.tree, run.region)));
    }
    let pids = run.pids.recorded();
    Ok(ExecutionReport { steps: run.steps, outcome, threads: run.processes.threads, symbols: run.observed.symbols, programs: run.observed.programs, nodes: ended.nodes, coverage, access_profile, outside: ended.outside, written_files, pids, call_sites: run.observed.step_sites, properties, atomic_sites: run.observed.atomic_sites, copied_from_fork_server, launched_ahead, wall: started.elapsed() })
}

/// Starts `cfg.command` as a fork server for the executions of a search
/// ([`dara_tracer::fork_server`]); why not, when it cannot serve. Call from a thread that outlives
/// the search's executions (their processes die with it). The server runs on `cpu` if given.
pub fn start_fork_server(cfg: &ExecutionConfig, cpu: Option<usize>) -> Result<Arc<dara_tracer::ForkServer>, String> {
    if cfg.cluster.is_some() {
        return Err("a cluster run starts several commands".into());
    }
    if !cfg.outside.is_closed() {
        return Err("a run open to outside peers runs once".into());
    }
    let spec = LaunchSpec { command: cfg.command.clone(), cwd: cfg.cwd.clone(), env: target_environment(cfg), pass_fd: None, cpu: None, born_on: cpu, discard_output: true, stdin_fd: None, host_proc_fd: None, virtual_pids: false, first_pid: None, agent: None, sdk_lines: None, fork_server: None, namespaces: None };
    dara_tracer::ForkServer::start(&spec).map(Arc::new).map_err(|e| e.to_string())
}

/// Readies `cfg` for many executions of its command (a search's, a minimization's candidates):
/// namespaces made ahead ([`dara_tracer::namespace_pool`]) and, when `fork_server`, a fork server
/// ([`start_fork_server`]). Returns why there is no server although one was asked for. The
/// executions are the same either way, only slower. Call from a thread that outlives them.
///
/// `aside`: CPUs none of the executions runs on, for the threads and the server that work while
/// an execution runs (on the execution's CPU they would take its time), the one the next
/// execution's program is launched on first ([`launch_ahead`]); empty: anywhere.
pub fn prepare_repeated_runs(cfg: &mut ExecutionConfig, fork_server: bool, aside: &[usize]) -> Option<String> {
    if cfg.namespaces.is_none() {
        // Without a pool each execution makes its own (and without privileges none).
        cfg.namespaces = dara_tracer::NamespacePool::start(aside).ok().map(Arc::new);
    }
    if cfg.leftovers.is_none() {
        cfg.leftovers = Leftovers::start(aside).map(Arc::new);
    }
    if !fork_server || cfg.fork_server.is_some() {
        return None;
    }
    // Next to the launch-ahead thread, which asks it for each copy.
    match start_fork_server(cfg, aside.first().copied()) {
        Ok(server) => {
            cfg.fork_server = Some(server);
            None
        }
        Err(why) => Some(why),
    }
}

/// A broken user property is the execution's outcome, named by the property, over how the
/// program then ended (it broke first); not over an outcome dara did not judge (uncontrolled,
/// interrupted, killed from outside, diverged). A liveness violation stays one unless an `always`
/// or `unreachable` broke (an `eventually` that never held is what the walk found).
fn judge_properties(outcome: &mut Outcome, properties: &dara_model::property::ExecutionProperties) {
    let judged = !matches!(outcome, Outcome::Uncontrolled { .. } | Outcome::Interrupted | Outcome::KilledFromOutside { .. } | Outcome::Diverged { .. });
    let broken = properties.broken().filter(|(kind, ..)| !(matches!(outcome, Outcome::LivenessViolated { .. }) && *kind == dara_model::property::PropertyKind::Eventually));
    if let (true, Some((property, name, detail))) = (judged, broken) {
        *outcome = Outcome::PropertyFailed { name, property, detail };
    }
}

pub use dara_model::outcome::signal_name;
