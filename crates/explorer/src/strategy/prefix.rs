//! The replay prefix of the systematic strategies (`dfs`, `dpor`), as loom's `rt::Path`.
//!
//! A stateless search (VeriSoft, CHESS) saves nothing of the program: every execution restarts
//! it and replays the decisions that lead to the next unexplored branch, then decides afresh.
//! [`Path`] holds one node per decision of the last execution, each node the choices offered
//! there and the one taken; what else a node remembers (DFS's alternatives within a bound, DPOR's
//! backtrack and sleep sets) is the strategy's. It checks that a replayed node is offered exactly
//! as when it was first reached: if not, the program is not deterministic under dara and the
//! search stops with a [`Divergence`] rather than explore a tree that is not there.
use dara_model::{Choice, Divergence};

use super::choices_label;

/// What the prefix needs of a strategy's node.
pub(super) trait Recorded {
    /// The choices offered at this node, in the model's order.
    fn offered(&self) -> &[Choice];
    /// Index into [`Recorded::offered`] of the choice the current execution takes here.
    fn taken(&self) -> usize;
}

/// The decision path of the current (or last) execution, and how much of it is replayed.
pub(super) struct Path<N> {
    /// Node `i` is the state before decision `i` of the current (or last) execution.
    nodes: Vec<N>,
    /// Nodes the current execution replays (set by [`Path::begin`]). Invariant: `replay <= nodes.len()`.
    replay: usize,
    /// Decisions taken so far in the current execution, replayed or not.
    depth: usize,
    execution: u64,
    /// The last execution ended inside the replayed prefix; reported by the next decision.
    ended_early: Option<Divergence>,
}

impl<N: Recorded> Path<N> {
    pub(super) fn new() -> Path<N> {
        Path { nodes: Vec::new(), replay: 0, depth: 0, execution: 0, ended_early: None }
    }

    /// Execution `execution` starts: it replays every node of the path.
    pub(super) fn begin(&mut self, execution: u64) {
        self.execution = execution;
        self.depth = 0;
        self.replay = self.nodes.len();
    }

    /// The decision at `step` while the prefix lasts: `Some(index)` of the replayed choice, `None`
    /// past the prefix (the strategy decides, and records it with [`Path::push`] or
    /// [`Path::untracked`]). A node offered differently from before, or an earlier execution that
    /// ended inside its prefix, is a divergence.
    pub(super) fn replayed(&mut self, step: u64, offered: &[Choice]) -> Result<Option<usize>, Divergence> {
        if let Some(d) = self.ended_early.take() {
            return Err(d);
        }
        let Some(node) = self.nodes.get(self.depth).filter(|_| self.depth < self.replay) else {
            return Ok(None);
        };
        if node.offered() != offered {
            return Err(Divergence { step, expected: as_before(node.offered()), seen: choices_label(offered) });
        }
        self.depth += 1;
        Ok(Some(node.taken()))
    }

    /// A decision past the prefix, with its node.
    pub(super) fn push(&mut self, node: N) {
        debug_assert_eq!(self.depth, self.nodes.len(), "past the prefix, every decision is a new node");
        self.nodes.push(node);
        self.depth += 1;
    }

    /// A decision past the prefix that the tree does not record (DPOR's sleep-set blocked tail).
    pub(super) fn untracked(&mut self) {
        self.depth += 1;
    }

    /// The execution ended after `steps` decisions. False when it ended inside its prefix: the
    /// next decision then reports the divergence, and the tree is left as it was.
    pub(super) fn end(&mut self, steps: u64) -> bool {
        if self.depth >= self.replay {
            return true;
        }
        let expected = as_before(self.nodes[self.depth].offered());
        let seen = format!("nothing: execution {} ended after {steps} steps", self.execution);
        self.ended_early = Some(Divergence { step: steps, expected, seen });
        false
    }

    /// Moves to the next branch: drops nodes from the deepest until `next` moves one to another
    /// of its alternatives (returning true). False when no node has one: the tree is explored.
    pub(super) fn backtrack(&mut self, mut next: impl FnMut(&mut N) -> bool) -> bool {
        while let Some(node) = self.nodes.last_mut() {
            if next(node) {
                return true;
            }
            self.nodes.pop();
        }
        false
    }

    /// Decisions taken so far in the current execution.
    pub(super) fn depth(&self) -> usize {
        self.depth
    }

    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The node of the last decision recorded.
    pub(super) fn last(&self) -> Option<&N> {
        self.nodes.last()
    }

    pub(super) fn nodes_mut(&mut self) -> &mut [N] {
        &mut self.nodes
    }

    /// Forgets the nodes from `len` on.
    pub(super) fn truncate(&mut self, len: usize) {
        self.nodes.truncate(len);
    }
}

/// What a replayed node should have offered, for divergence reports.
fn as_before(offered: &[Choice]) -> String {
    format!("{} as in earlier executions with the same decisions", choices_label(offered))
}

#[cfg(test)]
mod tests {
    use dara_abi::Op;

    use super::super::testkit::run_choice;
    use super::*;

    struct Node {
        offered: Vec<Choice>,
        taken: usize,
    }

    impl Recorded for Node {
        fn offered(&self) -> &[Choice] {
            &self.offered
        }

        fn taken(&self) -> usize {
            self.taken
        }
    }

    fn two() -> Vec<Choice> {
        vec![run_choice(0, Op::Yield, 0), run_choice(1, Op::Yield, 0)]
    }

    #[test]
    fn replays_the_recorded_path_then_hands_over() {
        let mut path = Path::new();
        path.begin(0);
        assert_eq!(path.replayed(0, &two()).unwrap(), None);
        path.push(Node { offered: two(), taken: 1 });
        assert_eq!(path.replayed(1, &two()).unwrap(), None);
        path.push(Node { offered: two(), taken: 0 });
        assert!(path.end(2));
        // The next branch: the deepest node has no other alternative, the first takes 0.
        assert!(path.backtrack(|n| n.taken == 1 && path_switch(n)));
        assert_eq!(path.len(), 1);
        path.begin(1);
        assert_eq!(path.replayed(0, &two()).unwrap(), Some(0));
        assert_eq!(path.replayed(1, &two()).unwrap(), None);
        assert_eq!(path.depth(), 1);
        assert!(!path.backtrack(|_| false), "nothing left once every node is done");
    }

    fn path_switch(n: &mut Node) -> bool {
        n.taken = 0;
        true
    }

    #[test]
    fn a_changed_node_or_a_short_run_is_a_divergence() {
        let mut path = Path::new();
        path.begin(0);
        path.replayed(0, &two()).unwrap();
        path.push(Node { offered: two(), taken: 0 });
        path.begin(1);
        let d = path.replayed(0, &two()[..1]).unwrap_err();
        assert_eq!(d.step, 0);
        assert_eq!(d.seen, "<thread 0 run yield 0x0>");
        assert!(d.expected.ends_with("as in earlier executions with the same decisions"), "{}", d.expected);
        // An execution that ends before its prefix does: reported at the next decision.
        path.begin(2);
        assert!(!path.end(0));
        let d = path.replayed(0, &two()).unwrap_err();
        assert_eq!(d.seen, "nothing: execution 2 ended after 0 steps");
    }
}
