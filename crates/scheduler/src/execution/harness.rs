//! What runs around an execution but outside dara's control: the `--setup`/`--cleanup` commands,
//! the target's environment (dara's variables, the preload first in `LD_PRELOAD`), and pinning
//! the scheduler thread to the execution's CPU.
use super::{ExecutionConfig, ExecutionError};

/// Runs a setup or cleanup command with `sh -c`, outside dara, in the program's directory and
/// environment; a failure stops the search (the executions would not start from the same state).
pub(super) fn run_harness(which: &'static str, command: &str, cfg: &ExecutionConfig) -> Result<(), ExecutionError> {
    let mut cmd = outside_command("/bin/sh");
    cmd.arg("-c").arg(command).env_clear().envs(cfg.env.iter().map(|(k, v)| (k, v))).stdin(std::process::Stdio::null());
    if let Some(cwd) = &cfg.cwd {
        cmd.current_dir(cwd);
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

/// A command to start from the scheduler thread (a harness command, a debugger at a pause), outside
/// dara's control: its time-stamp counter is enabled again between fork and exec, as the
/// scheduler thread runs with it disabled (`crate::own_traps`) and a new program's loader reads it.
pub fn outside_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    // SAFETY: the closure makes one async-signal-safe system call.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            dara_tracer::launch::enable_counter_in_child();
            Ok(())
        });
    }
    cmd
}

/// The recorded environment plus dara's variables; the preload goes first in LD_PRELOAD.
pub(super) fn target_environment(cfg: &ExecutionConfig) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::with_capacity(cfg.env.len() + 3);
    let mut preload = cfg.preload.clone().into_os_string();
    for (k, v) in &cfg.env {
        match k.as_str() {
            "LD_PRELOAD" if !v.is_empty() => {
                preload.push(":");
                preload.push(v);
            }
            dara_abi::ENV_SHM_PATH | dara_abi::ENV_ACTIVE | dara_abi::ENV_SDK_FD | "LD_PRELOAD" => {}
            _ => env.push((k.into(), v.into())),
        }
    }
    env.push(("LD_PRELOAD".into(), preload));
    env.push((dara_abi::ENV_SHM_PATH.into(), dara_abi::SHM_PATH.into()));
    env.push((dara_abi::ENV_ACTIVE.into(), "1".into()));
    env.push((dara_abi::ENV_SDK_FD.into(), dara_abi::SDK_FD.to_string().into()));
    crate::sanitizer_options::apply(&mut env);
    env
}
