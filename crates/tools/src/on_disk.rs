//! What a diverged replay says about on-disk state. A replay starts from the disk as it is now,
//! not as it was when the run was recorded: a pid file the recorded run left behind, a data file
//! it wrote or a log it appended to can make the same decisions lead elsewhere (nginx refuses to
//! start over a stale pid file). The trace names the files the recorded run opened for writing
//! (`TraceHeader::written`), and its `--setup` command, if any, runs before every replay.
use dara_model::trace::WrittenFiles;

/// Most file names the note lists; the rest are counted.
const LISTED: usize = 5;

/// One line for a replay that diverged: on-disk state may be why, which files the recorded run
/// wrote (`written`), and what to do. `setup`: the trace's setup command; `setup_skipped`:
/// `--no-setup` was given.
pub fn divergence_note(written: &WrittenFiles, setup: Option<&str>, setup_skipped: bool) -> String {
    let files = if written.is_empty() {
        "dara saw it open no file for writing (files changed by other means, e.g. rename, mkdir or raw system calls, are not noted)".to_string()
    } else {
        let shown: Vec<&str> = written.paths.iter().take(LISTED).map(String::as_str).collect();
        let hidden = written.paths.len().saturating_sub(LISTED);
        let more = match (hidden, written.more) {
            (0, false) => String::new(),
            (n, false) => format!(" and {n} more"),
            (_, true) => " and more".to_string(),
        };
        format!("the recorded run wrote {}{more}", shown.join(", "))
    };
    let remedy = match (setup, setup_skipped) {
        (Some(setup), false) => format!("the recorded setup `{setup}` ran before this replay; make it restore them"),
        (Some(setup), true) => format!("the recorded setup `{setup}` was skipped (--no-setup)"),
        (None, _) => "remove or restore them, or record again with --setup 'CMD' (e.g. 'rm -f FILE'), which every replay runs first".to_string(),
    };
    format!("note: the replay may differ because files on disk differ from when the run was recorded: {files}; {remedy}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(paths: &[&str], more: bool) -> WrittenFiles {
        WrittenFiles { paths: paths.iter().map(|p| p.to_string()).collect(), more }
    }

    #[test]
    fn names_the_files_and_the_remedy() {
        let note = divergence_note(&written(&["/run/x.pid"], false), None, false);
        assert!(note.contains("files on disk") && note.contains("/run/x.pid") && note.contains("--setup"), "{note}");
        let many: Vec<String> = (0..7).map(|i| format!("/d/{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let note = divergence_note(&written(&many, false), Some("rm -rf /d"), true);
        assert!(note.contains("/d/4 and 2 more") && !note.contains("/d/5") && note.contains("skipped (--no-setup)"), "{note}");
        let note = divergence_note(&written(&[], false), Some("rm -f a"), false);
        assert!(note.contains("no file for writing") && note.contains("`rm -f a` ran"), "{note}");
        assert!(!note.contains('\n'));
        assert!(divergence_note(&written(&["/a"], true), None, false).contains("/a and more"));
    }
}
