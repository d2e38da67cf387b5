//! One execution, end to end: create the region, launch the command, then the gated loop —
//! wait until every thread is parked, ask the strategy, apply the decision to the model, grant
//! exactly one thread — and the oracles that end it (exit, crash, deadlock, hang, uncontrolled
//! blocking). Every exit path tears the process tree down before returning.
//!
//! Only this module touches both the model and the live processes; the model stays pure and the
//! tracer stays ignorant of scheduling. Cluster runs (nodes, workload, check, faults) are in
//! [`cluster`].
mod cluster;
mod newborn;
mod outside_deaths;
mod signals;
mod watchdog;

use watchdog::TokenHolder;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dara_abi::handoff::{self, Seen, Waited};
use dara_abi::{splitmix64, CloseHow, Op, StartKind, Unsupported, MAX_PROCESSES};
use dara_tracer::reaper::ExitStatus;
use dara_tracer::{LaunchSpec, ProcessTree};

use crate::choice::{ChoiceKind, Decide, ProcessId, ThreadId};
use crate::coverage::{self, Module, ProcessCoverage};
use crate::memory::TargetMemory;
use crate::model::{Effect, Model, Request, ThreadStatus};
use crate::netprobe::NetProbe;
use crate::outcome::Outcome;
use crate::outside::{Outside, OutsideEvent, OutsideMode, RelayError};
use crate::preempt::{AccessProfile, Preemption};
use crate::region::Region;
use crate::symbols::Symbolizer;
use crate::time::{TimeConfig, TimerPolicy};
use crate::trace::Step;
use crate::procfs;

/// How to run one execution.
#[derive(Clone, Debug)]
pub struct ExecutionConfig {
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The program's complete environment (recorded in the trace; dara adds its own variables).
    pub env: Vec<(String, String)>,
    /// Path of libdara_preload.so.
    pub preload: PathBuf,
    /// CPU count the target observes.
    pub cpus: u32,
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
    /// What the profiling run's accesses were (`cfg.profile` only).
    pub access_profile: Option<AccessProfile>,
    /// Inputs from outside peers and the program's outputs to them, by step (recording and
    /// replay runs; empty in a closed world).
    pub outside: Vec<OutsideEvent>,
    /// Files the program opened for writing (absolute paths, first opened first; devices and
    /// `/proc` left out), for a replay that diverges to name; see [`crate::trace::WrittenFiles`].
    pub written_files: crate::trace::WrittenFiles,
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
    let started = Instant::now();
    if let Some(cpu) = cfg.pin_cpu {
        pin_current_thread(cpu);
    }
    if let Some(setup) = &cfg.setup {
        run_harness("setup", setup, cfg)?;
    }
    let region = Arc::new(Region::create(cfg.cpus, cfg.random_seed, &cfg.preempt, cfg.profile, !cfg.outside.is_closed()).map_err(ExecutionError::Region)?);
    region.header().realtime_epoch_ns.store(cfg.time.realtime_epoch_ns, Ordering::Release);
    let outside = Outside::new(&cfg.outside).map_err(ExecutionError::Outside)?;
    let spec = LaunchSpec {
        command: cfg.command.clone(),
        cwd: cfg.cwd.clone(),
        env: target_environment(cfg),
        pass_fd: Some((region.fd(), dara_abi::SHM_FD)),
        cpu: cfg.pin_cpu,
        discard_output: cfg.discard_output,
        stdin_fd: outside.as_ref().and_then(|o| o.stdin_for_program()),
        host_proc_fd: Some(dara_abi::HOST_PROC_FD),
        virtual_pids: true,
    };
    let waker = Arc::clone(&region);
    let tree = match cfg.cluster {
        Some(_) => ProcessTree::spawn_group(&spec, move || waker.wake_scheduler())?,
        None => ProcessTree::spawn(&spec, move || waker.wake_scheduler())?,
    };
    for (word, inode) in region.header().output_pipes.iter().zip(tree.output_pipe_inodes()) {
        word.store(inode, Ordering::Release);
    }
    // After the launch: the launcher's threads start with the counter as it was.
    let _counter_disabled = crate::own_tsc::disable_in_this_thread();
    let mut run = Execution::new(cfg, region, tree);
    run.outside = outside;
    if let Some(o) = run.outside.as_mut() {
        o.launched();
    }
    run.launched.push(run.tree.root_pid());
    let mut outcome = run.drive(decide, stop);
    // A replay that ended before the recording's outside events were all used diverged, unless
    // it ended where the recording was stopped.
    let stopped_as_recorded = outcome == Outcome::Interrupted && cfg.stop_at_step.is_some();
    if !matches!(outcome, Outcome::Diverged { .. }) && !stopped_as_recorded {
        if let Some((step, expected, seen)) = run.outside.as_ref().and_then(|o| o.finish(run.steps.len() as u64)) {
            outcome = Outcome::Diverged { step, expected, seen };
        }
    }
    let outside_events = run.outside.take().map(|mut o| {
        o.flush_clients();
        o.events().to_vec()
    });
    let outside_events = outside_events.unwrap_or_default();
    crate::outside::end_recording();
    run.region.header().shutdown.store(1, Ordering::Release);
    run.kill_strays();
    if !run.tree.kill_all() {
        return Err(ExecutionError::Teardown(run.tree.survivors()));
    }
    if let Some(cleanup) = &cfg.cleanup {
        run_harness("cleanup", cleanup, cfg)?;
    }
    if outcome.is_bug() {
        outcome.locate(crate::crash_site::stderr_location_resolving(&run.tree.stderr_tail(), &crate::symbols::name_in_file));
    }
    let mut modules = std::mem::take(&mut run.modules);
    let coverage = run
        .processes
        .keys()
        .filter_map(|&p| {
            let mut cov = ProcessCoverage::read(&run.region, p as usize)?;
            cov.modules = modules.remove(&p).unwrap_or_default();
            Some((p, cov))
        })
        .collect();
    let access_profile = cfg.profile.then(|| AccessProfile::read(run.region.access_table()));
    let nodes = run.nodes.as_ref().map(|n| n.node_of.iter().map(|(&p, &node)| (p, n.name(node).to_string())).chain(n.others.iter().map(|(&p, &r)| (p, r.to_string()))).collect()).unwrap_or_default();
    let (paths, more) = run.region.written_files();
    let written_files = crate::trace::WrittenFiles { paths, more };
    Ok(ExecutionReport { steps: run.steps, outcome, threads: run.thread_process, symbols: run.symbols, programs: run.programs, nodes, coverage, access_profile, outside: outside_events, written_files, wall: started.elapsed() })
}

/// Runs a setup or cleanup command with `sh -c`, outside dara, in the program's directory and
/// environment; a failure stops the search (the executions would not start from the same state).
fn run_harness(which: &'static str, command: &str, cfg: &ExecutionConfig) -> Result<(), ExecutionError> {
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(command).env_clear().envs(cfg.env.iter().map(|(k, v)| (k, v))).stdin(std::process::Stdio::null());
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
    }
    // SAFETY: the closure makes one async-signal-safe system call.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            crate::own_tsc::enable_in_child();
            Ok(())
        });
    }
    let failed = |detail: String| ExecutionError::Harness { which, command: command.to_string(), detail };
    let out = cmd.output().map_err(|e| failed(e.to_string()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or("").trim();
    Err(failed(format!("{}{}", out.status, if last.is_empty() { String::new() } else { format!(" ({last})") })))
}

/// The recorded environment plus dara's variables; the preload goes first in LD_PRELOAD.
fn target_environment(cfg: &ExecutionConfig) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::with_capacity(cfg.env.len() + 3);
    let mut preload = cfg.preload.clone().into_os_string();
    for (k, v) in &cfg.env {
        match k.as_str() {
            "LD_PRELOAD" if !v.is_empty() => {
                preload.push(":");
                preload.push(v);
            }
            dara_abi::ENV_SHM_PATH | dara_abi::ENV_ACTIVE | "LD_PRELOAD" => {}
            _ => env.push((k.into(), v.into())),
        }
    }
    env.push(("LD_PRELOAD".into(), preload));
    env.push((dara_abi::ENV_SHM_PATH.into(), dara_abi::SHM_PATH.into()));
    env.push((dara_abi::ENV_ACTIVE.into(), "1".into()));
    crate::sanitizer_options::apply(&mut env);
    env
}

fn pin_current_thread(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity reads it. Failure (CPU offline) is
    // harmless: the run is still correct, only slower.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

struct ProcessRecord {
    /// Kernel pid in dara's namespace: what /proc, pidfds and tgkill take.
    pid: u32,
    /// The pid the program sees (its `getpid`, what it passes to `kill`): `pid` unless the
    /// execution runs in a PID namespace. The only place the two meet is [`Execution::register_pid`].
    own_pid: u32,
    alive: bool,
    exit: Option<ExitStatus>,
    /// A pidfd, so the process can be killed at the end even if it left dara's process group
    /// (setsid), without ever signalling a recycled pid.
    pidfd: Option<std::os::fd::OwnedFd>,
    /// The file name of the program the process runs (its latest image), for messages.
    program: String,
}

enum Wait {
    /// Every live thread is parked at a scheduling point.
    Quiet,
    /// The execution is over.
    End(Outcome),
}

struct Execution<'a> {
    cfg: &'a ExecutionConfig,
    region: Arc<Region>,
    tree: ProcessTree,
    model: Model,
    memory: TargetMemory,
    steps: Vec<Step>,
    /// `posts` counter of each slot when last ingested.
    seen_posts: Vec<u32>,
    /// Slots whose thread has finished (or never came to be).
    finished: Vec<bool>,
    /// Claimed slots not yet finished, in claim order: what each wake-up scans, so the cost of a
    /// step does not grow with the number of threads that ever existed.
    active: Vec<usize>,
    /// Slots claimed so far (those below are in `active` or finished).
    known_slots: usize,
    thread_process: BTreeMap<ThreadId, ProcessId>,
    processes: BTreeMap<ProcessId, ProcessRecord>,
    holder: Option<TokenHolder>,
    /// Threads being born that the scheduler waits for.
    newborns: newborn::Newborns,
    symbolizers: BTreeMap<ProcessId, Symbolizer>,
    symbols: BTreeMap<u64, String>,
    /// Where each process took a fatal fault, named while it still existed (`Op::Fault`).
    faults: BTreeMap<ProcessId, String>,
    /// Program names by `ProcessStart` thread (see `ExecutionReport::programs`).
    programs: BTreeMap<ThreadId, String>,
    /// Processes known to be on their way out (granted `ProcessExit`, or took a fault): checked
    /// often until they are zombies.
    exiting: Vec<ProcessId>,
    /// Processes a granted `kill` will terminate, and since when: no decision is taken until
    /// they are gone (bounded), so a killed process never takes part in one by accident.
    dying: Vec<(ProcessId, Instant)>,
    /// Executable mappings of each process that has shown coverage, read while it was alive.
    modules: BTreeMap<ProcessId, Vec<Module>>,
    /// Posts ingested per process while its module map was not read yet (paces the checks).
    coverage_checks: Vec<u32>,
    /// Probes and settles the target's sockets, pipes and eventfds (see `netprobe`).
    net: NetProbe,
    /// A network operation ran or a process died since the model's readiness views were taken.
    net_dirty: bool,
    /// Inodes of listening sockets found held by a traced process (see `is_traced_server`).
    traced_listeners: std::collections::BTreeSet<u64>,
    /// Entries written to the region's table of relayed peers (see `show_relayed_peer`).
    relayed_count: usize,
    /// The process whose exit status is the run's verdict: the launched command (process 0) in a
    /// plain run; the workload, then the check, in a cluster run (`None` while one is starting).
    verdict: Option<ProcessId>,
    /// Pids dara launched itself: its reaper reports their exits with their status.
    launched: Vec<u32>,
    /// A cluster run's nodes and phase.
    nodes: Option<crate::cluster::Nodes>,
    /// A command dara launched whose `ProcessStart` has not come yet: no decision until it does.
    arriving: Option<cluster::Arrival>,
    /// Processes a crash fault killed: their end is not judged.
    crashing: Vec<ProcessId>,
    /// Processes a traced process sent a SIGKILL (any other SIGKILL came from outside).
    outside_deaths: outside_deaths::OutsideDeaths,
    /// A connect or accept ran since partitions were last enforced.
    new_connections: bool,
    /// The relay to peers outside dara (recording and replay runs).
    outside: Option<Outside>,
    /// Something that went wrong while granting, ending the run at the next decision.
    pending_end: Option<Outcome>,
    /// When the run started: virtual time 0 (a recording's timers fire no earlier than this plus
    /// their deadline).
    started: Instant,
    /// Since when the run has been waiting for outside input with nothing else to do, and
    /// whether the user was told.
    idle_since: Option<(Instant, bool)>,
    /// Something may have sent a traced process a signal since the driver last looked which
    /// parked waits one ends (see `signals.rs`).
    signals_dirty: bool,
}

impl<'a> Execution<'a> {
    fn new(cfg: &'a ExecutionConfig, region: Arc<Region>, tree: ProcessTree) -> Execution<'a> {
        Execution {
            cfg,
            region,
            tree,
            model: {
                let model = Model::with_time(&cfg.time).with_pause_horizon(cfg.time.run_for_ns.unwrap_or(u64::MAX).min(cfg.max_vtime_ns));
                if cfg.preempt.coarse {
                    model.with_coarse_steps()
                } else {
                    model
                }
            },
            started: Instant::now(),
            memory: TargetMemory::default(),
            steps: Vec::new(),
            seen_posts: vec![0; dara_abi::MAX_SLOTS],
            finished: vec![false; dara_abi::MAX_SLOTS],
            active: Vec::new(),
            known_slots: 0,
            thread_process: BTreeMap::new(),
            processes: BTreeMap::new(),
            holder: None,
            newborns: newborn::Newborns::default(),
            symbolizers: BTreeMap::new(),
            symbols: BTreeMap::new(),
            faults: BTreeMap::new(),
            programs: BTreeMap::new(),
            exiting: Vec::new(),
            dying: Vec::new(),
            modules: BTreeMap::new(),
            coverage_checks: vec![0; MAX_PROCESSES],
            net: NetProbe::default(),
            net_dirty: false,
            traced_listeners: Default::default(),
            relayed_count: 0,
            verdict: if cfg.cluster.is_some() { None } else { Some(0) },
            launched: Vec::new(),
            nodes: cfg.cluster.clone().map(crate::cluster::Nodes::new),
            arriving: None,
            crashing: Vec::new(),
            outside_deaths: Default::default(),
            new_connections: false,
            outside: None,
            pending_end: None,
            idle_since: None,
            signals_dirty: false,
        }
    }

    fn drive(&mut self, decide: &mut dyn Decide, stop: &AtomicBool) -> Outcome {
        loop {
            if let Wait::End(outcome) = self.wait_until_quiet(stop) {
                return outcome;
            }
            if self.steps.len() as u64 >= self.cfg.max_steps {
                return Outcome::Hang { reason: format!("step bound reached ({} scheduling decisions); raise --max-steps if the program is just long", self.cfg.max_steps) };
            }
            if self.model.now() > self.cfg.max_vtime_ns {
                return Outcome::Hang { reason: format!("virtual-time bound exceeded ({} s); raise --max-vtime if the program legitimately runs longer", self.cfg.max_vtime_ns / 1_000_000_000) };
            }
            if let Some(outcome) = self.pending_end.take() {
                return outcome;
            }
            if self.cfg.stop_at_step == Some(self.steps.len() as u64) {
                return Outcome::Interrupted; // where the recording was stopped
            }
            if let Some(outcome) = self.refresh_net() {
                return outcome;
            }
            if self.pass_on_signals() {
                continue; // wait for the processes the signals end
            }
            match self.advance_cluster() {
                cluster::Advance::Launched => continue,
                cluster::Advance::End(outcome) => return outcome,
                cluster::Advance::Decide => {}
            }
            if let Some(end) = self.cfg.time.run_for_ns.filter(|&t| self.model.now() >= t) {
                match self.run_for_reached(end) {
                    cluster::Advance::Launched => continue,
                    cluster::Advance::End(outcome) => return outcome,
                    cluster::Advance::Decide => {}
                }
            }
            self.replay_signals_before(self.steps.len() as u64);
            self.refresh_signals();
            let mut choices = self.model.choices();
            match self.await_outside(&choices, stop) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(outcome) => return outcome,
            }
            // Nothing can run: the earliest timers become due. The decision follows at once, with
            // no look at the outside in between: input that comes after the jump belongs to the
            // next step, in the recording as in its replay (which jumps at the same step).
            while choices.is_empty() && self.model.jump_to_next_deadline().is_some() {
                choices = self.model.choices();
            }
            self.add_fault_choices(&mut choices);
            if choices.is_empty() {
                if self.model.live_threads().is_empty() {
                    // Everyone finished; only process exits are still to come.
                    if let Some(outcome) = self.wait_for_exits(stop) {
                        return outcome;
                    }
                    continue;
                }
                return Outcome::Deadlock { threads: self.deadlock_report() };
            }
            let step = self.steps.len() as u64;
            let index = match decide.choose(step, &choices) {
                Ok(i) if i < choices.len() => i,
                Ok(i) => return Outcome::Diverged { step, expected: format!("a choice index below {}", choices.len()), seen: format!("index {i}") },
                Err(d) => return Outcome::Diverged { step: d.step, expected: d.expected, seen: d.seen },
            };
            let choice = choices[index];
            if choice.kind == crate::choice::ChoiceKind::Fault {
                if choice.op == Op::Pause {
                    self.model.pause(choice.thread);
                } else if let Some(outcome) = self.inject(&choice) {
                    return outcome;
                }
                self.steps.push(Step { choice, result: Some(0), now_ns: self.model.now() });
                continue;
            }
            let pending = match self.model.status(choice.thread) {
                Some(ThreadStatus::Pending(r)) if r.op().is_net() => Some(r),
                _ => None,
            };
            let effect = self.model.apply(&choice, &mut self.memory);
            if let (Some(request), Effect::Grant { .. }) = (pending, effect) {
                let pid = self.pid_of(choice.thread);
                self.net.granted(choice.thread, pid, request, matches!(choice.kind, crate::choice::ChoiceKind::Timeout | crate::choice::ChoiceKind::Interrupt));
                self.net_dirty = true;
                self.new_connections |= matches!(request.op(), Op::NetConnect | Op::NetAccept);
                if let (Request::NetClose { fd, how: CloseHow::Close }, Some(outside)) = (request, self.outside.as_mut()) {
                    outside.forget_listeners(self.thread_process.get(&choice.thread).copied().unwrap_or(0), Some(fd));
                }
            }
            let result = match effect {
                Effect::Grant { result } => Some(result),
                Effect::Blocked => None,
            };
            self.steps.push(Step { choice, result, now_ns: self.model.now() });
            if let Some(result) = result {
                self.grant(choice.thread, choice.op, result);
            }
        }
    }

    /// The request `thread` posted last, decoded again from its slot (where it stays until the
    /// thread's next post); `None` if the slot holds no request (it decoded when it was posted).
    fn posted(&self, thread: ThreadId) -> Option<Request> {
        let (op, args) = self.region.posted_words(thread as usize);
        Request::decode(Op::from_u32(op)?, args).ok()
    }

    /// A listening socket was split (`NetListen`, before its grant: both descriptors are still
    /// the program's): dara takes a duplicate of the public one and notes the twin's address.
    fn note_listener(&mut self, thread: ThreadId) {
        let Some(Request::NetListen { fd, twin: twin_fd, datagrams }) = self.posted(thread) else { return };
        let process = self.thread_process.get(&thread).copied().unwrap_or(0);
        let pid = self.pid_of(thread);
        let taken = (|| {
            let public = self.net.duplicate(pid, fd).map_err(|e| e.0)?.ok_or("the listening socket is gone")?;
            let twin = self.net.duplicate(pid, twin_fd).map_err(|e| e.0)?.ok_or("the twin socket is gone")?;
            let addr = crate::outside::loopback_address(&twin).ok_or("the twin has no INET address")?;
            let outside = self.outside.as_mut().ok_or("no relay in a closed world")?;
            if datagrams {
                return outside.add_datagram_socket(process, fd, public, addr).map_err(|e| e.to_string());
            }
            outside.add_listener(process, fd, public, twin, addr).map_err(|e| e.to_string())
        })();
        if let Err(detail) = taken {
            self.pending_end.get_or_insert(Outcome::Uncontrolled { thread, syscall: "listen".into(), detail: format!("dara could not take over a listening socket: {detail}") });
        }
    }

    /// Recording: when nothing can run now but an outside peer may still bring input, waits for
    /// it, and for real time to reach the next timer's deadline: a timer fires no earlier than it
    /// would without dara (the caller then moves the clock to it). Ok(true) when something came
    /// (look again), Ok(false) to go on now.
    ///
    /// "Nothing can run now": no choice at all (`TimerPolicy::Deadline`), or nothing but timers
    /// (`TimerPolicy::Any`, where a pending timer is always a choice).
    ///
    /// A thread waiting for a datagram on a socket it never bound (an answer from a UDP server),
    /// or for a client of a Unix-domain listening socket, waits for an outside peer too: dara
    /// relays neither, so it looks at the program's sockets again every [`UNRELAYED_POLL`], and a
    /// peer from outside stops the run as uncontrolled (see `NetProbe::view`) instead of the run
    /// calling it a deadlock.
    fn await_outside(&mut self, choices: &[crate::choice::Choice], stop: &AtomicBool) -> Result<bool, Outcome> {
        let Some((live, may_receive)) = self.outside.as_ref().map(|o| (o.live(), o.may_receive())) else { return Ok(false) };
        let idle = choices.iter().all(|c| c.kind == crate::choice::ChoiceKind::Timeout);
        let next_timer = match self.cfg.time.timers {
            TimerPolicy::Deadline => self.model.next_deadline(None),
            TimerPolicy::Any => choices.iter().filter_map(|c| self.model.timer_deadline(c.thread)).min(),
        };
        if !idle || (next_timer.is_none() && self.model.net_requests().is_empty()) {
            self.idle_since = None;
            return Ok(false);
        }
        // (Looked for only when no relayed peer may come: it reads epoll interest lists.)
        let unrelayed = live && !may_receive && self.waits_for_unrelayed_peers();
        if !may_receive && !unrelayed {
            return Ok(false);
        }
        // Virtual time follows real time while the program idles: its next timer fires when it
        // would have without dara (virtual 0 is the start of the run), unless a client comes first.
        let real_ns = self.started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        let limit = next_timer.map(|t| Duration::from_nanos(t.saturating_sub(real_ns)));
        if limit == Some(Duration::ZERO) {
            self.idle_since = None;
            return Ok(false);
        }
        let (since, told) = *self.idle_since.get_or_insert((Instant::now(), false));
        if !told && next_timer.is_none() && since.elapsed() >= IDLE_NOTICE {
            eprintln!("dara: waiting for outside input ({}); Ctrl-C passes SIGINT on to the program, a second one stops dara and keeps the trace", self.waiting_for());
            self.idle_since = Some((since, true));
        }
        // A signal someone outside sends straight to a parked thread (`kill <server pid>`) ends
        // a wait only once dara looks: while some wait could be ended so, look every
        // SIGNAL_LOOK (before, such a recording waited for good unless something else woke it).
        let interruptible = self.model.has_interruptible_wait();
        let outside = self.outside.as_mut().expect("checked above");
        let slice = match (unrelayed, limit) {
            (false, limit) => Some(limit.map_or(IDLE_NOTICE, |l| l.min(IDLE_NOTICE))),
            (true, None) => Some(UNRELAYED_POLL),
            (true, Some(limit)) => Some(limit.min(UNRELAYED_POLL)),
        };
        let slice = if interruptible { slice.map(|s| s.min(SIGNAL_LOOK)) } else { slice };
        match outside.wait(slice, stop) {
            Ok(true) => {
                self.idle_since = None;
                Ok(true)
            }
            Ok(false) if stop.load(Ordering::Relaxed) => Err(Outcome::Interrupted),
            Ok(false) => {
                if unrelayed {
                    self.net_dirty = true; // look at the sockets again
                }
                if interruptible {
                    self.signals_may_be_pending();
                }
                Ok(true) // look again: the deadline may have come, or more waiting is due
            }
            Err(e) => Err(relay_outcome(self.steps.len() as u64, e)),
        }
    }

    /// Whether some thread waits for what only a peer dara does not relay could bring: a datagram
    /// on a UDP socket, or a connection to a Unix-domain listening socket (directly, or through
    /// `poll` or an epoll set that watches such a socket).
    fn waits_for_unrelayed_peers(&mut self) -> bool {
        use crate::model::net::kind;
        for (thread, request) in self.model.net_requests() {
            let waiting_on = self.model.probed_view(thread).filter(|v| !v.ready).map(|v| crate::choice::NetObject::decode(v.obj).kind);
            let unrelayed = match (request.op(), waiting_on) {
                (Op::NetRecv, Some(kind::UDP)) | (Op::NetAccept, Some(kind::UNIX_STREAM)) => true,
                (Op::NetEpollWait, Some(kind::EPOLL)) | (Op::NetPoll, Some(kind::POLL)) => {
                    let pid = self.pid_of(thread);
                    self.net.watches_unrelayed(pid, &request)
                }
                _ => false,
            };
            if unrelayed {
                return true;
            }
        }
        false
    }

    /// What the idle threads wait for, for the waiting notice.
    fn waiting_for(&mut self) -> String {
        let report = self.deadlock_report();
        report.iter().take(3).map(|t| format!("thread {} {}", t.thread, t.detail)).collect::<Vec<_>>().join("; ")
    }

    /// Passes the signals dara-trace received (recording) or the recorded ones (replay) on to every
    /// traced process. True when some process will die of it: the next decision waits for that.
    fn pass_on_signals(&mut self) -> bool {
        let step = self.steps.len() as u64;
        let Some(signals) = self.outside.as_mut().map(|o| o.signals(step)) else { return false };
        let mut dies = false;
        for sig in signals {
            self.signals_may_be_pending();
            let now = Instant::now();
            let mut catching = Vec::new();
            for (&process, record) in &self.processes {
                if !record.alive {
                    continue;
                }
                let terminates = procfs::signal_terminates(record.pid, sig);
                let caught = !terminates && procfs::signal_caught(record.pid, sig);
                if let Some(pidfd) = &record.pidfd {
                    procfs::pidfd_signal(pidfd, sig);
                }
                // Noted whatever the process's mask says now: one parked at an exec has every
                // signal blocked, and takes this one, and dies of it, once it goes on.
                self.outside_deaths.note_passed_on(process, sig);
                if terminates {
                    self.dying.push((process, now));
                    self.exiting.push(process);
                    dies = true;
                } else if caught {
                    catching.push(process);
                }
            }
            // A process with a thread in a wait the signal ends (an `Interrupt`) takes it at once.
            let interruptible: Vec<ProcessId> = self.model.interruptible_waits().iter().filter_map(|(t, _)| self.thread_process.get(t).copied()).collect();
            catching.retain(|p| !interruptible.contains(p));
            if !catching.is_empty() && matches!(self.cfg.outside, OutsideMode::Live { .. }) {
                self.tell_signal_waits(&catching, sig);
            }
        }
        dies
    }

    /// A recording passed `sig` on to `processes`, which catch it and have no thread in a wait
    /// the signal ends (`poll`, `epoll_wait`, `sigsuspend`, a sleep, a condition wait, ...: an
    /// `Interrupt` choice). Their threads wait where a signal does not end the wait (a lock, a join):
    /// the handler runs when one of them is next granted, at the latest when its wait times out.
    /// Says so in one line, with when that will be, so a user whose Ctrl-C seems lost knows why.
    fn tell_signal_waits(&self, processes: &[ProcessId], sig: i32) {
        let when = |process: ProcessId| {
            let threads = self.thread_process.iter().filter(|(_, p)| **p == process).map(|(t, _)| *t);
            let program = self.processes.get(&process).map_or("", |r| r.program.as_str());
            match threads.filter_map(|t| self.model.timer_deadline(t)).min() {
                Some(deadline) => format!("process {process} ({program}) within {:.1} s", deadline.saturating_sub(self.model.now()) as f64 / 1e9),
                None => format!("process {process} ({program}) when woken (no timeout)"),
            }
        };
        const NAMED: usize = 3;
        let mut named: Vec<String> = processes.iter().take(NAMED).map(|&p| when(p)).collect();
        if processes.len() > NAMED {
            named.push(format!("{} more", processes.len() - NAMED));
        }
        eprintln!(
            "dara: {} passed on; processes that catch it but wait where a signal does not end the wait (a lock, a join, a wait for a child) take it when their waits end: {}. A second Ctrl-C stops dara and keeps the trace",
            signal_name(sig),
            named.join(", ")
        );
    }

    /// Kernel pid of `thread`'s process (0 if unknown).
    fn pid_of(&self, thread: ThreadId) -> u32 {
        self.thread_process.get(&thread).and_then(|p| self.processes.get(p)).map_or(0, |p| p.pid)
    }

    /// Brings the model's readiness views up to date: settles what granted network operations
    /// left in flight, then probes every thread parked on a network request that has no view
    /// (all of them after a network operation or a process exit). Runs while every thread is
    /// parked.
    fn refresh_net(&mut self) -> Option<Outcome> {
        let outside = self.outside.as_ref();
        if let Err(e) = self.net.settle(&|local, remote| outside.and_then(|o| o.received_by(local, remote))) {
            return Some(Outcome::Uncontrolled { thread: 0, syscall: "loopback delivery".into(), detail: e.0 });
        }
        for (pid, server) in self.net.take_connections() {
            if !self.is_traced_server(pid, server.port()) {
                let process = self.processes.iter().find(|(_, r)| r.pid == pid).map_or(0, |(&p, _)| p);
                return Some(Outcome::Uncontrolled {
                    thread: 0,
                    syscall: "connect".into(),
                    detail: format!("process {process} connected to {server}, a server outside dara: what it answers would be input dara neither controls nor records; run that server under dara too (a test script that starts both)"),
                });
            }
        }
        if let Some(outside) = self.outside.as_mut() {
            let sending = self.steps.last().is_some_and(|s| matches!(self.model.status(s.choice.thread), Some(ThreadStatus::Pending(r)) if r.op() == Op::NetSend));
            match outside.pump(self.steps.len() as u64, &mut self.net, sending) {
                // New bytes or connections change what the program's sockets show.
                Ok(changed) => self.net_dirty |= changed,
                Err(e) => return Some(relay_outcome(self.steps.len() as u64, e)),
            }
            for relayed in outside.take_relayed() {
                self.show_relayed_peer(relayed);
            }
        }
        if std::mem::take(&mut self.net_dirty) {
            self.model.forget_net_views();
            self.net.forget_views();
        }
        let requests: Vec<(ThreadId, Request)> = self.model.net_requests().into_iter().filter(|&(thread, _)| !self.model.has_net_view(thread)).collect();
        let epoll_waits: Vec<(ThreadId, u32, i32)> = requests
            .iter()
            .filter_map(|&(thread, r)| match r {
                Request::NetEpollWait { epoll, .. } => Some((thread, self.pid_of(thread), epoll)),
                _ => None,
            })
            .collect();
        if let Err(e) = self.net.poll_epoll_sets(&epoll_waits) {
            return Some(Outcome::Uncontrolled { thread: epoll_waits[0].0, syscall: Op::NetEpollWait.name().into(), detail: e.0 });
        }
        for (thread, request) in requests {
            let process = self.thread_process.get(&thread).copied().unwrap_or(0);
            let pid = self.pid_of(thread);
            match self.net.view(thread, process, pid, &request) {
                Ok(view) => self.model.set_net_view(thread, view),
                Err(e) => return Some(Outcome::Uncontrolled { thread, syscall: request.op().name().into(), detail: e.0 }),
            }
        }
        None
    }

    /// Whether the server a traced process (`pid`) connected to on `port` is traced too: a
    /// program's listening socket dara relays for (a recording), or a listening socket some
    /// traced process holds. Listeners found traced are remembered (connecting again is common).
    fn is_traced_server(&mut self, pid: u32, port: u16) -> bool {
        if self.outside.as_ref().is_some_and(|o| o.listens_on(port)) {
            return true;
        }
        let listeners = procfs::tcp_listener_inodes(pid, port);
        if listeners.iter().any(|inode| self.traced_listeners.contains(inode)) {
            return true;
        }
        let traced: Vec<u32> = self.processes.values().filter(|r| r.alive).map(|r| r.pid).collect();
        let found = listeners.into_iter().find(|&inode| traced.iter().any(|&p| procfs::holds_socket(p, inode)));
        found.map(|inode| self.traced_listeners.insert(inode)).is_some()
    }

    /// Tells the preload to show the client where the program would see dara's socket that
    /// stands for it (before the program can see it: its accept or receive is granted later).
    fn show_relayed_peer(&mut self, relayed: crate::outside::Relayed) {
        use dara_abi::relayed_flags;
        let peer = relayed.peer;
        let entry = &self.region.header().relayed[self.relayed_count % dara_abi::MAX_RELAYED];
        self.relayed_count += 1;
        entry.relay_port.store(0, Ordering::Release);
        let (family, ip) = match peer.ip() {
            std::net::IpAddr::V4(v4) => (libc::AF_INET, [u32::from_ne_bytes(v4.octets()), 0, 0, 0]),
            std::net::IpAddr::V6(v6) => (libc::AF_INET6, std::array::from_fn(|i| u32::from_ne_bytes(v6.octets()[i * 4..i * 4 + 4].try_into().expect("4 bytes")))),
        };
        entry.family.store(family as u32, Ordering::Relaxed);
        let flags = if relayed.datagrams { relayed_flags::DATAGRAMS } else { 0 } | if relayed.relay.is_ipv6() { relayed_flags::RELAY_V6 } else { 0 };
        entry.flags.store(flags, Ordering::Relaxed);
        entry.port.store(u32::from(peer.port()), Ordering::Relaxed);
        for (word, value) in entry.ip.iter().zip(ip) {
            word.store(value, Ordering::Relaxed);
        }
        entry.relay_port.store(u32::from(relayed.relay.port()), Ordering::Release);
    }

    /// Replay: sends the signals that reached a thread from outside with its grant of `step` in
    /// the recording, before that step's decision: the thread, parked and blocking them, lets
    /// them through as it comes back from the grant, as it did then. Sent before the decision
    /// because one may be what ended its wait (an `Interrupt` choice, offered only for a signal
    /// that is pending).
    fn replay_signals_before(&mut self, step: u64) {
        let Some(outside) = self.outside.as_mut() else { return };
        let signals = outside.signals_before(step);
        for &(thread, sig) in &signals {
            let (pid, tid) = (self.pid_of(thread as ThreadId), self.region.slot(thread as usize).tid.load(Ordering::Acquire));
            procfs::thread_signal(pid, tid, sig);
        }
        if !signals.is_empty() {
            self.signals_may_be_pending();
        }
    }

    /// Hands the token to `thread` with `result`.
    fn grant(&mut self, thread: ThreadId, op: Op, mut result: i64) {
        if op == Op::ProcessKill {
            // Before the thread goes on to send it: the targets are still there to look at. The
            // result tells the sender how many processes the signal ends (it waits for them).
            if let Some(Request::ProcessKill { signal, pid, .. }) = self.posted(thread) {
                result = self.note_kill(thread, signal, i64::from(pid)) as i64;
            }
            self.signals_may_be_pending();
        }
        if op == Op::ClockRead {
            result = self.clock_skew(thread);
        }
        if op == Op::NetListen {
            self.note_listener(thread);
        }
        let slot = self.region.slot(thread as usize);
        // Edges this thread reaches first are stamped with the step that granted it.
        self.region.header().step.store(self.steps.len().saturating_sub(1) as u32, Ordering::Relaxed);
        self.region.grant(thread as usize, result, self.model.now());
        self.holder = Some(TokenHolder::new(thread));
        if op == Op::ProcessExit {
            if let Some(&process) = self.thread_process.get(&thread) {
                self.exiting.push(process);
            }
        }
        if op == Op::ThreadExit {
            // The thread now runs libc's teardown. Wait until it is really gone, so nothing of it
            // runs concurrently with the next granted thread.
            let (pid, tid) = (slot.pid.load(Ordering::Relaxed), slot.tid.load(Ordering::Relaxed));
            if pid != tid {
                procfs::wait_thread_exit(pid, tid, THREAD_EXIT_LIMIT);
            }
            self.finished[thread as usize] = true;
            self.holder = None;
        }
    }

    /// Waits until no thread is running or starting, ingesting every new post.
    fn wait_until_quiet(&mut self, stop: &AtomicBool) -> Wait {
        loop {
            let seen = self.region.wake_count();
            // Before exits: a program refused a thread by dara's limit may crash right after.
            if let Some(outcome) = self.note_new_slots() {
                return Wait::End(outcome);
            }
            if let Some(outcome) = self.drain_exits() {
                return Wait::End(outcome);
            }
            if !self.exiting.is_empty() {
                if let Some(outcome) = self.check_exits(false) {
                    return Wait::End(outcome);
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Wait::End(Outcome::Interrupted);
            }
            let mut quiet = true;
            let mut index = 0;
            while index < self.active.len() {
                let i = self.active[index];
                index += 1;
                if self.finished[i] {
                    continue;
                }
                let pid = self.region.slot(i).pid.load(Ordering::Acquire);
                if pid != 0 && self.pid_is_dead(pid) {
                    continue;
                }
                match self.region.observe(i, self.seen_posts[i]) {
                    Seen::NewPost(posts) => {
                        self.seen_posts[i] = posts;
                        if let Some(outcome) = self.ingest(i as ThreadId) {
                            return Wait::End(outcome);
                        }
                        // Some posts are granted at once, without a decision (`Held`,
                        // `Fault`): the thread runs on.
                        if self.holder.as_ref().is_some_and(|h| h.thread == i as ThreadId) {
                            quiet = false;
                        }
                    }
                    Seen::Waiting => {}
                    Seen::Exited => self.finished[i] = true,
                    Seen::Starting | Seen::Running => quiet = false,
                }
            }
            // A post ingested late in the scan may have finished a slot seen busy earlier in it
            // (an exec ends the old image's threads): look once more before sleeping.
            quiet = quiet || self.active.iter().all(|&i| {
                let pid = self.region.slot(i).pid.load(Ordering::Acquire);
                self.finished[i] || (pid != 0 && self.pid_is_dead(pid)) || matches!(self.region.observe(i, self.seen_posts[i]), Seen::Waiting | Seen::Exited)
            });
            if quiet && !self.awaiting_deaths() && !self.awaiting_arrival() {
                // A creator claims its child's slot before it posts again, so a post seen in the
                // scan makes that claim visible here: a slot claimed during the scan (the child
                // has not posted yet) means look again, or a decision would leave the child out.
                if handoff::claimed(&self.region.header().next_slot) as usize > self.known_slots {
                    continue;
                }
                return Wait::Quiet;
            }
            if self.tree.all_gone() {
                if let Some(outcome) = self.drain_exits() {
                    return Wait::End(outcome);
                }
                return Wait::End(self.final_outcome());
            }
            // A process on its way out posts nothing more: look again soon.
            let pause = if self.exiting.is_empty() { Duration::from_millis(20) } else { Duration::from_micros(200) };
            if self.region.sleep(seen, pause) == Waited::TimedOut {
                // Nothing posted for a while: has a process died unannounced (killed)? Is the
                // kernel slow to release one that ended (said once, in one line)?
                if let Some(outcome) = self.check_exits(true) {
                    return Wait::End(outcome);
                }
                self.tree.kernel_still_reaping();
            }
            if let Some(outcome) = self.watchdog() {
                return Wait::End(outcome);
            }
            if let Some(outcome) = self.watch_newborns() {
                return Wait::End(outcome);
            }
        }
    }

    /// Adds newly claimed slots to the scan list and drops finished ones. Ends the run when the
    /// slot table overflowed: the program was refused a thread (EAGAIN) because of dara's limit,
    /// and whatever it does next is not its own behaviour.
    fn note_new_slots(&mut self) -> Option<Outcome> {
        let claimed = handoff::claimed(&self.region.header().next_slot) as usize;
        if claimed > dara_abi::MAX_SLOTS {
            return Some(Outcome::Uncontrolled {
                thread: 0,
                syscall: "pthread_create".into(),
                detail: format!("the program created more than {} threads in one execution, dara's limit (threads are not reused yet); the run was stopped", dara_abi::MAX_SLOTS),
            });
        }
        while self.known_slots < claimed {
            self.active.push(self.known_slots);
            self.known_slots += 1;
        }
        let finished = &self.finished;
        self.active.retain(|&i| !finished[i]);
        None
    }

    /// A thread posted: tell the model.
    fn ingest(&mut self, thread: ThreadId) -> Option<Outcome> {
        let slot = self.region.slot(thread as usize);
        let (raw_op, args) = self.region.posted_words(thread as usize);
        let process = slot.process.load(Ordering::Acquire);
        if self.holder.as_ref().is_some_and(|h| h.thread == thread) {
            self.holder = None;
        }
        // Sends and receives the thread made without a post since its last one (coarse steps, the
        // preload's `unposted`): the sends are settled before the next decision, like granted
        // ones, and the readiness views are looked at again.
        if slot.received_unposted.load(Ordering::Acquire) != 0 {
            self.net_dirty = true;
        }
        let sent = (slot.sent_count.load(Ordering::Acquire) as usize).min(dara_abi::SENT_MAX);
        if sent > 0 {
            let pid = slot.pid.load(Ordering::Acquire);
            for on in &slot.sent[..sent] {
                let ports = on.ports.load(Ordering::Acquire);
                let total = (ports != 0).then(|| ((ports >> 16) as u16, ports as u16, on.bytes_sent.load(Ordering::Acquire)));
                self.net.sent_unposted(pid, on.fd.load(Ordering::Acquire) as i32, total);
            }
            self.net_dirty = true;
        }
        let Some(op) = Op::from_u32(raw_op) else {
            return Some(Outcome::Uncontrolled { thread, syscall: format!("op {raw_op}"), detail: "the preload posted an operation this dara does not know (version mismatch?)".into() });
        };
        // The one place a posted slot's words become a request.
        let request = match Request::decode(op, args) {
            Ok(request) => request,
            Err(e) => return Some(Outcome::Uncontrolled { thread, syscall: op.name().into(), detail: e.to_string() }),
        };
        if op == Op::FifoOpen {
            // A reader posts holding its end open: a writer waiting for a reader may go on now.
            self.net_dirty = true;
        }
        match request {
            Request::ProcessStart { parent, kind } => {
                if process as usize >= self.cfg.max_processes.min(MAX_PROCESSES) {
                    return Some(Outcome::Uncontrolled { thread, syscall: "fork".into(), detail: too_many_processes(self.cfg.max_processes) });
                }
                let pid = slot.pid.load(Ordering::Acquire);
                if kind == StartKind::Exec {
                    self.image_replaced(process, thread);
                } else {
                    let parent = parent.filter(|_| kind == StartKind::Fork);
                    self.place_process(process, pid, parent);
                    let entry = &self.region.header().processes[process as usize];
                    entry.random_seed.store(splitmix64(self.cfg.random_seed ^ splitmix64(process as u64)), Ordering::Release);
                    let own_pid = match self.register_pid(pid) {
                        Ok(own) => own,
                        Err(detail) => return Some(Outcome::Uncontrolled { thread, syscall: "fork".into(), detail }),
                    };
                    self.processes.insert(process, ProcessRecord { pid, own_pid, alive: true, exit: None, pidfd: procfs::pidfd_open(pid), program: String::new() });
                    self.net.add_traced(pid);
                    self.model.add_process(process, parent);
                    self.memory.set_pid(process, pid);
                }
                if coverage::executable_is_instrumented(pid) {
                    self.modules.insert(process, coverage::executable_modules(pid));
                }
                let program = procfs::program_name(pid).unwrap_or_default();
                if self.cfg.symbolize && !program.is_empty() {
                    self.programs.insert(thread, program.clone());
                }
                if let Some(record) = self.processes.get_mut(&process) {
                    record.program = program;
                }
                self.thread_process.insert(thread, process);
                self.model.add_thread(thread, process);
            }
            Request::ThreadStart { .. } => {
                self.thread_process.insert(thread, process);
                self.model.add_thread(thread, process);
            }
            Request::Fault { signal, pc, addr } => {
                self.note_fault(thread, process, signal, pc.0, addr.0);
                return None;
            }
            Request::SignalArrived { signal, sender, code, value } => {
                self.signals_may_be_pending(); // the thread took one: others may have none left
                if let Some(outcome) = self.signal_arrived(thread, signal, sender, code, value) {
                    return Some(outcome);
                }
                self.grant(thread, Op::SignalArrived, 0);
                return None;
            }
            Request::Held { lock, what, depth, .. } => {
                // A lock taken without a post (see the preload's `solo`): the model learns its
                // owner, and the thread goes on, with no decision and no step.
                if let Err(detail) = self.model.adopt(thread, lock, what, depth) {
                    return Some(Outcome::Uncontrolled { thread, syscall: "a lock taken without a scheduling point".into(), detail });
                }
                self.grant(thread, Op::Held, 0);
                return None;
            }
            Request::Unsupported(call) => {
                let name = procfs::syscall_name(call.nr() as i64);
                let detail = match call {
                    Unsupported::Clone3 { flags, .. } => {
                        let what = if flags & libc::CLONE_THREAD as u64 != 0 { "thread" } else { "process" };
                        format!("a raw clone3 system call (flags {flags:#x}) would start a {what} that bypasses pthread_create and fork, which dara cannot follow; the run was stopped rather than left with an untraced {what}")
                    }
                    Unsupported::Syscall { nr: 56 | 57 | 58, .. } => "a raw clone/fork system call that bypasses libc's fork() is not supported; the run was stopped rather than left with an untraced process".to_string(),
                    Unsupported::Syscall { nr: 33 | 292, .. } => format!("the program asked for descriptor {} ({name} onto it), which dara keeps for its shared region in every traced process; the run was stopped rather than lose the region", dara_abi::SHM_FD),
                    Unsupported::StaticExec { path } => format!("{} is statically linked, so dara's preload cannot enter it; statically linked programs are not supported yet", procfs::c_string_of(self.processes.get(&process).map_or(0, |p| p.pid), path.0).unwrap_or_else(|| "the program to run".into())),
                    Unsupported::Syscall { args: [first, second, _], .. } => format!("{name} cannot be modelled by dara (arguments {first:#x}, {second:#x}); the run was stopped rather than left uncontrolled"),
                };
                return Some(Outcome::Uncontrolled { thread, syscall: name, detail });
            }
            _ => {}
        }
        if self.cfg.symbolize {
            self.note_symbol(process, request.subject());
        }
        self.note_modules(process, op);
        if matches!(op, Op::SigSuspend | Op::SigWait) {
            self.signals_may_be_pending(); // a signal it lets through may be pending already
        }
        self.model.post(thread, request, &mut self.memory);
        None
    }

    /// A signal sent by a process (not raised by the kernel) reached `thread` with its last grant
    /// (its sender pid, si_code and si_value). From dara or a traced process it is part of the run.
    /// From outside, a recording records it (its replay sends it to the same thread with the same
    /// grant); anywhere else it is input dara neither controls nor records: the run stops.
    fn signal_arrived(&mut self, thread: ThreadId, sig: i32, sender: u32, code: i32, value: u64) -> Option<Outcome> {
        // dara's own signals carry its mark (its pid would read 0 from inside a PID namespace,
        // as an outside sender's does).
        let from_dara = code == libc::SI_QUEUE && value == dara_abi::DARA_SIGNAL_VALUE;
        if from_dara || self.processes.values().any(|p| p.own_pid == sender) {
            return None;
        }
        let step = (self.steps.len() as u64).saturating_sub(1);
        match self.outside.as_mut() {
            Some(outside) if outside.live() => {
                outside.signal_with_grant(step, thread, sig);
                None
            }
            _ => Some(Outcome::Uncontrolled {
                thread,
                syscall: "signal".into(),
                detail: format!("signal {} from process {sender}, which dara does not trace, reached thread {thread}: a signal from outside is input dara controls only in a recording (send it to dara-trace to have it passed on)", signal_name(sig)),
            }),
        }
    }

    /// A thread is dying of a fault: name the faulting function while the process still exists,
    /// then let the thread go (no decision, no step: the fault is not a scheduling choice).
    fn note_fault(&mut self, thread: ThreadId, process: ProcessId, signal: i32, pc: u64, addr: u64) {
        let function = self.processes.get(&process).and_then(|p| {
            let pid = p.pid;
            self.symbolizers.entry(process).or_insert_with(|| Symbolizer::for_process(pid)).name(pc)
        });
        if signal != libc::SIGABRT {
            // An abort's pc is inside libc's raise; its assertion message names it better.
            self.faults.insert(process, crate::crash_site::fault_location(function, pc, addr, signal));
        }
        self.exiting.push(process);
        self.grant(thread, Op::Fault, 0);
    }

    /// Reads the module map of `process` the first time it shows coverage, while it is alive
    /// (`dara coverage` needs it to symbolize call sites). Reading /proc/<pid>/maps costs about
    /// 40 µs, a fiftieth of a small execution, so it is not done for uninstrumented programs.
    /// A process whose executable calls a receiver was mapped at its `ProcessStart` already
    /// (a program that only returns from `main` posts nothing after that). This catches the
    /// rest (an instrumented library in an uninstrumented executable): a `trace-pc-guard` module
    /// by its guard count (one load, every post); a `trace-pc` one by its counters, checked
    /// ([`Region::coverage_touched`], one `mincore`) at the process's 1st, 2nd, 4th, 8th, …
    /// post and whenever one of its threads starts or exits.
    fn note_modules(&mut self, process: ProcessId, op: Op) {
        let p = process as usize;
        if p >= MAX_PROCESSES || self.modules.contains_key(&process) {
            return;
        }
        self.coverage_checks[p] = self.coverage_checks[p].saturating_add(1);
        let due = self.coverage_checks[p].is_power_of_two() || matches!(op, Op::ThreadStart | Op::ThreadExit | Op::ProcessExit);
        let covered = self.region.coverage(p).guards.load(Ordering::Relaxed) != 0 || (due && self.region.coverage_touched(p));
        if let (true, Some(record)) = (covered, self.processes.get(&process)) {
            self.modules.insert(process, coverage::executable_modules(record.pid));
        }
    }

    fn note_symbol(&mut self, process: ProcessId, addr: u64) {
        if addr < 0x1000 || self.symbols.contains_key(&addr) {
            return;
        }
        let Some(pid) = self.processes.get(&process).map(|p| p.pid) else { return };
        let symbolizer = self.symbolizers.entry(process).or_insert_with(|| Symbolizer::for_process(pid));
        if let Some(name) = symbolizer.name(addr) {
            self.symbols.insert(addr, name);
        }
    }

    /// SIGKILLs every traced process still alive through its pidfd: those that left the process
    /// group (which `kill_all` reaches) included. Orphans among them are dara's children (it is
    /// the subreaper) and are reaped here; the others are reaped by their own dying parents.
    fn kill_strays(&mut self) {
        let root = self.tree.root_pid();
        let mut strays = Vec::new();
        for record in self.processes.values().filter(|r| r.alive && r.pid != root) {
            if let Some(fd) = &record.pidfd {
                procfs::pidfd_kill(fd);
                strays.push((record.pid, fd));
            }
        }
        // Their pidfds say when they have ended: their /proc entries are not looked up while the
        // kernel tears them down.
        let deadline = Instant::now() + Duration::from_millis(200);
        while !strays.is_empty() && Instant::now() < deadline {
            strays.retain(|&(pid, fd)| !procfs::pidfd_exited(fd) || !procfs::reap_if_child(pid));
            if !strays.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// `thread` was granted `kill(pid, sig)` and sends it next: note every traced process the
    /// signal will terminate (it is not caught, ignored or blocked there).
    fn note_kill(&mut self, thread: ThreadId, sig: i32, pid: i64) -> usize {
        let sender = self.thread_process.get(&thread).copied();
        let sender_group = sender.and_then(|p| self.processes.get(&p)).and_then(|r| procfs::process_group(r.pid));
        let now = Instant::now();
        for (&process, record) in &self.processes {
            if !record.alive {
                continue;
            }
            let hit = match pid {
                p if p > 0 => record.own_pid as i64 == p,
                0 => sender_group.is_some() && procfs::process_group(record.pid) == sender_group,
                -1 => Some(process) != sender,
                g => procfs::process_group(record.pid) == Some((-g) as u32),
            };
            if hit {
                self.outside_deaths.note_kill(process, sig);
            }
            if hit && procfs::signal_terminates(record.pid, sig) {
                self.dying.push((process, now));
                self.exiting.push(process);
            }
        }
        self.dying.iter().filter(|(_, since)| *since == now).count()
    }

    /// Whether a killed process is still on its way out (the next decision waits for it).
    fn awaiting_deaths(&mut self) -> bool {
        let processes = &self.processes;
        self.dying.retain(|(p, since)| processes.get(p).is_some_and(|r| r.alive) && since.elapsed() < DYING_LIMIT);
        !self.dying.is_empty()
    }

    /// Process `process` exec'd a new program whose main thread is `thread`: the old image's
    /// threads are gone (the kernel ended them), the process lives on.
    fn image_replaced(&mut self, process: ProcessId, thread: ThreadId) {
        for (&t, &p) in &self.thread_process {
            if p == process && t != thread {
                self.finished[t as usize] = true;
            }
        }
        if self.holder.as_ref().is_some_and(|h| self.thread_process.get(&h.thread) == Some(&process)) {
            self.holder = None;
        }
        self.model.process_replaced_image(process);
        // The exec closed the process's close-on-exec descriptors: a pipe whose last writer that
        // was now reads end-of-file (git's start_command waits for exactly that to learn that its
        // child's exec succeeded).
        self.net_dirty = true;
        self.symbolizers.remove(&process);
        self.modules.remove(&process);
    }

    /// The pid a new process (kernel pid `pid`, which its preload read through dara's /proc)
    /// sees itself as. In a PID namespace it must be in exactly one namespace below dara's: a
    /// preload without dara's /proc descriptor (a program that closed it) would have posted its
    /// own namespace pid, which names some other process here.
    fn register_pid(&self, pid: u32) -> Result<u32, String> {
        if !self.tree.pids_virtual() {
            return Ok(pid);
        }
        match procfs::namespace_pids(pid).as_deref() {
            Some(&[_, own]) => Ok(own),
            _ => Err(format!("a new process posted pid {pid}, which is not a process in this execution's PID namespace: dara's /proc descriptor ({}) was closed or replaced by the program", dara_abi::HOST_PROC_FD)),
        }
    }

    fn pid_is_dead(&self, pid: u32) -> bool {
        self.processes.values().any(|p| p.pid == pid && !p.alive)
    }

    /// Applies queued process exits; returns an outcome if one ends the execution.
    fn drain_exits(&mut self) -> Option<Outcome> {
        while let Some(event) = self.tree.try_exit() {
            let known = self.processes.iter().find(|(_, p)| p.pid == event.pid && p.alive).map(|(&p, _)| p);
            let Some(process) = known else {
                if let Some(outcome) = self.arrival_failed(event.pid, event.status) {
                    return Some(outcome);
                }
                if event.pid == self.tree.root_pid() && self.processes.is_empty() && event.status == ExitStatus::Code(PRELOAD_REFUSED) {
                    return Some(Outcome::Uncontrolled {
                        thread: 0,
                        syscall: "exec".into(),
                        detail: "libdara_preload.so refused to attach: it was built for another dara version than this dara-trace; rebuild the workspace (cargo build --release)".into(),
                    });
                }
                if event.pid == self.tree.root_pid() && self.processes.is_empty() {
                    return Some(Outcome::Uncontrolled {
                        thread: 0,
                        syscall: "exec".into(),
                        detail: "the program exited without ever reaching dara's preload: LD_PRELOAD did not take effect (static binary, setuid, or a launcher that clears the environment)".into(),
                    });
                }
                continue;
            };
            if let Some(outcome) = self.process_ended(process, Some(event.status)) {
                return Some(outcome);
            }
        }
        None
    }

    /// Process `process` is gone (`status` when known): update the model and the records, and
    /// judge the exit. The launched program's exit status is the verdict and it may die of any
    /// signal only as a bug; the processes it started may exit with any status (a test script's
    /// `grep` that finds nothing is not a bug) or be terminated by a signal, but dying of a
    /// crash signal (SIGSEGV, SIGABRT, ...) is a bug wherever it happens.
    fn process_ended(&mut self, process: ProcessId, status: Option<ExitStatus>) -> Option<Outcome> {
        let record = self.processes.get_mut(&process)?;
        if !record.alive {
            return None;
        }
        record.alive = false;
        record.exit = status;
        self.exiting.retain(|&p| p != process);
        self.model.process_exited(process);
        self.net_dirty = true;
        self.signals_may_be_pending(); // the parent's SIGCHLD
        if let Some(outside) = self.outside.as_mut() {
            outside.forget_listeners(process, None);
        }
        let running = self.holder.as_ref().map(|h| h.thread).filter(|t| self.thread_process.get(t) == Some(&process));
        if running.is_some() {
            self.holder = None;
        }
        if let Some(at) = self.crashing.iter().position(|&p| p == process) {
            self.crashing.swap_remove(at);
            self.net.forget_owed_to_closed_ports();
            return None; // killed by a crash fault: not the program's doing
        }
        let status = status?;
        if let ExitStatus::Signal(signal) = status {
            if let Some(outcome) = self.outside_deaths.outside_kill(process, signal) {
                return Some(outcome);
            }
            if self.outside_deaths.stopped_by_user(process, signal) {
                return None; // the user's Ctrl-C, passed on: judged with the run (final_outcome)
            }
        }
        if self.nodes.is_some() {
            if let Some(outcome) = self.cluster_process_ended(process, status) {
                return Some(outcome);
            }
        }
        match status {
            ExitStatus::Signal(libc::SIGSYS) => Some(self.killed_by_trap(process, running)),
            ExitStatus::Signal(signal) if self.verdict == Some(process) || is_crash_signal(signal) => {
                Some(Outcome::Crashed { process, signal, name: signal_name(signal), location: self.faults.remove(&process) })
            }
            ExitStatus::Signal(_) | ExitStatus::Code(_) => None,
        }
    }

    /// Process `process` died of SIGSYS: the kernel found the syscall trap's signal blocked (or
    /// its handler gone) when the process made a call the filter traps, so dara lost control;
    /// the program did not crash. The call itself died with the process: name the program, the
    /// thread that was running and where it last was.
    fn killed_by_trap(&self, process: ProcessId, running: Option<ThreadId>) -> Outcome {
        let program = self.processes.get(&process).map_or("", |r| r.program.as_str());
        let program = if program.is_empty() { String::new() } else { format!(" ({program})") };
        let thread = running.unwrap_or(0);
        let last = running.and_then(|t| self.steps.iter().rev().find(|s| s.choice.thread == t && s.choice.kind != ChoiceKind::Fault));
        let place = match (running, last) {
            (Some(t), Some(step)) => format!(" while its thread {t} ran on from its {:?}", step.choice.op),
            (Some(t), None) => format!(" while its thread {t} was starting"),
            (None, _) => " in a thread dara was not running (one being created, or one inside a library that blocks every signal)".to_string(),
        };
        Outcome::Uncontrolled {
            thread,
            syscall: "a trapped system call with SIGSYS blocked".into(),
            detail: format!("process {process}{program} was killed by the kernel{place}: it made a system call dara intercepts (futex, clock, sleep, getrandom, fork, exec or wait) with SIGSYS blocked, so dara's trap could not run (dara keeps SIGSYS out of the masks set through libc, so something set the mask without it: a signal handler's saved context, or a raw system call dara does not trap)"),
        }
    }

    /// Notices processes that died without dara's reaper hearing of it (children of traced
    /// processes are reaped by their parents): an exiting process once it is a zombie, and any
    /// other whose pid is a zombie or gone.
    ///
    /// A process's pidfd says whether it ended; /proc is read only after that, once, not every
    /// 200 µs while the process is on its way out: reaping a process makes the kernel invalidate
    /// its /proc dentries (`release_task` → `shrink_dcache_parent`), and lookups under them at the
    /// same time only make that loop longer. dara's own children give their status through
    /// `waitid(WNOWAIT)` on the pidfd and are left for the reaper.
    fn check_exits(&mut self, all: bool) -> Option<Outcome> {
        let candidates: Vec<(ProcessId, u32)> = self
            .processes
            .iter()
            .filter(|(p, r)| r.alive && (all || self.exiting.contains(p)) && (!self.launched.contains(&r.pid) || self.exiting.contains(p)))
            .map(|(&p, r)| (p, r.pid))
            .collect();
        for (process, pid) in candidates {
            let pidfd = self.processes.get(&process).and_then(|r| r.pidfd.as_ref());
            let end = match pidfd {
                Some(fd) if !procfs::pidfd_exited(fd) => procfs::ProcessEnd::Running,
                // Launched commands are dara's children: the status without reaping, so their
                // end never waits on the reaper thread's timing.
                Some(fd) if self.launched.contains(&pid) => procfs::child_status(fd).map_or(procfs::ProcessEnd::Gone, procfs::ProcessEnd::Zombie),
                _ => procfs::process_end(pid),
            };
            match end {
                procfs::ProcessEnd::Running => {}
                procfs::ProcessEnd::Zombie(status) => {
                    let status = if libc::WIFSIGNALED(status) { ExitStatus::Signal(libc::WTERMSIG(status)) } else { ExitStatus::Code(libc::WEXITSTATUS(status)) };
                    if let Some(outcome) = self.process_ended(process, Some(status)) {
                        return Some(outcome);
                    }
                }
                procfs::ProcessEnd::Gone if self.launched.contains(&pid) => {} // reaped: the reaper's event has its status
                procfs::ProcessEnd::Gone => {
                    if let Some(outcome) = self.process_ended(process, None) {
                        return Some(outcome);
                    }
                }
            }
        }
        None
    }

    fn final_outcome(&self) -> Outcome {
        match self.verdict.and_then(|v| self.processes.get(&v)).and_then(|p| p.exit) {
            Some(ExitStatus::Code(code)) => Outcome::Exited { code, location: None },
            Some(ExitStatus::Signal(signal)) if self.outside_deaths.stopped_by_user(self.verdict.unwrap_or(0), signal) => {
                Outcome::StoppedBySignal { process: self.verdict.unwrap_or(0), signal, name: signal_name(signal) }
            }
            Some(ExitStatus::Signal(signal)) => {
                let process = self.verdict.unwrap_or(0);
                Outcome::Crashed { process, signal, name: signal_name(signal), location: self.faults.get(&process).cloned() }
            }
            None => Outcome::Uncontrolled {
                thread: 0,
                syscall: "exec".into(),
                detail: "the program ended without ever reaching dara's preload".into(),
            },
        }
    }

    /// Nothing can be scheduled and no thread is live: wait (bounded) for the processes to end.
    fn wait_for_exits(&mut self, stop: &AtomicBool) -> Option<Outcome> {
        let deadline = Instant::now() + self.cfg.busy_limit;
        // The kernel still releasing an ended process (told in one line) is no hang of the program.
        while Instant::now() < deadline || self.tree.kernel_still_reaping() {
            let seen = self.region.wake_count();
            if let Some(outcome) = self.drain_exits() {
                return Some(outcome);
            }
            if self.tree.all_gone() {
                return Some(self.final_outcome());
            }
            if stop.load(Ordering::Relaxed) {
                return Some(Outcome::Interrupted);
            }
            if self.region.claimed_slots() > self.thread_process.len() {
                return None; // a thread is being born after all
            }
            self.region.sleep(seen, Duration::from_millis(20));
        }
        Some(Outcome::Hang { reason: "every thread finished but the process did not exit".into() })
    }

    fn deadlock_report(&mut self) -> Vec<crate::outcome::BlockedThread> {
        let mut report = self.model.blocked_report();
        for blocked in &mut report {
            if blocked.addr >= 0x1000 {
                if let Some(pid) = self.processes.get(&blocked.process).map(|p| p.pid) {
                    let symbolizer = self.symbolizers.entry(blocked.process).or_insert_with(|| Symbolizer::for_process(pid));
                    blocked.symbol = symbolizer.name(blocked.addr);
                }
                if let Some(name) = &blocked.symbol {
                    let hex = format!("{:#x}", blocked.addr);
                    blocked.detail = blocked.detail.replace(&hex, &format!("{name} ({hex})"));
                }
            }
        }
        report
    }
}

/// The outcome a relay failure ends the run with.
fn relay_outcome(step: u64, e: RelayError) -> Outcome {
    match e {
        RelayError::Diverged { expected, seen } => Outcome::Diverged { step, expected, seen },
        RelayError::Broken(detail) => Outcome::Uncontrolled { thread: 0, syscall: "outside relay".into(), detail },
    }
}

/// How often a recording that waits for a peer dara does not relay looks at the program's sockets
/// again.
const UNRELAYED_POLL: Duration = Duration::from_millis(20);
/// How often a recording waiting for outside input looks for signals sent straight to its parked
/// threads.
const SIGNAL_LOOK: Duration = Duration::from_millis(50);
/// How long the run waits for outside input before it says so.
const IDLE_NOTICE: Duration = Duration::from_secs(2);

/// Exit status of a target whose preload found a region of another layout version.
const PRELOAD_REFUSED: i32 = 125;

/// How long the scheduler waits for a process a `kill` terminates before deciding anyway.
const DYING_LIMIT: Duration = Duration::from_secs(2);

/// How long the scheduler waits for an exiting thread to be gone before it goes on anyway.
const THREAD_EXIT_LIMIT: Duration = Duration::from_secs(2);

/// What a run that reached the process limit says.
fn too_many_processes(limit: usize) -> String {
    if limit >= MAX_PROCESSES {
        format!("the program started more than {limit} processes in one execution, the most dara can follow (--max-processes is at its maximum); the run was stopped")
    } else {
        format!("the program started more than {limit} processes in one execution, the limit set by --max-processes (at most {MAX_PROCESSES}); the run was stopped: raise --max-processes if it needs more")
    }
}

/// Signals that mean the program crashed (as opposed to being told to stop).
fn is_crash_signal(signal: i32) -> bool {
    matches!(signal, libc::SIGSEGV | libc::SIGABRT | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGTRAP | libc::SIGSYS)
}

pub use dara_model::outcome::signal_name;
