//! The ptrace path: how dara controls processes its preload cannot enter (statically linked
//! programs, Go programs).
//!
//! * [`filter`]: the seccomp filter that stops such a process on the system calls that matter;
//! * [`seize`]: how a process asks the agent to trace it before it installs that filter;
//! * [`agent`]: `dara-agent`, the process that traces them and posts their requests on their
//!   slots, as the preload does for a process it runs;
//! * [`remote`], [`auxv`]: a stopped tracee's registers, memory and auxiliary vector;
//! * [`AgentProcess`]: starting the agent for an execution and ending it.
//!
//! docs/ptrace.md tells the whole story: what is stopped, what each call becomes, the costs, and
//! what this path cannot see (in Go and static C, uncontended locks never enter the kernel).
pub mod agent;
pub mod atomics;
pub mod auxv;
pub mod displaced;
pub mod filter;
pub mod gopclntab;
pub mod inject;
pub mod remote;
pub mod probes;
pub mod seize;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The agent of one execution. Dropping it kills it (its tracees die with it: `EXITKILL`).
pub struct AgentProcess {
    child: Child,
}

impl AgentProcess {
    /// Starts `program` (the `dara-agent` binary) on the region behind descriptor `region_fd`,
    /// pinned to `cpu` like the rest of the execution.
    ///
    /// The agent ignores the terminal's signals: a Ctrl-C reaches dara-trace's whole process
    /// group, and `timeout` signals its group too. dara-trace passes the first one on to the
    /// program; an agent killed by it would take its tracees with it (`EXITKILL`), and the
    /// recording would end as "killed from outside". It still dies with dara (`PDEATHSIG`) and
    /// when dropped (SIGKILL).
    pub fn spawn(program: &Path, region_fd: i32, cpu: Option<usize>) -> std::io::Result<AgentProcess> {
        let mut cmd = Command::new(program);
        cmd.arg(dara_abi::SHM_FD.to_string()).stdin(Stdio::null());
        // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
        // (dup2, prctl, signal, sched_setaffinity, and the counter re-enabling).
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(region_fd, dara_abi::SHM_FD) != dara_abi::SHM_FD {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_IGN);
                }
                crate::launch::enable_counter_in_child();
                if let Some(cpu) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                Ok(())
            });
        }
        Ok(AgentProcess { child: cmd.spawn()? })
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
