//! The human-readable `dara coverage` report: the summary line, then per binary a per-function
//! table, the uncovered sites and the most and least frequently reached edges.
use std::fmt::Write;

use super::{BinaryReport, Edge, Report};

/// How many edges the "most/least frequent" lists show.
const FREQUENT_SHOWN: usize = 5;

pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} of {} instrumented edges covered ({:.1}%) in {} traces", r.covered, r.total, r.percent, r.traces);
    if r.traces_without_coverage > 0 {
        let _ = writeln!(out, "({} of the traces hold no coverage)", r.traces_without_coverage);
    }
    if r.unmapped_edges > 0 {
        let _ = writeln!(out, "({} covered edges lie outside every recorded module and are counted by address only)", r.unmapped_edges);
    }
    for b in &r.binaries {
        binary(&mut out, b, r.traces);
    }
    out
}

fn binary(out: &mut String, b: &BinaryReport, traces: usize) {
    let pct = if b.total == 0 { 0.0 } else { 100.0 * b.covered as f64 / b.total as f64 };
    let _ = writeln!(out, "\n{}: {} of {} edges covered ({pct:.1}%), {} hits", b.path, b.covered, b.total, b.hits);
    if let Some(w) = &b.warning {
        let _ = writeln!(out, "  warning: {w}");
    }
    let width = b.functions.iter().map(|f| f.function.len()).max().unwrap_or(8).clamp(8, 60);
    let _ = writeln!(out, "  {:<width$}  covered", "function");
    for f in &b.functions {
        let _ = writeln!(out, "  {:<width$}  {}/{}", f.function, f.covered, f.total);
    }
    let uncovered: Vec<&Edge> = b.edges.iter().filter(|e| e.frequency == 0).collect();
    let _ = writeln!(out, "  uncovered sites ({}):", uncovered.len());
    for e in &uncovered {
        let _ = writeln!(out, "    {}", site(e));
    }
    let mut reached: Vec<&Edge> = b.edges.iter().filter(|e| e.frequency > 0).collect();
    if reached.is_empty() {
        return;
    }
    reached.sort_by(|a, b| b.frequency.cmp(&a.frequency).then(b.hits.cmp(&a.hits)).then(a.address.cmp(&b.address)));
    let _ = writeln!(out, "  most frequent edges:");
    for e in reached.iter().take(FREQUENT_SHOWN) {
        let _ = writeln!(out, "    {}  in {}/{traces} traces, {} hits", site(e), e.frequency, e.hits);
    }
    let _ = writeln!(out, "  least frequent edges:");
    for e in reached.iter().rev().take(FREQUENT_SHOWN) {
        let _ = writeln!(out, "    {}  in {}/{traces} traces, {} hits", site(e), e.frequency, e.hits);
    }
}

/// `0x1234  h3  cov_branches.c:19`
fn site(e: &Edge) -> String {
    format!("{:#x}  {}  {}", e.address, e.place.function, e.place.file_line())
}
