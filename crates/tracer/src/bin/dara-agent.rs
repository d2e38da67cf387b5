//! `dara-agent`: dara's ptrace agent for one execution (see `dara_tracer::ptrace::agent`).
//! Started by dara-trace and dara-replay, never by a person: its one argument is the descriptor
//! of the execution's shared region.
fn main() {
    let fd = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(dara_abi::SHM_FD);
    if let Err(e) = dara_tracer::ptrace::agent::run(fd) {
        eprintln!("dara-agent: {e}");
        std::process::exit(2);
    }
}
