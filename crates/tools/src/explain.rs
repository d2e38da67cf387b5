//! `dara explain TRACE`: the short story of a bug. The schedule is first made as small as dara can
//! make it (`minimal.bin` beside the trace, or a minimization now: fewer preemptions), then
//! replayed to name objects and call sites, and each preemption that remains is told: which
//! thread was stopped before what (with its source line), what the other threads did meanwhile,
//! and the racing pair: the other thread's last step on the same object before the stopped thread
//! got to it. A preemption whose stopped thread never touches what the others did is told with
//! what they did (a message order, a timer): dara shows the order, not a proof that it is the
//! cause.
use std::path::{Path, PathBuf};

use anyhow::Context;
use dara_model::choice::ChoiceObject;
use dara_model::trace::{Step, Trace};

use crate::listing::{self, Names};
use crate::setup::{self, MachineOptions, STOP};

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The bug's trace (a dara-out/bug-NNNN/trace.bin; its minimal.bin is used when there is one).
    pub trace: PathBuf,
    /// Candidate executions the minimization may run when the trace has no minimal.bin.
    #[arg(long, default_value_t = 100)]
    pub tries: u64,
    #[command(flatten)]
    pub machine: MachineOptions,
}

pub fn run(args: ExplainArgs) -> anyhow::Result<u8> {
    setup::init_process()?;
    let given = dara_model::trace::read_file(&args.trace)?;
    setup::check_left_out_env(&given.header, "dara explain")?;
    let mut base = setup::base_config(&args.machine, given.header.command.clone())?;
    base.discard_output = true;
    let (trace, whence) = smallest(&args.trace, given, &base, args.tries)?;
    base.symbolize = true;
    let (report, preempted) = dara_explorer::reproduce::reproduce_observed(&trace, &base, &STOP).context("the replay failed to run")?;
    if let Some((step, what)) = dara_explorer::reproduce::first_difference(&trace.steps, &report.steps) {
        eprintln!("dara explain: the replay diverged from the trace at step {step}: {what}");
        return Ok(3);
    }
    let places = listing::places(&report.call_sites);
    let names = Names { symbols: &report.symbols, threads: &report.threads, programs: &report.programs, nodes: &report.nodes, cluster: trace.header.cluster.as_ref(), outside: &report.outside, places: &places, critical: trace.header.critical_transition.as_ref() };
    print!("{}", story(&trace, &report.steps, &names, &preempted, &whence));
    Ok(if trace.outcome.is_bug() { 1 } else { 0 })
}

/// The trace with the fewest preemptions at hand, and where it came from.
fn smallest(path: &Path, given: Trace, base: &dara_scheduler::execution::ExecutionConfig, tries: u64) -> anyhow::Result<(Trace, String)> {
    let beside = path.with_file_name("minimal.bin");
    if beside != path {
        if let Ok(minimal) = dara_model::trace::read_file(&beside) {
            return Ok((minimal, format!("the minimal schedule {}", beside.display())));
        }
    }
    if !given.outcome.is_bug() || given.header.outside {
        return Ok((given, "the trace as recorded".into()));
    }
    match dara_explorer::minimize::minimize(&given, base, tries, &STOP, &mut |_| {}) {
        Ok(m) if m.after.smaller_than(&m.before) => Ok((m.trace, format!("a schedule minimized now ({}, was {})", crate::minimize::size_line(&m.after), crate::minimize::size_line(&m.before)))),
        _ => Ok((given, "the trace as recorded (no smaller schedule found)".into())),
    }
}

/// `t2 mutex-lock alice (0x...) at demo.c:55 transfer`.
fn said(i: usize, steps: &[Step], names: &Names<'_>) -> String {
    let c = &steps[i].choice;
    let object = listing::step_object(c, names);
    let at = names.places.get(i).filter(|p| !p.is_empty()).map(|p| format!(" at {p}")).unwrap_or_default();
    let object = if object.is_empty() { String::new() } else { format!(" {object}") };
    format!("t{} {}{object}{at} (step {i})", c.thread, c.op.name())
}

/// The same object, for the racing pair: an address or a network endpoint pair.
fn same_object(a: &Step, b: &Step) -> bool {
    match (a.choice.object(), b.choice.object()) {
        (ChoiceObject::Address(x), ChoiceObject::Address(y)) => x == y,
        (ChoiceObject::Net(x), ChoiceObject::Net(y)) => x.endpoint.is_some() && (x.endpoint == y.endpoint || x.endpoint == y.peer),
        _ => false,
    }
}

pub fn story(trace: &Trace, steps: &[Step], names: &Names<'_>, preempted: &[bool], whence: &str) -> String {
    let mut out = format!("{}\n", trace.outcome.summary());
    let points: Vec<usize> = (0..steps.len()).filter(|&i| preempted.get(i).copied().unwrap_or(false)).collect();
    out += &format!("from {whence}: {} steps, {} preemption(s)\n", steps.len(), points.len());
    if points.is_empty() {
        out += "No preemption: the bug shows in the order the threads run by themselves (each runs until it blocks or ends); the schedule's choices are where blocked threads resumed.\n";
    }
    for (n, &i) in points.iter().enumerate() {
        let Some(stopped) = (0..i).rev().map(|k| steps[k].choice.thread).next() else { continue };
        let resumes = (i..steps.len()).find(|&k| steps[k].choice.thread == stopped);
        out += &format!("\n{}. at step {i}, t{stopped} was preempted", n + 1);
        match resumes {
            Some(j) => out += &format!(" before {}\n", said(j, steps, names)),
            None => out += " and did not run again\n",
        }
        let until = resumes.unwrap_or(steps.len());
        let meanwhile: Vec<usize> = (i..until).collect();
        out += &format!("   meanwhile ({} steps):\n", meanwhile.len());
        for &k in meanwhile.iter().take(12) {
            out += &format!("     {}\n", said(k, steps, names));
        }
        if meanwhile.len() > 12 {
            out += &format!("     ... {} more\n", meanwhile.len() - 12);
        }
        if let Some(j) = resumes {
            match meanwhile.iter().rev().find(|&&k| same_object(&steps[k], &steps[j])) {
                Some(&k) => out += &format!("   racing pair: {}\n            and {}\n", said(k, steps, names), said(j, steps, names)),
                None => out += "   no step meanwhile touched what it did next: the order of the steps above is what the preemption changed\n",
            }
        }
    }
    out
}
