//! The readable interleaving: one line per decision, which thread did what to which object, the
//! result and the virtual time.
use std::collections::BTreeMap;
use std::fmt::Write;

use dara_scheduler::choice::{ProcessId, ThreadId, FAULT_THREAD};
use dara_scheduler::cluster::Nodes;
use dara_scheduler::trace::Step;
use dara_scheduler::ChoiceKind;

/// What the listing knows besides the steps: object names, the process of each thread, the
/// program each process start began.
pub struct Names<'a> {
    pub symbols: &'a BTreeMap<u64, String>,
    pub threads: &'a BTreeMap<ThreadId, ProcessId>,
    pub programs: &'a BTreeMap<ThreadId, String>,
    /// A cluster run's node of each node process, and its spec (fault descriptions).
    pub nodes: &'a BTreeMap<ProcessId, String>,
    pub cluster: Option<&'a dara_scheduler::cluster::ClusterSpec>,
    /// Inputs from outside peers and the program's outputs to them, shown before the step they
    /// preceded.
    pub outside: &'a [dara_scheduler::outside::OutsideEvent],
}

/// Formats `steps` as a listing. Steps whose `preempted` entry is true are marked `>>` (another
/// thread could have gone on instead). With several processes, threads are shown as
/// `p<process>/t<thread>`, prefixed with the node's name in a cluster run (`kv1:p2/t4`); faults
/// dara injected are shown as thread `dara`.
pub fn interleaving(steps: &[Step], names: &Names<'_>, preempted: &[bool]) -> String {
    let mut out = String::new();
    let several = names.threads.values().collect::<std::collections::BTreeSet<_>>().len() > 1;
    let who = |t: ThreadId| match names.threads.get(&t) {
        _ if t == FAULT_THREAD => "dara".to_string(),
        Some(p) if several => match names.nodes.get(p) {
            Some(node) => format!("{node}:p{p}/t{t}"),
            None => format!("p{p}/t{t}"),
        },
        _ => format!("t{t}"),
    };
    let _ = writeln!(out, "   {:>6}  {:>8}  {:<12} {:<16} {:<34} result", "step", "vtime", "thread", "operation", "object");
    let mut outside = names.outside.iter().peekable();
    for (i, step) in steps.iter().enumerate() {
        while let Some(e) = outside.next_if(|e| e.step <= i as u64) {
            let _ = writeln!(out, "   {:>6}  {:>8}  {:<12} {}", "", "", "outside", outside_line(e));
        }
        let c = &step.choice;
        let op = match c.kind {
            ChoiceKind::Run => c.op.name().to_string(),
            ChoiceKind::Timeout => format!("{} (timeout)", c.op.name()),
            ChoiceKind::Interrupt => format!("{} (signal)", c.op.name()),
            ChoiceKind::Fault => format!("FAULT {}", c.op.name()),
        };
        let object = match names.programs.get(&c.thread) {
            _ if c.kind == ChoiceKind::Fault => Nodes::describe(names.cluster, c),
            Some(program) if c.op == dara_abi::Op::ProcessStart => program.clone(),
            _ => describe_object(c.obj, c.op, names.symbols),
        };
        let result = match step.result {
            Some(r) => format!("-> {r}"),
            None => "blocks".to_string(),
        };
        let alt = if c.alt != 0 { format!(" [alt {}]", c.alt) } else { String::new() };
        let mark = if preempted.get(i).copied().unwrap_or(false) { ">> " } else { "   " };
        let _ = writeln!(out, "{mark}{:>6}  {:>8}  {:<12} {:<16} {:<34} {result}{alt}", i, format_vtime(step.now_ns), who(c.thread), op, object);
    }
    for e in outside {
        let _ = writeln!(out, "   {:>6}  {:>8}  {:<12} {}", "", "", "outside", outside_line(e));
    }
    let n = preempted.iter().filter(|p| **p).count();
    if n > 0 {
        let _ = writeln!(out, "{n} preemption(s), marked >>: there another thread could have continued, and the schedule switched instead.");
    }
    out
}

/// One outside event for the listing: what crossed the boundary, with its first bytes.
fn outside_line(e: &dara_scheduler::outside::OutsideEvent) -> String {
    use dara_scheduler::outside::OutsideWhat::*;
    let bytes = |b: &[u8]| format!("{} bytes {}", b.len(), dara_scheduler::outside::quoted(b, 48));
    match &e.what {
        Connect { listener, peer: Some(peer) } => format!("c{} connects to listening socket {listener} from {peer}", e.stream),
        Connect { listener, peer: None } => format!("c{} connects to listening socket {listener}", e.stream),
        Data(b) => format!("c{} sends {}", e.stream, bytes(b)),
        Close => format!("c{} closes", e.stream),
        Reset => format!("c{} resets the connection", e.stream),
        Output(b) => format!("c{} receives {}", e.stream, bytes(b)),
        OutputClosed => format!("c{} sees the program close", e.stream),
        Signal(s) if e.stream == 0 => format!("signal {} to every process", dara_scheduler::execution::signal_name(*s)),
        Signal(s) => format!("signal {} from outside to thread {} (with its next grant)", dara_scheduler::execution::signal_name(*s), e.stream - 1),
        Stdin(b) => format!("stdin {}", bytes(b)),
        StdinClosed => "stdin ends".to_string(),
        Peer { socket, peer: Some(peer) } => format!("d{} sends to UDP socket {socket} from {peer}", e.stream),
        Peer { socket, peer: None } => format!("d{} sends to UDP socket {socket}", e.stream),
        Datagram(b) => format!("d{} sends a datagram of {}", e.stream, bytes(b)),
        DatagramOutput(b) => format!("d{} receives a datagram of {}", e.stream, bytes(b)),
    }
}

fn describe_object(obj: u64, op: dara_abi::Op, symbols: &BTreeMap<u64, String>) -> String {
    use dara_abi::Op::*;
    match op {
        Sleep => return format!("until {}", format_vtime(obj)),
        ThreadJoin | ThreadDetach => return format!("thread {obj}"),
        ProcessWait if obj == dara_abi::ANY_PROCESS => return "any child".to_string(),
        ProcessWait if obj == dara_abi::ANY_PROCESS - 1 => return "a process dara does not trace".to_string(),
        ProcessWait => return format!("process {obj}"),
        ProcessFork | ProcessExec => return String::new(),
        ProcessKill if obj == dara_abi::ANY_PROCESS => return "a process group".to_string(),
        ProcessKill if obj == dara_abi::ANY_PROCESS - 1 => return "a process dara does not trace".to_string(),
        ProcessKill => return format!("process {obj}"),
        ProcessStart | ThreadStart | ThreadCreate | ThreadExit | ProcessExit | Yield | EdgeQuantum | ClockRead => return String::new(),
        op if op.is_net() => return describe_net(obj),
        _ => {}
    }
    match symbols.get(&obj) {
        Some(name) => format!("{name} ({obj:#x})"),
        None => format!("{obj:#x}"),
    }
}

/// A network step's object: kind, logical endpoint, peer and the first bytes, e.g.
/// `tcp e2->e1 "GET "` (see `dara_scheduler::model::net::describe`).
fn describe_net(obj: u64) -> String {
    use dara_scheduler::model::net::{kind, undescribe};
    let (ep, peer, k, preview) = undescribe(obj);
    let name = match k {
        kind::TCP => "tcp",
        kind::UDP => "udp",
        kind::UNIX_STREAM => "unix",
        kind::UNIX_DGRAM => "unix-dgram",
        kind::PIPE => "pipe",
        kind::EVENTFD => "eventfd",
        kind::EPOLL => "epoll",
        kind::POLL => "poll",
        _ => "fd",
    };
    let mut out = match (ep, peer) {
        (Some(e), Some(p)) => format!("{name} e{e}<->e{p}"),
        (Some(e), None) if k == kind::POLL => format!("{name} first ready e{e}"),
        (Some(e), None) => format!("{name} e{e}"),
        (None, _) => name.to_string(),
    };
    if !preview.is_empty() {
        let text: String = preview.iter().map(|&b| if (0x20..0x7f).contains(&b) && b != b'"' { b as char } else { '.' }).collect();
        let _ = write!(out, " \"{text}\"");
    }
    out
}

pub use dara_scheduler::time::format_vtime;
