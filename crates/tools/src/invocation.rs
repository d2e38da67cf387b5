//! How a tool names another of dara's tools in a command it prints for the user to run
//! ("replay: dara-replay out/bug-0001/trace.bin"): by its bare name only where the user's PATH
//! finds that very program, else by its path (relative to the current directory when under it),
//! so that the printed line works when pasted, on a fresh clone before anything is installed too.
use std::path::{Path, PathBuf};

/// The command that runs dara's tool `name` (`dara-replay`, `dara`): the tool beside the running
/// executable, named as the user's shell would find it.
pub fn tool_command(name: &str) -> String {
    let Some(sibling) = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join(name))) else {
        return name.to_string();
    };
    if !sibling.is_file() {
        return name.to_string();
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let cwd = std::env::current_dir().ok();
    spelled(name, &sibling, std::env::split_paths(&path_var), cwd.as_deref())
}

/// `name` when the first `name` on `path` is `sibling` itself; else `sibling`, as `./rel/path`
/// under `cwd` or absolute, quoted for the shell where it needs it.
fn spelled(name: &str, sibling: &Path, path: impl Iterator<Item = PathBuf>, cwd: Option<&Path>) -> String {
    let found = path.map(|dir| dir.join(name)).find(|p| p.is_file());
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    if found.is_some_and(|f| same(&f, sibling)) {
        return name.to_string();
    }
    let shown = match cwd.and_then(|c| sibling.strip_prefix(c).ok()) {
        Some(rel) => Path::new(".").join(rel),
        None => sibling.to_path_buf(),
    };
    crate::results::shell_word(&shown.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with an executable file `name` in it, removed on drop.
    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir_with(tag: &str, name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("dara-invocation-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), b"#!/bin/sh\n").unwrap();
        Dir(dir)
    }

    #[test]
    fn the_bare_name_only_when_the_path_finds_that_very_tool() {
        let built = dir_with("built", "dara-replay");
        let other = dir_with("other", "dara-replay");
        let sibling = built.0.join("dara-replay");
        assert_eq!(spelled("dara-replay", &sibling, [built.0.clone()].into_iter(), None), "dara-replay");
        // Another dara-replay first on PATH (an older install) is not the one that made this trace.
        assert_eq!(spelled("dara-replay", &sibling, [other.0.clone(), built.0.clone()].into_iter(), None), sibling.display().to_string());
        // Not on PATH at all (a fresh clone): a path, relative where the user stands above it.
        assert_eq!(spelled("dara-replay", &sibling, std::iter::empty(), Some(built.0.parent().unwrap())), format!("./{}/dara-replay", built.0.file_name().unwrap().to_str().unwrap()));
    }
}
