//! Options shared by the CLIs, and the process-wide set-up: finding libdara_preload.so,
//! becoming subreaper, turning SIGINT/SIGTERM into a clean stop.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use dara_scheduler::execution::ExecutionConfig;
use dara_scheduler::memory_totals::MemoryTotals;
use dara_scheduler::outside::SignalInbox;

/// Set by SIGINT/SIGTERM; the scheduler polls it and ends the execution cleanly.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// Where the stop handler leaves signals a recording passes on to the program (see
/// [`signal_inbox`]); set once, before any recording starts.
static INBOX: std::sync::OnceLock<SignalInbox> = std::sync::OnceLock::new();

/// The handle a recording (`OutsideMode::Live`) takes the user's SIGINT/SIGTERM through.
pub fn signal_inbox() -> SignalInbox {
    INBOX.get_or_init(SignalInbox::default).clone()
}

/// During a recording the first SIGINT or SIGTERM is passed on to the program (it is an input,
/// as from the terminal); otherwise, and the second time, dara stops.
extern "C" fn on_stop_signal(sig: libc::c_int) {
    // (`OnceLock::get` is one atomic load; the inbox is atomics only.)
    if !INBOX.get().is_some_and(|inbox| inbox.take(sig)) {
        STOP.store(true, Ordering::SeqCst);
    }
}

/// Installs the stop handlers and makes dara the subreaper of everything it launches.
pub fn init_process() -> anyhow::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only touches atomics, which is async-signal-safe.
        unsafe { libc::signal(sig, on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
    end_quietly_on_closed_pipe();
    dara_tracer::launch::become_subreaper().context("cannot become child subreaper")?;
    Ok(())
}

/// Like other Unix tools, end quietly when the reader of our output goes away (`| head`) instead
/// of panicking in `println!`. A target dies with us (PR_SET_PDEATHSIG) and the region is a
/// memfd, so nothing is left behind.
pub fn end_quietly_on_closed_pipe() {
    // SAFETY: restoring the default disposition of a signal.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Machine-level settings of an execution (not recorded in traces).
#[derive(Args, Clone, Debug)]
pub struct MachineOptions {
    /// CPU to pin each execution to (default: the CPU dara starts on).
    #[arg(long)]
    pub pin_cpu: Option<usize>,
    /// A thread holding the run token and asleep in the kernel this long (ms) without running
    /// once ends the run as "uncontrolled blocking" (disk waits get 20 times longer).
    #[arg(long, default_value_t = 500)]
    pub watchdog_ms: u64,
    /// A thread that uses this much CPU time (s, its own: time spent waiting for a CPU does not
    /// count) without reaching a scheduling point ends the run as a hang.
    #[arg(long, default_value_t = 60)]
    pub busy_limit: u64,
    /// Processes one execution may start (every fork, spawn or `system` counts, an exec does
    /// not); one more stops the run as uncontrolled.
    #[arg(long, default_value_t = DEFAULT_MAX_PROCESSES, value_parser = clap::value_parser!(u64).range(1..=dara_abi::MAX_PROCESSES as u64))]
    pub max_processes: u64,
}

/// Default of `--max-processes`: a test script that starts a few hundred short commands fits.
pub const DEFAULT_MAX_PROCESSES: u64 = 256;

/// libdara_preload.so: $DARA_PRELOAD, else the newest copy next to the running executable or in
/// cargo's `deps/` beside it (where `cargo test -p dara-tools` leaves the only current one).
pub fn find_preload() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("DARA_PRELOAD") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("DARA_PRELOAD={} does not exist", p.display());
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().context("cannot locate the dara executable")?;
    let dir = exe.parent().context("dara executable has no directory")?;
    let newest = [dir.join("libdara_preload.so"), dir.join("deps/libdara_preload.so"), dir.join("../libdara_preload.so")]
        .into_iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max_by_key(|(modified, _)| *modified);
    if let Some((_, path)) = newest {
        return Ok(path.canonicalize().unwrap_or(path));
    }
    bail!("cannot find libdara_preload.so next to {}; build the whole workspace (cargo build --release) or set DARA_PRELOAD", exe.display())
}

/// dara-agent (the ptrace agent for static and Go programs): $DARA_AGENT, else next to the
/// running executable or one directory up (cargo puts test binaries in `deps/`). None when
/// there is none: such programs are then refused with a message saying how to get it.
pub fn find_agent() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DARA_AGENT") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("dara-agent"), dir.join("../dara-agent")].into_iter().find(|p| p.is_file()).map(|p| p.canonicalize().unwrap_or(p))
}

/// The host's memory and swap totals now: the snapshot every execution of this run shows
/// through `sysinfo` (the default, 4 GiB and no swap, if the kernel will not say).
fn host_memory() -> MemoryTotals {
    // SAFETY: all-zero is a valid struct sysinfo.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: sysinfo fills the struct it is given.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return MemoryTotals::default();
    }
    MemoryTotals { total_ram: info.totalram, total_swap: info.totalswap, mem_unit: info.mem_unit.max(1) }
}

fn current_cpu() -> usize {
    // SAFETY: sched_getcpu takes no arguments.
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as usize
}

/// Runtimes that spin before they sleep, told to sleep at once unless the user chose otherwise.
/// Under dara only one thread runs, so a thread spinning for a partner (GCC's libgomp spins
/// `GOMP_SPINCOUNT`, 300,000 rounds, at every barrier; LLVM's libomp `KMP_BLOCKTIME`) spins
/// for nothing every time: a program of 100 OpenMP regions took 9 s instead of 11 ms. Spinning
/// is invisible to the program's results; the variable is in the trace like the rest of the
/// environment, so replays see it too (docs/limits.md, "Spin-waiting runtimes").
const SPIN_WAITS_OFF: [(&str, &str); 1] = [("OMP_WAIT_POLICY", "PASSIVE")];

fn with_spin_waits_off(mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    for (name, value) in SPIN_WAITS_OFF {
        if !env.iter().any(|(k, _)| k == name) {
            env.push((name.to_string(), value.to_string()));
        }
    }
    env
}

/// An execution template from the machine options; the caller fills in command and bounds.
pub fn base_config(machine: &MachineOptions, command: Vec<String>) -> anyhow::Result<ExecutionConfig> {
    Ok(ExecutionConfig {
        command,
        cwd: std::env::current_dir().ok(),
        // Variables that are not UTF-8 cannot be recorded in the trace; they are left out of the
        // run too, so the recording and its replay see the same environment.
        env: with_spin_waits_off(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()),
        preload: find_preload()?,
        agent: find_agent(),
        cpus: 4,
        memory: host_memory(),
        library_cache: dara_model::library_cache::LibraryCache::now(),
        pin_cpu: Some(machine.pin_cpu.unwrap_or_else(current_cpu)),
        random_seed: 0,
        max_steps: 500_000,
        max_vtime_ns: 3_600 * 1_000_000_000,
        watchdog: Duration::from_millis(machine.watchdog_ms),
        busy_limit: Duration::from_secs(machine.busy_limit),
        max_processes: machine.max_processes as usize,
        symbolize: false,
        discard_output: false,
        preempt: Default::default(),
        cluster: None,
        setup: None,
        cleanup: None,
        profile: false,
        outside: Default::default(),
        time: Default::default(),
        stop_at_step: None,
        pause_before: None,
        liveness: None,
        fork_server: None,
        namespaces: None,
        leftovers: None,
        pids: Default::default(),
    })
}

/// Before a trace is re-run: the variables it left out (`--env-exclude`) must be set here, and a
/// value of another length than the recording's is worth a warning (the stack moves).
pub fn check_left_out_env(header: &dara_model::trace::TraceHeader, tool: &str) -> anyhow::Result<()> {
    let lookup = |name: &str| std::env::var(name).ok();
    let warnings = dara_model::trace::private_env::check(&header.env_left_out, lookup).map_err(anyhow::Error::msg)?;
    for warning in warnings {
        eprintln!("{tool}: warning: {warning}");
    }
    Ok(())
}
