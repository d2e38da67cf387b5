//! Results for machines: the JSON document `dara-trace --json` and `dara-replay --json` print on
//! stdout, and the JUnit XML file `dara-trace --junit FILE` writes for CI systems.
//!
//! With `--json`, stdout holds the document alone. [`JsonStdout::take`] moves everything else off
//! it before the run starts: descriptor 1 becomes a copy of stderr, so the program's output (which
//! dara copies to its descriptor 1) and `dara-replay`'s own lines go to stderr (`dara-trace` always
//! writes its lines there), and the document is written at the end to the descriptor stdout was.
//! Exit codes do not change with `--json`.
//! The fields are documented in docs/results.md; a field is added, never renamed.
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::Context;
use dara_model::Outcome;
use serde::Serialize;

/// Version of the documents' layout (`"format"`), raised when a field changes meaning.
pub const FORMAT: u32 = 1;

/// Where the document goes: the descriptor stdout was before [`JsonStdout::take`].
pub struct JsonStdout(File);

impl JsonStdout {
    /// Keeps stdout for the document and points descriptor 1 at stderr.
    pub fn take() -> anyhow::Result<JsonStdout> {
        // SAFETY: dup and dup2 on descriptors this process owns; nothing else holds a pointer to
        // them, and Rust's stdout handle writes to descriptor 1 whatever it names.
        let saved = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
        if saved < 0 {
            return Err(std::io::Error::last_os_error()).context("--json: cannot keep stdout for the document");
        }
        // SAFETY: `saved` was just returned by fcntl and is owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(saved) });
        let _ = std::io::stdout().flush();
        // SAFETY: descriptor 2 is open (or dup2 fails harmlessly); see above.
        if unsafe { libc::dup2(2, 1) } < 0 {
            return Err(std::io::Error::last_os_error()).context("--json: cannot send the program's output to stderr");
        }
        Ok(JsonStdout(file))
    }

    /// Writes `document` as one line of JSON.
    pub fn write<T: Serialize>(mut self, document: &T) -> anyhow::Result<()> {
        let _ = std::io::stdout().flush();
        let mut text = serde_json::to_string(document).context("--json: cannot encode the results")?;
        text.push('\n');
        self.0.write_all(text.as_bytes()).context("--json: cannot write the results to stdout")
    }
}

/// An outcome as machines read it: its kind, the identity bugs are deduplicated by, the line a
/// person reads, and the outcome's own fields.
#[derive(Serialize, Debug)]
pub struct OutcomeEntry {
    /// `exited`, `crashed`, `deadlock`, `hang`, ... (the same word as `detail.kind`).
    pub kind: String,
    /// Whether it is a bug of the program.
    pub bug: bool,
    /// Equal identities are one bug (kind and location, without addresses).
    pub identity: String,
    pub summary: String,
    pub detail: Outcome,
}

impl OutcomeEntry {
    pub fn of(outcome: &Outcome) -> OutcomeEntry {
        let detail = outcome.clone();
        let kind = serde_json::to_value(&detail).ok().and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string)).unwrap_or_default();
        OutcomeEntry { kind, bug: outcome.is_bug(), identity: outcome.signature(), summary: outcome.summary(), detail }
    }
}

/// One distinct bug of a search.
#[derive(Serialize, Debug)]
pub struct BugEntry {
    pub outcome: OutcomeEntry,
    /// The execution (0-based) that found it, and its length in scheduling steps.
    pub execution: u64,
    pub steps: usize,
    /// The bug's directory (trace.bin, summary.txt) and its trace.
    pub dir: PathBuf,
    pub trace: PathBuf,
    /// The smaller failing schedule minimization saved, if any.
    pub minimal: Option<PathBuf>,
    /// The seed of the program's random streams in that execution (from the trace's header).
    pub random_seed: Option<u64>,
    /// The command that reproduces it.
    pub replay: String,
    /// A liveness violation's critical transition (from the trace's header), if found.
    pub critical_transition: Option<dara_model::liveness::CriticalTransition>,
}

impl BugEntry {
    pub fn new(outcome: &Outcome, execution: u64, steps: usize, dir: &Path, trace: &Path, minimal: Option<PathBuf>) -> BugEntry {
        let replay_trace = minimal.as_deref().unwrap_or(trace);
        let header = dara_model::trace::read_file(trace).ok().map(|t| t.header);
        let random_seed = header.as_ref().map(|h| h.random_seed);
        let critical_transition = header.and_then(|h| h.critical_transition);
        BugEntry {
            outcome: OutcomeEntry::of(outcome),
            execution,
            steps,
            dir: dir.to_path_buf(),
            trace: trace.to_path_buf(),
            replay: format!("{} {}", crate::invocation::tool_command("dara-replay"), shell_word(&replay_trace.display().to_string())),
            minimal,
            random_seed,
            critical_transition,
        }
    }
}

/// One user property over a search.
#[derive(Serialize, Debug)]
pub struct PropertyEntry {
    /// `always`, `sometimes`, `reachable`, `unreachable` or `eventually`.
    pub kind: dara_model::property::PropertyKind,
    pub name: String,
    /// Executions that evaluated (reached) it, held it at least once, and broke it.
    pub executions: u64,
    pub executions_held: u64,
    pub executions_broken: u64,
    pub evaluations: u64,
    /// A goal met (a `sometimes` held, a `reachable` reached) or a claim kept in every execution.
    pub satisfied: bool,
    /// A goal met: the (0-based) execution that met it first, and that execution's trace (saved
    /// as `goal-NNNN/trace.bin`); null otherwise.
    pub first_met: Option<u64>,
    pub first_met_trace: Option<PathBuf>,
}

impl PropertyEntry {
    /// The search's properties, goals with the trace of the first execution that met them.
    pub fn list(properties: &dara_model::property::SearchProperties, goals: &[dara_explorer::search::SavedGoal]) -> Vec<PropertyEntry> {
        properties
            .0
            .iter()
            .map(|((kind, name), t)| PropertyEntry {
                kind: *kind,
                name: name.clone(),
                executions: t.executions,
                executions_held: t.executions_held,
                executions_broken: t.executions_broken,
                evaluations: t.evaluations,
                satisfied: dara_model::property::SearchProperties::satisfied(*kind, t),
                first_met: t.first_met,
                first_met_trace: goals.iter().find(|g| g.kind == *kind && g.name == *name).map(|g| g.trace.clone()),
            })
            .collect()
    }

    /// One line for people: what happened to it over `executions` executions.
    pub fn line(&self, executions: u64) -> String {
        use dara_model::property::PropertyKind as K;
        let name = format!("\"{}\"", self.name);
        let what = match self.kind {
            K::Sometimes | K::Reachable if !self.satisfied => {
                let verb = if self.kind == K::Reachable { "reached" } else { "held" };
                format!("NEVER {verb} in {executions} executions{}", if self.executions > 0 { format!(" (evaluated in {})", self.executions) } else { String::new() })
            }
            K::Sometimes => format!("held in {} of {executions} executions{}", self.executions_held, self.first(executions)),
            K::Reachable => format!("reached in {} of {executions} executions ({} times){}", self.executions, self.evaluations, self.first(executions)),
            K::Unreachable if self.executions == 0 => format!("never reached in {executions} executions"),
            _ if self.executions_broken > 0 => format!("BROKEN in {} of {} executions that evaluated it", self.executions_broken, self.executions),
            _ if self.executions == 0 => format!("never evaluated in {executions} executions"),
            _ => format!("held in all {} executions that evaluated it ({} evaluations)", self.executions, self.evaluations),
        };
        format!("{:<11} {name:<32} {what}", self.kind.word())
    }

    /// ", first in execution K (TRACE)" for a goal met in a search of more than one execution.
    fn first(&self, executions: u64) -> String {
        match (self.first_met, &self.first_met_trace) {
            (Some(k), Some(trace)) if executions > 1 => format!(", first in execution {k} ({})", trace.display()),
            _ => String::new(),
        }
    }
}

/// How a search ended, for machines.
#[derive(Serialize, Debug)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EndEntry {
    /// Every execution asked for ran, or the search stopped at its first bug.
    Completed,
    /// A systematic strategy explored its whole space and saw every interleaving point; `note`
    /// says what that proves.
    Exhausted { note: String },
    /// A systematic strategy explored its whole space, but some interleavings were out of sight
    /// (`reason`, with the build line that fixes it), so nothing is proved; `explored` says what ran.
    NotExhaustive { explored: String, reason: String },
    TimeBudget,
    Interrupted,
    /// An execution met something dara cannot control; the search stopped (exit 2).
    Uncontrolled { outcome: OutcomeEntry },
    /// dara-trace could not run the program or search (exit 2): `message` says why.
    Error { message: String },
}

/// `dara-trace --json`'s document.
#[derive(Serialize, Debug)]
pub struct SearchDocument {
    pub format: u32,
    pub tool: &'static str,
    pub dara_version: &'static str,
    pub command: Vec<String>,
    pub strategy: String,
    /// The search's seed: the same seed gives the same executions.
    pub seed: u64,
    /// Executions asked for, and run.
    pub runs: u64,
    pub executions: u64,
    /// Whether this was a recording (one run, outside peers allowed) rather than a search.
    pub recording: bool,
    pub end: EndEntry,
    /// Executions by how they ended (outcome kind: count).
    pub outcomes: std::collections::BTreeMap<String, u64>,
    pub bugs: Vec<BugEntry>,
    /// The last execution's trace.
    pub last_trace: Option<PathBuf>,
    /// Distinct coverage edges reached (instrumented programs only; 0 otherwise).
    pub coverage_edges: usize,
    pub wall_seconds: f64,
    /// What the strategy wanted the user to know.
    pub notes: Vec<String>,
    /// The user properties the program declared or evaluated (docs/properties.md).
    pub properties: Vec<PropertyEntry>,
    /// dara-trace's exit status.
    pub exit_code: u8,
}

impl SearchDocument {
    /// The document of a dara-trace run that failed before or while searching.
    pub fn error(command: Vec<String>, strategy: String, seed: u64, runs: u64, message: String) -> SearchDocument {
        SearchDocument {
            format: FORMAT,
            tool: "dara-trace",
            dara_version: env!("CARGO_PKG_VERSION"),
            command,
            strategy,
            seed,
            runs,
            executions: 0,
            recording: false,
            end: EndEntry::Error { message },
            outcomes: Default::default(),
            bugs: Vec::new(),
            last_trace: None,
            coverage_edges: 0,
            wall_seconds: 0.0,
            notes: Vec::new(),
            properties: Vec::new(),
            exit_code: 2,
        }
    }
}

/// `dara-replay --json`'s document.
#[derive(Serialize, Debug)]
pub struct ReplayDocument {
    pub format: u32,
    pub tool: &'static str,
    pub dara_version: &'static str,
    pub trace: PathBuf,
    pub command: Vec<String>,
    /// Steps in the trace, and steps the replay ran.
    pub recorded_steps: usize,
    pub replayed_steps: usize,
    /// `reproduced` (the bug again, exit 1), `clean` (ran clean as recorded, exit 0), `diverged`
    /// (exit 3), `interrupted` (exit 130), `error` (exit 2).
    pub verdict: &'static str,
    pub recorded_outcome: Option<OutcomeEntry>,
    pub outcome: Option<OutcomeEntry>,
    /// What differed, when the verdict is `diverged`.
    pub divergence: Option<String>,
    /// With `--verify`: the extra replays run and whether they were identical.
    pub verified: Option<bool>,
    pub exit_code: u8,
    /// Why the replay could not run (verdict `error`).
    pub error: Option<String>,
    /// A liveness violation's critical transition (from the trace's header).
    pub critical_transition: Option<dara_model::liveness::CriticalTransition>,
}

impl ReplayDocument {
    pub fn new(trace: &Path) -> ReplayDocument {
        ReplayDocument {
            format: FORMAT,
            tool: "dara-replay",
            dara_version: env!("CARGO_PKG_VERSION"),
            trace: trace.to_path_buf(),
            command: Vec::new(),
            recorded_steps: 0,
            replayed_steps: 0,
            verdict: "error",
            recorded_outcome: None,
            outcome: None,
            divergence: None,
            verified: None,
            exit_code: 2,
            error: None,
            critical_transition: None,
        }
    }
}

/// Writes a JUnit XML report of a search: one test case per distinct bug (failed), or one
/// passing case when none was found; a search dara could not finish is an `error` case.
pub fn write_junit(path: &Path, doc: &SearchDocument) -> anyhow::Result<()> {
    let name = format!("dara-trace {}", doc.command.join(" "));
    let class = "dara";
    let mut cases = String::new();
    let mut failures = 0;
    let mut errors = 0;
    for bug in &doc.bugs {
        failures += 1;
        let body = format!("execution {} ({} steps), seed {}, strategy {}\ntrace: {}\nreplay: {}", bug.execution, bug.steps, doc.seed, doc.strategy, bug.trace.display(), bug.replay);
        cases += &format!(
            "    <testcase classname=\"{class}\" name=\"{}\" time=\"0\">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>\n",
            xml(&bug.outcome.identity),
            xml(&bug.outcome.kind),
            xml(&bug.outcome.summary),
            xml(&body)
        );
    }
    let problem = match &doc.end {
        EndEntry::Uncontrolled { outcome } => Some(("uncontrolled", outcome.summary.clone())),
        EndEntry::Error { message } => Some(("error", message.clone())),
        EndEntry::Interrupted => Some(("interrupted", format!("interrupted after {} executions", doc.executions))),
        _ => None,
    };
    if let Some((kind, message)) = problem {
        errors += 1;
        cases += &format!("    <testcase classname=\"{class}\" name=\"search\" time=\"{:.3}\">\n      <error type=\"{kind}\" message=\"{}\"/>\n    </testcase>\n", doc.wall_seconds, xml(&message));
    } else if doc.bugs.is_empty() {
        cases += &format!("    <testcase classname=\"{class}\" name=\"no bug in {} executions ({})\" time=\"{:.3}\"/>\n", doc.executions, xml(&doc.strategy), doc.wall_seconds);
    }
    let tests = doc.bugs.len().max(1) + usize::from(problem_is_extra(doc));
    let text = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{:.3}\">\n{cases}  </testsuite>\n</testsuites>\n",
        xml(&name),
        doc.wall_seconds
    );
    std::fs::write(path, text).with_context(|| format!("cannot write the JUnit report {}", path.display()))
}

/// Whether the error case of a search comes on top of its bug cases.
fn problem_is_extra(doc: &SearchDocument) -> bool {
    !doc.bugs.is_empty() && matches!(doc.end, EndEntry::Uncontrolled { .. } | EndEntry::Error { .. } | EndEntry::Interrupted)
}

/// `text` escaped for XML attribute values and character data.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot hold at all.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// `word` quoted for a POSIX shell when it needs it.
pub(crate) fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_markup_and_control_characters() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;?");
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("dara-out/bug-0001/trace.bin"), "dara-out/bug-0001/trace.bin");
        assert_eq!(shell_word("my dir/it's.bin"), "'my dir/it'\\''s.bin'");
    }

    #[test]
    fn an_outcome_entry_names_its_kind_and_identity() {
        let e = OutcomeEntry::of(&Outcome::Exited { code: 3, location: None });
        assert_eq!((e.kind.as_str(), e.bug, e.identity.as_str()), ("exited", true, "exit:3"));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["detail"]["code"], 3);
    }

    #[test]
    fn junit_counts_bugs_as_failures() {
        let mut doc = SearchDocument::error(vec!["./prog".into()], "pct:3".into(), 7, 10, String::new());
        doc.end = EndEntry::Completed;
        doc.exit_code = 1;
        let outcome = Outcome::Exited { code: 3, location: None };
        doc.bugs.push(BugEntry::new(&outcome, 4, 20, Path::new("out/bug-0001"), Path::new("out/bug-0001/trace.bin"), None));
        let path = std::env::temp_dir().join(format!("dara-junit-{}.xml", std::process::id()));
        write_junit(&path, &doc).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(text.contains("tests=\"1\" failures=\"1\" errors=\"0\""), "{text}");
        assert!(text.contains("<failure type=\"exited\" message=\"BUG: exited with status 3\">"), "{text}");
        assert!(text.contains("replay: dara-replay out/bug-0001/trace.bin"), "{text}");
    }
}
