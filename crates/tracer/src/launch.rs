//! Starting the target command under control and tearing its whole tree down again.
//!
//! The child is set up between fork and exec (`pre_exec`, async-signal-safe calls only): its own
//! process group (so the terminal's Ctrl-C reaches dara, not the target, and the group can be
//! killed as one), ASLR off (`personality(ADDR_NO_RANDOMIZE)`, so object addresses repeat across
//! runs), pinned to the execution's CPU, and `PR_SET_PDEATHSIG` so it dies if dara dies. dara itself
//! is the child subreaper, so orphaned grandchildren are reparented to it and reaped (and killed)
//! too. When dara may create namespaces the tree runs in one of [`crate::pidns`]: commands are
//! forked into it, join its mounts (fresh /proc) before exec, and orphans go to its init.
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::forwarding::{self, Pipe, Sink};
use crate::pidns::{self, PidNamespace};
use crate::reaper::{self, ExitEvent, Reaping};

/// How long teardown waits for the killed tree to be reaped. A SIGKILLed process is normally gone
/// in milliseconds; the bound is generous because a loaded machine (or a hog on the execution's
/// CPU) delays every process involved, the namespace's init included, and giving up early would
/// be a false "stuck in the kernel".
const TEARDOWN_LIMIT: Duration = Duration::from_secs(30);

/// After this long a teardown lets what is left run on any CPU (see `placement::let_run_anywhere`;
/// twice [`placement::RESCUE_AFTER`](crate::placement::RESCUE_AFTER): a whole group ends at once).
const TEARDOWN_RESCUE_AFTER: Duration = Duration::from_millis(200);

/// A reap (the kernel's release of an ended process) that takes this long is told to the user.
pub const REAP_NOTICE: Duration = Duration::from_secs(5);

/// How long teardown waits for a reap the kernel is still working on (past `TEARDOWN_LIMIT`, 30 s):
/// the process is dead, so this is no "stuck" process, only a slow kernel.
pub const REAP_LIMIT: Duration = Duration::from_secs(600);

/// What to start.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The complete environment of the command (dara's own environment is not inherited, so a
    /// replay sees exactly what the recording saw).
    pub env: Vec<(OsString, OsString)>,
    /// A descriptor of dara's to hand down as (dara's fd, number in the target).
    pub pass_fd: Option<(i32, i32)>,
    /// CPU the whole tree is pinned to, and dara's threads that serve it (reaper, output).
    pub cpu: Option<usize>,
    /// The CPU the root command is started on when not `cpu`: a program launched ahead, while
    /// another execution runs on `cpu`, moved there by [`ProcessTree::settle`] when its own
    /// execution starts.
    pub born_on: Option<usize>,
    /// Drop the target's stdout/stderr instead of copying them to dara's (the pipes are still
    /// drained, so the target behaves the same).
    pub discard_output: bool,
    /// A descriptor of dara's to give the first launched command as its stdin (a pipe dara writes
    /// recorded input into); None: /dev/null.
    pub stdin_fd: Option<i32>,
    /// Descriptor number under which the target gets dara's /proc (see `dara_abi::HOST_PROC_FD`).
    pub host_proc_fd: Option<i32>,
    /// Run the tree in a PID namespace of its own ([`crate::pidns`]) when dara can create one.
    pub virtual_pids: bool,
    /// With `virtual_pids`: the pid the first command gets there (a replay of a recording made
    /// with the host's pids, [`ProcessTree::set_next_pid`]); None: 2, the namespace's first.
    pub first_pid: Option<u32>,
    /// How to run programs the preload cannot enter (statically linked ones) on the ptrace path
    /// ([`crate::ptrace`]); None: they are refused.
    pub agent: Option<AgentLaunch>,
    /// Where the lines the program writes to [`dara_abi::SDK_FD`] go (the SDK's property
    /// events); None: the target gets no such descriptor.
    pub sdk_lines: Option<LineSink>,
    /// The search's program parked before `main` ([`crate::fork_server`]): the root command, when
    /// it serves it, is a copy of it rather than a fork + exec.
    pub fork_server: Option<Arc<crate::ForkServer>>,
    /// Where the tree's namespace comes from when `virtual_pids`: made ahead by a search's pool,
    /// or (None) cloned now.
    pub namespaces: Option<Arc<crate::NamespacePool>>,
}

/// Takes each line (without its newline) written to the SDK's pipe, in the order written.
#[derive(Clone)]
pub struct LineSink(pub Arc<dyn Fn(&[u8]) + Send + Sync>);

impl std::fmt::Debug for LineSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineSink")
    }
}

/// The ptrace agent of an execution: its program, and the execution's region where a launched
/// process asks it to attach ([`crate::ptrace::seize`]).
#[derive(Clone, Debug)]
pub struct AgentLaunch {
    pub program: PathBuf,
    pub words: AgentWordsRef,
}

/// The region's [`dara_abi::agent::AgentWords`], mapped by the scheduler for longer than the tree
/// lives.
#[derive(Clone, Copy, Debug)]
pub struct AgentWordsRef(pub *const dara_abi::agent::AgentWords);

// SAFETY: the words are atomics in shared memory that outlives the tree; any thread may use them.
unsafe impl Send for AgentWordsRef {}
// SAFETY: as above.
unsafe impl Sync for AgentWordsRef {}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no command given")]
    Empty,
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
}

/// The init's pid inside its namespace.
const INIT_PID: libc::pid_t = 1;

/// A running target tree. Dropping it kills every process in it.
pub struct ProcessTree {
    /// The process group every launched command joins (the command's own pid in a plain run,
    /// the placeholder's in a cluster run).
    pgid: u32,
    /// The first launched command (0 until one is launched).
    root: u32,
    spec: LaunchSpec,
    exits: Receiver<ExitEvent>,
    reaper_done: Receiver<()>,
    /// What the reaper is reaping now.
    reaping: Arc<Reaping>,
    /// The last slow reap dara told the user about (0: none).
    slow_reap_told: u32,
    finished: bool,
    /// `all_gone` saw every process reaped and the namespace's init without orphans.
    init_alone: std::cell::Cell<bool>,
    /// The thread copying the target's output pipes to dara's own ([`crate::forwarding`]).
    forwarders: Vec<forwarding::Forwarder>,
    /// Write ends of those pipes, handed to every launched command; closed at teardown so the
    /// forwarders see end of file.
    output_writers: Vec<OwnedFd>,
    /// The last [`STDERR_TAIL_BYTES`] the target wrote to stderr (assertion messages, panics and
    /// sanitizer reports locate a bug).
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    output_pipes: [u64; dara_abi::OUTPUT_PIPES],
    /// The execution's PID namespace; None: the program sees real pids.
    ns: Option<PidNamespace>,
    /// Why there is no namespace although one was asked for.
    ns_refused: Option<String>,
    /// dara's /proc, handed to every launched command (`spec.host_proc_fd`).
    host_proc: Option<OwnedFd>,
    /// The ptrace agent, started with the first command that needs it.
    agent: Option<crate::ptrace::AgentProcess>,
    /// The root command is a copy of the spec's fork server.
    root_copied: bool,
    /// The copy's holder, reaped when the tree drops (after the copy is gone).
    holder: Option<crate::fork_server::Holder>,
    /// Without a namespace: the process that kills the tree if dara dies ([`crate::keeper`]).
    keeper: Option<crate::keeper::Keeper>,
}

pub use crate::forwarding::{SDK_LINE_MAX, STDERR_TAIL_BYTES};

/// Makes the calling process the subreaper of its descendants. Call once at start-up.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl ProcessTree {
    /// Starts `spec.command` as the leader of a new process group. `on_exit` is called (from the
    /// reaper thread) after each exit event is queued, so the scheduler can be woken from its
    /// futex wait.
    pub fn spawn(spec: &LaunchSpec, on_exit: impl Fn() + Send + 'static) -> Result<ProcessTree, LaunchError> {
        let mut tree = ProcessTree::prepare(spec)?;
        let root = tree.start(&spec.command, 0)?;
        tree.pgid = root;
        tree.root = root;
        if let Some(keeper) = &tree.keeper {
            keeper.keep_group(root);
        }
        tree.start_reaper(on_exit);
        Ok(tree)
    }

    /// A group for several commands started one by one with [`launch`](Self::launch) (a
    /// cluster's nodes, its workload, its check): an untraced placeholder process that only
    /// waits leads the group, so the group outlives any of its members and a node can be
    /// restarted into it after every other member has died. `spec.command` is not run.
    pub fn spawn_group(spec: &LaunchSpec, on_exit: impl Fn() + Send + 'static) -> Result<ProcessTree, LaunchError> {
        let mut tree = ProcessTree::prepare(spec)?;
        // In a namespace its init leads the group.
        tree.pgid = match &tree.ns {
            Some(ns) => ns.init_pid(),
            None => placeholder().map_err(|source| LaunchError::Spawn { program: "dara's process-group placeholder".into(), source })?,
        };
        tree.start_reaper(on_exit);
        Ok(tree)
    }

    /// Starts `command` in the tree's process group with the tree's environment, directory,
    /// descriptor and output pipes. Returns its pid. The first command launched is the root.
    pub fn launch(&mut self, command: &[String]) -> Result<u32, LaunchError> {
        // The group as the new process names it: the init is pid 1 inside the namespace.
        let group = if self.ns.is_some() { INIT_PID } else { self.pgid as libc::pid_t };
        let pid = self.start(command, group)?;
        if self.root == 0 {
            self.root = pid;
        }
        Ok(pid)
    }

    /// The output pipes and their forwarders; nothing started yet.
    fn prepare(spec: &LaunchSpec) -> Result<ProcessTree, LaunchError> {
        let pipe_error = |source| LaunchError::Spawn { program: "the output pipes".into(), source };
        let (out_r, out_w) = cloexec_pipe().map_err(pipe_error)?;
        let (err_r, err_w) = cloexec_pipe().map_err(pipe_error)?;
        let mut output_pipes = [fd_inode(out_w.as_raw_fd()).unwrap_or(0), fd_inode(err_w.as_raw_fd()).unwrap_or(0), 0];
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let tail = Some(Arc::clone(&stderr_tail));
        let (out_r, err_r) = (std::fs::File::from(out_r), std::fs::File::from(err_r));
        let (to_out, to_err) = if spec.discard_output { (Sink::Discard, Sink::Discard) } else { (Sink::Stdout, Sink::Stderr) };
        let mut pipes = vec![Pipe { from: out_r, to: to_out, tail: None }, Pipe { from: err_r, to: to_err, tail }];
        let mut output_writers = vec![out_w, err_w];
        if let Some(sink) = &spec.sdk_lines {
            let (sdk_r, sdk_w) = cloexec_pipe().map_err(pipe_error)?;
            output_pipes[2] = fd_inode(sdk_w.as_raw_fd()).unwrap_or(0);
            pipes.push(Pipe { from: std::fs::File::from(sdk_r), to: Sink::Lines(sink.clone()), tail: None });
            output_writers.push(sdk_w);
        }
        // Started where the root is (see `settle`).
        let forwarders = vec![forwarding::start(pipes, spec.born_on.or(spec.cpu)).map_err(pipe_error)?];
        // Until the reaper starts these stand in; `start_reaper` replaces them.
        let (_, exits) = std::sync::mpsc::channel();
        let (_, reaper_done) = std::sync::mpsc::channel();
        let make = || match &spec.namespaces {
            Some(pool) => pool.take(),
            None => PidNamespace::create(),
        };
        let (ns, ns_refused) = match spec.virtual_pids.then(make) {
            // Its init stays where it was made (off the executions' CPU in a search): it only reaps
            // orphans, and is woken to start its pids over between executions.
            Some(Ok(ns)) => (Some(ns), None),
            Some(Err(e)) => (None, Some(e.to_string())),
            None => (None, None),
        };
        let host_proc = spec.host_proc_fd.and_then(|_| crate::pidns::dara_proc().ok());
        // Best effort: without it a SIGKILL of dara may leave a computing process behind, as
        // before namespaces.
        let keeper = if ns.is_none() { crate::keeper::Keeper::start().ok() } else { None };
        Ok(ProcessTree { pgid: 0, root: 0, spec: spec.clone(), exits, reaper_done, reaping: Arc::default(), slow_reap_told: 0, finished: false, init_alone: std::cell::Cell::new(false), forwarders, output_writers, stderr_tail, output_pipes, ns, ns_refused, host_proc, agent: None, root_copied: false, holder: None, keeper })
    }

    fn start_reaper(&mut self, on_exit: impl Fn() + Send + 'static) {
        let reaper = reaper::start(self.pgid, self.spec.born_on.or(self.spec.cpu), on_exit);
        self.exits = reaper.exits;
        self.reaper_done = reaper.done;
        self.reaping = reaper.reaping;
    }

    /// Whether the kernel is still releasing a process of the tree that ended, slowly (for
    /// [`REAP_NOTICE`] or more, less than [`REAP_LIMIT`]): whoever waits for the tree's end waits
    /// longer then, rather than call the program hung or the process unkillable.
    pub fn kernel_still_reaping(&mut self) -> bool {
        self.slow_reap().is_some_and(|(_, for_)| for_ < REAP_LIMIT)
    }

    /// Whether the group has no process left but the one the kernel is still releasing (its
    /// reap under way for [`REAP_NOTICE`] or more): it is dead and unhashed, nothing can be
    /// killed, and the reaper thread finishes its release alone.
    fn only_a_release_left(&self) -> bool {
        if self.reaping.current().is_none_or(|(_, for_)| for_ < REAP_NOTICE) {
            return false;
        }
        // SAFETY: kill with signal 0 only checks whether the process group has a member.
        let rc = unsafe { libc::kill(-(self.pgid as i32), 0) };
        rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// The exit status of `pid` if the reaper is reaping it now (see [`reaper::Reaping`]).
    pub fn status_being_reaped(&self, pid: u32) -> Option<reaper::ExitStatus> {
        self.reaping.status_of(pid)
    }

    /// The process the kernel has been releasing for [`REAP_NOTICE`] or longer (the reaper's
    /// `wait4` is still in the kernel), and for how long. The first time a process is seen so,
    /// dara says so in one line: the wait that follows is the kernel's, not a hang of the program.
    fn slow_reap(&mut self) -> Option<(u32, Duration)> {
        let (pid, for_) = self.reaping.current().filter(|&(_, for_)| for_ >= REAP_NOTICE)?;
        if self.slow_reap_told != pid {
            self.slow_reap_told = pid;
            eprintln!(
                "dara: the kernel has been releasing process {pid} for {} s after it ended (wait4 -> release_task, invalidating its /proc entries; slow on a loaded machine){}; waiting for it",
                for_.as_secs(),
                self.reaping.thread().map(reaper_in_kernel).unwrap_or_default()
            );
        }
        Some((pid, for_))
    }

    /// Forks and execs `command` set up for dara: in process group `group` as the new process
    /// names it (a new one if 0), inside the namespace if there is one.
    fn start(&mut self, command: &[String], group: libc::pid_t) -> Result<u32, LaunchError> {
        let (program, args) = command.split_first().ok_or(LaunchError::Empty)?;
        let first_pid = self.spec.first_pid.filter(|_| self.root == 0);
        if let Some(pid) = first_pid {
            // Checked once the root posts its start (the scheduler's pid ledger).
            self.set_next_pid(pid);
        } else if let Some(pid) = self.fork_from_server(command, group) {
            return Ok(pid);
        }
        let spawn_error = |source| LaunchError::Spawn { program: program.clone(), source };
        let traced = self.ptrace_launch(program).map_err(spawn_error)?;
        let spec = &self.spec;
        let mut cmd = command_for(spec, program, args);
        if traced.is_some() {
            // The agent runs it, not the preload (a dynamically linked Go program would load it).
            cmd.env_remove("LD_PRELOAD");
        }
        let cpu = spec.born_on.filter(|_| self.root == 0).or(spec.cpu);
        let host_proc = spec.host_proc_fd.zip(self.host_proc.as_ref().map(|f| f.as_raw_fd()));
        let mounts = self.ns.as_ref().map(PidNamespace::mount_ns_fd);
        let mut installs = [(-1, -1); 3];
        for (slot, pair) in installs.iter_mut().zip(self.dara_descriptors()) {
            *slot = pair;
        }
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls (setpgid, personality, prctl, dup2, sched_setaffinity,
        // open, setns, fchdir); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(mnt_ns) = mounts {
                    pidns::enter_mounts(mnt_ns)?;
                }
                set_up_child(group, &installs)?;
                if let Some(cpu) = cpu {
                    crate::placement::pin(0, cpu);
                }
                if let Some((words, filter)) = &traced {
                    // Last: from here on the filter's calls stop for the agent.
                    let pid = host_proc.and_then(|(to, _)| crate::ptrace::seize::host_pid(to)).unwrap_or(libc::getpid() as u32);
                    crate::ptrace::seize::ask_for_launch(&*words.0, pid).map_err(|_| std::io::Error::other("dara's ptrace agent did not attach"))?;
                    crate::ptrace::filter::install(filter)?;
                    // The counter faults, and the agent answers it from the virtual clock.
                    libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV, 0, 0, 0);
                }
                Ok(())
            });
        }
        // The target writes into pipes that dara copies to its own stdout/stderr, whatever those
        // are: a program that checks isatty() or fstat() on its output (Python, most CLIs) then
        // behaves the same when recorded in CI and replayed at a terminal.
        // stdin is /dev/null for the same reason, or a pipe dara writes what it records into (a
        // recording's stdin, see the scheduler's `outside`), for the first command only.
        let writer = |i: usize| self.output_writers[i].try_clone().map(std::process::Stdio::from);
        let stdin = match spec.stdin_fd.filter(|_| self.root == 0) {
            // SAFETY: dup of a descriptor the caller owns; the duplicate becomes the child's stdin.
            Some(fd) => match unsafe { libc::dup(fd) } {
                -1 => return Err(spawn_error(std::io::Error::last_os_error())),
                // SAFETY: a descriptor dup just returned, owned by nobody else.
                dup => std::process::Stdio::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(dup) }),
            },
            None => std::process::Stdio::null(),
        };
        cmd.stdin(stdin).stdout(writer(0).map_err(spawn_error)?).stderr(writer(1).map_err(spawn_error)?);
        let child = match &self.ns {
            Some(ns) => ns.fork_inside(|| cmd.spawn()).and_then(|spawned| spawned),
            None => cmd.spawn(),
        }
        .map_err(spawn_error)?;
        // The reaper owns waiting; std's handle is dropped without waiting.
        Ok(child.id())
    }

    /// The root command as a copy of the spec's fork server, when it serves `command`; None:
    /// launch it plainly (also after the server failed, which dara says once).
    fn fork_from_server(&mut self, command: &[String], group: libc::pid_t) -> Option<u32> {
        let server = self.spec.fork_server.as_ref().filter(|s| group == 0 && self.root == 0 && s.serves(&self.spec, command))?;
        let null = match self.spec.stdin_fd {
            Some(_) => None,
            None => Some(std::fs::File::open("/dev/null").ok()?),
        };
        let stdin = self.spec.stdin_fd.or(null.as_ref().map(AsRawFd::as_raw_fd))?;
        let stdio = [(stdin, 0), (self.output_writers[0].as_raw_fd(), 1), (self.output_writers[1].as_raw_fd(), 2)];
        let installs: Vec<(i32, i32)> = stdio.into_iter().chain(self.dara_descriptors()).collect();
        let child = crate::fork_server::ForkChild { pid_ns: self.ns.as_ref().map(PidNamespace::pid_ns_fd), mount_ns: self.ns.as_ref().map(PidNamespace::mount_ns_fd), installs: &installs, cpu: self.spec.born_on.or(self.spec.cpu) };
        match server.fork(&child) {
            Ok(crate::fork_server::ServedCopy { pid, holder }) => {
                // dara is its parent: the group exists before the reaper waits on it, whichever of
                // the two setpgid calls comes first.
                // SAFETY: plain integers; `pid` is dara's unreaped child.
                unsafe { libc::setpgid(pid as i32, pid as i32) };
                self.root_copied = true;
                self.holder = holder;
                Some(pid)
            }
            Err(e) => {
                eprintln!("dara: the fork server stopped serving ({e}); every execution now starts the program with fork and exec (slower, same runs)");
                None
            }
        }
    }

    /// Starts the ptrace agent if the tree has none yet; why not, if it cannot.
    pub fn ensure_agent(&mut self) -> Result<(), String> {
        if self.agent.is_some() {
            return Ok(());
        }
        let Some(agent) = &self.spec.agent else {
            return Err("dara-agent, which runs statically linked programs, is not next to dara-trace: build the whole workspace (cargo build --release) or set DARA_AGENT".into());
        };
        let region_fd = self.spec.pass_fd.map_or(-1, |(fd, _)| fd);
        let started = crate::ptrace::AgentProcess::spawn(&agent.program, region_fd, self.spec.cpu).map_err(|e| format!("cannot start {}: {e}", agent.program.display()))?;
        self.agent = Some(started);
        Ok(())
    }

    /// For a program the preload cannot enter: the agent's words (starting the agent first if
    /// this tree has none yet) and the filter the child installs before its exec. None for a
    /// program the preload enters, or when the spec has no agent (such programs are refused
    /// before the launch).
    fn ptrace_launch(&mut self, program: &str) -> std::io::Result<Option<(AgentWordsRef, [dara_abi::agent::SockFilter; dara_abi::agent::FILTER_LEN])>> {
        let Some(agent) = &self.spec.agent else { return Ok(None) };
        if !crate::binary::program_needs_agent(program) {
            return Ok(None);
        }
        let words = agent.words;
        self.ensure_agent().map_err(std::io::Error::other)?;
        Ok(Some((words, crate::ptrace::filter::program())))
    }

    /// dara's descriptors every command gets, as (dara's, number in the child): the region, dara's
    /// /proc, the SDK pipe (those the spec and the tree have).
    fn dara_descriptors(&self) -> impl Iterator<Item = (i32, i32)> {
        let host_proc = self.spec.host_proc_fd.zip(self.host_proc.as_ref().map(|f| f.as_raw_fd())).map(|(to, from)| (from, to));
        let sdk = self.output_writers.get(2).map(|w| (w.as_raw_fd(), dara_abi::SDK_FD));
        self.spec.pass_fd.into_iter().chain(host_proc).chain(sdk)
    }

    /// Moves a root started elsewhere (`born_on`) to the tree's CPU, with the tree's reaper and
    /// output threads (they started there too: moved at once, they would have taken the CPU from
    /// the execution running on it). Call while the root is parked at its start barrier,
    /// single-threaded (it is dara's unreaped child: its pid names it).
    pub fn settle(&mut self) {
        if let (Some(cpu), Some(_)) = (self.spec.cpu, self.spec.born_on.take()) {
            crate::placement::pin(self.root as libc::pid_t, cpu);
            if let Some(reaper) = self.reaping.thread() {
                crate::placement::pin(reaper as libc::pid_t, cpu);
            }
            for forwarder in &self.forwarders {
                forwarder.move_to(cpu);
            }
        }
    }

    /// Whether the first command is a copy of the spec's fork server (not a fork + exec).
    pub fn root_copied(&self) -> bool {
        self.root_copied
    }

    /// Kernel pid of the first launched command (0 before one is).
    pub fn root_pid(&self) -> u32 {
        self.root
    }

    /// Whether the tree runs in a PID namespace of its own: the pids the program sees are the
    /// same in every execution of a schedule.
    pub fn pids_virtual(&self) -> bool {
        self.ns.is_some()
    }

    /// Makes `pid` the pid of the next process or thread born in the tree's namespace, if it is
    /// free there; false without a namespace or if its init could not set it. Call only while no
    /// other process or thread of the tree can be born (the run token is dara's).
    pub fn set_next_pid(&mut self, pid: u32) -> bool {
        self.ns.as_mut().is_some_and(|ns| ns.set_next_pid(pid))
    }

    /// Tells the keeper (a tree without a namespace has one) that logical process `process` is
    /// reached through `pidfd`, which the caller keeps open while the process may live: if dara
    /// dies, the keeper kills it.
    pub fn keep(&self, process: usize, pidfd: i32) {
        if let Some(keeper) = &self.keeper {
            keeper.keep(process, pidfd);
        }
    }

    /// Why the tree has no PID namespace although one was asked for.
    pub fn namespace_refused(&self) -> Option<&str> {
        self.ns_refused.as_deref()
    }

    /// A copy of the SDK pipe's write end (None without one), for the scheduler's marks
    /// (`dara_model::liveness`). Its holder closes it before [`ProcessTree::kill_all`], or the
    /// reader never sees the end of the pipe.
    pub fn sdk_writer(&self) -> Option<std::fs::File> {
        let fd = self.output_writers.get(2)?.try_clone().ok()?;
        Some(std::fs::File::from(fd))
    }

    /// Inodes of the pipes the target's stdout, stderr and SDK lines write into (0 where there is
    /// none).
    pub fn output_pipe_inodes(&self) -> [u64; dara_abi::OUTPUT_PIPES] {
        self.output_pipes
    }

    /// Waits until the forwarders have read everything the target wrote to its output pipes, at
    /// most `limit`; whether they have ([`crate::output_drain`]).
    pub fn wait_output_drained(&self, limit: Duration) -> bool {
        let pipes: Vec<_> = self.output_writers.iter().map(|w| w.as_fd()).collect();
        crate::output_drain::wait_empty(&pipes, limit)
    }

    /// The end of what the target wrote to stderr so far; complete once [`kill_all`](Self::kill_all)
    /// has returned true.
    pub fn stderr_tail(&self) -> Vec<u8> {
        self.stderr_tail.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Next exit event, if one is queued.
    pub fn try_exit(&self) -> Option<ExitEvent> {
        self.exits.try_recv().ok()
    }

    /// Whether every process of the tree has been reaped (in a namespace: dara's children, and
    /// the orphans its init adopted).
    pub fn all_gone(&self) -> bool {
        if self.finished {
            return true;
        }
        let gone = matches!(self.reaper_done.try_recv(), Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected)) && !self.ns.as_ref().is_some_and(PidNamespace::has_orphans);
        self.init_alone.set(gone && self.ns.is_some());
        gone
    }

    /// SIGKILLs the process group and waits (bounded by `TEARDOWN_LIMIT`, 30 s) until all of it is
    /// reaped. Returns false if something survived that long (a process stuck in the kernel). A descendant that left the
    /// group (setsid) is not reached here: dara refuses process creation for now, and multi-process
    /// support must kill by the scheduler's own process table.
    pub fn kill_all(&mut self) -> bool {
        if self.finished {
            return true;
        }
        // Nothing was started (spawning failed: `kill(-0)` would signal dara's own group), or
        // `all_gone` saw nothing of the program left but the namespace's init, which runs none of
        // its code: it is killed when the tree is dropped (in a search, on a thread of its own,
        // off the executions' CPU).
        if self.pgid == 0 || self.init_alone.get() {
            self.finish();
            return true;
        }
        let started = Instant::now();
        let deadline = started + TEARDOWN_LIMIT;
        let mut group_gone = false;
        let mut let_run = false;
        loop {
            // A killed process still has to run to end: one that has not ended in TEARDOWN_RESCUE_AFTER
            // (and the namespace's init, which ends last) may run on any CPU (`placement`).
            if !let_run && started.elapsed() >= TEARDOWN_RESCUE_AFTER {
                let_run = true;
                self.let_the_rest_run_anywhere();
            }
            if !group_gone {
                // SAFETY: kill with a negative pid signals a process group; no memory is involved.
                unsafe { libc::kill(-(self.pgid as i32), libc::SIGKILL) };
            }
            // The init's death kills whatever is left in the namespace, setsid'd processes too.
            if let Some(ns) = self.ns.as_mut() {
                ns.kill();
            }
            if !group_gone {
                group_gone = matches!(self.reaper_done.recv_timeout(Duration::from_millis(20)), Ok(()) | Err(RecvTimeoutError::Disconnected)) || self.only_a_release_left();
            }
            // The init exits once the namespace is empty, dara's reaped children included.
            let ns_gone = self.ns.as_mut().is_none_or(PidNamespace::try_reap);
            if group_gone && ns_gone {
                self.finish();
                return true;
            }
            // Past the limit only while the kernel is still releasing a process that ended, or
            // taking down the namespace's killed init (see `init_exiting`).
            if Instant::now() > deadline && !self.kernel_still_reaping() && !(group_gone && self.init_exiting(deadline)) {
                return false;
            }
            if group_gone {
                // Only the init is left to end: its pidfd says when (a 1 ms bound keeps the
                // reaper-slowness checks above going).
                match self.ns.as_ref() {
                    Some(ns) => {
                        ns.wait_ended(Duration::from_millis(1));
                    }
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
    }

    /// Lets what is left of the tree (the processes of its group, and the namespace's init) run on
    /// any CPU: they are killed and only have to end.
    fn let_the_rest_run_anywhere(&self) {
        for (pid, _) in self.remains() {
            crate::placement::let_run_anywhere(pid);
        }
    }

    /// The processes of the group and the namespace's init that still exist, each with its
    /// `/proc/<pid>/stat` line.
    fn remains(&self) -> Vec<(u32, String)> {
        let init = self.ns.as_ref().map(PidNamespace::init_pid);
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            let pgrp = stat.rfind(')').and_then(|close| stat[close + 1..].split_whitespace().nth(2)?.parse::<u32>().ok());
            if pgrp == Some(self.pgid) || Some(pid) == init {
                found.push((pid, stat));
            }
        }
        found
    }

    /// Whether the namespace's init, killed, is still being taken down by the kernel (its
    /// `PF_EXITING` set, not a zombie yet) and less than [`REAP_LIMIT`] has passed since
    /// `deadline`: in `zap_pid_ns_processes` it waits for every process of the namespace to be
    /// released, and on a loaded CPU it was seen runnable for over 30 s with a tenth of a
    /// millisecond of CPU time (the teardown then gave up and called it stuck). The first time,
    /// dara says so in one line.
    fn init_exiting(&mut self, deadline: Instant) -> bool {
        let Some(init) = self.ns.as_ref().map(PidNamespace::init_pid) else { return false };
        if deadline.elapsed() >= REAP_LIMIT || !crate::procfs::exiting(init) {
            return false;
        }
        if self.slow_reap_told != init {
            self.slow_reap_told = init;
            eprintln!("dara: the kernel has been taking down the namespace's init (process {init}) for over {} s; waiting for it", TEARDOWN_LIMIT.as_secs());
        }
        true
    }

    /// Marks the tree finished once nothing of the program is left.
    fn finish(&mut self) {
        self.finished = true;
        self.output_writers.clear();
        // A finished tree launches nothing more: let go of the search's shared launchers (their
        // last owner waits for what they made, which may be queued behind this tree on the
        // thread that drops ended executions).
        self.spec.fork_server = None;
        self.spec.namespaces = None;
        // Every writer is dead, so the pipes are at end of file: drain them fully before the
        // caller prints its verdict.
        for f in &self.forwarders {
            f.wait_drained();
        }
    }
}

/// Where dara's reaper thread `tid` sits in the kernel, for the slow-reap notice: its state and
/// its kernel stack (root can read it), innermost first.
fn reaper_in_kernel(tid: u32) -> String {
    let read = |file: &str| std::fs::read_to_string(format!("/proc/self/task/{tid}/{file}")).unwrap_or_default();
    let state = crate::procfs::thread_state(std::process::id(), tid).unwrap_or('?');
    let stack = read("stack");
    let frames: Vec<&str> = stack.lines().filter_map(|l| l.split_whitespace().nth(1)).map(|f| f.split('+').next().unwrap_or(f)).take(8).collect();
    let stack = if frames.is_empty() { String::new() } else { format!(", kernel stack {}", frames.join(" < ")) };
    format!(" (dara's reaper thread {tid}: state {state}{stack})")
}

impl ProcessTree {
    /// What is left after a teardown that gave up: each process of the group, and the
    /// namespace's init, with its state and the kernel function it sleeps in (`wchan`), for a
    /// person reading the error. Empty when nothing is left to see.
    pub fn survivors(&self) -> String {
        let mut found = Vec::new();
        for (pid, stat) in self.remains() {
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
            let state = stat[close + 1..].split_whitespace().next().unwrap_or("?");
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            let place = if wchan.is_empty() || wchan == "0" { String::new() } else { format!(" in {wchan}") };
            found.push(format!("pid {pid} ({}) state {state}{place}", &stat[open + 1..close]));
        }
        found.join(", ")
    }
}

/// A command for `program` with the spec's arguments, working directory and complete environment
/// (nothing of dara's own).
pub(crate) fn command_for(spec: &LaunchSpec, program: &str, args: &[String]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    cmd.env_clear();
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    cmd
}

/// What every command dara starts gets between fork and exec: process group `group` as the new
/// process names it (a new one if 0), ASLR off, death with dara, the descriptors `installs` as
/// (dara's, number in the child; -1 pairs skipped) and the time-stamp counter on.
///
/// # Safety
/// Call only in a forked child before exec: async-signal-safe system calls only, no allocation.
pub(crate) unsafe fn set_up_child(group: libc::pid_t, installs: &[(i32, i32)]) -> std::io::Result<()> {
    // SAFETY: plain integers, in the child (see the contract).
    unsafe {
        if libc::setpgid(0, group) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let persona = libc::personality(0xffff_ffff);
        if persona == -1 || libc::personality((persona | libc::ADDR_NO_RANDOMIZE) as libc::c_ulong) == -1 {
            return Err(std::io::Error::last_os_error());
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        for &(from, to) in installs.iter().filter(|&&(from, _)| from >= 0) {
            // dup2 gives the new descriptor no close-on-exec flag: it survives the exec.
            if libc::dup2(from, to) != to {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    enable_counter_in_child();
    Ok(())
}

/// A pipe whose ends are closed on exec (a launched command gets its own copy of the write end).
fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Re-enables the time-stamp counter between fork and exec. The scheduler thread runs with it
/// disabled (the scheduler's `own_traps.rs`), which a fork inherits and an exec keeps, and the new
/// program's dynamic loader reads the counter before anything could catch the fault.
/// Async-signal-safe.
pub fn enable_counter_in_child() {
    // SAFETY: PR_SET_TSC takes a plain integer.
    unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_ENABLE, 0, 0, 0) };
}

/// Forks the process that leads a cluster run's process group: it only waits, untraced, until
/// teardown kills the group (or dara dies).
fn placeholder() -> std::io::Result<u32> {
    // SAFETY: the child makes only async-signal-safe calls (setpgid, prctl, pause, _exit) and
    // never returns into Rust code, so forking a multithreaded process is sound here.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => unsafe {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            loop {
                libc::pause();
            }
        },
        pid => {
            // Also from the parent, so the group exists before anything is launched into it.
            // SAFETY: plain integers.
            unsafe { libc::setpgid(pid, pid) };
            Ok(pid as u32)
        }
    }
}

/// The inode behind a descriptor.
fn fd_inode(fd: i32) -> Option<u64> {
    // SAFETY: an all-zero stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the live local.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        // Nothing of the execution is left in its namespace: a later one may use it.
        if self.finished && self.init_alone.get() {
            if let Some(ns) = self.ns.take() {
                ns.give_back();
            }
        }
        if !self.kill_all() {
            // Something survived the teardown (reported by whoever called `kill_all`): the
            // output threads may never see their pipes end, so they are left to finish on their
            // own rather than waited for here (dara waited for good, its writers not yet closed).
            self.output_writers.clear();
            for forwarder in self.forwarders.drain(..) {
                forwarder.leave();
            }
        }
        // The copy is gone: its holder ends (taking the copy's memory down) and is reaped.
        self.holder.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &[&str]) -> LaunchSpec {
        LaunchSpec { command: command.iter().map(|s| s.to_string()).collect(), cwd: None, env: vec![], pass_fd: None, cpu: None, born_on: None, discard_output: true, stdin_fd: None, host_proc_fd: None, virtual_pids: false, first_pid: None, agent: None, sdk_lines: None, fork_server: None, namespaces: None }
    }

    #[test]
    fn a_command_that_cannot_start_is_an_error_and_kills_nothing() {
        // Before the fix, the half-built tree's teardown sent SIGKILL to process group 0: the
        // test runner's own. Surviving this test is the assertion that matters.
        let err = ProcessTree::spawn(&spec(&["/no/such/program"]), || {}).err().expect("spawning a missing program fails");
        assert!(err.to_string().contains("/no/such/program"), "{err}");
    }

    #[test]
    fn a_group_outlives_its_members_and_takes_new_ones() {
        let mut tree = ProcessTree::spawn_group(&spec(&[]), || {}).unwrap();
        let first = tree.launch(&["/bin/true".to_string()]).unwrap();
        assert_eq!(tree.root_pid(), first);
        let deadline = Instant::now() + Duration::from_secs(5);
        while tree.try_exit().is_none_or(|e| e.pid != first) {
            assert!(Instant::now() < deadline, "the first member's exit was not reported");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!tree.all_gone(), "the placeholder keeps the group alive");
        let second = tree.launch(&["/bin/true".to_string()]).unwrap();
        assert_ne!(second, first);
        assert!(tree.kill_all(), "teardown reaps the group");
        assert!(tree.all_gone());
    }

    #[test]
    fn in_a_namespace_the_command_is_pid_2_and_teardown_ends_the_namespace() {
        let file = std::env::temp_dir().join(format!("dara-pidns-{}", std::process::id()));
        let script = format!("echo $$ > {}; exec sleep 1000", file.display());
        let mut spec = spec(&["/bin/sh", "-c", &script]);
        spec.virtual_pids = true;
        let mut tree = ProcessTree::spawn(&spec, || {}).unwrap();
        assert!(tree.pids_virtual(), "dara's tests run as root: {:?}", tree.namespace_refused());
        let init = tree.ns.as_ref().map(PidNamespace::init_pid).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&file).map_or(true, |s| s.trim().is_empty()) {
            assert!(Instant::now() < deadline, "the command never wrote its pid");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "2");
        let _ = std::fs::remove_file(&file);
        assert!(tree.kill_all(), "teardown reaps the tree and the init");
        assert!(!std::path::Path::new(&format!("/proc/{init}")).exists(), "the init is gone");
    }
}
