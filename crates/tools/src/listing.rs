//! The readable interleaving: one line per decision, which thread did what to which object, the
//! result and the virtual time.
use std::collections::BTreeMap;
use std::fmt::Write;

use dara_model::choice::{Choice, ChoiceObject, ProcessId, ThreadId, FAULT_THREAD};
use dara_model::cluster::Nodes;
use dara_model::trace::Step;
use dara_model::ChoiceKind;

use crate::coverage::symbolize::Place;

/// What the listing knows besides the steps: object names, the process of each thread, the
/// program each process start began.
pub struct Names<'a> {
    pub symbols: &'a BTreeMap<u64, String>,
    pub threads: &'a BTreeMap<ThreadId, ProcessId>,
    pub programs: &'a BTreeMap<ThreadId, String>,
    /// A cluster run's node of each node process, and its spec (fault descriptions).
    pub nodes: &'a BTreeMap<ProcessId, String>,
    pub cluster: Option<&'a dara_model::cluster::ClusterSpec>,
    /// Inputs from outside peers and the program's outputs to them, shown before the step they
    /// preceded.
    pub outside: &'a [dara_model::outside::OutsideEvent],
    /// Where in the program each step was called from (`demo.c:47 transfer`; see [`places`]);
    /// empty: no such column.
    pub places: &'a [String],
    /// A liveness violation's critical transition (the trace's header), marked `!!`.
    pub critical: Option<&'a dara_model::liveness::CriticalTransition>,
}

/// Each step's call site resolved from its binary's DWARF (None where the preload could not
/// tell); one lookup table per binary.
pub fn resolve(sites: &[Option<dara_scheduler::symbols::CallSite>]) -> Vec<Option<(Place, &dara_scheduler::symbols::CallSite)>> {
    let mut binaries: BTreeMap<std::path::PathBuf, crate::coverage::symbolize::Symbolizer> = BTreeMap::new();
    sites
        .iter()
        .map(|site| {
            let site = site.as_ref()?;
            let symbolizer = binaries.entry(site.module.clone()).or_insert_with(|| crate::coverage::symbolize::Symbolizer::open(&site.module));
            Some((symbolizer.place(site.vaddr), site))
        })
        .collect()
}

/// A resolved call site as the listing shows it: `file:line function`, the function and binary
/// without line information, `binary+offset` without symbols.
pub fn place_text(resolved: &Option<(Place, &dara_scheduler::symbols::CallSite)>) -> String {
    let Some((place, site)) = resolved else { return String::new() };
    let module = site.module.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match place.line {
        Some(_) => format!("{} {}", place.file_line(), place.function),
        None if place.function != "?" => format!("{} ({module})", place.function),
        None => format!("{module}+{:#x}", site.vaddr),
    }
}

/// Each step's call site as [`place_text`] shows it.
pub fn places(sites: &[Option<dara_scheduler::symbols::CallSite>]) -> Vec<String> {
    resolve(sites).iter().map(place_text).collect()
}

/// Formats `steps` as a listing. Steps whose `preempted` entry is true are marked `>>` (another
/// thread could have gone on instead); a liveness violation's critical transition is marked `!!`
/// and described after the steps. With several processes, threads are shown as
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
    let at_header = if names.places.is_empty() { "" } else { "  at" };
    let _ = writeln!(out, "   {:>6}  {:>8}  {:<12} {:<16} {:<34} result{at_header}", "step", "vtime", "thread", "operation", "object");
    let mut outside = names.outside.iter().peekable();
    for (i, step) in steps.iter().enumerate() {
        while let Some(e) = outside.next_if(|e| e.step <= i as u64) {
            if let Some(line) = outside_line(e) {
                let _ = writeln!(out, "   {:>6}  {:>8}  {:<12} {}", "", "", "outside", line);
            }
        }
        let c = &step.choice;
        let op = match c.kind {
            ChoiceKind::Run => c.op.name().to_string(),
            ChoiceKind::Timeout => format!("{} (timeout)", c.op.name()),
            ChoiceKind::Interrupt => format!("{} (signal)", c.op.name()),
            ChoiceKind::Fault => format!("FAULT {}", c.op.name()),
        };
        let object = step_object(c, names);
        let result = match step.result {
            Some(r) => format!("-> {r}"),
            None => "blocks".to_string(),
        };
        let alt = if c.alt != 0 { format!(" [alt {}]", c.alt) } else { String::new() };
        let mark = match names.critical {
            Some(t) if t.step == i as u64 => "!! ",
            _ if preempted.get(i).copied().unwrap_or(false) => ">> ",
            _ => "   ",
        };
        let at = match names.places.get(i) {
            Some(place) if !place.is_empty() => format!("{:<width$}  {place}", "", width = 9usize.saturating_sub(result.len() + alt.len())),
            _ => String::new(),
        };
        let _ = writeln!(out, "{mark}{:>6}  {:>8}  {:<12} {:<16} {:<34} {result}{alt}{at}", i, format_vtime(step.now_ns), who(c.thread), op, object);
    }
    for line in outside.filter_map(outside_line) {
        let _ = writeln!(out, "   {:>6}  {:>8}  {:<12} {}", "", "", "outside", line);
    }
    let n = preempted.iter().filter(|p| **p).count();
    if n > 0 {
        let _ = writeln!(out, "{n} preemption(s), marked >>: there another thread could have continued, and the schedule switched instead.");
    }
    if let Some(t) = names.critical {
        let _ = writeln!(out, "{} (marked !!)", t.describe());
    }
    out
}

/// The object column of a step: the program a process start began, a fault's nodes, or the
/// object's name (symbol and address, a descriptor's peer, a deadline).
pub fn step_object(c: &Choice, names: &Names<'_>) -> String {
    match names.programs.get(&c.thread) {
        _ if c.kind == ChoiceKind::Fault => Nodes::describe(names.cluster, c),
        Some(program) if c.op == dara_abi::Op::ProcessStart => program.clone(),
        _ => describe_object(c, names.symbols),
    }
}

/// One outside event for the listing: what crossed the boundary, with its first bytes; None for
/// a move of the clock up to real time (the vtime column shows it).
fn outside_line(e: &dara_model::outside::OutsideEvent) -> Option<String> {
    use dara_model::outside::OutsideWhat::*;
    let bytes = |b: &[u8]| format!("{} bytes {}", b.len(), dara_model::outside::quoted(b, 48));
    Some(match &e.what {
        Connect { listener, peer: Some(peer) } => format!("c{} connects to listening socket {listener} from {peer}", e.stream),
        Connect { listener, peer: None } => format!("c{} connects to listening socket {listener}", e.stream),
        Data(b) => format!("c{} sends {}", e.stream, bytes(b)),
        Close => format!("c{} closes", e.stream),
        Reset => format!("c{} resets the connection", e.stream),
        Output(b) => format!("c{} receives {}", e.stream, bytes(b)),
        OutputClosed => format!("c{} sees the program close", e.stream),
        Signal(s) if e.stream == 0 => format!("signal {} to every process", dara_model::outcome::signal_name(*s)),
        Signal(s) => format!("signal {} from outside to thread {} (with its next grant)", dara_model::outcome::signal_name(*s), e.stream - 1),
        SignalEndingWait(s) => format!("signal {} from outside to thread {}, ending its wait", dara_model::outcome::signal_name(*s), e.stream.saturating_sub(1)),
        Stdin(b) => format!("stdin {}", bytes(b)),
        StdinClosed => "stdin ends".to_string(),
        Peer { socket, peer: Some(peer) } => format!("d{} sends to UDP socket {socket} from {peer}", e.stream),
        Peer { socket, peer: None } => format!("d{} sends to UDP socket {socket}", e.stream),
        Datagram(b) => format!("d{} sends a datagram of {}", e.stream, bytes(b)),
        DatagramOutput(b) => format!("d{} receives a datagram of {}", e.stream, bytes(b)),
        Clock(_) => return None,
        Dial { server, refused: false } => format!("c{}: the program connects to the outside server {server}", e.stream),
        Dial { server, refused: true } => format!("the outside server {server} refuses the program's connect"),
        NameLookup { query, answer } => format!("the program looks up {}: {}", query.describe(), answer.describe()),
    })
}

/// A step's object for the listing: what the choice is about ([`Choice::object`]), with a
/// symbol for an address the target's binaries name.
fn describe_object(c: &Choice, symbols: &BTreeMap<u64, String>) -> String {
    use dara_abi::Op::*;
    use dara_abi::ProcessTarget;
    match (c.op, c.object()) {
        (ProcessStart | ThreadStart | ThreadCreate | ThreadExit | ProcessExit | Yield | EdgeQuantum | Probe | ClockRead | ProcessFork | ProcessExec, _) => String::new(),
        (_, ChoiceObject::None) => String::new(),
        (_, ChoiceObject::Time(t)) => format!("until {}", format_vtime(t)),
        (_, ChoiceObject::Thread(t)) => format!("thread {t}"),
        (ProcessWait, ChoiceObject::Process(ProcessTarget::Any)) => "any child".to_string(),
        (_, ChoiceObject::Process(ProcessTarget::Any)) => "a process group".to_string(),
        (_, ChoiceObject::Process(ProcessTarget::Untraced)) => "a process dara does not trace".to_string(),
        (_, ChoiceObject::Process(ProcessTarget::Process(p))) => format!("process {p}"),
        (_, ChoiceObject::Net(net)) => net.to_string(),
        (_, ChoiceObject::Node(n)) => format!("node {n}"),
        (_, ChoiceObject::NodePair(a, b)) => format!("nodes {a} | {b}"),
        (_, ChoiceObject::Address(obj) | ChoiceObject::Word(obj)) => match symbols.get(&obj) {
            Some(name) => format!("{name} ({obj:#x})"),
            None => format!("{obj:#x}"),
        },
    }
}

pub use dara_model::time::format_vtime;
