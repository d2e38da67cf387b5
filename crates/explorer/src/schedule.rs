//! Schedules written by a person, after Vtrace: a suspected interleaving, in the listing's own
//! format, made into a deterministic run that either shows the outcome or says which line could
//! not be followed and what the program offered instead.
//!
//! A schedule is a text of steps, one a line: `THREAD OPERATION [OBJECT]`, e.g. `t2 mutex-lock
//! alice`, exactly as `dara-replay` lists them (the step number, the virtual time, the `>>` mark
//! and `-> RESULT` may stay; a `p0/t2` or `node:p0/t2` thread names thread 2; `(timeout)` and
//! `(signal)` after the operation name the other ways a thread moves on). A line without a thread
//! (the listing's header, notes) and lines starting with `#` are skipped, so a pasted listing is a
//! schedule. A line may be left out where the choice is forced (one thread could move): the
//! follower fills such steps in. When the schedule is used up the run goes on without preemption
//! (the last thread while it can, else the lowest), so a schedule needs to say only as much as the
//! suspected bug needs.
//!
//! Where Vtrace's follower deviates: objects are checked after the run, against the listing's
//! names (the decision sees addresses, not symbols); a line naming another object is reported,
//! not refused.
use dara_model::choice::{Choice, ChoiceKind, ThreadId, FAULT_THREAD};
use dara_model::{Decide, Divergence};

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleLine {
    /// 1-based line number in the file.
    pub line: usize,
    pub thread: ThreadId,
    /// The operation's name as the listing shows it (`mutex-lock`).
    pub op: String,
    pub kind: ChoiceKind,
    /// The object column, if the line has one (checked after the run).
    pub object: Option<String>,
    /// The line as written, trimmed.
    pub text: String,
}

/// Parses a schedule; Err names the first line that looks like a step but is not one.
pub fn parse(text: &str) -> Result<Vec<ScheduleLine>, String> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let without_result = trimmed.split(" -> ").next().unwrap_or(trimmed).trim_end();
        let without_result = without_result.strip_suffix(" blocks").unwrap_or(without_result);
        let mut words: Vec<&str> = without_result.split_whitespace().collect();
        if words.first() == Some(&">>") {
            words.remove(0);
        }
        // Skip the step number and the virtual time, if present.
        while words.first().is_some_and(|w| w.parse::<u64>().is_ok() || is_vtime(w)) {
            words.remove(0);
        }
        let Some(thread) = words.first().and_then(|w| thread_of(w)) else {
            continue; // a header, a note, an outside event: not a step
        };
        let Some(&op) = words.get(1) else {
            return Err(format!("line {}: `{trimmed}` names thread {thread} but no operation", i + 1));
        };
        let mut rest = &words[2..];
        let kind = match rest.first() {
            Some(&"(timeout)") => ChoiceKind::Timeout,
            Some(&"(signal)") => ChoiceKind::Interrupt,
            _ => ChoiceKind::Run,
        };
        if kind != ChoiceKind::Run {
            rest = &rest[1..];
        }
        if dara_abi::Op::from_name(op).is_none() {
            return Err(format!("line {}: `{op}` is not an operation dara lists (e.g. mutex-lock, thread-create, join, sleep)", i + 1));
        }
        let object = (!rest.is_empty()).then(|| rest.join(" "));
        lines.push(ScheduleLine { line: i + 1, thread, op: op.to_string(), kind, object, text: trimmed.to_string() });
    }
    Ok(lines)
}

/// `0.000s`, `12.5ms`: the listing's virtual time column.
fn is_vtime(word: &str) -> bool {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == 'µ');
    digits.len() < word.len() && !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// The thread a listing's thread column names: `t3`, `p1/t3`, `node:p1/t3`.
fn thread_of(word: &str) -> Option<ThreadId> {
    word.rsplit('/').next()?.rsplit(':').next()?.strip_prefix('t')?.parse().ok()
}

/// How a followed schedule went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    /// For each step of the run, the schedule line (index into the lines) it followed; None for
    /// a step filled in (forced, or after the schedule ran out).
    pub lines_at: Vec<Option<usize>>,
    /// Lines followed (all of them unless the run diverged or ended first).
    pub followed: usize,
}

/// The decider that enforces a schedule.
pub struct FollowSchedule {
    lines: Vec<ScheduleLine>,
    next: usize,
    last: Option<ThreadId>,
    pub followed: Followed,
}

impl FollowSchedule {
    pub fn new(lines: Vec<ScheduleLine>) -> FollowSchedule {
        FollowSchedule { lines, next: 0, last: None, followed: Followed::default() }
    }

    fn matches(line: &ScheduleLine, c: &Choice) -> bool {
        c.thread == line.thread && c.kind == line.kind && c.op.name() == line.op
    }

    /// After the schedule: the last thread while it can move, else the first choice.
    fn without_preemption(&self, choices: &[Choice]) -> usize {
        self.last.and_then(|t| choices.iter().position(|c| c.thread == t && c.kind == ChoiceKind::Run)).unwrap_or(0)
    }
}

impl Decide for FollowSchedule {
    fn choose(&mut self, step: u64, choices: &[Choice]) -> Result<usize, Divergence> {
        let (index, line) = match self.lines.get(self.next) {
            Some(line) => match choices.iter().position(|c| Self::matches(line, c)) {
                Some(i) => {
                    self.next += 1;
                    (i, Some(self.next - 1))
                }
                None if choices.len() == 1 => (0, None),
                None => {
                    return Err(Divergence {
                        step,
                        expected: format!("line {} of the schedule (`{}`)", line.line, line.text),
                        seen: offered(choices),
                    })
                }
            },
            None => (self.without_preemption(choices), None),
        };
        self.followed.lines_at.push(line);
        self.followed.followed = self.next;
        self.last = choices.get(index).map(|c| c.thread).filter(|&t| t != FAULT_THREAD);
        Ok(index)
    }
}

/// The choices a step offered, as a schedule would name them.
pub fn offered(choices: &[Choice]) -> String {
    let named: Vec<String> = choices
        .iter()
        .map(|c| {
            let kind = match c.kind {
                ChoiceKind::Timeout => " (timeout)",
                ChoiceKind::Interrupt => " (signal)",
                ChoiceKind::Fault => " (fault)",
                ChoiceKind::Run => "",
            };
            let who = if c.thread == FAULT_THREAD { "dara".to_string() } else { format!("t{}", c.thread) };
            format!("{who} {}{kind}", c.op.name())
        })
        .collect();
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dara_abi::Op;

    fn choice(thread: ThreadId, op: Op) -> Choice {
        Choice { thread, kind: ChoiceKind::Run, alt: 0, op, obj: 0x10 }
    }

    #[test]
    fn a_pasted_listing_is_a_schedule() {
        let text = "replaying t.bin (3 steps): ./demo\n   step     vtime  thread       operation        object     result\n        0    0.000s  t0           process-start    demo   -> 0\n>>      6    0.000s  p0/t2        mutex-lock       alice (0x555555558060)   -> 0\n# a comment\nkv1:p1/t4 sleep (timeout)\n1 preemption(s), marked >>: ...\n";
        let lines = parse(text).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!((lines[0].thread, lines[0].op.as_str(), lines[0].object.as_deref()), (0, "process-start", Some("demo")));
        assert_eq!((lines[1].thread, lines[1].object.as_deref(), lines[1].line), (2, Some("alice (0x555555558060)"), 4));
        assert_eq!((lines[2].thread, lines[2].kind, lines[2].object.as_deref()), (4, ChoiceKind::Timeout, None));
        assert!(parse("t1 frobnicate x").unwrap_err().contains("`frobnicate` is not an operation"));
    }

    #[test]
    fn forced_steps_are_filled_in_and_a_line_that_cannot_be_followed_is_named() {
        let mut f = FollowSchedule::new(parse("t2 mutex-lock\nt1 mutex-lock\n").unwrap());
        // Forced: only thread 1 can move; the line for thread 2 waits.
        assert_eq!(f.choose(0, &[choice(1, Op::ThreadCreate)]).unwrap(), 0);
        // Thread 2's lock is offered: followed.
        assert_eq!(f.choose(1, &[choice(1, Op::MutexLock), choice(2, Op::MutexLock)]).unwrap(), 1);
        // Thread 1's lock is not offered among two others: the line is named with the offer.
        let err = f.choose(2, &[choice(2, Op::MutexUnlock), choice(3, Op::ThreadJoin)]).unwrap_err();
        assert_eq!(err.expected, "line 2 of the schedule (`t1 mutex-lock`)");
        assert_eq!(err.seen, "t2 mutex-unlock, t3 join");
        assert_eq!(f.followed.lines_at, vec![None, Some(0)]);
    }

    #[test]
    fn after_the_schedule_the_run_goes_on_without_preemption() {
        let mut f = FollowSchedule::new(parse("t2 mutex-lock").unwrap());
        assert_eq!(f.choose(0, &[choice(1, Op::MutexLock), choice(2, Op::MutexLock)]).unwrap(), 1);
        assert_eq!(f.choose(1, &[choice(1, Op::MutexLock), choice(2, Op::MutexUnlock)]).unwrap(), 1, "thread 2 keeps going");
        assert_eq!(f.choose(2, &[choice(1, Op::MutexLock), choice(3, Op::ThreadJoin)]).unwrap(), 0, "then the lowest");
        assert_eq!(f.followed.followed, 1);
    }
}
