//! Simulated programs for strategy tests, and the search loop in miniature: each program offers
//! choices the way the model does (in thread order) and applies the chosen one. Test-only.
use std::collections::BTreeMap;

use dara_abi::Op;
use dara_model::choice::ProcessId;
use dara_model::coverage::ProcessCoverage;
use dara_model::property::ExecutionProperties;
use dara_model::{Choice, ChoiceKind};

use super::{Feedback, Start, Status, Strategy};

pub(crate) trait Program {
    /// Enabled choices; empty when the program is finished.
    fn choices(&self) -> Vec<Choice>;
    fn apply(&mut self, c: &Choice);
    /// What the program reports at its end, per process. Default: none.
    fn coverage(&self) -> BTreeMap<ProcessId, ProcessCoverage> {
        BTreeMap::new()
    }
    /// The properties it declared and evaluated. Default: none.
    fn properties(&self) -> ExecutionProperties {
        ExecutionProperties::empty()
    }
}

pub(crate) fn run_choice(thread: u32, op: Op, obj: u64) -> Choice {
    Choice { thread, kind: ChoiceKind::Run, alt: 0, op, obj }
}

/// Executions of one search, started as the search loop starts them: execution 0 uncalibrated,
/// every later one with execution 0's length.
#[derive(Default)]
pub(crate) struct Search {
    first_steps: Option<u64>,
    /// What the strategy said after the last execution.
    pub status: Status,
}

impl Search {
    pub(crate) fn new() -> Search {
        Search::default()
    }

    /// Runs execution `execution` of `program` under `strategy` for at most `max_steps`
    /// decisions. Returns the decisions taken and whether the program finished.
    pub(crate) fn run(
        &mut self,
        strategy: &mut dyn Strategy,
        execution: u64,
        program: &mut dyn Program,
        max_steps: u64,
    ) -> (Vec<Choice>, bool) {
        let start = Start { execution, first_steps: self.first_steps.filter(|_| execution > 0) };
        let (taken, finished, status) = execute(strategy, start, program, max_steps);
        if execution == 0 {
            self.first_steps = Some(taken.len() as u64);
        }
        self.status = status;
        (taken, finished)
    }
}

/// One execution started with `start`, outside any search: the decisions taken and whether the
/// program finished.
pub(crate) fn run(strategy: &mut dyn Strategy, start: Start, program: &mut dyn Program, max_steps: u64) -> (Vec<Choice>, bool) {
    let (taken, finished, _) = execute(strategy, start, program, max_steps);
    (taken, finished)
}

fn execute(strategy: &mut dyn Strategy, start: Start, program: &mut dyn Program, max_steps: u64) -> (Vec<Choice>, bool, Status) {
    strategy.begin_execution(start);
    let mut taken = Vec::new();
    let mut finished = false;
    for step in 0..max_steps {
        let choices = program.choices();
        if choices.is_empty() {
            finished = true;
            break;
        }
        let i = strategy.choose(step, &choices).expect("strategy diverged");
        assert!(i < choices.len(), "index {i} out of {} choices", choices.len());
        program.apply(&choices[i]);
        taken.push(choices[i]);
    }
    finished |= program.choices().is_empty();
    let (coverage, properties) = (program.coverage(), program.properties());
    let status = strategy.end_execution(&Feedback { choices: &taken, coverage: &coverage, properties: &properties });
    (taken, finished, status)
}

/// Straight-line threads: thread `t` performs `ops[t]` in order, one op per step. The object
/// of each choice is `0x1000 * (t + 1) + index` so every step is distinguishable. A `Sleep`
/// op also offers a `Timeout` choice.
pub(crate) struct Straight {
    pub ops: Vec<Vec<Op>>,
    pub pc: Vec<usize>,
    /// (thread, op index) in execution order.
    pub history: Vec<(u32, usize)>,
}

impl Straight {
    pub(crate) fn new(ops: Vec<Vec<Op>>) -> Straight {
        let n = ops.len();
        Straight { ops, pc: vec![0; n], history: Vec::new() }
    }

    /// Position in `history` of thread `t`'s op `i`.
    pub(crate) fn when(&self, t: u32, i: usize) -> Option<usize> {
        self.history.iter().position(|&h| h == (t, i))
    }
}

impl Program for Straight {
    fn choices(&self) -> Vec<Choice> {
        let mut out = Vec::new();
        for (t, ops) in self.ops.iter().enumerate() {
            if let Some(&op) = ops.get(self.pc[t]) {
                let c = run_choice(t as u32, op, 0x1000 * (t as u64 + 1) + self.pc[t] as u64);
                out.push(c);
                if op == Op::Sleep {
                    out.push(Choice { kind: ChoiceKind::Timeout, ..c });
                }
            }
        }
        out
    }

    fn apply(&mut self, c: &Choice) {
        let t = c.thread as usize;
        self.history.push((c.thread, self.pc[t]));
        self.pc[t] += 1;
    }
}
