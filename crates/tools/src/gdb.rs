//! `dara-replay --gdb STEP`: the replay stops before STEP with every thread parked, and the
//! process of the step's thread is handed to a gdbserver on a loopback port for a person (or a
//! script) to inspect with gdb; when gdb detaches, the replay goes on exactly as it would have.
//!
//! Only processes that run under the preload can be attached: one that runs through dara's ptrace
//! agent (static and Go programs) is traced already, and the kernel lets one tracer hold it.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use dara_scheduler::execution::{outside_command, PauseBefore, PausedStep};

/// What went wrong at the pause, for the tool to report once the replay has ended (the replay
/// itself goes on, so that no process is left behind).
pub type PauseProblem = Arc<Mutex<Option<String>>>;

/// Fails with a one-line error when gdbserver is missing.
pub fn check_gdbserver() -> anyhow::Result<()> {
    match Command::new("gdbserver").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(status) if status.success() => Ok(()),
        _ => anyhow::bail!("--gdb needs gdbserver on PATH (Debian: apt-get install gdbserver gdb; scripts/install-deps.sh installs both)"),
    }
}

/// The pause before `step`: serves the step's process to gdb, and records a problem in the
/// returned cell instead of serving when it cannot.
pub fn pause_before(step: u64) -> (PauseBefore, PauseProblem) {
    let problem: PauseProblem = Arc::default();
    let record = problem.clone();
    let hook = move |paused: &PausedStep| {
        if let Err(why) = serve(paused) {
            *record.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        }
    };
    (PauseBefore { step, hook: Arc::new(hook) }, problem)
}

/// Runs gdbserver attached to the paused step's process until gdb detaches.
fn serve(paused: &PausedStep) -> Result<(), String> {
    let step = paused.step;
    let Some((pid, tid)) = paused.kernel else {
        return Err(format!("step {step} is a fault dara injects, not a thread's step: give --gdb a step of a thread"));
    };
    if let Some(tracer) = tracer_of(pid).filter(|&t| t != 0) {
        return Err(format!("step {step}'s process (pid {pid}) runs through dara's ptrace agent (traced by pid {tracer}: a static or Go program), and a process takes one tracer: --gdb works on programs run through the preload"));
    }
    let program = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_else(|_| "PROGRAM".into());
    // Started from the scheduler thread, whose time-stamp counter is off: outside_command turns
    // it on again for gdbserver.
    let mut server = outside_command("gdbserver")
        .args(["--once", "--attach", "127.0.0.1:0", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start gdbserver: {e}"))?;
    let mut said = BufReader::new(server.stderr.take().expect("piped"));
    let mut heard = String::new();
    let port = loop {
        let mut line = String::new();
        match said.read_line(&mut line) {
            Ok(0) | Err(_) => {
                let status = server.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(format!("gdbserver could not attach to pid {pid} ({status}): {}", heard.trim()));
            }
            Ok(_) => {}
        }
        if let Some(port) = line.trim().strip_prefix("Listening on port ") {
            break port.to_string();
        }
        heard.push_str(&line);
    };
    println!(
        "paused before step {step} (t{} {}, inside that call, waiting for dara's grant): gdbserver on 127.0.0.1:{port}, attached to pid {pid}; the step's thread is LWP {tid}",
        paused.thread,
        paused.op.name()
    );
    println!("connect: gdb -ex 'target remote 127.0.0.1:{port}' {program}   (the replay goes on when gdb detaches)");
    // The rest of what gdbserver says (its detach) is drained so that it never blocks on the pipe.
    std::io::copy(&mut said, &mut std::io::sink()).ok();
    let status = server.wait().map_err(|e| format!("waiting for gdbserver: {e}"))?;
    println!("gdb detached ({status}); the replay goes on");
    Ok(())
}

/// The pid tracing `pid` (0 when none), from /proc.
fn tracer_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse().ok())
}
