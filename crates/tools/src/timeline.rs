//! `dara timeline TRACE -o FILE.html`: one self-contained page that draws a run: a lane per
//! thread (grouped by process, named by node in a cluster run), a row per step down a virtual-time
//! axis, arrows for what ordered two threads (a lock handed over, a thread started or joined, a
//! message sent and received: the happens-before of [`crate::export`]), the preemptions marked,
//! the outcome at the top and the bug's last step marked. A step shows its call site (file:line
//! and function, from a replay of the trace) and, clicked, the source line itself.
//!
//! The page carries its data as JSON and draws it with a short script into SVG: no network, no
//! library. The replay that names symbols and call sites is the one `dara-replay` makes; a trace
//! that does not replay is refused (exit 3), as `dara-replay` would report it.
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use dara_model::choice::FAULT_THREAD;
use dara_model::ChoiceKind;

use crate::setup::{self, MachineOptions, STOP};

#[derive(clap::Args, Debug)]
pub struct TimelineArgs {
    /// The trace to draw.
    pub trace: PathBuf,
    /// The page to write.
    #[arg(short, long, default_value = "timeline.html")]
    pub output: PathBuf,
    #[command(flatten)]
    pub machine: MachineOptions,
}

#[derive(serde::Serialize)]
struct Lane {
    thread: u32,
    name: String,
}

#[derive(serde::Serialize)]
struct PageStep {
    lane: usize,
    vtime: String,
    op: String,
    object: String,
    result: String,
    preempted: bool,
    at: String,
    source: String,
}

#[derive(serde::Serialize)]
struct Arrow {
    from: usize,
    to: usize,
    why: crate::export::Why,
}

#[derive(serde::Serialize)]
struct Page {
    title: String,
    outcome: String,
    bug: bool,
    lanes: Vec<Lane>,
    steps: Vec<PageStep>,
    arrows: Vec<Arrow>,
}

pub fn run(args: TimelineArgs) -> anyhow::Result<u8> {
    setup::init_process()?;
    let recorded = dara_model::trace::read_file(&args.trace)?;
    setup::check_left_out_env(&recorded.header, "dara timeline")?;
    let mut base = setup::base_config(&args.machine, recorded.header.command.clone())?;
    base.symbolize = true;
    base.discard_output = true;
    let (report, preempted) = dara_explorer::reproduce::reproduce_observed(&recorded, &base, &STOP).context("the replay failed to run")?;
    if let Some((step, what)) = dara_explorer::reproduce::first_difference(&recorded.steps, &report.steps) {
        eprintln!("dara timeline: the replay diverged from the trace at step {step}: {what}");
        return Ok(3);
    }
    let resolved = crate::listing::resolve(&report.call_sites);
    let places: Vec<String> = resolved.iter().map(crate::listing::place_text).collect();
    let names = crate::listing::Names { symbols: &report.symbols, threads: &report.threads, programs: &report.programs, nodes: &report.nodes, cluster: recorded.header.cluster.as_ref(), outside: &report.outside, places: &places, critical: recorded.header.critical_transition.as_ref() };
    let page = page(&recorded, &report.steps, &names, &preempted, &resolved);
    let json = serde_json::to_string(&page).context("cannot encode the timeline")?.replace("</", "<\\/");
    let html = TEMPLATE.replace("/*DATA*/null", &json).replace("TITLE", &html_escape(&page.title));
    std::fs::write(&args.output, html).with_context(|| format!("cannot write {}", args.output.display()))?;
    println!("timeline: {} ({} steps, {} threads) -> {}", page.outcome, page.steps.len(), page.lanes.len(), args.output.display());
    Ok(0)
}

fn page(trace: &dara_model::trace::Trace, steps: &[dara_model::trace::Step], names: &crate::listing::Names<'_>, preempted: &[bool], resolved: &[Option<(crate::coverage::symbolize::Place, &dara_scheduler::symbols::CallSite)>]) -> Page {
    let mut threads: Vec<u32> = steps.iter().map(|s| s.choice.thread).collect();
    threads.sort_by_key(|&t| (t == FAULT_THREAD, names.threads.get(&t).copied().unwrap_or(0), t));
    threads.dedup();
    let lane_of: BTreeMap<u32, usize> = threads.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    let several = names.threads.values().collect::<std::collections::BTreeSet<_>>().len() > 1;
    let lanes = threads
        .iter()
        .map(|&t| {
            let name = match names.threads.get(&t) {
                _ if t == FAULT_THREAD => "dara".to_string(),
                Some(p) if several => names.nodes.get(p).map_or(format!("p{p}/t{t}"), |n| format!("{n}:p{p}/t{t}")),
                _ => format!("t{t}"),
            };
            Lane { thread: t, name }
        })
        .collect();
    let mut sources: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    let page_steps = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let c = &s.choice;
            let op = match c.kind {
                ChoiceKind::Run => c.op.name().to_string(),
                ChoiceKind::Timeout => format!("{} (timeout)", c.op.name()),
                ChoiceKind::Interrupt => format!("{} (signal)", c.op.name()),
                ChoiceKind::Fault => format!("FAULT {}", c.op.name()),
            };
            PageStep {
                lane: lane_of[&c.thread],
                vtime: crate::listing::format_vtime(s.now_ns),
                op,
                object: crate::listing::step_object(c, names),
                result: s.result.map_or("blocks".into(), |r| format!("-> {r}")),
                preempted: preempted.get(i).copied().unwrap_or(false),
                at: names.places.get(i).cloned().unwrap_or_default(),
                source: resolved.get(i).and_then(|r| r.as_ref()).and_then(|(place, _)| source_line(&mut sources, place)).unwrap_or_default(),
            }
        })
        .collect();
    Page {
        title: format!("dara timeline: {}", trace.header.command.join(" ")),
        outcome: trace.outcome.summary(),
        bug: trace.outcome.is_bug(),
        lanes,
        steps: page_steps,
        arrows: arrows(steps),
    }
}

/// Cross-thread orderings worth an arrow: each step's cause on another thread
/// ([`crate::export::causes`], the happens-before the ShiViz export draws from too).
fn arrows(steps: &[dara_model::trace::Step]) -> Vec<Arrow> {
    crate::export::causes(steps)
        .into_iter()
        .enumerate()
        .filter_map(|(to, cause)| cause.map(|(from, why)| Arrow { from, to, why }))
        .filter(|a| steps[a.from].choice.thread != steps[a.to].choice.thread)
        .collect()
}

/// The source line `place` names, each file read once (a file the DWARF names that is not here,
/// or not text, gives nothing).
fn source_line(files: &mut BTreeMap<String, Option<Vec<String>>>, place: &crate::coverage::symbolize::Place) -> Option<String> {
    let (file, line) = (place.file.as_ref()?, place.line? as usize);
    let lines = files.entry(file.clone()).or_insert_with(|| std::fs::read_to_string(file).ok().map(|t| t.lines().map(str::to_string).collect()));
    lines.as_ref()?.get(line.checked_sub(1)?).map(|l| l.trim().to_string())
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The page: styles, an SVG the script fills from `DATA`, and a pane for the clicked step.
const TEMPLATE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>TITLE</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 0; }
header { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ccc; padding: 6px 12px; z-index: 1; }
header.bug #outcome { color: #b00; font-weight: bold; }
#detail { font-family: monospace; white-space: pre-wrap; min-height: 2.5em; }
svg text { font: 11px monospace; }
.lane-name { font-weight: bold; }
.step circle { fill: #36c; } .step.preempted circle { fill: #e80; } .step.last circle { fill: #b00; r: 7; }
.step text.op { fill: #222; } .step text.at { fill: #777; }
.arrow { stroke: #999; stroke-width: 1.2; fill: none; marker-end: url(#head); }
.arrow.message { stroke: #393; } .arrow.lock { stroke: #c63; }
.lane-line { stroke: #ddd; } .axis { fill: #888; }
</style></head>
<body>
<header id="head-bar"><div id="title"></div><div id="outcome"></div><div id="legend">lanes: threads · orange: preemption · red: last step · arrows: <span style="color:#c63">lock handed over</span>, <span style="color:#393">message</span>, thread start / join · click a step for its source line</div><div id="detail"></div></header>
<svg id="timeline" xmlns="http://www.w3.org/2000/svg"><defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#999"/></marker></defs></svg>
<script>
const DATA = /*DATA*/null;
(function draw() {
  const NS = "http://www.w3.org/2000/svg", ROW = 22, LANE = 260, LEFT = 80, TOP = 40;
  const svg = document.getElementById("timeline");
  const el = (name, attrs, text) => { const e = document.createElementNS(NS, name); for (const k in attrs) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text; return e; };
  document.getElementById("title").textContent = document.title;
  document.getElementById("outcome").textContent = "outcome: " + DATA.outcome;
  if (DATA.bug) document.getElementById("head-bar").classList.add("bug");
  svg.setAttribute("width", LEFT + DATA.lanes.length * LANE + 40);
  svg.setAttribute("height", TOP + DATA.steps.length * ROW + 40);
  const x = lane => LEFT + lane * LANE + 12, y = i => TOP + i * ROW;
  DATA.lanes.forEach((lane, i) => {
    const g = el("g", { class: "lane", "data-thread": lane.thread });
    g.appendChild(el("text", { class: "lane-name", x: x(i) - 8, y: TOP - 18 }, lane.name));
    g.appendChild(el("line", { class: "lane-line", x1: x(i), x2: x(i), y1: TOP - 10, y2: y(DATA.steps.length) }));
    svg.appendChild(g);
  });
  DATA.arrows.forEach(a => {
    const from = DATA.steps[a.from], to = DATA.steps[a.to];
    svg.appendChild(el("path", { class: "arrow " + a.why, "data-why": a.why, d: `M ${x(from.lane)} ${y(a.from)} L ${x(to.lane)} ${y(a.to)}` }));
  });
  const detail = document.getElementById("detail");
  DATA.steps.forEach((s, i) => {
    const last = i === DATA.steps.length - 1;
    const g = el("g", { class: "step" + (s.preempted ? " preempted" : "") + (last && DATA.bug ? " last" : ""), "data-step": i });
    g.appendChild(el("text", { class: "axis", x: 4, y: y(i) + 4 }, s.vtime));
    g.appendChild(el("circle", { cx: x(s.lane), cy: y(i), r: 5 }));
    g.appendChild(el("text", { class: "op", x: x(s.lane) + 10, y: y(i) + 4 }, `${i} ${s.op} ${s.object} ${s.result}`.replace(/ +/g, " ")));
    if (s.at) g.appendChild(el("text", { class: "at", x: x(s.lane) + 10, y: y(i) + 15 }, s.at));
    g.appendChild(el("title", {}, `step ${i} at ${s.vtime}: ${DATA.lanes[s.lane].name} ${s.op} ${s.object} ${s.result}${s.at ? "\n" + s.at : ""}`));
    g.addEventListener("click", () => { detail.textContent = `step ${i}: ${DATA.lanes[s.lane].name} ${s.op} ${s.object} ${s.result}\n${s.at || "(no call site)"}${s.source ? "\n    " + s.source : ""}`; });
    svg.appendChild(g);
  });
  document.body.setAttribute("data-drawn", DATA.steps.length);
})();
</script>
</body></html>
"##;
