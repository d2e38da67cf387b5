//! `dara coverage [--json] TRACE...`: the edge coverage stored in traces, united over all of them
//! and shown per binary — edges covered out of all instrumented sites, hits, in how many traces
//! each edge was reached, the functions and source lines left uncovered.
//!
//! * [`sites`]: the instrumented call sites of a binary, found statically (the denominator).
//! * [`symbolize`]: function and file:line of a site from the binary's DWARF.
//! * [`render`]: the text and JSON reports.
//!
//! An edge is identified across traces and processes by (binary, link-time address of its call
//! site's return address): run-time addresses are mapped back through the module map stored with
//! each process's coverage. The binaries are read now, from the paths the traces recorded; a
//! binary rebuilt since (its build-id differs from the one the trace recorded) is reported with a
//! warning, since its addresses may no longer match.
//!
//! Exit status: 0 report printed; 2 a file is not a readable trace, or none of the traces holds
//! coverage (the program was not built with sanitizer coverage).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use dara_model::coverage::ProcessCoverage;
use dara_model::trace::{self, Trace};

pub mod render;
pub mod sites;
pub mod symbolize;

use sites::ModuleSites;
use symbolize::{Place, Symbolizer};

/// Arguments of `dara coverage`.
#[derive(clap::Args, Debug)]
pub struct CoverageArgs {
    /// Traces to unite (e.g. dara-out/trace.bin, dara-out/bug-*/trace.bin).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One instrumented edge of a binary, over all traces.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Edge {
    /// Link-time address of the call site's return address.
    pub address: u64,
    #[serde(flatten)]
    pub place: Place,
    /// Sum of the per-trace hit counts (each saturates at 255 per process and run).
    pub hits: u64,
    /// Traces in which the edge was reached.
    pub frequency: usize,
    /// Found by the static scan (false: covered at run time at an address the scan missed).
    pub static_site: bool,
}

/// Covered / total edges of one function.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FunctionCoverage {
    pub function: String,
    pub covered: usize,
    pub total: usize,
}

/// Everything known about one binary.
#[derive(Debug, serde::Serialize)]
pub struct BinaryReport {
    pub path: String,
    /// Instrumented edges: static sites plus any covered edge the scan did not find.
    pub total: usize,
    pub covered: usize,
    pub hits: u64,
    /// Set when the binary on disk is not the one the traces recorded.
    pub warning: Option<String>,
    pub functions: Vec<FunctionCoverage>,
    /// Every edge, covered or not, by address.
    pub edges: Vec<Edge>,
}

/// The whole report.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub traces: usize,
    /// Traces that stored no coverage at all.
    pub traces_without_coverage: usize,
    pub covered: usize,
    pub total: usize,
    pub percent: f64,
    pub binaries: Vec<BinaryReport>,
    /// Covered edges at addresses outside every recorded module (no module map, or dlopen).
    pub unmapped_edges: usize,
}

/// Runs `dara coverage`; Ok(exit code).
pub fn run(args: CoverageArgs) -> anyhow::Result<u8> {
    let traces: Vec<Trace> = args.traces.iter().map(|p| trace::read_file(p).map_err(anyhow::Error::from)).collect::<anyhow::Result<_>>()?;
    let Some(report) = build_report(&traces)? else {
        eprintln!(
            "dara: none of the {} trace(s) holds coverage: the program was not built with sanitizer coverage (see docs/coverage.md)",
            traces.len()
        );
        return Ok(2);
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("formatting the report as JSON")?);
    } else {
        print!("{}", render::text(&report));
    }
    Ok(0)
}

/// Per (binary, address): hits and the traces that reached it.
#[derive(Default)]
struct Seen {
    hits: u64,
    traces: BTreeSet<usize>,
}

/// Unites the coverage of `traces`; None when none holds any.
pub fn build_report(traces: &[Trace]) -> anyhow::Result<Option<Report>> {
    let without = traces.iter().filter(|t| t.coverage.is_empty()).count();
    if without == traces.len() {
        return Ok(None);
    }
    let mut seen: BTreeMap<String, BTreeMap<u64, Seen>> = BTreeMap::new();
    let mut modules: BTreeMap<String, Option<ModuleSites>> = BTreeMap::new();
    let mut unmapped = BTreeSet::new();
    for (k, t) in traces.iter().enumerate() {
        for cov in t.coverage.values() {
            for m in &cov.modules {
                modules.entry(m.path.clone()).or_insert_with(|| scan_file(Path::new(&m.path)));
            }
            for e in &cov.edges {
                match locate(cov, e.pc, &modules) {
                    Some((path, address)) => {
                        let s = seen.entry(path).or_default().entry(address).or_default();
                        s.hits += u64::from(e.count);
                        s.traces.insert(k);
                    }
                    None => {
                        unmapped.insert(e.pc);
                    }
                }
            }
        }
    }
    let recorded_ids: BTreeMap<&str, &str> = traces.iter().flat_map(|t| t.header.build_ids.iter().map(|(p, id)| (p.as_str(), id.as_str()))).collect();
    let mut binaries = Vec::new();
    for (path, sites) in &modules {
        let sites = sites.as_ref();
        let covered = seen.remove(path).unwrap_or_default();
        let static_sites = sites.map_or(&[][..], |s| &s.sites[..]);
        if static_sites.is_empty() && covered.is_empty() {
            continue;
        }
        let warning = match (sites, recorded_ids.get(path.as_str())) {
            (None, _) => Some(format!("{path} could not be read now: edges are shown by address only")),
            (Some(s), Some(&id)) if s.build_id.as_deref().is_some_and(|now| now != id) => {
                Some(format!("{path} was rebuilt since the traces were recorded (build-id {id}, now {}): addresses may not match", s.build_id.as_deref().unwrap_or("?")))
            }
            _ => None,
        };
        binaries.push(binary_report(path, sites.is_some(), static_sites, &covered, warning));
    }
    let covered: usize = binaries.iter().map(|b| b.covered).sum::<usize>() + unmapped.len();
    let total: usize = binaries.iter().map(|b| b.total).sum::<usize>() + unmapped.len();
    Ok(Some(Report {
        traces: traces.len(),
        traces_without_coverage: without,
        covered,
        total,
        percent: if total == 0 { 0.0 } else { 100.0 * covered as f64 / total as f64 },
        binaries,
        unmapped_edges: unmapped.len(),
    }))
}

/// Reads and scans a binary; None when it is not a regular file of sane size or not ELF (paths
/// come from the trace, which may be hostile: a device named there is never read).
fn scan_file(path: &Path) -> Option<ModuleSites> {
    ModuleSites::scan(&dara_tracer::image::read(path).ok()?).ok()
}

/// (binary path, link-time address) of run-time address `pc` in the process of `cov`.
fn locate(cov: &ProcessCoverage, pc: u64, modules: &BTreeMap<String, Option<ModuleSites>>) -> Option<(String, u64)> {
    // The byte before a return address is the call's own last byte: look that up, so a call that
    // ends its mapping or segment still belongs to it.
    let inside = pc.checked_sub(1)?;
    let m = cov.modules.iter().find(|m| inside >= m.start && inside < m.end)?;
    let sites = modules.get(&m.path)?.as_ref()?;
    let address = sites.vaddr_of_offset((inside - m.start).checked_add(m.offset)?)?.checked_add(1)?;
    Some((m.path.clone(), address))
}

/// `readable`: the binary was read and parsed (else it is not opened again for symbols).
fn binary_report(path: &str, readable: bool, sites: &[u64], covered: &BTreeMap<u64, Seen>, warning: Option<String>) -> BinaryReport {
    let symbolizer = if readable { Symbolizer::open(Path::new(path)) } else { Symbolizer::none() };
    let addresses: BTreeSet<u64> = sites.iter().copied().chain(covered.keys().copied()).collect();
    let static_set: BTreeSet<u64> = sites.iter().copied().collect();
    let edges: Vec<Edge> = addresses
        .into_iter()
        .map(|address| {
            let s = covered.get(&address);
            Edge {
                address,
                place: symbolizer.place(address),
                hits: s.map_or(0, |s| s.hits),
                frequency: s.map_or(0, |s| s.traces.len()),
                static_site: static_set.contains(&address),
            }
        })
        .collect();
    let mut functions: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for e in &edges {
        let f = functions.entry(e.place.function.as_str()).or_default();
        f.1 += 1;
        f.0 += usize::from(e.frequency > 0);
    }
    let functions = functions.into_iter().map(|(f, (covered, total))| FunctionCoverage { function: f.to_string(), covered, total }).collect();
    BinaryReport {
        path: path.to_string(),
        total: edges.len(),
        covered: edges.iter().filter(|e| e.frequency > 0).count(),
        hits: edges.iter().map(|e| e.hits).sum(),
        warning,
        functions,
        edges,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dara_model::coverage::{EdgeHit, Module};
    use dara_model::trace::TraceHeader;
    use dara_model::Outcome;

    fn trace_with(modules: Vec<Module>, pcs: &[u64]) -> Trace {
        let header = TraceHeader {
            dara_version: "0".into(),
            command: vec!["x".into()],
            cwd: "/".into(),
            env: vec![],
            env_left_out: vec![],
            strategy: "random".into(),
            seed: 0,
            execution: 0,
            random_seed: 0,
            cpus: 1,
            memory: Default::default(),
            library_cache: None,
            max_steps: 1,
            max_vtime_ns: 1,
            build_ids: vec![],
            preempt: Default::default(),
            cluster: None,
            setup: None,
            cleanup: None,
            outside: false,
            stdin: false,
            time: Default::default(),
            written: Default::default(),
            liveness: None,
            critical_transition: None,
            pids: None,
        };
        let edges = pcs.iter().enumerate().map(|(i, &pc)| EdgeHit { edge: i as u32, pc, count: 2, first_step: 0 }).collect();
        Trace { header, steps: vec![], outcome: Outcome::Exited { code: 0, location: None }, coverage: [(0, ProcessCoverage { guards: 0, edges, modules })].into(), outside: vec![] }
    }

    #[test]
    fn hostile_module_maps_are_not_read_and_count_by_address() {
        // A device, a directory and a missing file named as modules; offsets that would overflow.
        let modules = ["/dev/zero", "/", "/no/such/file"]
            .iter()
            .enumerate()
            .map(|(i, p)| Module { path: p.to_string(), start: 0x1000 * (i as u64 + 1), end: 0x1000 * (i as u64 + 2), offset: u64::MAX })
            .collect();
        let t = trace_with(modules, &[0x1800, 0x2800, 0x3800, 0]);
        let r = build_report(&[t]).unwrap().unwrap();
        assert_eq!((r.covered, r.total, r.unmapped_edges), (4, 4, 4));
        assert!(r.binaries.is_empty());
    }

    #[test]
    fn no_coverage_anywhere_is_none_and_partial_coverage_is_noted() {
        let mut bare = trace_with(vec![], &[]);
        bare.coverage.clear();
        assert!(build_report(&[bare.clone(), bare.clone()]).unwrap().is_none());
        let r = build_report(&[bare, trace_with(vec![], &[0x10])]).unwrap().unwrap();
        assert_eq!((r.traces, r.traces_without_coverage, r.covered), (2, 1, 1));
    }
}
