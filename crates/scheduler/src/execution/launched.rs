//! An execution's region and processes, made before it is driven: at its start, or *ahead*, while
//! the execution before it runs ([`launch_ahead`]).
//!
//! Launching ahead takes the launch (the fork server's copy or a fork + exec and the dynamic
//! loading) and the preload's start, up to the start barrier, off the search's critical path:
//! they run on another CPU while the previous execution runs on its own. The program runs none of
//! its code before the execution grants its start, so a program launched ahead is the same as one
//! launched at the start: the same region settings, the same descriptors, the same namespace
//! (pid 2), and it is moved to the execution's CPU before the grant ([`ProcessTree::settle`]).
//! Only closed runs of one command without `--setup`/`--cleanup` (which must run between two
//! executions' programs) and without the ptrace agent launch ahead ([`can_launch_ahead`]).
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dara_tracer::{LaunchSpec, ProcessTree};

use super::harness::target_environment;
use super::liveness::PropertyLines;
use super::processes::StartFacts;
use super::{ExecutionConfig, ExecutionError};
use crate::region::Region;

/// A program launched for an execution, parked at its start barrier (or on its way there).
pub struct Launched {
    pub(super) region: Arc<Region>,
    pub(super) tree: ProcessTree,
    pub(super) properties: Arc<PropertyLines>,
    /// Its root's start, learnt ahead (None when launched at the execution's start).
    pub(super) known: Option<StartFacts>,
    /// What it was launched for: an execution with another seed or watch set cannot use it (the
    /// region holds both from its creation).
    random_seed: u64,
    watch: Vec<u64>,
}

impl std::fmt::Debug for Launched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched").field("root", &self.tree.root_pid()).field("random_seed", &self.random_seed).finish()
    }
}

impl Launched {
    /// Whether an execution of `cfg` (the configuration it was launched ahead for, up to the
    /// execution's seed and watch set) can run this program.
    pub fn made_for(&self, cfg: &ExecutionConfig) -> bool {
        self.random_seed == cfg.random_seed && self.watch == cfg.preempt.watch
    }
}

/// Whether executions of `cfg` may be launched ahead (see the module doc).
pub fn can_launch_ahead(cfg: &ExecutionConfig) -> bool {
    let through_agent = || cfg.agent.is_some() && cfg.command.first().is_some_and(|p| dara_tracer::binary::program_needs_agent(p));
    cfg.cluster.is_none() && cfg.outside.is_closed() && cfg.setup.is_none() && cfg.cleanup.is_none() && !through_agent()
}

/// Launches the program of an execution of `cfg` now, on `cpu` (the execution moves it to its own
/// when it starts), from the calling thread, which moves to `cpu` too: on the execution's CPU the
/// launch would take the running execution's time. For a thread that lives as long as the search
/// (a fork + exec'd program dies with the thread that forked it).
pub fn launch_ahead(cfg: &ExecutionConfig, cpu: usize) -> Result<Launched, ExecutionError> {
    dara_tracer::placement::pin(0, cpu);
    let mut launched = launch(cfg, None, Some(cpu))?;
    launched.known = Some(StartFacts::learn(launched.tree.root_pid(), launched.tree.pids_virtual()));
    Ok(launched)
}

/// Creates the region and launches the command with `stdin_fd` as its stdin (None: /dev/null),
/// its root started on `born_on` if given (else on the execution's CPU).
pub(super) fn launch(cfg: &ExecutionConfig, stdin_fd: Option<i32>, born_on: Option<usize>) -> Result<Launched, ExecutionError> {
    let region = Arc::new(Region::create(cfg.cpus, cfg.random_seed, &cfg.preempt, cfg.profile, !cfg.outside.is_closed()).map_err(ExecutionError::Region)?);
    region.header().realtime_epoch_ns.store(cfg.time.realtime_epoch_ns, Ordering::Release);
    region.header().parent_shown.store(cfg.pids.parent_shown(), Ordering::Release);
    region.header().session_shown.store(cfg.pids.session_shown(), Ordering::Release);
    region.header().memory.store(cfg.memory.into());
    region.header().call_sites.store(u32::from(cfg.symbolize), Ordering::Release);
    let properties = Arc::new(PropertyLines::default());
    let property_lines = Arc::clone(&properties);
    let spec = LaunchSpec {
        command: cfg.command.clone(),
        cwd: cfg.cwd.clone(),
        env: target_environment(cfg),
        pass_fd: Some((region.fd(), dara_abi::SHM_FD)),
        cpu: cfg.pin_cpu,
        born_on,
        discard_output: cfg.discard_output,
        stdin_fd,
        host_proc_fd: Some(dara_abi::HOST_PROC_FD),
        virtual_pids: cfg.pids.namespaced(),
        first_pid: cfg.pids.first_pid(),
        agent: cfg.agent.clone().map(|program| dara_tracer::AgentLaunch { program, words: dara_tracer::AgentWordsRef(&region.header().agent) }),
        sdk_lines: Some(dara_tracer::LineSink(Arc::new(move |line| property_lines.record(line)))),
        // A copy of the server is born with the server's next pid, not the recording's.
        fork_server: cfg.fork_server.clone().filter(|_| cfg.pids.first_pid().is_none()),
        namespaces: cfg.namespaces.clone(),
    };
    let waker = Arc::clone(&region);
    let tree = match cfg.cluster {
        Some(_) => ProcessTree::spawn_group(&spec, move || waker.wake_scheduler())?,
        None => ProcessTree::spawn(&spec, move || waker.wake_scheduler())?,
    };
    for (word, inode) in region.header().output_pipes.iter().zip(tree.output_pipe_inodes()) {
        word.store(inode, Ordering::Release);
    }
    Ok(Launched { region, tree, properties, known: None, random_seed: cfg.random_seed, watch: cfg.preempt.watch.clone() })
}
