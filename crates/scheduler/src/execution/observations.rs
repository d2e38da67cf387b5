//! What an execution notes about the program for its report, without affecting the run: names of
//! the object addresses the interleaving listing shows, the program each process started, where a
//! process took a fatal fault (named while it still existed), and the module maps of processes
//! that show coverage (read while they are alive, so uninstrumented programs pay nothing).
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use dara_abi::MAX_PROCESSES;

use crate::choice::{ProcessId, ThreadId};
use crate::coverage::{self, Module};
use crate::region::Region;
use crate::symbols::Symbolizer;

#[derive(Default)]
pub(super) struct Observations {
    symbolizers: BTreeMap<ProcessId, Symbolizer>,
    /// Names of object addresses seen (when `symbolize`).
    pub(super) symbols: BTreeMap<u64, String>,
    /// Where each process took a fatal fault, named while it still existed (`Op::Fault`).
    pub(super) faults: BTreeMap<ProcessId, String>,
    /// Program names by `ProcessStart` thread (see `ExecutionReport::programs`).
    pub(super) programs: BTreeMap<ThreadId, String>,
    /// Executable mappings of each process that has shown coverage, read while it was alive.
    pub(super) modules: BTreeMap<ProcessId, Vec<Module>>,
    /// The call site of each thread's pending post (when `symbolize`).
    pending_sites: BTreeMap<ThreadId, crate::symbols::CallSite>,
    /// The call site of each step, in step order (when `symbolize`; empty otherwise).
    pub(super) step_sites: Vec<Option<crate::symbols::CallSite>>,
    /// `--preempt-on atomics`: the atomic instructions trapped in each program started.
    pub(super) atomic_sites: BTreeMap<String, dara_tracer::atomic_plan::PlanSummary>,
}

impl Observations {
    /// The symbol at `addr` in `process` (kernel pid `pid`), if its binaries name one.
    pub(super) fn symbol(&mut self, process: ProcessId, pid: u32, addr: u64) -> Option<String> {
        self.symbolizers.entry(process).or_insert_with(|| Symbolizer::for_process(pid)).name(addr)
    }

    /// Where `addr`, a code address in `process` (kernel pid `pid`), is: the function its
    /// binary names there, else the file and offset (`libc.so.6+0x189ad8`).
    pub(super) fn place(&mut self, process: ProcessId, pid: u32, addr: u64) -> Option<String> {
        let symbolizer = self.symbolizers.entry(process).or_insert_with(|| Symbolizer::for_process(pid));
        let module = symbolizer.module_offset(addr);
        match (symbolizer.name(addr), module) {
            (Some(name), Some(module)) => Some(format!("{name} ({module})")),
            (name, module) => name.or(module),
        }
    }

    /// Notes where in the program `thread` (of `process`, kernel pid `pid`) made the post it
    /// just made: the return address the preload found ([`dara_abi::Slot::call_site`]).
    pub(super) fn note_call_site(&mut self, thread: ThreadId, process: ProcessId, pid: u32, addr: u64) {
        let site = (addr != 0).then(|| self.symbolizers.entry(process).or_insert_with(|| Symbolizer::for_process(pid)).locate(addr)).flatten();
        match site {
            Some(site) => self.pending_sites.insert(thread, site),
            None => self.pending_sites.remove(&thread),
        };
    }

    /// A step of `thread` was taken (`None`: a fault dara injected): its call site, for the listing.
    pub(super) fn note_step(&mut self, thread: Option<ThreadId>) {
        let site = thread.and_then(|t| self.pending_sites.get(&t).cloned());
        self.step_sites.push(site);
    }

    /// Names `addr`, an object `process` (kernel pid `pid`) posted about, for the listing.
    pub(super) fn note_symbol(&mut self, process: ProcessId, pid: u32, addr: u64) {
        if addr < 0x1000 || self.symbols.contains_key(&addr) {
            return;
        }
        if let Some(name) = self.symbol(process, pid, addr) {
            self.symbols.insert(addr, name);
        }
    }

    /// `process` (kernel pid `pid`) is taking a fatal `signal` at `pc` (fault address `addr`,
    /// stack pointer `sp`): names the place, and the program's own frame under a library's fault,
    /// while the process still exists.
    pub(super) fn note_fault(&mut self, process: ProcessId, pid: u32, signal: i32, pc: u64, addr: u64, sp: u64) {
        if signal == libc::SIGABRT {
            return; // an abort's pc is inside libc's raise; its assertion message names it better
        }
        let symbolizer = self.symbolizers.entry(process).or_insert_with(|| Symbolizer::for_process(pid));
        let function = symbolizer.name(pc).or_else(|| symbolizer.module_offset(pc));
        let caller = crate::crash_frame::program_frame(pid, symbolizer, pc, sp);
        self.faults.insert(process, crate::crash_site::fault_location(function, pc, addr, signal, caller));
    }

    /// A new process (kernel pid `pid`) started: map its executable now if it is `instrumented`
    /// (`coverage::executable_is_instrumented`).
    pub(super) fn process_started(&mut self, process: ProcessId, pid: u32, instrumented: bool) {
        if instrumented {
            self.modules.insert(process, coverage::executable_modules(pid));
        }
    }

    /// `process` exec'd a new program: what was known of its old image no longer holds.
    pub(super) fn image_replaced(&mut self, process: ProcessId) {
        self.symbolizers.remove(&process);
        self.modules.remove(&process);
    }

    /// Reads the module map of `process` the first time it shows coverage, while it is alive
    /// (`dara coverage` needs it to symbolize call sites). Reading /proc/<pid>/maps costs about
    /// 40 µs, a fiftieth of a small execution, so it is not done for uninstrumented programs.
    /// A process whose executable calls a receiver was mapped at its `ProcessStart` already
    /// (a program that only returns from `main` posts nothing after that). This catches the
    /// rest (an instrumented library in an uninstrumented executable) at its first post after
    /// a `trace-pc-guard` module handed out guards or any edge was counted: two loads per post.
    /// `pid`: its kernel pid, if alive.
    pub(super) fn note_modules(&mut self, region: &Region, process: ProcessId, pid: Option<u32>) {
        let p = process as usize;
        if p >= MAX_PROCESSES || self.modules.contains_key(&process) {
            return;
        }
        let covered = region.coverage(p).guards.load(Ordering::Relaxed) != 0 || region.coverage_touched(p);
        if let (true, Some(pid)) = (covered, pid) {
            self.modules.insert(process, coverage::executable_modules(pid));
        }
    }
}
