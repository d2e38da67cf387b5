//! Launching and supervising the target process tree.
//!
//! * [`binary`]: what the command is (dynamic ELF, static ELF, script) and refusing what dara
//!   cannot control yet.
//! * [`image`]: reading an ELF file whole, only when it is a regular file of sane size.
//! * [`file_memo`]: answers that read a whole file (static? Go? instrumented?), kept per file
//!   version so a search reads each program once.
//! * [`fork_server`]: the search's program started once and parked before `main`, copied per
//!   execution instead of exec'd.
//! * [`forwarding`]: the thread copying an execution's output pipes (stdout, stderr, SDK lines).
//! * [`launch`]: starting the command with the preload injected, ASLR off, in its own process
//!   group, pinned to one CPU, dying with dara.
//! * `keeper`: the process that kills a tree without a namespace (a recording's) if dara dies.
//! * [`namespace_pool`]: the next execution's namespace made ahead, while one runs.
//! * [`output_drain`]: waiting until dara's output pipes are empty, so the program always finds
//!   them writable.
//! * `own_stack`: a process cloned into dara's memory on a stack of its own (the init, the keeper).
//! * [`placement`]: pinning a thread or process to a CPU.
//! * [`pidns`]: a PID namespace (and a private /proc) per execution, so pids repeat across runs
//!   (and a replay's births get a recording's pids).
//! * [`procfs`]: what /proc and pidfds say about a live target (thread states and blocked
//!   syscalls for the watchdog, process ends, signal dispositions, sockets), and signalling or
//!   killing one process or thread.
//! * [`reaper`]: a thread that reaps every descendant (dara is their subreaper) and reports exits.
//!
//! The scheduler talks to this crate through [`ProcessTree`] (spawn, receive exits, kill all) and
//! asks [`procfs`] about single processes and threads.
pub mod atomic_plan;
pub mod binary;
pub mod debug_file;
pub mod file_memo;
pub mod fork_server;
pub mod forwarding;
pub mod helper_threads;
pub mod image;
mod keeper;
pub mod launch;
pub mod namespace_pool;
pub mod out_of_line;
mod own_stack;
pub mod output_drain;
pub mod pidns;
pub mod placement;
pub mod procfs;
pub mod ptrace;
pub mod reaper;

pub use launch::{AgentLaunch, AgentWordsRef, LaunchError, LaunchSpec, LineSink, ProcessTree};
pub use fork_server::ForkServer;
pub use namespace_pool::NamespacePool;
pub use reaper::ExitEvent;
